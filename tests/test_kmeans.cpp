// KMeans: scikit-learn parity cases, an independent naive reference, k-means++ sanity, input errors.
// Every case runs for float and double and on every backend in gpuml::testing::backends().
#include "support.hpp"

#include <gpuml/estimators/kmeans.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace {

using gpuml::Backend;
using gpuml::KMeans;
using gpuml::KMeansParams;
using gpuml::Labels;
using gpuml::Matrix;
using gpuml::Vector;

template <class T>
class KMeansTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KMeansTest, Scalars);

#define FOR_EACH_BACKEND(nb)                        \
  for (const auto& nb : gpuml::testing::backends()) \
    if (SCOPED_TRACE("backend " + nb.name); false) { \
    } else

/// Captures gpuml warnings for the lifetime of the object.
struct WarningCapture {
  std::vector<std::string> messages;
  gpuml::WarningHandler previous;
  WarningCapture() {
    previous = gpuml::set_warning_handler([this](const std::string& m) { messages.push_back(m); });
  }
  ~WarningCapture() { gpuml::set_warning_handler(previous); }
  bool contains(const std::string& s) const {
    return std::any_of(messages.begin(), messages.end(), [&](const std::string& m) { return m.find(s) != std::string::npos; });
  }
};

template <class T>
double tol_for() {
  return std::is_same_v<T, float> ? 1e-4 : 1e-10;
}

void expect_near_rel(double got, double want, double rtol, const char* what) {
  EXPECT_LE(std::abs(got - want), rtol * std::max(std::abs(want), 1e-30)) << what << ": got " << got << ", want " << want;
}

template <class T>
Matrix<double> to_double(const Matrix<T>& m) {
  return m.template cast<double>();
}

/// Well separated blobs: n samples around k random centers in [-scale, scale]^d with uniform noise in [-1, 1].
template <class T>
Matrix<T> blobs(Eigen::Index n, Eigen::Index d, Eigen::Index k, std::uint64_t salt, double scale = 10.0) {
  const Matrix<double> centers = gpuml::testing::random_matrix<double>(k, d, salt, -scale, scale);
  const Matrix<double> noise = gpuml::testing::random_matrix<double>(n, d, salt + 1);
  Matrix<T> X(n, d);
  for (Eigen::Index i = 0; i < n; ++i) X.row(i) = (centers.row(i % k) + noise.row(i)).template cast<T>();
  return X;
}

/// Naive double-precision Lloyd with scikit-learn's rules (centring, relocation, strict / tol convergence,
/// final E-step), plain loops only.
struct NaiveResult {
  Matrix<double> centers;
  std::vector<int> labels;
  double inertia = 0;
  int n_iter = 0;
};

NaiveResult naive_kmeans(const Matrix<double>& X0, const std::vector<double>& w, const Matrix<double>& init, int max_iter,
                         double rel_tol) {
  const int n = static_cast<int>(X0.rows()), d = static_cast<int>(X0.cols()), k = static_cast<int>(init.rows());
  std::vector<double> mean(d, 0.0);
  for (int i = 0; i < n; ++i)
    for (int f = 0; f < d; ++f) mean[f] += X0(i, f) / n;
  double var_sum = 0;
  for (int f = 0; f < d; ++f) {
    double v = 0;
    for (int i = 0; i < n; ++i) v += (X0(i, f) - mean[f]) * (X0(i, f) - mean[f]);
    var_sum += v / n;
  }
  const double tol = var_sum / d * rel_tol;
  Matrix<double> X = X0, C = init;
  for (int i = 0; i < n; ++i)
    for (int f = 0; f < d; ++f) X(i, f) -= mean[f];
  for (int j = 0; j < k; ++j)
    for (int f = 0; f < d; ++f) C(j, f) -= mean[f];
  auto dist2 = [&](int i, const Matrix<double>& c, int j) {
    double s = 0;
    for (int f = 0; f < d; ++f) s += (X(i, f) - c(j, f)) * (X(i, f) - c(j, f));
    return s;
  };
  auto estep = [&](const Matrix<double>& c, std::vector<int>& lab) {
    for (int i = 0; i < n; ++i) {
      int best = 0;
      double bd = dist2(i, c, 0);
      for (int j = 1; j < k; ++j)
        if (double v = dist2(i, c, j); v < bd) bd = v, best = j;
      lab[i] = best;
    }
  };
  std::vector<int> labels(n, -1), old(n, -1);
  NaiveResult r;
  bool strict = false;
  int it = 0;
  for (; it < max_iter; ++it) {
    estep(C, labels);
    Matrix<double> S = Matrix<double>::Zero(k, d);
    std::vector<double> W(k, 0.0);
    for (int i = 0; i < n; ++i) {
      W[labels[i]] += w[i];
      for (int f = 0; f < d; ++f) S(labels[i], f) += w[i] * X(i, f);
    }
    std::vector<int> empty;
    for (int j = 0; j < k; ++j)
      if (W[j] == 0) empty.push_back(j);
    if (!empty.empty()) {
      std::vector<double> dist(n);
      double mx = 0;
      for (int i = 0; i < n; ++i) mx = std::max(mx, dist[i] = dist2(i, C, labels[i]));
      if (mx > 0) {
        std::vector<int> order(n);
        for (int i = 0; i < n; ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](int a, int b) { return dist[a] > dist[b] || (dist[a] == dist[b] && a > b); });
        for (size_t t = 0; t < empty.size(); ++t) {
          const int far = order[t], o = labels[far], e = empty[t];
          for (int f = 0; f < d; ++f) {
            S(o, f) -= w[far] * X(far, f);
            S(e, f) = w[far] * X(far, f);
          }
          W[e] = w[far];
          W[o] -= w[far];
        }
      }
    }
    int heavy = 0;
    for (int j = 1; j < k; ++j)
      if (W[j] > W[heavy]) heavy = j;
    for (int j = 0; j < k; ++j)
      for (int f = 0; f < d; ++f) S(j, f) = W[j] > 0 ? S(j, f) / W[j] : S(heavy, f);
    double shift = 0;
    for (int j = 0; j < k; ++j)
      for (int f = 0; f < d; ++f) shift += (S(j, f) - C(j, f)) * (S(j, f) - C(j, f));
    C = S;
    if (labels == old) {
      strict = true;
      break;
    }
    if (shift <= tol) break;
    old = labels;
  }
  r.n_iter = std::min(it + 1, max_iter);
  if (!strict) estep(C, labels);
  for (int i = 0; i < n; ++i) r.inertia += w[i] * dist2(i, C, labels[i]);
  for (int j = 0; j < k; ++j)
    for (int f = 0; f < d; ++f) C(j, f) += mean[f];
  r.centers = C;
  r.labels = labels;
  return r;
}

std::vector<int> to_vec(const Labels& l) { return std::vector<int>(l.data(), l.data() + l.size()); }

template <class T>
Matrix<T> four_points() {
  Matrix<T> X(4, 2);
  X << 0, 0, 0.5, 0, 0.5, 1, 1, 1;
  return X;
}

Matrix<double> mat2(std::initializer_list<double> v, Eigen::Index rows) {
  Matrix<double> m(rows, static_cast<Eigen::Index>(v.size()) / rows);
  std::copy(v.begin(), v.end(), m.data());
  return m;
}

// ---------------------------------------------------------------------------------------------------------------
// scikit-learn parity cases

TYPED_TEST(KMeansTest, WeightedFourPoints) {
  using T = TypeParam;
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 2;
    p.init_centers = mat2({0, 0, 1, 1}, 2);
    Vector<T> w(4);
    w << 3, 1, 1, 3;
    KMeans<T> km(p, nb.backend);
    km.fit(four_points<T>(), w);
    EXPECT_EQ(to_vec(km.labels()), (std::vector<int>{0, 0, 1, 1}));
    EXPECT_NEAR(km.inertia(), 0.375, 1e-6);
    const Matrix<double> want = mat2({0.125, 0, 0.875, 1}, 2);
    EXPECT_TRUE(to_double(km.cluster_centers()).isApprox(want, 1e-6)) << km.cluster_centers();
    EXPECT_EQ(km.n_iter(), 2);
  }
}

TYPED_TEST(KMeansTest, RelocatesEmptyCluster) {
  using T = TypeParam;
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 2;
    p.init_centers = mat2({0.5, 0.5, 3, 3}, 2);  // the second center is empty at the first iteration
    KMeans<T> km(p, nb.backend);
    km.fit(four_points<T>());
    EXPECT_NEAR(km.inertia(), 0.25, 1e-6);
    EXPECT_EQ(km.n_iter(), 3);
    // Two relocations are acceptable (argpartition does not order ties), as in scikit-learn's test.
    const auto labels = to_vec(km.labels());
    const Matrix<double> c = to_double(km.cluster_centers());
    if (labels == std::vector<int>{0, 0, 1, 1}) {
      EXPECT_TRUE(c.isApprox(mat2({0.25, 0, 0.75, 1}, 2), 1e-6)) << c;
    } else {
      EXPECT_EQ(labels, (std::vector<int>{1, 1, 0, 0}));
      EXPECT_TRUE(c.isApprox(mat2({0.75, 1, 0.25, 0}, 2), 1e-6)) << c;
    }
  }
}

TYPED_TEST(KMeansTest, VerboseOutputMatchesScikitLearn) {
  using T = TypeParam;
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 2;
    p.init_centers = mat2({0, 0, 1, 1}, 2);
    p.verbose = true;
    Vector<T> w(4);
    w << 3, 1, 1, 3;
    KMeans<T> km(p, nb.backend);
    ::testing::internal::CaptureStdout();
    km.fit(four_points<T>(), w);
    const std::string out = ::testing::internal::GetCapturedStdout();
    EXPECT_EQ(out,
              "Initialization complete\nIteration 0, inertia 0.5.\nIteration 1, inertia 0.375.\n"
              "Converged at iteration 1: strict convergence.\n");
  }
}

TYPED_TEST(KMeansTest, TolZeroConvergesStrictlyOnBlobs) {
  using T = TypeParam;
  const Matrix<T> X = blobs<T>(600, 3, 4, 11);
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 4;
    p.tol = 0;
    p.max_iter = 300;
    p.random_state = 7;
    KMeans<T> km(p, nb.backend);
    km.fit(X);
    EXPECT_LT(km.n_iter(), p.max_iter);
    EXPECT_GE(km.n_iter(), 2);  // iteration 0 can never converge strictly
    // Strict convergence: one more E-M step from the result keeps every label.
    KMeansParams q = p;
    q.init_centers = to_double(km.cluster_centers());
    q.max_iter = 1;
    KMeans<T> again(q, nb.backend);
    again.fit(X);
    EXPECT_EQ(to_vec(again.labels()), to_vec(km.labels()));
  }
}

TYPED_TEST(KMeansTest, RefitFromConvergedCentersChangesNothing) {
  using T = TypeParam;
  const Matrix<T> X = blobs<T>(500, 4, 5, 21);
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 5;
    p.random_state = 3;
    p.tol = 0;  // run to strict convergence: a local optimum
    KMeans<T> km1(p, nb.backend);
    km1.fit(X);
    KMeansParams q = p;
    q.tol = 1e-4;
    q.init_centers = to_double(km1.cluster_centers());
    KMeans<T> km2(q, nb.backend);
    km2.fit(X);
    EXPECT_EQ(to_vec(km2.labels()), to_vec(km1.labels()));
    EXPECT_TRUE(to_double(km2.cluster_centers()).isApprox(to_double(km1.cluster_centers()), 1e-5));
    expect_near_rel(km2.inertia(), km1.inertia(), 1e-5, "inertia");
    EXPECT_EQ(km2.n_iter(), 1);  // the center shift is within tol at the first iteration
  }
}

TYPED_TEST(KMeansTest, MaxIterOneIsOneStepThenAnEStep) {
  using T = TypeParam;
  const Eigen::Index n = 257, d = 3, k = 4;
  const Matrix<T> X = gpuml::testing::random_matrix<T>(n, d, 31);
  Matrix<double> init(k, d);
  for (Eigen::Index j = 0; j < k; ++j) init.row(j) = X.row(j * 50).template cast<double>();
  // Hand computation in double: assign to init, average, reassign, inertia.
  const Matrix<double> Xd = X.template cast<double>();
  auto nearest = [&](const Matrix<double>& C, Eigen::Index i) {
    Eigen::Index best = 0;
    (C.rowwise() - Xd.row(i)).rowwise().squaredNorm().minCoeff(&best);
    return static_cast<int>(best);
  };
  Matrix<double> C1 = Matrix<double>::Zero(k, d);
  std::vector<double> cnt(k, 0.0);
  for (Eigen::Index i = 0; i < n; ++i) {
    const int l = nearest(init, i);
    C1.row(l) += Xd.row(i);
    cnt[l] += 1;
  }
  for (Eigen::Index j = 0; j < k; ++j) {
    ASSERT_GT(cnt[j], 0);
    C1.row(j) /= cnt[j];
  }
  std::vector<int> want_labels(n);
  double want_inertia = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    want_labels[i] = nearest(C1, i);
    want_inertia += (Xd.row(i) - C1.row(want_labels[i])).squaredNorm();
  }
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = static_cast<int>(k);
    p.init_centers = init;
    p.max_iter = 1;
    KMeans<T> km(p, nb.backend);
    km.fit(X);
    EXPECT_EQ(km.n_iter(), 1);
    EXPECT_TRUE(to_double(km.cluster_centers()).isApprox(C1, std::is_same_v<T, float> ? 1e-5 : 1e-12));
    EXPECT_EQ(to_vec(km.labels()), want_labels);
    expect_near_rel(km.inertia(), want_inertia, std::is_same_v<T, float> ? 1e-5 : 1e-10, "inertia");
  }
}

TYPED_TEST(KMeansTest, IntegerWeightsEqualRepeatedSamples) {
  using T = TypeParam;
  const Eigen::Index n = 300, d = 3, k = 3;
  const Matrix<T> X = blobs<T>(n, d, k, 41);
  std::mt19937_64 rng(gpuml::testing::test_seed() + 41);
  Vector<T> w(n);
  std::vector<Eigen::Index> rep;
  for (Eigen::Index i = 0; i < n; ++i) {
    const int c = 1 + static_cast<int>(rng() % 4);
    w[i] = static_cast<T>(c);
    for (int r = 0; r < c; ++r) rep.push_back(i);
  }
  Matrix<T> Xr(static_cast<Eigen::Index>(rep.size()), d);
  for (size_t r = 0; r < rep.size(); ++r) Xr.row(static_cast<Eigen::Index>(r)) = X.row(rep[r]);
  Matrix<double> init(k, d);
  for (Eigen::Index j = 0; j < k; ++j) init.row(j) = X.row(j * 7 + 1).template cast<double>();
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = static_cast<int>(k);
    p.init_centers = init;
    KMeans<T> kw(p, nb.backend), kr(p, nb.backend);
    kw.fit(X, w);
    kr.fit(Xr);
    std::vector<int> repeated;
    for (Eigen::Index i : rep) repeated.push_back(kw.labels()[i]);
    EXPECT_EQ(to_vec(kr.labels()), repeated);
    expect_near_rel(kw.inertia(), kr.inertia(), std::is_same_v<T, float> ? 1e-5 : 1e-10, "inertia");
    EXPECT_TRUE(to_double(kw.cluster_centers()).isApprox(to_double(kr.cluster_centers()), 1e-5));
  }
}

TYPED_TEST(KMeansTest, UnitWeightsEqualNoWeightsAndScaledWeightsGiveSameResult) {
  using T = TypeParam;
  const Matrix<T> X = blobs<T>(400, 5, 6, 51);
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 6;
    p.random_state = 5;
    KMeans<T> plain(p, nb.backend), unit(p, nb.backend), scaled(p, nb.backend);
    plain.fit(X);
    unit.fit(X, Vector<T>::Ones(X.rows()));
    EXPECT_EQ(to_vec(unit.labels()), to_vec(plain.labels()));
    EXPECT_EQ(unit.cluster_centers(), plain.cluster_centers());
    EXPECT_EQ(unit.inertia(), plain.inertia());
    EXPECT_EQ(unit.n_iter(), plain.n_iter());
    // Scaling every weight by 0.5 (exact in binary) scales the inertia and keeps labels and centers.
    scaled.fit(X, Vector<T>::Constant(X.rows(), T(0.5)));
    EXPECT_EQ(to_vec(scaled.labels()), to_vec(plain.labels()));
    EXPECT_TRUE(to_double(scaled.cluster_centers()).isApprox(to_double(plain.cluster_centers()), 1e-5));
    expect_near_rel(scaled.inertia(), 0.5 * plain.inertia(), 1e-5, "scaled inertia");
  }
}

TYPED_TEST(KMeansTest, Float32AgreesWithFloat64) {
  // Compares KMeans<float> with KMeans<double> on the same (float-representable) data; runs once per TypeParam.
  const Matrix<float> Xf = blobs<float>(700, 6, 5, 61);
  const Matrix<double> Xd = Xf.cast<double>();
  Matrix<double> init(5, 6);
  for (int j = 0; j < 5; ++j) init.row(j) = Xd.row(j * 3);
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 5;
    p.init_centers = init;
    KMeans<float> kf(p, nb.backend);
    KMeans<double> kd(p, nb.backend);
    kf.fit(Xf);
    kd.fit(Xd);
    EXPECT_EQ(to_vec(kf.labels()), to_vec(kd.labels()));
    expect_near_rel(kf.inertia(), kd.inertia(), 1e-4, "inertia");
  }
}

TYPED_TEST(KMeansTest, DuplicatesWithMoreClustersThanPointsWarnAndStop) {
  using T = TypeParam;
  Matrix<T> X(5, 2);
  X << 0, 0, 1, 1, 1, 1, 1, 0, 0, 1;
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 5;
    p.init_centers = X.template cast<double>();
    KMeans<T> km(p, nb.backend);
    WarningCapture warnings;
    km.fit(X);
    EXPECT_EQ(km.n_iter(), 1);
    EXPECT_TRUE(warnings.contains("Number of distinct clusters (4) found smaller than n_clusters (5). Possibly due to "
                                  "duplicate points in X."));
    EXPECT_NEAR(km.inertia(), 0.0, 1e-12);
  }
}

TYPED_TEST(KMeansTest, KMeansPlusPlusOnDuplicatesWarns) {
  using T = TypeParam;
  Matrix<T> X(4, 2);
  X << 0, 0, 0, 1, 1, 0, 1, 0;  // the last point is duplicated
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 4;
    p.random_state = gpuml::testing::test_seed();
    KMeans<T> km(p, nb.backend);
    WarningCapture warnings;
    km.fit(X);
    EXPECT_TRUE(warnings.contains("Number of distinct clusters (3) found smaller than n_clusters (4)"));
    const auto l = to_vec(km.labels());
    EXPECT_EQ(std::set<int>(l.begin(), l.end()), (std::set<int>{0, 1, 2}));
  }
}

TYPED_TEST(KMeansTest, DistinctClustersWarningWithLargeClusters) {
  // Two distinct points, 300 copies each (more than 256 per cluster), k = 3: scikit-learn warns.
  using T = TypeParam;
  Matrix<T> X(600, 2);
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    X(i, 0) = i % 2 ? T(3.5) : T(-1.25);
    X(i, 1) = i % 2 ? T(0.75) : T(2.0);
  }
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 3;
    p.random_state = gpuml::testing::test_seed();
    KMeans<T> km(p, nb.backend);
    WarningCapture warnings;
    km.fit(X);
    EXPECT_TRUE(warnings.contains("Number of distinct clusters (2) found smaller than n_clusters (3)"));
  }
}

TYPED_TEST(KMeansTest, ExplicitInitWithNInitWarns) {
  using T = TypeParam;
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 2;
    p.n_init = 3;
    p.init_centers = mat2({0, 0, 1, 1}, 2);
    KMeans<T> km(p, nb.backend);
    WarningCapture warnings;
    km.fit(four_points<T>());
    EXPECT_TRUE(warnings.contains("Explicit initial center position passed: performing only one init in KMeans instead "
                                  "of n_init=3."));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Consistency of the public methods

TYPED_TEST(KMeansTest, LabelsEqualPredictTransformAndScore) {
  using T = TypeParam;
  const Matrix<T> X = gpuml::testing::random_matrix<T>(1000, 5, 71, -3, 7);
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 9;
    p.random_state = 11;
    KMeans<T> km(p, nb.backend);
    km.fit(X);
    EXPECT_EQ(to_vec(km.predict(X)), to_vec(km.labels()));
    expect_near_rel(km.score(X), -km.inertia(), std::is_same_v<T, float> ? 1e-4 : 1e-10, "score");
    const Vector<T> w = Vector<T>::Constant(X.rows(), T(2));
    expect_near_rel(km.score(X, w), -2 * km.inertia(), std::is_same_v<T, float> ? 1e-4 : 1e-10, "weighted score");

    const Matrix<T> Dc = km.transform(km.cluster_centers());
    ASSERT_EQ(Dc.rows(), 9);
    ASSERT_EQ(Dc.cols(), 9);
    for (int j = 0; j < 9; ++j) EXPECT_EQ(Dc(j, j), T(0)) << "diagonal " << j;
    const Matrix<T> D = km.transform(X);
    ASSERT_EQ(D.rows(), X.rows());
    ASSERT_EQ(D.cols(), 9);
    for (Eigen::Index i = 0; i < X.rows(); i += 37)
      for (int j = 0; j < 9; ++j) {
        const double want =
            (X.row(i).template cast<double>() - km.cluster_centers().row(j).template cast<double>()).norm();
        EXPECT_NEAR(D(i, j), want, 1e-5 * (1 + want));
      }
    // Every label is the nearest center by transform's distances (up to rounding).
    for (Eigen::Index i = 0; i < X.rows(); ++i) {
      const T best = D.row(i).minCoeff();
      EXPECT_LE(D(i, km.labels()[i]), best * (1 + T(1e-4)) + T(1e-6));
    }

    KMeans<T> other(p, nb.backend);
    EXPECT_EQ(to_vec(other.fit_predict(X)), to_vec(km.labels()));
    KMeans<T> third(p, nb.backend);
    EXPECT_EQ(third.fit_transform(X), D);
  }
}

TYPED_TEST(KMeansTest, MatchesNaiveReference) {
  using T = TypeParam;
  const Eigen::Index n = 1003, d = 7, k = 13;
  // double: uniform data (harder); float: blobs, so that no sample sits within rounding of a tie.
  const Matrix<T> X = std::is_same_v<T, double> ? gpuml::testing::random_matrix<T>(n, d, 81, -2, 5)
                                                : blobs<T>(n, d, k, 81, 6.0);
  const Matrix<double> Xd = X.template cast<double>();
  std::mt19937_64 rng(gpuml::testing::test_seed() + 81);
  Vector<T> w(n);
  std::vector<double> wd(n);
  for (Eigen::Index i = 0; i < n; ++i) wd[i] = w[i] = static_cast<T>(0.25 * (1 + rng() % 8));
  Matrix<double> init(k, d);
  for (Eigen::Index j = 0; j < k; ++j) init.row(j) = Xd.row((j * 71 + 5) % n);
  const NaiveResult ref = naive_kmeans(Xd, wd, init, 300, 1e-4);
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = static_cast<int>(k);
    p.init_centers = init;
    KMeans<T> km(p, nb.backend);
    km.fit(X, w);
    EXPECT_EQ(to_vec(km.labels()), ref.labels);
    expect_near_rel(km.inertia(), ref.inertia, std::is_same_v<T, float> ? 1e-4 : 1e-6, "inertia");
    EXPECT_TRUE(to_double(km.cluster_centers()).isApprox(ref.centers, std::is_same_v<T, float> ? 1e-4 : 1e-8));
    if (std::is_same_v<T, double>) {
      EXPECT_EQ(km.n_iter(), ref.n_iter);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Seeding

// numpy.random.RandomState(0).random_sample(3) and RandomState(2**32 - 1).random_sample(), as numpy prints them; the
// 1000th draw from seed 0 crosses a regeneration of the key. (python/tests/test_kmeans_fit.py checks whole streams
// against numpy itself.)
TEST(NumpyRandomStateTest, DrawsNumpysNumbers) {
  gpuml::algorithms::NumpyRandomState zero(0);
  EXPECT_EQ(zero.random_sample(), 0.5488135039273248);
  EXPECT_EQ(zero.random_sample(), 0.7151893663724195);
  EXPECT_EQ(zero.random_sample(), 0.6027633760716439);
  gpuml::algorithms::NumpyRandomState top(0xFFFFFFFFull);
  EXPECT_EQ(top.random_sample(), 0.0976320289940138);
  // A stream rebuilt from a state continues where the state's own stream does.
  for (int i = 0; i < 997; ++i) zero.random_sample();
  gpuml::algorithms::NumpyRandomState copy(zero.key(), zero.pos());
  for (int i = 0; i < 700; ++i) ASSERT_EQ(copy.random_sample(), zero.random_sample()) << "draw " << i;
  EXPECT_THROW(gpuml::algorithms::NumpyRandomState(std::uint64_t(1) << 32), gpuml::invalid_input);
  KMeansParams p;
  p.random_state = std::uint64_t(1) << 40;
  const Matrix<double> X = gpuml::testing::random_matrix<double>(50, 2, 3);
  EXPECT_THROW(KMeans<double>(p, gpuml::Backend::host()).fit(X), gpuml::invalid_input);
}

TYPED_TEST(KMeansTest, KMeansPlusPlusPicksDistinctPositiveWeightSamples) {
  using T = TypeParam;
  const Eigen::Index n = 800, d = 4;
  const int k = 17;
  const Matrix<T> X = gpuml::testing::random_matrix<T>(n, d, 91);
  Vector<T> w(n);
  for (Eigen::Index i = 0; i < n; ++i) w[i] = (i % 3 == 0) ? T(0) : T(1 + i % 5);
  FOR_EACH_BACKEND(nb) {
    gpuml::algorithms::NumpyRandomState rng1(gpuml::testing::test_seed()), rng2(gpuml::testing::test_seed());
    const Matrix<T> C1 = gpuml::detail::run_kmeans_plus_plus<T>(nb.backend, X, w, k, rng1);
    const Matrix<T> C2 = gpuml::detail::run_kmeans_plus_plus<T>(nb.backend, X, w, k, rng2);
    EXPECT_EQ(C1, C2) << "not reproducible for a fixed seed";
    ASSERT_EQ(C1.rows(), k);
    std::set<Eigen::Index> chosen;
    for (int j = 0; j < k; ++j) {
      Eigen::Index found = -1;
      for (Eigen::Index i = 0; i < n; ++i)
        if (X.row(i) == C1.row(j)) found = i;
      ASSERT_GE(found, 0) << "center " << j << " is not a sample";
      EXPECT_GT(w[found], T(0)) << "zero-weight sample " << found << " chosen";
      chosen.insert(found);
    }
    EXPECT_EQ(static_cast<int>(chosen.size()), k) << "centers are not distinct";
  }
}

TYPED_TEST(KMeansTest, FitIsReproducibleAndZeroWeightSamplesStayOut) {
  using T = TypeParam;
  const Matrix<T> X = blobs<T>(900, 3, 6, 101);
  Vector<T> w = Vector<T>::Ones(X.rows());
  for (Eigen::Index i = 0; i < X.rows(); i += 2) w[i] = 0;
  FOR_EACH_BACKEND(nb) {
    for (const char* init : {"k-means++", "random"}) {
      SCOPED_TRACE(init);
      KMeansParams p;
      p.n_clusters = 6;
      p.init = init;
      p.random_state = 1234;
      p.max_iter = 1;
      KMeans<T> a(p, nb.backend), b(p, nb.backend);
      a.fit(X, w);
      b.fit(X, w);
      EXPECT_EQ(a.cluster_centers(), b.cluster_centers());
      EXPECT_EQ(to_vec(a.labels()), to_vec(b.labels()));
      EXPECT_EQ(a.inertia(), b.inertia());
      // Zero-weight samples contribute nothing: the weighted fit equals the fit on the odd rows alone.
      Matrix<T> odd(X.rows() / 2, X.cols());
      for (Eigen::Index i = 0; i < odd.rows(); ++i) odd.row(i) = X.row(2 * i + 1);
      expect_near_rel(a.score(odd), a.score(X, w), 1e-5, "score of the weighted rows");
    }
  }
}

TYPED_TEST(KMeansTest, RandomInitRestartsKeepTheBestRun) {
  using T = TypeParam;
  const Matrix<T> X = gpuml::testing::random_matrix<T>(600, 2, 111);
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 7;
    p.init = "random";
    p.random_state = 99;
    p.n_init = 1;
    KMeans<T> one(p, nb.backend);
    one.fit(X);
    p.n_init = 0;  // auto: 10 runs for random; the first run equals the single run above
    KMeans<T> ten(p, nb.backend);
    ten.fit(X);
    EXPECT_LE(ten.inertia(), one.inertia());
    EXPECT_EQ(to_vec(ten.predict(X)), to_vec(ten.labels()));
    std::set<int> used(ten.labels().data(), ten.labels().data() + ten.labels().size());
    EXPECT_EQ(used.size(), 7u);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Errors

template <class T>
void expect_unchanged(const KMeans<T>& km, const Matrix<T>& centers, const Labels& labels, double inertia, int n_iter) {
  ASSERT_TRUE(km.fitted());
  EXPECT_EQ(km.cluster_centers(), centers);
  EXPECT_EQ(km.labels(), labels);
  EXPECT_EQ(km.inertia(), inertia);
  EXPECT_EQ(km.n_iter(), n_iter);
}

TYPED_TEST(KMeansTest, BadInputThrowsAndKeepsEarlierFit) {
  using T = TypeParam;
  const Matrix<T> X = gpuml::testing::random_matrix<T>(50, 3, 121);
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 3;
    KMeans<T> km(p, nb.backend);
    km.fit(X);
    const Matrix<T> c0 = km.cluster_centers();
    const Labels l0 = km.labels();
    const double i0 = km.inertia();
    const int n0 = km.n_iter();

    Matrix<T> bad = X;
    bad(4, 1) = std::numeric_limits<T>::quiet_NaN();
    EXPECT_THROW(km.fit(bad), gpuml::invalid_input);
    bad(4, 1) = std::numeric_limits<T>::infinity();
    EXPECT_THROW(km.fit(bad), gpuml::invalid_input);
    EXPECT_THROW(km.fit(Matrix<T>(0, 3)), gpuml::invalid_input);
    EXPECT_THROW(km.fit(Matrix<T>(5, 0)), gpuml::invalid_input);
    Vector<T> w = Vector<T>::Ones(X.rows());
    w[7] = -1;
    EXPECT_THROW(km.fit(X, w), gpuml::invalid_input);
    EXPECT_THROW(km.fit(X, Vector<T>::Ones(X.rows() - 1)), gpuml::invalid_input);
    EXPECT_THROW(km.fit(X, Vector<T>::Zero(X.rows())), gpuml::invalid_input);
    w[7] = std::numeric_limits<T>::quiet_NaN();
    EXPECT_THROW(km.fit(X, w), gpuml::invalid_input);
    expect_unchanged(km, c0, l0, i0, n0);
    // Bad input to predict/transform/score.
    EXPECT_THROW(km.predict(bad), gpuml::invalid_input);
    EXPECT_THROW(km.predict(Matrix<T>::Zero(4, 2)), gpuml::invalid_input);
    EXPECT_THROW(km.transform(Matrix<T>::Zero(4, 5)), gpuml::invalid_input);
    EXPECT_THROW(km.score(X, Vector<T>::Ones(3)), gpuml::invalid_input);

    auto check = [&](const KMeansParams& q, const Matrix<T>& data, const std::string& needle) {
      KMeans<T> other(q, nb.backend);
      try {
        other.fit(data);
        ADD_FAILURE() << "no exception for " << needle;
      } catch (const gpuml::invalid_input& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
      EXPECT_FALSE(other.fitted());
    };
    KMeansParams q = p;
    q.n_clusters = 51;
    check(q, X, "n_samples=50 should be >= n_clusters=51");
    q = p;
    q.n_clusters = 0;
    check(q, X, "n_clusters");
    q = p;
    q.init_centers = Matrix<double>::Zero(3, 2);
    check(q, X, "shape");
    q.init_centers = Matrix<double>::Zero(2, 3);
    check(q, X, "shape");
    q.init_centers = Matrix<double>::Zero(3, 3);
    (*q.init_centers)(1, 1) = std::numeric_limits<double>::infinity();
    check(q, X, "init_centers");
    if constexpr (std::is_same_v<T, float>) {  // finite in float64, beyond float32: scikit-learn's message
      (*q.init_centers)(1, 1) = 1e39;
      check(q, X, "Input contains infinity or a value too large for dtype('float32')");
    }
    q = p;
    q.init = "kmeans++";
    check(q, X, "init");
    q = p;
    q.max_iter = 0;
    check(q, X, "max_iter");
    q = p;
    q.tol = -1;
    check(q, X, "tol");
    q = p;
    q.n_init = -2;
    check(q, X, "n_init");
  }
}

TYPED_TEST(KMeansTest, ErrorsDoNotTouchAnEarlierFitOfTheSameObject) {
  using T = TypeParam;
  const Matrix<T> X = gpuml::testing::random_matrix<T>(40, 2, 131);
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 4;
    p.init_centers = X.topRows(4).template cast<double>();
    KMeans<T> km(p, nb.backend);
    km.fit(X);
    const Matrix<T> c0 = km.cluster_centers();
    const Labels l0 = km.labels();
    const double i0 = km.inertia();
    const int n0 = km.n_iter();
    EXPECT_THROW(km.fit(X.topRows(3)), gpuml::invalid_input);       // n_clusters > n_samples
    EXPECT_THROW(km.fit(X.leftCols(1)), gpuml::invalid_input);      // init of the wrong shape
    EXPECT_THROW(km.fit(Matrix<T>(0, 2)), gpuml::invalid_input);    // empty
    expect_unchanged(km, c0, l0, i0, n0);
  }
}

TYPED_TEST(KMeansTest, NotFittedBeforeFit) {
  using T = TypeParam;
  const Matrix<T> X = gpuml::testing::random_matrix<T>(10, 2, 141);
  FOR_EACH_BACKEND(nb) {
    KMeans<T> km(KMeansParams{}, nb.backend);
    EXPECT_FALSE(km.fitted());
    EXPECT_THROW(km.predict(X), gpuml::not_fitted);
    EXPECT_THROW(km.transform(X), gpuml::not_fitted);
    EXPECT_THROW(km.score(X), gpuml::not_fitted);
    EXPECT_THROW(km.cluster_centers(), gpuml::not_fitted);
    EXPECT_THROW(km.labels(), gpuml::not_fitted);
    EXPECT_EQ(km.params().n_clusters, 8);
    EXPECT_EQ(km.backend().is_host(), nb.backend.is_host());
  }
}

}  // namespace

#if !defined(__SANITIZE_ADDRESS__)
namespace {
// The body of the test below, in a process of its own: exits 0 when the check holds, 1 with the reason otherwise.
[[noreturn]] void fit_under_a_tight_address_space() {
  auto fail = [](const std::string& why) {
    std::fprintf(stderr, "%s\n", why.c_str());
    std::_Exit(1);
  };
  const Matrix<float> X = gpuml::testing::random_matrix<float>(1'000'003, 16, 5);  // 64 MB
  KMeansParams p;
  p.n_clusters = 4;
  p.max_iter = 2;
  KMeans<float> km(p, gpuml::Backend::host());
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  if (pages <= 0) fail("could not read /proc/self/statm");
  rlimit old{};
  if (getrlimit(RLIMIT_AS, &old) != 0) fail("getrlimit failed");
  rlimit tight = old;
  tight.rlim_cur = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (16u << 20);
  if (setrlimit(RLIMIT_AS, &tight) != 0) fail("setrlimit failed");
  std::string message;
  try {
    km.fit(X);
  } catch (const gpuml::out_of_memory& e) {
    message = e.what();
  } catch (const std::exception& e) {
    message = std::string("other exception: ") + e.what();
  }
  setrlimit(RLIMIT_AS, &old);
  if (message.find("out of host memory while fitting KMeans on 1000003 x 16 values of 4 bytes (61 MiB") == std::string::npos)
    fail("unexpected outcome: '" + message + "'");
  if (km.fitted()) fail("the estimator was left fitted");
  std::fprintf(stderr, "out-of-memory named as expected\n");
  std::_Exit(0);
}
}  // namespace

// Host memory running out names what was being done and the data's size (not a bare std::bad_alloc): the address
// space is capped a little above what the process uses, so the fit's working copy of X cannot be allocated. It runs
// in a fresh process (the threadsafe death-test style re-runs this binary for this test alone): in a process that
// has already opened a GPU driver, the driver's threads map and unmap address space on their own, and the fit then
// found room under the cap.
TEST(KMeansHostMemory, OutOfMemoryNamesTheWorkAndTheSize) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(fit_under_a_tight_address_space(), ::testing::ExitedWithCode(0), "out-of-memory named as expected");
}
#endif

// The iteration callback sees every iteration in order on every backend, and returning false cancels the fit
// with gpuml::cancelled, leaving an earlier fit as it was.
// The host E-step in slices (a poll is set and the last step ran longer than a slice; a slice of 0 ms slices every
// step after the first) gives the whole step's labels, sums and weights bit for bit, polls between the slices, and
// stops with gpuml::cancelled when the poll says so.
// A slice holds at least one block per host thread and a step has at most 128 blocks (host::kmeans_detail::blocking),
// so with a thread per core a machine of 64 cores or more has no room for a second slice: the thread count is set.
TYPED_TEST(KMeansTest, HostStepsInSlicesMatchWholeStepsAndCancel) {
  using T = TypeParam;
  const Eigen::Index n = 40009, d = 6;
  const int k = 11;
  gpuml::ScopedConfig threads(gpuml::config().set_num_threads(4));  // several threads, and room for several slices
  ASSERT_GE(gpuml::host::kmeans_detail::blocking<T>(n, k, d).n_blocks / gpuml::host_threads(), 2);
  const Matrix<T> X = gpuml::testing::random_matrix<T>(n, d, 901, -1.0, 1.0);
  const gpuml::Vector<T> w = gpuml::testing::random_matrix<T>(n, 1, 902, 0.5, 2.0).col(0);
  gpuml::host::kmeans_detail::HostLloyd<T> whole(X, w), sliced(X, w);
  int polls = 0;
  sliced.set_keep_going([&polls] { return ++polls > 0; }, 0.0);
  Matrix<T> C = X.topRows(k), sums_whole, sums_sliced;
  gpuml::Vector<T> weights_whole, weights_sliced;
  for (int step = 0; step < 4; ++step) {
    const int polls_before = polls;
    EXPECT_EQ(gpuml::testing::e_step_rounded(whole, C, sums_whole, weights_whole), gpuml::testing::e_step_rounded(sliced, C, sums_sliced, weights_sliced));
    EXPECT_TRUE(whole.labels() == sliced.labels()) << "step " << step;
    EXPECT_EQ(std::memcmp(sums_whole.data(), sums_sliced.data(), sizeof(T) * sums_whole.size()), 0) << "step " << step;
    EXPECT_EQ(std::memcmp(weights_whole.data(), weights_sliced.data(), sizeof(T) * k), 0) << "step " << step;
    if (step == 0) EXPECT_EQ(polls, 0) << "the first step, with no earlier step timed, ran whole";
    else EXPECT_GE(polls - polls_before, 1) << "step " << step << " ran in slices with a poll between them";
    for (int j = 0; j < k; ++j)
      if (weights_whole[j] > 0) C.row(j) = sums_whole.row(j) / weights_whole[j];
  }
  sliced.set_keep_going([] { return false; }, 0.0);
  EXPECT_THROW(gpuml::testing::e_step_rounded(sliced, C, sums_sliced, weights_sliced), gpuml::cancelled);
}

TYPED_TEST(KMeansTest, IterationCallbackReportsAndCancels) {
  using T = TypeParam;
  const Matrix<T> X = gpuml::testing::random_matrix<T>(997, 5, 131);
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 6;
    p.init_centers = X.topRows(6).template cast<double>();
    p.max_iter = 40;
    p.tol = 0;
    std::vector<int> seen;
    int stop_after = -1;  // < 0: never
    p.on_iteration = [&](const gpuml::LloydIteration& it) {
      EXPECT_EQ(it.max_iter, 40);
      EXPECT_GE(it.center_shift, 0.0);
      seen.push_back(it.iteration);
      return stop_after < 0 || it.iteration < stop_after;
    };
    KMeans<T> km(p, nb.backend);
    km.fit(X);
    ASSERT_EQ(static_cast<int>(seen.size()), km.n_iter());
    for (int i = 0; i < km.n_iter(); ++i) EXPECT_EQ(seen[i], i);
    ASSERT_GT(km.n_iter(), 3);
    const Labels before = km.labels();
    const double inertia = km.inertia();

    stop_after = 2;
    seen.clear();
    EXPECT_THROW(km.fit(X), gpuml::cancelled);
    EXPECT_EQ(seen.size(), 3u);
    EXPECT_TRUE(km.labels() == before);
    EXPECT_EQ(km.inertia(), inertia);
    KMeans<T> fresh(p, nb.backend);
    EXPECT_THROW(fresh.fit(X), gpuml::cancelled);
    EXPECT_FALSE(fresh.fitted());
  }
}

// A model made from saved centers predicts, transforms and scores as the model they came from.
TYPED_TEST(KMeansTest, ModelFromSavedCentersPredictsAsTheFittedOne) {
  using T = TypeParam;
  const Matrix<T> X = gpuml::testing::random_matrix<T>(613, 7, 141);
  FOR_EACH_BACKEND(nb) {
    KMeansParams p;
    p.n_clusters = 9;
    p.random_state = gpuml::testing::test_seed();
    KMeans<T> fitted(p, nb.backend);
    fitted.fit(X);
    KMeans<T> saved(p, nb.backend);
    saved.set_cluster_centers(fitted.cluster_centers());
    EXPECT_TRUE(saved.predict(X) == fitted.labels());
    EXPECT_EQ(saved.transform(X), fitted.transform(X));
    EXPECT_EQ(saved.score(X), fitted.score(X));
    EXPECT_EQ(saved.n_iter(), 0);
    Matrix<T> bad = fitted.cluster_centers();
    bad(1, 1) = std::numeric_limits<T>::quiet_NaN();
    EXPECT_THROW(saved.set_cluster_centers(bad), gpuml::invalid_input);
    EXPECT_EQ(saved.cluster_centers(), fitted.cluster_centers());
  }
}

// Where gpuml differs from scikit-learn on purpose (README, Semantics): n_init = 0 is the C++ spelling of "auto"
// (10 runs for init = "random", 1 otherwise), and negative sample weights are rejected for every init (scikit-learn
// fails on them for k-means++ and random, and computes with them for an array init).
TEST(KMeansParameters, NInitZeroIsAutoAndNegativeWeightsAreRejected) {
  const Matrix<double> X = gpuml::testing::random_matrix<double>(200, 3, 91);
  KMeansParams p;
  p.n_clusters = 4;
  p.init = "random";
  p.random_state = gpuml::testing::test_seed();
  KMeans<double> auto_runs(p, gpuml::Backend::host());
  auto_runs.fit(X);
  p.n_init = 10;
  KMeans<double> ten_runs(p, gpuml::Backend::host());
  ten_runs.fit(X);
  p.n_init = 1;
  KMeans<double> one_run(p, gpuml::Backend::host());
  one_run.fit(X);
  EXPECT_EQ(auto_runs.cluster_centers(), ten_runs.cluster_centers());
  EXPECT_EQ(auto_runs.inertia(), ten_runs.inertia());
  EXPECT_LE(auto_runs.inertia(), one_run.inertia());

  KMeansParams a;
  a.n_clusters = 2;
  a.init_centers = X.topRows(2);
  Vector<double> w = Vector<double>::Ones(200);
  w[3] = -1;
  KMeans<double> km(a, gpuml::Backend::host());
  try {
    km.fit(X, w);
    ADD_FAILURE() << "a negative sample weight was accepted";
  } catch (const gpuml::invalid_input& e) {
    EXPECT_NE(std::string(e.what()).find("sample_weight must be non-negative (negative at 3)"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(km.fitted());
  a.n_init = -1;
  EXPECT_THROW(KMeans<double>(a, gpuml::Backend::host()).fit(X), gpuml::invalid_input);
}

// The host's rounding of exact-sum terms is std::nearbyint's (ties to even) at every magnitude, the band just below
// 2^52 (where a double still has halves) included; exponents stay bounded where bound * rows overflows double, and
// a float32 scale stays within float32's normal range.
TEST(KMeansExactSums, RoundingAndExponentsHoldAtTheEdges) {
  for (const double y : {0.5, 1.5, 2.5, -0.5, -1.5, 123.456, -7.5, 2251799813685249.5, -2251799813685249.5,
                         2251799813685250.5, 4503599627370495.5, -4503599627370495.5, 4503599627370496.0, 1e18, -1e18})
    EXPECT_EQ(gpuml::algorithms::round_to_even(y), std::nearbyint(y)) << y;
  using gpuml::algorithms::SumFrame;
  const std::int64_t rows = 1'000'000'000;
  const int e = SumFrame::exponent<double>(1e300, rows);
  EXPECT_LE(std::ldexp(1e300, e) * static_cast<double>(rows), std::ldexp(1.0, 62)) << e;
  EXPECT_GT(std::ldexp(1e300, e) * static_cast<double>(rows), std::ldexp(1.0, 60)) << e;
  EXPECT_GE(SumFrame::exponent<float>(1e300, rows), -126);
  EXPECT_EQ(SumFrame::exponent<float>(0.0, rows), 0);
  EXPECT_EQ(SumFrame::exponent<float>(1.0, 3), 60);  // 3 < 2^2: 3 * 2^60 < 2^62
}

// The fit's column passes read rows in lanes (algorithms::column_lanes: runs of several contiguous rows, or row by
// row for strided or wide X). Against a plain row-by-row reference: the exact sums identical (integers), the extremes
// and smallest magnitudes identical; for narrow contiguous rows (lanes), a strided view (row by row) and rows wider
// than the lanes allow, with a row count that leaves a partial run in a chunk. The range pass reports a value that is
// not finite (NaN, or an infinity) wherever it is, and finite values as finite.
TYPED_TEST(KMeansTest, ColumnPassesInLanesMatchARowByRowReference) {
  using T = TypeParam;
  namespace alg = gpuml::algorithms;
  struct Shape { Eigen::Index rows, cols; bool strided; };
  for (const Shape shape : {Shape{alg::kRowChunk + 13, 7, false}, Shape{5003, 5, true}, Shape{301, alg::kLaneRowsUpTo + 3, false}}) {
    Matrix<T> full = gpuml::testing::random_matrix<T>(shape.rows, shape.cols + (shape.strided ? 3 : 0), 950 + shape.cols, -40.0, 25.0);
    for (Eigen::Index i = 0; i < shape.rows; i += 97) full(i, 1) = T(0);  // zeros: not a smallest magnitude
    full(shape.rows / 2, 2) = T(3e-7);
    const gpuml::MatrixView<T> X = full.leftCols(shape.cols);
    ASSERT_EQ(X.outerStride() != X.cols(), shape.strided);
    const Eigen::Index d = shape.cols;
    constexpr double inf = std::numeric_limits<double>::infinity();
    Eigen::RowVectorXd lo = Eigen::RowVectorXd::Constant(d, inf), hi = -lo, small = lo, sums = Eigen::RowVectorXd::Zero(d);
    for (Eigen::Index i = 0; i < X.rows(); ++i)
      for (Eigen::Index f = 0; f < d; ++f) {
        const double v = static_cast<double>(X(i, f));
        lo[f] = std::min(lo[f], v);
        hi[f] = std::max(hi[f], v);
        if (v != 0) small[f] = std::min(small[f], std::abs(v));
        sums[f] += v;
      }
    alg::ColumnRange range;
    EXPECT_TRUE(alg::column_range(X, range, /*smallest=*/true));
    EXPECT_EQ(range.lowest, lo);
    EXPECT_EQ(range.highest, hi);
    EXPECT_EQ(range.smallest, small);
    for (const T bad : {std::numeric_limits<T>::quiet_NaN(), -std::numeric_limits<T>::infinity()}) {
      for (const Eigen::Index at : {Eigen::Index(0), X.rows() - 1, X.rows() / 3}) {
        Matrix<T> with_bad = full;
        with_bad(at, d - 1 - at % d) = bad;
        alg::ColumnRange ignored;
        EXPECT_FALSE(alg::column_range(gpuml::MatrixView<T>(with_bad.leftCols(d)), ignored, true)) << "row " << at;
      }
    }

    const Eigen::RowVectorXd mean = sums / static_cast<double>(X.rows());
    for (const Eigen::RowVectorXd* center : {static_cast<const Eigen::RowVectorXd*>(nullptr), &mean}) {
      const auto exponents = alg::ExactColumnSums::exponents_for(alg::column_bounds(range, center), X.rows());
      const alg::ExactColumnSums exact = alg::exact_column_sums(X, center, exponents);
      for (Eigen::Index f = 0; f < d; ++f) {
        std::int64_t whole = 0, fraction = 0;
        for (Eigen::Index i = 0; i < X.rows(); ++i) {
          double v = static_cast<double>(X(i, f));
          if (center) v = (v - (*center)[f]) * (v - (*center)[f]);
          const double y = std::ldexp(v, exponents[f]), r = std::nearbyint(y);
          whole += static_cast<std::int64_t>(r);
          fraction += static_cast<std::int64_t>(std::nearbyint((y - r) * 4294967296.0));
        }
        EXPECT_EQ(exact.whole[f], whole) << "column " << f << (center ? " centred" : "");
        EXPECT_EQ(exact.fraction[f], fraction) << "column " << f << (center ? " centred" : "");
      }
    }
  }
}
