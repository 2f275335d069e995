// Brute-force k-NN: the engine behind every backend against a plain double-precision reference, sklearn's
// X=None semantics, duplicates and ties, the classifier and regressor against hand-computed values, bad input.
#include "support.hpp"

#include <gpuml/estimators/neighbors.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using gpuml::IndexMatrix;
using gpuml::Labels;
using gpuml::Matrix;
using gpuml::Metric;
using gpuml::NeighborsParams;
using gpuml::Vector;
using gpuml::testing::backends;
using gpuml::testing::random_matrix;
using gpuml::testing::reference_value;

const std::vector<std::string> kMetrics = {"euclidean", "sqeuclidean", "manhattan", "cosine", "chebyshev",
                                           "inner_product"};

// ---------------------------------------------------------------------------------------------------------------
// Reference: all pairwise values in double with plain loops; sorted by (key, index) with key = distance, or
// -inner product for inner_product.

struct RefEntry {
  double value;  // as the estimator reports it
  double key;    // sort key (ascending)
  std::int64_t index;
};

template <class T>
std::vector<RefEntry> ref_sorted(const Matrix<T>& db, const Matrix<T>& q, Eigen::Index i, Metric m) {
  std::vector<RefEntry> out;
  for (Eigen::Index j = 0; j < db.rows(); ++j) {
    const double v = reference_value<T>(q, i, db, j, m);
    out.push_back({v, m == Metric::inner_product ? -v : v, j});
  }
  std::stable_sort(out.begin(), out.end(), [](const RefEntry& a, const RefEntry& b) { return a.key < b.key; });
  return out;
}

template <class T>
struct Tol {
  static constexpr double rtol = std::is_same_v<T, float> ? 1e-4 : 1e-10;
  static constexpr double atol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  static bool close(double got, double want) { return std::abs(got - want) <= rtol * std::abs(want) + atol; }
  // Values farther apart than rounding can explain.
  static bool separated(double a, double b) {
    return std::abs(a - b) > 4 * (rtol * std::max(std::abs(a), std::abs(b)) + atol);
  }
};

// Checks one result row against the reference list `ref` (already in the expected order):
// - values close position by position, sorted in the metric's order, indices distinct and in range;
// - every run of reference values not separated by more than rounding: if it lies inside the first k, the
//   same index set; if it is a group of identical database rows, exactly the reference order (lower index
//   first); if it straddles position k, indices drawn from the run.
template <class T>
void check_row(const std::vector<RefEntry>& ref, const T* dist, const std::int64_t* ind, int k, Metric m,
               const Matrix<T>& db, const std::string& what) {
  const Eigen::Index n = db.rows();
  SCOPED_TRACE(what);
  std::set<std::int64_t> seen;
  for (int c = 0; c < k; ++c) {
    ASSERT_GE(ind[c], 0);
    ASSERT_LT(ind[c], n);
    ASSERT_TRUE(seen.insert(ind[c]).second) << "index " << ind[c] << " repeated";
    ASSERT_TRUE(Tol<T>::close(dist[c], ref[c].value))
        << "position " << c << ": got " << dist[c] << ", want " << ref[c].value;
    if (c > 0) {
      if (m == Metric::inner_product)
        ASSERT_GE(dist[c - 1], dist[c]) << "not sorted descending at " << c;
      else
        ASSERT_LE(dist[c - 1], dist[c]) << "not sorted ascending at " << c;
    }
  }
  std::size_t a = 0;
  while (a < static_cast<std::size_t>(k)) {
    std::size_t b = a + 1;
    while (b < ref.size() && !Tol<T>::separated(ref[b - 1].value, ref[b].value)) ++b;
    bool exact = true;
    for (std::size_t c = a + 1; c < b; ++c) exact = exact && db.row(ref[c].index) == db.row(ref[a].index);
    const std::size_t end = std::min<std::size_t>(b, k);
    if (exact) {
      for (std::size_t c = a; c < end; ++c)
        ASSERT_EQ(ind[c], ref[c].index) << "exact tie at position " << c << " not broken by the lower index";
    } else {
      std::set<std::int64_t> run, got;
      for (std::size_t c = a; c < b; ++c) run.insert(ref[c].index);
      for (std::size_t c = a; c < end; ++c) got.insert(ind[c]);
      if (b <= static_cast<std::size_t>(k)) {
        ASSERT_EQ(got, run) << "positions " << a << ".." << b;
      } else {
        for (auto j : got) ASSERT_TRUE(run.count(j)) << "index " << j << " at the k boundary is not a near-tie";
      }
    }
    a = b;
  }
}

template <class T>
void check_against_reference(const gpuml::KnnResult<T>& r, const Matrix<T>& db, const Matrix<T>& q, int k,
                             Metric m, const std::string& what) {
  ASSERT_EQ(r.distances.rows(), q.rows());
  ASSERT_EQ(r.distances.cols(), k);
  ASSERT_EQ(r.indices.rows(), q.rows());
  ASSERT_EQ(r.indices.cols(), k);
  for (Eigen::Index i = 0; i < q.rows(); ++i) {
    const auto ref = ref_sorted(db, q, i, m);
    check_row<T>(ref, r.distances.row(i).data(), r.indices.row(i).data(), k, m, db,
                 what + " query " + std::to_string(i));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

template <class T>
class Neighbors : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Neighbors, Scalars);

// ---------------------------------------------------------------------------------------------------------------

TEST(NeighborsMetric, ParsesNamesAndAliases) {
  EXPECT_EQ(gpuml::parse_metric("euclidean"), Metric::euclidean);
  EXPECT_EQ(gpuml::parse_metric("l2"), Metric::euclidean);
  EXPECT_EQ(gpuml::parse_metric("sqeuclidean"), Metric::sqeuclidean);
  EXPECT_EQ(gpuml::parse_metric("manhattan"), Metric::manhattan);
  EXPECT_EQ(gpuml::parse_metric("cityblock"), Metric::manhattan);
  EXPECT_EQ(gpuml::parse_metric("l1"), Metric::manhattan);
  EXPECT_EQ(gpuml::parse_metric("cosine"), Metric::cosine);
  EXPECT_EQ(gpuml::parse_metric("chebyshev"), Metric::chebyshev);
  EXPECT_EQ(gpuml::parse_metric("inner_product"), Metric::inner_product);
  for (const auto& name : kMetrics) EXPECT_EQ(gpuml::metric_name(gpuml::parse_metric(name)), name);
  EXPECT_THROW(gpuml::parse_metric("minkowski"), gpuml::invalid_input);
  EXPECT_THROW(gpuml::parse_metric("Euclidean"), gpuml::invalid_input);
  try {
    gpuml::parse_metric("hamming");
    FAIL() << "no exception";
  } catch (const gpuml::invalid_input& e) {
    EXPECT_NE(std::string(e.what()).find("chebyshev"), std::string::npos) << e.what();
  }
}

TYPED_TEST(Neighbors, MatchesReferenceForEveryMetricAndK) {
  using T = TypeParam;
  const Matrix<T> db = random_matrix<T>(1001, 37, 11);
  const Matrix<T> q = random_matrix<T>(77, 37, 12);
  for (const auto& b : backends()) {
    for (const auto& name : kMetrics) {
      for (int k : {1, 7, 1000, 1001}) {
        if (k == 1001 && name != "euclidean" && name != "inner_product") continue;  // keep the test quick
        gpuml::NearestNeighbors<T> nn({k, name}, b.backend);
        nn.fit(db);
        const auto r = nn.kneighbors(q);
        check_against_reference<T>(r, db, q, k, gpuml::parse_metric(name),
                                   b.name + " " + name + " k=" + std::to_string(k));
        if (this->HasFatalFailure()) return;
      }
    }
  }
}

TYPED_TEST(Neighbors, MatchesReferenceOnOtherShapes) {
  using T = TypeParam;
  struct Shape {
    Eigen::Index n, d, m;
    int k;
  };
  // Several database blocks with a ragged tail; many query blocks; a single query; one feature.
  for (const Shape s : {Shape{2500, 9, 50, 7}, Shape{700, 5, 600, 3}, Shape{333, 3, 1, 20}, Shape{40, 1, 9, 5}}) {
    const Matrix<T> db = random_matrix<T>(s.n, s.d, 21 + s.n);
    const Matrix<T> q = random_matrix<T>(s.m, s.d, 22 + s.n);
    for (const auto& b : backends())
      for (const auto& name : kMetrics) {
        gpuml::NearestNeighbors<T> nn({s.k, name}, b.backend);
        nn.fit(db);
        check_against_reference<T>(nn.kneighbors(q), db, q, s.k, gpuml::parse_metric(name),
                                   b.name + " " + name + " n=" + std::to_string(s.n));
        if (this->HasFatalFailure()) return;
      }
  }
}

TYPED_TEST(Neighbors, QueryingTheTrainingSetExcludesEachSample) {
  using T = TypeParam;
  Matrix<T> X = random_matrix<T>(300, 13, 31);
  // A few duplicated rows: a sample whose copies precede it may fall out of its own k+1 neighbours.
  X.row(40) = X.row(7);
  X.row(41) = X.row(7);
  X.row(200) = X.row(150);
  const int k = 6;
  for (const auto& b : backends())
    for (const auto& name : kMetrics) {
      const Metric m = gpuml::parse_metric(name);
      gpuml::NearestNeighbors<T> nn({k, name}, b.backend);
      nn.fit(X);
      const auto r = nn.kneighbors();
      ASSERT_EQ(r.indices.rows(), X.rows());
      ASSERT_EQ(r.indices.cols(), k);
      for (Eigen::Index i = 0; i < X.rows(); ++i) {
        // sklearn: the k+1 nearest, then the sample itself removed, or the first one when it is absent (inner
        // product: the last one, the sample being pushed out by more similar rows).
        auto ref = ref_sorted(X, X, i, m);
        auto self = std::find_if(ref.begin(), ref.begin() + k + 1, [&](const RefEntry& e) { return e.index == i; });
        const auto absent = m == Metric::inner_product ? ref.begin() + k : ref.begin();
        ref.erase(self != ref.begin() + k + 1 ? self : absent);
        check_row<T>(ref, r.distances.row(i).data(), r.indices.row(i).data(), k, m, X,
                     b.name + " " + name + " X=None sample " + std::to_string(i));
        if (this->HasFatalFailure()) return;
        if (m != Metric::inner_product) {
          for (int c = 0; c < k; ++c) ASSERT_NE(r.indices(i, c), i) << name << ": sample " << i << " is its own neighbour";
        }
      }
      // The duplicates, exactly: sample 7's copies are 40 and 41 (distance 0); 40's are 7 and 41; 41's are 7, 40.
      if (m != Metric::inner_product) {
        EXPECT_EQ(r.indices(7, 0), 40);
        EXPECT_EQ(r.indices(7, 1), 41);
        EXPECT_EQ(r.indices(40, 0), 7);
        EXPECT_EQ(r.indices(40, 1), 41);
        EXPECT_EQ(r.indices(41, 0), 7);
        EXPECT_EQ(r.indices(41, 1), 40);
        EXPECT_EQ(r.distances(41, 0), T(0));
        EXPECT_EQ(r.distances(41, 1), T(0));
        EXPECT_EQ(r.indices(150, 0), 200);
        EXPECT_EQ(r.indices(200, 0), 150);
        EXPECT_EQ(r.distances(150, 0), T(0));
      }
      // kneighbors_self(1) on sample 41: its k+1 = 2 nearest are 7 and 40 (lower indices first), so 41 is not among
      // them and sklearn masks the first column: the answer is 40 (sklearn 1.9.1, algorithm="brute").
      if (m != Metric::inner_product) {
        const auto r1 = nn.kneighbors_self(1);
        EXPECT_EQ(r1.indices(41, 0), 40) << name;
        EXPECT_EQ(r1.indices(7, 0), 40) << name;
        EXPECT_EQ(nn.kneighbors_indices(), r.indices) << name;
      }
    }
}

TYPED_TEST(Neighbors, QueryingTheTrainingSetMasksTheFirstDuplicateLikeSklearn) {
  // Rows 0-4 identical, k = 3: row 4's k+1 = 4 nearest are 0, 1, 2, 3 (ties by index) and do not hold 4 itself;
  // sklearn (algorithm="brute") masks the first column and answers [1, 2, 3]; rows 0-3 drop themselves.
  using T = TypeParam;
  Matrix<T> X = random_matrix<T>(11, 5, 17);
  for (int i = 1; i < 5; ++i) X.row(i) = X.row(0);
  const std::vector<std::vector<Eigen::Index>> expected{{1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2}, {1, 2, 3}};
  for (const auto& b : backends())
    for (const auto* name : {"euclidean", "sqeuclidean", "manhattan", "chebyshev"}) {
      gpuml::NearestNeighbors<T> nn({3, name}, b.backend);
      nn.fit(X);
      const auto r = nn.kneighbors();
      for (int i = 0; i < 5; ++i)
        for (int c = 0; c < 3; ++c) {
          EXPECT_EQ(r.indices(i, c), expected[i][c]) << b.name << " " << name << " row " << i << " column " << c;
          EXPECT_EQ(r.distances(i, c), T(0)) << b.name << " " << name << " row " << i;
        }
    }
}

// Many features: on CPU devices llvmpipe's loop limit would cut the kernels short (wrong neighbours from d = 18000,
// too few from 70000); every backend must still return the reference's neighbours.
TYPED_TEST(Neighbors, VeryManyFeatures) {
  using T = TypeParam;
  for (const Eigen::Index d : {Eigen::Index(30011), Eigen::Index(70001)}) {
    const Matrix<T> db = random_matrix<T>(97, d, 61 + d), q = random_matrix<T>(3, d, 62 + d);
    for (const auto& b : backends()) {
      auto previous = gpuml::set_warning_handler([](const std::string&) {});  // a CPU device may use the host
      gpuml::NearestNeighbors<T> nn({3, "euclidean"}, b.backend);
      nn.fit(db);
      const auto r = nn.kneighbors(q);
      gpuml::set_warning_handler(previous);
      check_against_reference<T>(r, db, q, 3, Metric::euclidean, b.name + " d=" + std::to_string(d));
    }
  }
}

// Finite float32 data whose squared distances overflow float32: scikit-learn computes float32 distances in float64,
// so the neighbours are still the true ones (values that do not fit float32 come back as inf, as scikit-learn's
// cast gives them).
TEST(NeighborsFloat32, ValuesBeyondTheSquareOfTheScalarRange) {
  using T = float;
  const double scale = 1e20;
  const Matrix<T> db = (random_matrix<double>(301, 9, 71) * scale).template cast<T>();
  const Matrix<T> q = (random_matrix<double>(7, 9, 72) * scale).template cast<T>();
  for (const auto& b : backends())
    for (const auto& name : kMetrics) {
      const Metric m = gpuml::parse_metric(name);
      gpuml::NearestNeighbors<T> nn({4, name}, b.backend);
      nn.fit(db);
      const auto r = nn.kneighbors(q);
      if (m == Metric::sqeuclidean || m == Metric::inner_product) {  // values beyond the range: the order only
        for (Eigen::Index i = 0; i < q.rows(); ++i) {
          const auto ref = ref_sorted(db, q, i, m);
          for (int c = 0; c < 4; ++c) EXPECT_EQ(r.indices(i, c), ref[c].index) << b.name << " " << name << " query " << i;
        }
      } else {
        check_against_reference<T>(r, db, q, 4, m, b.name + " " + name);
      }
    }
}

TYPED_TEST(Neighbors, DuplicatesAreOrderedByIndexAndAtDistanceZero) {
  using T = TypeParam;
  // 25 distinct rows, each copied 2..5 times at shuffled positions.
  const Matrix<T> base = random_matrix<T>(25, 6, 41);
  std::vector<Eigen::Index> src;
  for (Eigen::Index r = 0; r < base.rows(); ++r)
    for (int c = 0; c < 2 + r % 4; ++c) src.push_back(r);
  std::mt19937_64 rng(gpuml::testing::test_seed() + 42);
  std::shuffle(src.begin(), src.end(), rng);
  Matrix<T> db(static_cast<Eigen::Index>(src.size()), base.cols());
  for (std::size_t i = 0; i < src.size(); ++i) db.row(static_cast<Eigen::Index>(i)) = base.row(src[i]);

  for (const auto& b : backends())
    for (const auto& name : kMetrics) {
      const Metric m = gpuml::parse_metric(name);
      for (int k : {1, 2, 3, 9}) {
        gpuml::NearestNeighbors<T> nn({k, name}, b.backend);
        nn.fit(db);
        const auto r = nn.kneighbors(base);
        check_against_reference<T>(r, db, base, k, m, b.name + " " + name + " k=" + std::to_string(k));
        if (this->HasFatalFailure()) return;
        if (m == Metric::inner_product) continue;
        for (Eigen::Index i = 0; i < base.rows(); ++i) {
          std::vector<std::int64_t> copies;
          for (std::size_t j = 0; j < src.size(); ++j)
            if (src[j] == i) copies.push_back(static_cast<std::int64_t>(j));
          for (int c = 0; c < std::min<int>(k, static_cast<int>(copies.size())); ++c) {
            EXPECT_EQ(r.indices(i, c), copies[c]) << name << " k=" << k << " row " << i;
            EXPECT_EQ(r.distances(i, c), T(0)) << name << " k=" << k << " row " << i;
          }
        }
        // Deterministic: the same call gives the same answer.
        const auto again = nn.kneighbors(base);
        EXPECT_EQ(again.indices, r.indices);
        EXPECT_EQ(again.distances, r.distances);
      }
    }
}

TYPED_TEST(Neighbors, ExactTiesBetweenDistinctRowsGoToTheLowerIndex) {
  using T = TypeParam;
  // Small integer coordinates: every computation is exact, so equal values are real ties (cosine excluded: it
  // divides by square roots).
  std::mt19937_64 rng(gpuml::testing::test_seed() + 51);
  std::uniform_int_distribution<int> coord(-3, 3);
  Matrix<T> db(260, 3), q(40, 3);
  for (Eigen::Index i = 0; i < db.size(); ++i) db.data()[i] = static_cast<T>(coord(rng));
  for (Eigen::Index i = 0; i < q.size(); ++i) q.data()[i] = static_cast<T>(coord(rng));
  for (const auto& b : backends())
    for (const auto& name : kMetrics) {
      if (name == "cosine") continue;
      for (int k : {1, 5, 17}) {
        gpuml::NearestNeighbors<T> nn({k, name}, b.backend);
        nn.fit(db);
        const auto r = nn.kneighbors(q);
        const Metric m = gpuml::parse_metric(name);
        for (Eigen::Index i = 0; i < q.rows(); ++i) {
          const auto ref = ref_sorted(db, q, i, m);
          for (int c = 0; c < k; ++c) {
            ASSERT_EQ(r.indices(i, c), ref[c].index) << b.name << " " << name << " k=" << k << " query " << i;
            ASSERT_EQ(r.distances(i, c), static_cast<T>(ref[c].value));
          }
        }
      }
    }
}

TYPED_TEST(Neighbors, CosineOfZeroVectorIsOne) {
  using T = TypeParam;
  Matrix<T> db = random_matrix<T>(20, 4, 61);
  db.row(3).setZero();
  Matrix<T> q(2, 4);
  q.row(0).setZero();
  q.row(1) = db.row(5);
  for (const auto& b : backends()) {
    gpuml::NearestNeighbors<T> nn({20, "cosine"}, b.backend);
    nn.fit(db);
    const auto r = nn.kneighbors(q);
    for (int c = 0; c < 20; ++c) {
      EXPECT_EQ(r.distances(0, c), T(1));
      EXPECT_EQ(r.indices(0, c), c);  // all tied: index order
    }
    EXPECT_EQ(r.indices(1, 0), 5);
    EXPECT_EQ(r.distances(1, 0), T(0));
    for (int c = 0; c < 20; ++c) {
      if (r.indices(1, c) == 3) {
        EXPECT_EQ(r.distances(1, c), T(1));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Neighbours in (returned value, index) order, whatever k. References in exact integer arithmetic: the data hold
// integers small enough that every value the engines form is exact.

template <class T>
struct ExactEntry {
  T value;            // as the estimator returns it
  long double key;    // ascending: the value, or minus the inner product
  std::int64_t index;
};

/// Query i's neighbours among db's rows, exactly: integer sums in int64, the euclidean distance the correctly
/// rounded square root of the exact squared distance; sorted by (key, index).
template <class T>
std::vector<ExactEntry<T>> exact_sorted(const Matrix<T>& db, const Matrix<T>& q, Eigen::Index i, Metric m) {
  std::vector<ExactEntry<T>> out;
  for (Eigen::Index j = 0; j < db.rows(); ++j) {
    std::int64_t acc = 0;
    for (Eigen::Index f = 0; f < db.cols(); ++f) {
      const auto a = static_cast<std::int64_t>(q(i, f)), b = static_cast<std::int64_t>(db(j, f));
      switch (m) {
        case Metric::euclidean:
        case Metric::sqeuclidean: acc += (a - b) * (a - b); break;
        case Metric::manhattan: acc += a > b ? a - b : b - a; break;
        case Metric::chebyshev: acc = std::max(acc, a > b ? a - b : b - a); break;
        default: acc += a * b;
      }
    }
    T value = static_cast<T>(acc);
    if (m == Metric::euclidean) value = std::sqrt(value);
    const long double key = m == Metric::inner_product ? -static_cast<long double>(value) : static_cast<long double>(value);
    out.push_back({value, key, j});
  }
  std::sort(out.begin(), out.end(), [](const ExactEntry<T>& a, const ExactEntry<T>& b) {
    return a.key < b.key || (a.key == b.key && a.index < b.index);
  });
  return out;
}

/// Integer-valued random matrix with entries in [lo, hi].
template <class T>
Matrix<T> random_integers(Eigen::Index rows, Eigen::Index cols, std::uint64_t salt, int lo, int hi) {
  std::mt19937_64 rng(gpuml::testing::test_seed() * 0x9E3779B97F4A7C15ull + salt);
  std::uniform_int_distribution<int> value(lo, hi);
  Matrix<T> m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(value(rng));
  return m;
}

/// Whether row i of a result is sorted by (value, index): values ascending (inner product descending), equal values
/// by the lower index.
template <class T>
::testing::AssertionResult sorted_by_value_and_index(const gpuml::KnnResult<T>& r, Eigen::Index i, Metric m) {
  const double sign = m == Metric::inner_product ? -1.0 : 1.0;
  for (Eigen::Index c = 1; c < r.indices.cols(); ++c) {
    const double before = sign * double(r.distances(i, c - 1)), after = sign * double(r.distances(i, c));
    if (before > after || (before == after && r.indices(i, c - 1) > r.indices(i, c)))
      return ::testing::AssertionFailure() << "row " << i << " columns " << c - 1 << ", " << c << ": (" << r.distances(i, c - 1)
                                           << ", " << r.indices(i, c - 1) << ") before (" << r.distances(i, c) << ", "
                                           << r.indices(i, c) << ")";
  }
  return ::testing::AssertionSuccess();
}

// kneighbors() without X under inner_product: a sample is rarely its own best match, so scikit-learn's duplicate
// rule (no sample among its own k + 1 results: drop the first column) would drop its most similar row. Each row's
// neighbours are its k best other rows, ties by the lower index.
TYPED_TEST(Neighbors, InnerProductWithoutXKeepsTheMostSimilarOtherRows) {
  using T = TypeParam;
  Matrix<T> X(4, 2);
  X << 1, 0, 2, 0, 3, 0, 0, 1;
  // k = 1: row 0's k + 1 = 2 best are rows 2 and 1 (inner products 3 and 2), without row 0 itself.
  const std::vector<std::vector<std::int64_t>> want_index{{2, 2, 1, 0}, {2, 1, 2, 0, 1, 0, 0, 1}};
  const std::vector<std::vector<T>> want_value{{3, 6, 6, 0}, {3, 2, 6, 2, 6, 3, 0, 0}};
  for (const auto& b : backends())
    for (int k : {1, 2}) {
      gpuml::NearestNeighbors<T> nn({k, "inner_product"}, b.backend);
      nn.fit(X);
      const auto r = nn.kneighbors();
      for (Eigen::Index i = 0; i < 4; ++i)
        for (int c = 0; c < k; ++c) {
          EXPECT_EQ(r.indices(i, c), want_index[k - 1][i * k + c]) << b.name << " k=" << k << " row " << i;
          EXPECT_EQ(r.distances(i, c), want_value[k - 1][i * k + c]) << b.name << " k=" << k << " row " << i;
        }
    }

  // Random integer rows (every inner product exact), a few duplicated, against each row's k best other rows.
  Matrix<T> R = random_integers<T>(157, 5, 91, -4, 4);
  R.row(60) = R.row(3);
  R.row(101) = R.row(3);
  R.row(140) = R.row(77);
  for (const auto& b : backends())
    for (int k : {1, 4, 13}) {
      gpuml::NearestNeighbors<T> nn({k, "inner_product"}, b.backend);
      nn.fit(R);
      const auto r = nn.kneighbors();
      EXPECT_EQ(nn.kneighbors_self(k).indices, r.indices);
      for (Eigen::Index i = 0; i < R.rows(); ++i) {
        auto ref = exact_sorted<T>(R, R, i, Metric::inner_product);
        ref.erase(std::find_if(ref.begin(), ref.end(), [&](const ExactEntry<T>& e) { return e.index == i; }));
        for (int c = 0; c < k; ++c) {
          ASSERT_EQ(r.indices(i, c), ref[c].index) << b.name << " k=" << k << " row " << i << " column " << c;
          ASSERT_EQ(r.distances(i, c), ref[c].value) << b.name << " k=" << k << " row " << i << " column " << c;
        }
      }
    }
}

// Neighbours at the same returned value come back in index order for every k, so the first j columns of a k-search
// are the j-search. Two integer data sets, every value exact:
// - a small grid with duplicated rows: many exact ties at every distance;
// - database rows far from the queries, where distinct squared distances share one rounded square root, so the
//   euclidean order by (distance, index) differs from the order by (squared distance, index).
TYPED_TEST(Neighbors, EqualValuesComeInIndexOrderForEveryK) {
  using T = TypeParam;
  Matrix<T> grid = random_integers<T>(311, 3, 92, 0, 3);
  for (Eigen::Index r = 0; r < 40; ++r) grid.row(250 + r) = grid.row(7 * r % 250);
  const Matrix<T> grid_queries = random_integers<T>(29, 3, 93, 0, 3);
  // One coordinate far off, L + [0, 8] in the database and [0, 8] - L in the queries, three in [0, 5]: squared
  // distances about (2L)^2 and dense in the integers, above 2^22 (float) or 2^51 (double), where neighbouring
  // integers share a square root; every norm-expansion sum stays below 2^24 (2^53).
  const T far = std::is_same_v<T, float> ? T(2000) : T(44000000);
  Matrix<T> spread = random_integers<T>(283, 4, 94, 0, 5);
  spread.col(0) = random_integers<T>(283, 1, 95, 0, 8).array() + far;
  for (Eigen::Index r = 0; r < 20; ++r) spread.row(260 + r) = spread.row(13 * r);
  Matrix<T> spread_queries = random_integers<T>(37, 4, 96, 0, 5);
  spread_queries.col(0) = random_integers<T>(37, 1, 97, 0, 8).array() - far;

  struct Case {
    const char* name;
    const Matrix<T>& db;
    const Matrix<T>& q;
  };
  for (const Case& data : {Case{"far", spread, spread_queries}, Case{"grid", grid, grid_queries}})
    for (const auto& b : backends())
      for (const char* name : {"euclidean", "sqeuclidean", "manhattan", "chebyshev", "inner_product", "cosine"}) {
        const Metric m = gpuml::parse_metric(name);
        const std::string what = std::string(data.name) + " " + b.name + " " + name;
        gpuml::NearestNeighbors<T> nn({1, name}, b.backend);
        nn.fit(data.db);
        gpuml::KnnResult<T> previous;
        for (int k : {1, 2, 3, 8, 13, 40, 97}) {
          const auto r = nn.kneighbors(data.q, k);
          for (Eigen::Index i = 0; i < data.q.rows(); ++i) {
            ASSERT_TRUE(sorted_by_value_and_index(r, i, m)) << what << " k=" << k;
            if (m == Metric::cosine) continue;  // not exact: checked against the double reference below
            const auto ref = exact_sorted<T>(data.db, data.q, i, m);
            for (int c = 0; c < k; ++c) {
              ASSERT_EQ(r.indices(i, c), ref[c].index) << what << " k=" << k << " query " << i << " column " << c;
              ASSERT_EQ(r.distances(i, c), ref[c].value) << what << " k=" << k << " query " << i << " column " << c;
            }
          }
          if (m == Metric::cosine) check_against_reference<T>(r, data.db, data.q, k, m, what);
          if (previous.indices.size()) {
            const auto j = previous.indices.cols();
            ASSERT_TRUE(r.indices.leftCols(j) == previous.indices) << what << ": k=" << k << " against k=" << j;
            ASSERT_TRUE(r.distances.leftCols(j) == previous.distances) << what << ": k=" << k << " against k=" << j;
          }
          previous = r;
        }
      }
}

// Continuous data far from the origin, where the engines' selection values (norm expansions) are off by far more
// than the gaps between neighbours: each k-search is exactly the first k columns of the search for every row (which
// selects nothing, so it holds each row's returned value), for the metrics whose values are recomputed.
TYPED_TEST(Neighbors, SearchesSelectByTheReturnedValues) {
  using T = TypeParam;
  const double offset = std::is_same_v<T, float> ? 100.0 : 1e6;
  const Matrix<T> db = random_matrix<T>(997, 7, 98, offset - 1, offset + 1);
  const Matrix<T> q = random_matrix<T>(61, 7, 99, offset - 1, offset + 1);
  for (const auto& b : backends())
    for (const char* name : {"euclidean", "sqeuclidean", "cosine"}) {
      const Metric m = gpuml::parse_metric(name);
      gpuml::NearestNeighbors<T> nn({5, name}, b.backend);
      nn.fit(db);
      const auto all = nn.kneighbors(q, static_cast<int>(db.rows()));
      for (Eigen::Index i = 0; i < q.rows(); ++i) ASSERT_TRUE(sorted_by_value_and_index(all, i, m)) << b.name << " " << name;
      if (m != Metric::cosine) {
        const gpuml::KnnResult<T> head{all.distances.leftCols(50), all.indices.leftCols(50)};
        check_against_reference<T>(head, db, q, 50, m, b.name + " " + name);
      }
      for (int k : {1, 2, 5, 17, 64}) {
        const auto r = nn.kneighbors(q, k);
        for (Eigen::Index i = 0; i < q.rows(); ++i) {
          ASSERT_TRUE(r.indices.row(i) == all.indices.row(i).head(k)) << b.name << " " << name << " k=" << k << " query " << i;
          ASSERT_TRUE(r.distances.row(i) == all.distances.row(i).head(k)) << b.name << " " << name << " k=" << k;
        }
      }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Classifier and regressor on a 1-D toy set: X = 0, 1, 2, 10, 11.

template <class T>
Matrix<T> toy_x() {
  Matrix<T> X(5, 1);
  X << 0, 1, 2, 10, 11;
  return X;
}

template <class T>
Matrix<T> col(std::initializer_list<double> v) {
  Matrix<T> m(static_cast<Eigen::Index>(v.size()), 1);
  Eigen::Index i = 0;
  for (double x : v) m(i++, 0) = static_cast<T>(x);
  return m;
}

TYPED_TEST(Neighbors, ClassifierVotes) {
  using T = TypeParam;
  Labels y(5);
  y << 3, 3, -1, -1, 8;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-12;
  for (const auto& b : backends()) {
    gpuml::KNeighborsClassifier<T> uni({3, "euclidean", "uniform"}, b.backend);
    uni.fit(toy_x<T>(), y);
    ASSERT_EQ(uni.classes().size(), 3);
    EXPECT_EQ(uni.classes()[0], -1);
    EXPECT_EQ(uni.classes()[1], 3);
    EXPECT_EQ(uni.classes()[2], 8);

    // 1.4: neighbours 1 (0.4, label 3), 2 (0.6, label -1), 0 (1.4, label 3).
    // 2.0: neighbours 2 (0, label -1), 1 (1, label 3), 0 (2, label 3).
    // 10.6: neighbours 11 (0.4, label 8), 10 (0.6, label -1), 2 (8.6, label -1).
    const Matrix<T> q = col<T>({1.4, 2.0, 10.6});
    const Matrix<double> pu = uni.predict_proba(q);
    ASSERT_EQ(pu.rows(), 3);
    ASSERT_EQ(pu.cols(), 3);
    EXPECT_NEAR(pu(0, 0), 1.0 / 3, tol);
    EXPECT_NEAR(pu(0, 1), 2.0 / 3, tol);
    EXPECT_NEAR(pu(0, 2), 0.0, tol);
    EXPECT_NEAR(pu(2, 0), 2.0 / 3, tol);
    EXPECT_NEAR(pu(2, 2), 1.0 / 3, tol);
    const Labels lu = uni.predict(q);
    EXPECT_EQ(lu[0], 3);
    EXPECT_EQ(lu[1], 3);
    EXPECT_EQ(lu[2], -1);

    gpuml::KNeighborsClassifier<T> dist({3, "euclidean", "distance"}, b.backend);
    dist.fit(toy_x<T>(), y);
    const Matrix<double> pd = dist.predict_proba(q);
    const double a = static_cast<double>(T(1.4));
    const double w3 = 1 / (a - 1) + 1 / a, wm1 = 1 / (2 - a);  // 0.4 -> label 3, 0.6 -> label -1, 1.4 -> label 3
    EXPECT_NEAR(pd(0, 0), wm1 / (w3 + wm1), 1e-5);
    EXPECT_NEAR(pd(0, 1), w3 / (w3 + wm1), 1e-5);
    // Zero distance: only the exact match votes.
    EXPECT_NEAR(pd(1, 0), 1.0, tol);
    EXPECT_NEAR(pd(1, 1), 0.0, tol);
    const Labels ld = dist.predict(q);
    EXPECT_EQ(ld[0], 3);
    EXPECT_EQ(ld[1], -1);  // uniform says 3
    EXPECT_EQ(ld[2], 8);   // 1/0.4 > 1/0.6 + 1/8.6
    for (Eigen::Index i = 0; i < 3; ++i) {
      EXPECT_NEAR(pu.row(i).sum(), 1.0, 1e-12);
      EXPECT_NEAR(pd.row(i).sum(), 1.0, 1e-12);
    }

    // A vote tie goes to the smallest label: 1.5 has neighbours 1 (label 3) and 2 (label -1) at 0.5 each.
    gpuml::KNeighborsClassifier<T> two({2, "euclidean", "uniform"}, b.backend);
    two.fit(toy_x<T>(), y);
    EXPECT_EQ(two.predict(col<T>({1.5}))[0], -1);
    gpuml::KNeighborsClassifier<T> two_d({2, "euclidean", "distance"}, b.backend);
    two_d.fit(toy_x<T>(), y);
    EXPECT_EQ(two_d.predict(col<T>({1.5}))[0], -1);
  }
}

TYPED_TEST(Neighbors, ClassifierOnRandomDataMatchesReferenceVotes) {
  using T = TypeParam;
  const Matrix<T> X = random_matrix<T>(400, 5, 71);
  const Matrix<T> q = random_matrix<T>(60, 5, 72);
  Labels y(X.rows());
  for (Eigen::Index i = 0; i < y.size(); ++i) y[i] = static_cast<std::int32_t>((i * 7) % 4) * 10 - 5;
  for (const auto& b : backends()) {
    gpuml::KNeighborsClassifier<T> clf({9, "manhattan", "uniform"}, b.backend);
    clf.fit(X, y);
    const Matrix<double> p = clf.predict_proba(q);
    const Labels pred = clf.predict(q);
    ASSERT_EQ(p.cols(), 4);
    for (Eigen::Index i = 0; i < q.rows(); ++i) {
      const auto ref = ref_sorted(X, q, i, Metric::manhattan);
      if (!Tol<T>::separated(ref[8].value, ref[9].value)) continue;  // the 9th and 10th too close to call
      std::vector<double> votes(4, 0.0);
      for (int c = 0; c < 9; ++c) votes[(y[ref[c].index] + 5) / 10] += 1.0 / 9;
      for (int c = 0; c < 4; ++c) EXPECT_NEAR(p(i, c), votes[c], 1e-12) << "query " << i;
      const auto best = std::max_element(votes.begin(), votes.end()) - votes.begin();  // first maximum
      EXPECT_EQ(pred[i], static_cast<std::int32_t>(best) * 10 - 5) << "query " << i;
    }
  }
}

TYPED_TEST(Neighbors, RegressorMeans) {
  using T = TypeParam;
  const Matrix<T> y1 = col<T>({0, 10, 20, 30, 40});
  Matrix<T> y2(5, 2);
  y2 << 0, 1, 10, 2, 20, 3, 30, 4, 40, 5;
  const Matrix<T> q = col<T>({1.4, 2.0});
  for (const auto& b : backends()) {
    gpuml::KNeighborsRegressor<T> uni({3, "euclidean", "uniform"}, b.backend);
    uni.fit(toy_x<T>(), Vector<T>(y1.col(0)));
    const Matrix<T> pu = uni.predict(q);
    ASSERT_EQ(pu.rows(), 2);
    ASSERT_EQ(pu.cols(), 1);
    EXPECT_NEAR(pu(0, 0), 10.0, 1e-5);  // (10 + 20 + 0) / 3
    EXPECT_NEAR(pu(1, 0), 10.0, 1e-5);  // (20 + 10 + 0) / 3

    gpuml::KNeighborsRegressor<T> dist({3, "euclidean", "distance"}, b.backend);
    dist.fit(toy_x<T>(), y2);
    const Matrix<T> pd = dist.predict(q);
    ASSERT_EQ(pd.cols(), 2);
    const double a = static_cast<double>(T(1.4));
    const double w1 = 1 / (a - 1), w2 = 1 / (2 - a), w0 = 1 / a;
    EXPECT_NEAR(pd(0, 0), (w1 * 10 + w2 * 20 + w0 * 0) / (w0 + w1 + w2), 1e-4);
    EXPECT_NEAR(pd(0, 1), (w1 * 2 + w2 * 3 + w0 * 1) / (w0 + w1 + w2), 1e-4);
    EXPECT_EQ(pd(1, 0), T(20));  // zero distance: only the exact match counts
    EXPECT_EQ(pd(1, 1), T(3));
  }
}

// ---------------------------------------------------------------------------------------------------------------

TYPED_TEST(Neighbors, RejectsBadInput) {
  using T = TypeParam;
  const Matrix<T> X = random_matrix<T>(10, 4, 81);
  for (const auto& b : backends()) {
    gpuml::NearestNeighbors<T> nn({3, "euclidean"}, b.backend);
    EXPECT_THROW(nn.kneighbors(X), gpuml::not_fitted);
    EXPECT_THROW(nn.kneighbors(), gpuml::not_fitted);
    nn.fit(X);
    EXPECT_THROW(nn.kneighbors(X, 11), gpuml::invalid_input);  // k > n_samples_fit
    EXPECT_NO_THROW(nn.kneighbors(X, 10));
    EXPECT_THROW(nn.kneighbors_self(10), gpuml::invalid_input);  // X=None needs k < n_samples_fit
    EXPECT_NO_THROW(nn.kneighbors_self(9));
    EXPECT_THROW(nn.kneighbors(X, -1), gpuml::invalid_input);
    EXPECT_THROW(nn.kneighbors(random_matrix<T>(3, 5, 82)), gpuml::invalid_input);  // wrong n_features
    Matrix<T> bad = random_matrix<T>(3, 4, 83);
    bad(1, 2) = std::numeric_limits<T>::quiet_NaN();
    EXPECT_THROW(nn.kneighbors(bad), gpuml::invalid_input);
    bad(1, 2) = std::numeric_limits<T>::infinity();
    EXPECT_THROW(nn.kneighbors(bad), gpuml::invalid_input);
    EXPECT_THROW(nn.kneighbors(Matrix<T>(0, 4)), gpuml::invalid_input);

    // A failed fit leaves the earlier fit in place.
    Matrix<T> nan_x = random_matrix<T>(20, 4, 84);
    nan_x(5, 0) = -std::numeric_limits<T>::infinity();
    EXPECT_THROW(nn.fit(nan_x), gpuml::invalid_input);
    EXPECT_THROW(nn.fit(Matrix<T>(0, 4)), gpuml::invalid_input);
    EXPECT_THROW(nn.fit(Matrix<T>(5, 0)), gpuml::invalid_input);
    EXPECT_EQ(nn.n_samples_fit(), 10);
    EXPECT_EQ(nn.n_features_in(), 4);
    EXPECT_EQ(nn.kneighbors(X).indices.cols(), 3);

    EXPECT_THROW((gpuml::NearestNeighbors<T>({3, "minkowski"}, b.backend).fit(X)), gpuml::invalid_input);
    EXPECT_THROW((gpuml::NearestNeighbors<T>({0, "euclidean"}, b.backend).fit(X)), gpuml::invalid_input);

    Labels y(10);
    y.setZero();
    gpuml::KNeighborsClassifier<T> clf({3, "euclidean", "uniform"}, b.backend);
    EXPECT_THROW(clf.predict(X), gpuml::not_fitted);
    EXPECT_THROW(clf.fit(X, Labels::Zero(9)), gpuml::invalid_input);  // y wrong length
    EXPECT_THROW((gpuml::KNeighborsClassifier<T>({3, "euclidean", "inverse"}, b.backend).fit(X, y)),
                 gpuml::invalid_input);
    EXPECT_THROW((gpuml::KNeighborsClassifier<T>({3, "nope", "uniform"}, b.backend).fit(X, y)), gpuml::invalid_input);
    EXPECT_THROW((gpuml::KNeighborsClassifier<T>({11, "euclidean", "uniform"}, b.backend).fit(X, y).predict(X)),
                 gpuml::invalid_input);
    clf.fit(X, y);
    EXPECT_THROW(clf.predict(random_matrix<T>(2, 3, 85)), gpuml::invalid_input);

    gpuml::KNeighborsRegressor<T> reg({3, "euclidean", "distance"}, b.backend);
    EXPECT_THROW(reg.predict(X), gpuml::not_fitted);
    EXPECT_THROW(reg.fit(X, Vector<T>(Vector<T>::Zero(11))), gpuml::invalid_input);
    Vector<T> ybad = Vector<T>::Zero(10);
    ybad[3] = std::numeric_limits<T>::quiet_NaN();
    EXPECT_THROW(reg.fit(X, ybad), gpuml::invalid_input);
    EXPECT_THROW((gpuml::KNeighborsRegressor<T>({3, "inner_product", "distance"}, b.backend).fit(X, Vector<T>(Vector<T>::Zero(10)))),
                 gpuml::invalid_input);
  }
}

TYPED_TEST(Neighbors, HostEngineRejectsBadShapes) {
  using T = TypeParam;
  const Matrix<T> db = random_matrix<T>(8, 3, 91);
  EXPECT_THROW(gpuml::host::knn_search<T>(db, random_matrix<T>(2, 4, 92), 2, Metric::euclidean), gpuml::invalid_input);
  EXPECT_THROW(gpuml::host::knn_search<T>(db, db, 9, Metric::euclidean), gpuml::invalid_input);
  EXPECT_THROW(gpuml::host::knn_search<T>(db, db, 0, Metric::euclidean), gpuml::invalid_input);
  const auto r = gpuml::host::knn_search<T>(db, Matrix<T>(0, 3), 2, Metric::euclidean);
  EXPECT_EQ(r.indices.rows(), 0);
  EXPECT_EQ(r.indices.cols(), 2);
}

}  // namespace

// radius_neighbors against a float64 reference: every row within the radius and no other, except rows whose
// reference distance lies within float rounding of the radius, which may go either way; distances match the
// reference; index order, or (distance, index) order when sorted; X=None leaves each sample out of its own list.
TYPED_TEST(Neighbors, RadiusNeighborsMatchTheReference) {
  using T = TypeParam;
  const Matrix<T> db = random_matrix<T>(613, 11, 41);
  const Matrix<T> q = random_matrix<T>(53, 11, 42);
  const double slack = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  for (const auto& b : backends()) {
    for (const char* name : {"euclidean", "sqeuclidean", "manhattan", "chebyshev", "cosine"}) {
      const Metric m = gpuml::parse_metric(name);
      // A radius that catches a few dozen rows per query: the 5%-quantile of the reference distances.
      std::vector<double> all;
      for (Eigen::Index j = 0; j < db.rows(); ++j) all.push_back(reference_value<T>(q, 0, db, j, m));
      std::nth_element(all.begin(), all.begin() + all.size() / 20, all.end());
      const double radius = all[all.size() / 20];
      NeighborsParams p{5, name};
      p.radius = radius;
      gpuml::NearestNeighbors<T> nn(p, b.backend);
      nn.fit(db);
      for (const bool self : {false, true}) {
        for (const bool sorted : {false, true}) {
          const auto r = self ? nn.radius_neighbors_self(-1, sorted) : nn.radius_neighbors(q, -1, sorted);
          const Matrix<T>& Q = self ? db : q;
          ASSERT_EQ(r.offsets.size(), std::size_t(Q.rows()) + 1);
          for (Eigen::Index i = 0; i < Q.rows(); ++i) {
            std::set<std::int64_t> got;
            for (auto c = r.offsets[i]; c < r.offsets[i + 1]; ++c) {
              const auto j = r.indices[std::size_t(c)];
              const double ref = reference_value<T>(Q, i, db, j, m);
              EXPECT_NEAR(double(r.distances[std::size_t(c)]), ref, slack * (1 + ref)) << name << " " << i << " " << j;
              EXPECT_LE(ref, radius * (1 + slack) + slack) << name;
              if (c > r.offsets[i]) {
                const auto prev = std::size_t(c - 1);
                if (sorted)
                  EXPECT_TRUE(std::make_pair(r.distances[prev], r.indices[prev]) <
                              std::make_pair(r.distances[std::size_t(c)], j));
                else
                  EXPECT_LT(r.indices[prev], j);
              }
              got.insert(j);
            }
            for (Eigen::Index j = 0; j < db.rows(); ++j) {
              const double ref = reference_value<T>(Q, i, db, j, m);
              if (self && j == i) {
                EXPECT_FALSE(got.count(j)) << name << ": sample " << i << " is its own radius neighbour";
              } else if (ref < radius * (1 - slack) - slack) {
                EXPECT_TRUE(got.count(j)) << name << " query " << i << " misses " << j;
              }
            }
            if (this->HasFailure()) return;
          }
        }
      }
    }
  }
}

// Progress of a search: reported in order up to its total, the same neighbours as without it, and a callback that
// returns false stops the search with gpuml::cancelled.
TYPED_TEST(Neighbors, SearchProgressIsReportedAndCancels) {
  using T = TypeParam;
  const Matrix<T> db = random_matrix<T>(3001, 9, 51);
  const Matrix<T> q = random_matrix<T>(2311, 9, 52);
  for (const auto& b : backends()) {
    for (const char* name : {"euclidean", "inner_product"}) {
      NeighborsParams p{7, name};
      gpuml::NearestNeighbors<T> plain(p, b.backend);
      plain.fit(db);
      const auto expected = plain.kneighbors(q);
      std::vector<gpuml::WorkProgress> seen;
      p.on_progress = [&](const gpuml::WorkProgress& w) {
        seen.push_back(w);
        return true;
      };
      gpuml::NearestNeighbors<T> watched(p, b.backend);
      watched.fit(db);
      const auto got = watched.kneighbors(q);
      EXPECT_TRUE(got.indices == expected.indices) << b.name << " " << name;
      EXPECT_TRUE(got.distances == expected.distances) << b.name << " " << name;
      ASSERT_FALSE(seen.empty()) << b.name;
      for (std::size_t i = 1; i < seen.size(); ++i) EXPECT_GT(seen[i].done, seen[i - 1].done);
      EXPECT_EQ(seen.back().done, seen.back().total);
      EXPECT_GE(seen.back().total, std::uint64_t(q.rows()));

      int calls = 0;
      p.on_progress = [&](const gpuml::WorkProgress&) { return ++calls < 2; };
      gpuml::NearestNeighbors<T> stopped(p, b.backend);
      stopped.fit(db);
      if (seen.size() > 1) {
        EXPECT_THROW(stopped.kneighbors(q), gpuml::cancelled) << b.name;
      }
    }
  }
}

// Sharded lists against one device's: every engine returns the first k of its rows by (returned value, index),
// so the merged shards' lists are one device's, bit for bit.
template <class T>
void expect_same_lists(const gpuml::KnnResult<T>& got, const gpuml::KnnResult<T>& expected, const std::string& what) {
  ASSERT_EQ(got.indices.rows(), expected.indices.rows());
  ASSERT_EQ(got.indices.cols(), expected.indices.cols());
  for (Eigen::Index i = 0; i < got.indices.rows(); ++i) {
    EXPECT_TRUE(got.indices.row(i) == expected.indices.row(i)) << what << " query " << i;
    EXPECT_TRUE(got.distances.row(i) == expected.distances.row(i)) << what << " query " << i;
  }
}

// A database beyond Config::device_memory_limit (here half of its size) does not stay on the device: each search
// uploads it block by block (a quarter of the limit each) and returns the resident search's neighbours and values
// bit for bit, for every metric, with k above a block's size, and for X=None.
TYPED_TEST(Neighbors, DatabaseBeyondTheDeviceMemoryLimitIsStreamedWithTheSameNeighbours) {
  using T = TypeParam;
  const Matrix<T> db = random_matrix<T>(3001, 13, 63);
  const Matrix<T> q = random_matrix<T>(77, 13, 64);
  for (const auto& b : backends()) {
    if (!b.backend.is_vulkan()) continue;
    for (const auto& name : kMetrics) {
      for (int k : {9, 300}) {
        gpuml::NearestNeighbors<T> resident({k, name}, b.backend);
        resident.fit(db);
        const auto expected = resident.kneighbors(q);
        EXPECT_FALSE(expected.stats.streamed) << name;
        EXPECT_EQ(expected.stats.database_blocks, 1u) << name;
        const std::uint64_t limit = std::uint64_t(db.size()) * sizeof(T) / 2;
        gpuml::ScopedConfig scoped(gpuml::config().set_device_memory_limit(limit));
        gpuml::NearestNeighbors<T> streamed({k, name}, b.backend);
        streamed.fit(db);
        const auto got = streamed.kneighbors(q);
        const auto& stats = got.stats;
        EXPECT_TRUE(stats.streamed) << name;
        EXPECT_GE(stats.database_blocks, 4u) << name;  // blocks of at most a quarter of the limit
        EXPECT_TRUE(got.indices == expected.indices) << name << " k=" << k;
        EXPECT_EQ(std::memcmp(got.distances.data(), expected.distances.data(), sizeof(T) * expected.distances.size()), 0)
            << name << " k=" << k;
        if (k == 9) {
          const auto self = streamed.kneighbors(), self_expected = resident.kneighbors();
          EXPECT_TRUE(self.indices == self_expected.indices) << name << " X=None";
        }
      }
    }
  }
}

// The database sharded across several logical devices (the device under test opened twice and three times): one
// device's neighbours and values, for every metric, with k above a shard's size, and for X=None.
TYPED_TEST(Neighbors, ShardedDatabaseGivesTheOneDeviceNeighbours) {
  using T = TypeParam;
  const Matrix<T> db = random_matrix<T>(1237, 13, 61);
  const Matrix<T> q = random_matrix<T>(101, 13, 62);
  for (const auto& b : backends()) {
    if (!b.backend.is_vulkan()) continue;
    const std::string index = std::to_string(b.backend.device()->info().index);
    for (const std::string& list : {index + "," + index, index + "," + index + "," + index}) {
      const gpuml::Backend sharded = gpuml::select_backend(list);
      for (const auto& name : kMetrics) {
        for (int k : {1, 9, 500}) {
          gpuml::NearestNeighbors<T> one({k, name}, b.backend), many({k, name}, sharded);
          one.fit(db);
          many.fit(db);
          const auto expected = one.kneighbors(q), got = many.kneighbors(q);
          expect_same_lists<T>(got, expected, list + " " + name);
          if (k == 9) expect_same_lists<T>(many.kneighbors(), one.kneighbors(), list + " " + name + " X=None");
        }
      }
    }
  }
}
