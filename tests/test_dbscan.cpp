// DBSCAN against an independent reference: neighbourhoods from plain double loops and scikit-learn's dbscan_inner
// followed literally (a depth-first search from each unlabelled core sample in index order). Integer data make
// pairs at exactly eps (and duplicates) exact in float and double; continuous data use an eps away from every
// pairwise distance, so rounding cannot decide a neighbourhood. Every metric, float and double, weights (zero,
// fractional, negative), host and device backends.
#include "support.hpp"

#include <gpuml/algorithms/dbscan.hpp>
#include <gpuml/estimators/dbscan.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using gpuml::DBSCAN;
using gpuml::DBSCANParams;
using gpuml::Matrix;
using gpuml::Metric;
using gpuml::Vector;
using gpuml::testing::backends;
using gpuml::testing::NamedBackend;
using gpuml::testing::random_matrix;
using gpuml::testing::reference_value;
using gpuml::testing::test_seed;

struct Reference {
  std::vector<std::int64_t> labels, core;
};

/// scikit-learn's DBSCAN on neighbourhoods `hood` (each in index order, the sample itself included), written as
/// _dbscan.py and dbscan_inner write it.
Reference reference_dbscan(const std::vector<std::vector<std::int64_t>>& hood, const std::vector<double>* weight,
                           double min_samples) {
  const std::size_t n = hood.size();
  std::vector<bool> is_core(n);
  Reference r;
  for (std::size_t i = 0; i < n; ++i) {
    double size = 0;
    for (std::int64_t j : hood[i]) size += weight ? (*weight)[std::size_t(j)] : 1.0;
    is_core[i] = size >= min_samples;
    if (is_core[i]) r.core.push_back(std::int64_t(i));
  }
  r.labels.assign(n, -1);
  std::int64_t label_num = 0;
  std::vector<std::int64_t> stack;
  for (std::size_t start = 0; start < n; ++start) {
    if (r.labels[start] != -1 || !is_core[start]) continue;
    std::size_t i = start;
    while (true) {
      if (r.labels[i] == -1) {
        r.labels[i] = label_num;
        if (is_core[i])
          for (std::int64_t v : hood[i])
            if (r.labels[std::size_t(v)] == -1) stack.push_back(v);
      }
      if (stack.empty()) break;
      i = std::size_t(stack.back());
      stack.pop_back();
    }
    ++label_num;
  }
  return r;
}

/// Neighbourhoods by the reference distance in double: every j with d(i, j) <= eps, in index order.
template <class T>
std::vector<std::vector<std::int64_t>> reference_hoods(const Matrix<T>& X, double eps, Metric m) {
  std::vector<std::vector<std::int64_t>> hood(std::size_t(X.rows()));
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (Eigen::Index j = 0; j < X.rows(); ++j)
      if (reference_value<T>(X, i, X, j, m) <= eps) hood[std::size_t(i)].push_back(j);
  return hood;
}

/// An eps near the q-quantile of the pairwise distances, halfway between two distinct values far enough apart that
/// float rounding cannot put a pair on the other side.
template <class T>
double clear_eps(const Matrix<T>& X, Metric m, double q) {
  std::vector<double> d;
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (Eigen::Index j = i + 1; j < X.rows(); ++j) d.push_back(reference_value<T>(X, i, X, j, m));
  std::sort(d.begin(), d.end());
  for (std::size_t k = std::size_t(q * double(d.size())); k + 1 < d.size(); ++k) {
    const double gap = d[k + 1] - d[k], mid = 0.5 * (d[k] + d[k + 1]);
    if (gap > 1e-3 * mid + 1e-6) return mid;
  }
  ADD_FAILURE() << "no clear eps";
  return 1;
}

/// Integer coordinates in [0, span): duplicates and distances exactly eps are common and exact in float.
template <class T>
Matrix<T> grid_data(Eigen::Index n, Eigen::Index d, int span, std::uint64_t salt) {
  std::mt19937_64 rng(test_seed() * 0x9E3779B97F4A7C15ull + salt);
  std::uniform_int_distribution<int> coord(0, span - 1);
  Matrix<T> X(n, d);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index f = 0; f < d; ++f) X(i, f) = T(coord(rng));
  return X;
}

/// Weights whose every sum is exact in float: zero, fractional (dyadic), larger than min_samples, negative.
std::vector<double> dyadic_weights(Eigen::Index n, std::uint64_t salt) {
  std::mt19937_64 rng(test_seed() * 0x9E3779B97F4A7C15ull + salt);
  const double choices[] = {0.0, 0.25, 0.5, 1.0, 1.0, 1.5, 2.0, 6.0, -1.0};
  std::uniform_int_distribution<int> pick(0, 8);
  std::vector<double> w(static_cast<std::size_t>(n));
  for (double& v : w) v = choices[pick(rng)];
  return w;
}

template <class T>
void expect_matches(const DBSCAN<T>& model, const Matrix<T>& X, const Reference& want, const std::string& what) {
  const auto& labels = model.labels();
  ASSERT_EQ(labels.size(), X.rows()) << what;
  std::int64_t differing = 0, first = -1;
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    if (labels[i] != want.labels[std::size_t(i)]) {
      ++differing;
      if (first < 0) first = i;
    }
  EXPECT_EQ(differing, 0) << what << ": first at sample " << first << " (got " << (first >= 0 ? labels[first] : 0)
                          << ", want " << (first >= 0 ? want.labels[std::size_t(first)] : 0) << ")";
  const auto& core = model.core_sample_indices();
  ASSERT_EQ(std::size_t(core.size()), want.core.size()) << what;
  for (Eigen::Index c = 0; c < core.size(); ++c) {
    ASSERT_EQ(core[c], want.core[std::size_t(c)]) << what;
    ASSERT_TRUE(model.components().row(c) == X.row(core[c])) << what;
  }
  const std::int64_t clusters = want.labels.empty() ? 0 : *std::max_element(want.labels.begin(), want.labels.end()) + 1;
  EXPECT_EQ(model.n_clusters(), clusters) << what;
}

class DbscanTest : public ::testing::TestWithParam<NamedBackend> {};

template <class T>
void grid_case(const gpuml::Backend& backend, const std::string& metric, double p, Metric reference_metric,
               double eps, std::uint64_t salt) {
  // Awkward sizes; a narrow span in 2-d makes dense clusters with many duplicates, 3-d sparser ones with noise.
  for (auto [n, d, span] : {std::tuple<Eigen::Index, Eigen::Index, int>{157, 2, 12}, {211, 3, 9}}) {
    const Matrix<T> X = grid_data<T>(n, d, span, salt + std::uint64_t(n));
    const auto hood = reference_hoods<T>(X, eps, reference_metric);
    const std::vector<double> w = dyadic_weights(n, salt + 7);
    Vector<T> wt(n);
    for (Eigen::Index i = 0; i < n; ++i) wt[i] = T(w[std::size_t(i)]);
    for (int min_samples : {1, 3, 6}) {
      DBSCANParams params;
      params.set_eps(eps).set_min_samples(min_samples).set_metric(metric).set_p(p);
      DBSCAN<T> model(params, backend);
      const std::string what = metric + " p=" + std::to_string(p) + " n=" + std::to_string(n) +
                               " min_samples=" + std::to_string(min_samples);
      model.fit(X);
      expect_matches(model, X, reference_dbscan(hood, nullptr, min_samples), what);
      model.fit(X, wt);
      expect_matches(model, X, reference_dbscan(hood, &w, min_samples), what + " weighted");
    }
  }
}

TEST_P(DbscanTest, IntegerDataWithTiesAtEpsEveryMetric) {
  const auto& b = GetParam().backend;
  const double inf = std::numeric_limits<double>::infinity();
  // eps = 2 in euclidean holds pairs at exactly 2 (and 5 = sqrt(25) ties the (3, 4) pairs when eps = 5).
  grid_case<float>(b, "euclidean", 2, Metric::euclidean, 2.0, 11);
  grid_case<double>(b, "euclidean", 2, Metric::euclidean, 2.0, 12);
  grid_case<float>(b, "minkowski", 2, Metric::euclidean, 5.0, 13);
  grid_case<double>(b, "sqeuclidean", 2, Metric::sqeuclidean, 4.0, 14);
  grid_case<float>(b, "manhattan", 2, Metric::manhattan, 3.0, 15);
  grid_case<double>(b, "minkowski", 1, Metric::manhattan, 2.0, 16);
  grid_case<float>(b, "chebyshev", 2, Metric::chebyshev, 1.0, 17);
  grid_case<double>(b, "minkowski", inf, Metric::chebyshev, 2.0, 18);
}

template <class T>
void continuous_case(const gpuml::Backend& backend, Metric metric, std::uint64_t salt) {
  const Eigen::Index n = 173, d = 5;
  Matrix<T> X = random_matrix<T>(n, d, salt);
  for (Eigen::Index i = 0; i < n; i += 13) X.row(i) = X.row((i * 7 + 3) % n);  // duplicates
  if (metric == Metric::cosine) X.row(5).setZero();  // a zero row: distance 1 from everything, itself included
  const double eps = clear_eps<T>(X, metric, 0.04);
  const auto hood = reference_hoods<T>(X, eps, metric);
  for (int min_samples : {2, 5}) {
    DBSCAN<T> model(DBSCANParams{}.set_eps(eps).set_min_samples(min_samples).set_metric(gpuml::metric_name(metric)),
                    backend);
    model.fit(X);
    expect_matches(model, X, reference_dbscan(hood, nullptr, min_samples),
                   std::string(gpuml::metric_name(metric)) + " min_samples=" + std::to_string(min_samples));
  }
}

TEST_P(DbscanTest, ContinuousDataEveryMetricFloatAndDouble) {
  const auto& b = GetParam().backend;
  std::uint64_t salt = 100;
  for (Metric m : {Metric::euclidean, Metric::sqeuclidean, Metric::manhattan, Metric::cosine, Metric::chebyshev}) {
    continuous_case<float>(b, m, ++salt);
    continuous_case<double>(b, m, ++salt);
  }
}

TEST_P(DbscanTest, FractionalWeightsDecideCoreSamples) {
  // Weights of 1/3: whether three of them reach min_samples = 1 depends on the order and type of the sum, which
  // must be numpy's (pairwise, in the weights' type, in index order).
  const auto& b = GetParam().backend;
  const Eigen::Index n = 40;
  Matrix<double> X = Matrix<double>::Zero(n, 1);
  for (Eigen::Index i = 0; i < n; ++i) X(i, 0) = double(i / 3) * 10.0;  // groups of three equal samples
  Vector<double> w = Vector<double>::Constant(n, 1.0 / 3.0);
  DBSCAN<double> model(DBSCANParams{}.set_eps(0.5).set_min_samples(1), b);
  model.fit(X, w);
  const double third = 1.0 / 3.0, three_thirds = third + third + third;
  for (Eigen::Index i = 0; i + 2 < n; i += 3) {
    const bool core = model.labels()[i] != -1;
    EXPECT_EQ(core, three_thirds >= 1.0) << "sample " << i;
  }
  // The last sample is alone: a third is below min_samples, noise.
  EXPECT_EQ(model.labels()[n - 1], -1);
}

TEST_P(DbscanTest, FloatDataBeyondFloatRangeDecidedInDouble) {
  const auto& b = GetParam().backend;
  Matrix<float> X(6, 2);
  X << 0, 0, 1e19f, 0, 2e19f, 0, 3e20f, 1e20f, 3e20f, 1.5e20f, -3e38f, 0;
  DBSCAN<float> model(DBSCANParams{}.set_eps(1.5e19).set_min_samples(2), b);
  model.fit(X);
  const std::vector<std::int32_t> want = {0, 0, 0, -1, -1, -1};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(model.labels()[i], want[std::size_t(i)]) << i;
}

TEST_P(DbscanTest, ScikitLearnDocstringExample) {
  Matrix<double> X(6, 2);
  X << 1, 2, 2, 2, 2, 3, 8, 7, 8, 8, 25, 80;
  DBSCAN<double> model(DBSCANParams{}.set_eps(3).set_min_samples(2), GetParam().backend);
  const gpuml::Labels labels = model.fit_predict(X);
  const std::vector<std::int32_t> want = {0, 0, 0, 1, 1, -1};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(labels[i], want[std::size_t(i)]);
  EXPECT_EQ(model.core_sample_indices().size(), 5);
}

TEST_P(DbscanTest, BadInputNamesTheProblem) {
  const auto& b = GetParam().backend;
  const Matrix<float> X = random_matrix<float>(9, 2, 3);
  auto message = [&](DBSCANParams p, Vector<float> w = {}) -> std::string {
    try {
      DBSCAN<float>(p, b).fit(X, w);
    } catch (const gpuml::invalid_input& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message(DBSCANParams{}.set_eps(0)).find("eps must be > 0"), std::string::npos);
  EXPECT_NE(message(DBSCANParams{}.set_eps(std::nan(""))).find("eps"), std::string::npos);
  EXPECT_NE(message(DBSCANParams{}.set_min_samples(0)).find("min_samples must be >= 1"), std::string::npos);
  EXPECT_NE(message(DBSCANParams{}.set_metric("minkowski").set_p(3)).find("p = 1, 2 or inf"), std::string::npos);
  EXPECT_NE(message(DBSCANParams{}.set_metric("inner_product")).find("similarity"), std::string::npos);
  EXPECT_NE(message(DBSCANParams{}.set_metric("hamming")).find("unknown metric 'hamming'"), std::string::npos);
  EXPECT_NE(message(DBSCANParams{}, Vector<float>::Ones(8)).find("sample_weight has length 8"), std::string::npos);
  Vector<float> nan_weight = Vector<float>::Ones(9);
  nan_weight[4] = std::nanf("");
  EXPECT_NE(message(DBSCANParams{}, nan_weight).find("sample_weight contains NaN"), std::string::npos);
  EXPECT_THROW(DBSCAN<float>({}, b).labels(), gpuml::not_fitted);
  EXPECT_THROW(DBSCAN<float>({}, b).fit(Matrix<float>(0, 2)), gpuml::invalid_input);
}

TEST_P(DbscanTest, CancelledFitKeepsTheEarlierOne) {
  const auto& b = GetParam().backend;
  const Matrix<double> X = grid_data<double>(50, 2, 6, 21);
  int stages = 0;
  bool cancel = false;
  DBSCANParams p = DBSCANParams{}.set_eps(1.0).set_min_samples(3);
  p.on_progress = [&](const gpuml::WorkProgress& w) {
    ++stages;
    EXPECT_EQ(w.total, 3u);
    return !(cancel && w.done == 2);
  };
  DBSCAN<double> model(p, b);
  model.fit(X);
  EXPECT_EQ(stages, 3);
  const gpuml::Labels before = model.labels();
  cancel = true;
  EXPECT_THROW(model.fit(X.topRows(20)), gpuml::cancelled);
  EXPECT_EQ(model.labels(), before);
}

INSTANTIATE_TEST_SUITE_P(Backends, DbscanTest, ::testing::ValuesIn(backends()), gpuml::testing::backend_name);

// The algorithm layer alone: a border sample reached from two clusters takes the smaller label, whatever the
// order of its neighbours; numpy's summation order over 300 neighbours.
TEST(DbscanAlgorithm, BorderTakesTheFirstClusterAndSumsAreNumpys) {
  // 0-1 core cluster A, 3-4 core cluster B, 2 a border of both; 5 noise.
  gpuml::algorithms::RadiusResult<double> hood;
  const std::vector<std::vector<std::int64_t>> rows = {{0, 1}, {0, 1, 2}, {1, 2, 3}, {2, 3, 4}, {3, 4}, {5}};
  hood.offsets.push_back(0);
  for (const auto& r : rows) {
    hood.indices.insert(hood.indices.end(), r.begin(), r.end());
    hood.offsets.push_back(std::int64_t(hood.indices.size()));
  }
  const std::vector<std::uint8_t> core = {1, 1, 0, 1, 1, 0};
  const auto r = gpuml::algorithms::label_components(hood, core);
  EXPECT_EQ(r.labels, (std::vector<std::int64_t>{0, 0, 0, 1, 1, -1}));
  EXPECT_EQ(r.core_sample_indices, (std::vector<std::int64_t>{0, 1, 3, 4}));

  // numpy: np.sum of 300 float32 values 0.1 (pairwise: 128 + 172, split at multiples of 8).
  std::vector<float> v(300, 0.1f);
  const float got = gpuml::algorithms::numpy_sum<float>(300, [&](std::int64_t i) { return v[std::size_t(i)]; });
  float sequential = 0;
  for (float x : v) sequential += x;
  // An independent pairwise sum: halves down to blocks of at most 128, each as eight interleaved lanes.
  auto block = [&](std::size_t first, std::size_t count) {
    float lanes[8] = {};
    std::size_t i = 0;
    for (; i + 8 <= count; i += 8)
      for (int j = 0; j < 8; ++j) lanes[j] = i == 0 ? v[first + j] : lanes[j] + v[first + i + j];
    float s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    for (; i < count; ++i) s += v[first + i];
    return s;
  };
  // 300 -> 144 (150 less 150 % 8) + 156 -> each at most 128? 144 -> 72 + 72; 156 -> 72 + 84.
  const float want = (block(0, 72) + block(72, 72)) + (block(144, 72) + block(216, 84));
  EXPECT_EQ(got, want);
  EXPECT_NE(got, sequential);  // otherwise the check above would not tell the orders apart
}

}  // namespace
