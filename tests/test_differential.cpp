// A standing differential test: the Vulkan engines against the host engines over random problems (shapes from 1
// to thousands of rows and features, scales from 1e-3 to 1e3, offsets far from the origin, constant columns,
// duplicated rows, every k-NN metric, float and double). Each case is drawn from the printed GPUML_TEST_SEED, so
// a failure replays with GPUML_TEST_SEED=<seed>; GPUML_DIFF_CASES=<n> runs more (or fewer) cases than the default.
#include "support.hpp"

#include <gpuml/estimators/kmeans.hpp>
#include <gpuml/estimators/neighbors.hpp>

#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using gpuml::Matrix;

int case_count() {
  if (const char* e = std::getenv("GPUML_DIFF_CASES"); e && *e) return std::max(1, std::atoi(e));
  return 8;  // a new seed every run: coverage grows with the runs, not with one run's length
}

struct Problem {
  Eigen::Index n = 0, d = 0;
  double scale = 1, offset = 0;
  std::string text;
};

/// Random data with awkward structure: some constant columns, some duplicated rows, an offset and a scale.
template <class T>
Matrix<T> draw(std::mt19937_64& rng, Problem& p, Eigen::Index max_n, Eigen::Index max_d) {
  auto uniform_int = [&](Eigen::Index lo, Eigen::Index hi) { return std::uniform_int_distribution<Eigen::Index>(lo, hi)(rng); };
  p.n = uniform_int(2, max_n);
  p.d = uniform_int(1, max_d);
  p.scale = std::pow(10.0, std::uniform_real_distribution<double>(-3, 3)(rng));
  p.offset = std::uniform_int_distribution<int>(0, 2)(rng) == 0 ? 0.0 : std::uniform_real_distribution<double>(-1e3, 1e3)(rng) * p.scale;
  std::uniform_real_distribution<double> u(-1, 1);
  Matrix<T> X(p.n, p.d);
  for (Eigen::Index i = 0; i < p.n; ++i)
    for (Eigen::Index j = 0; j < p.d; ++j) X(i, j) = static_cast<T>(p.offset + p.scale * u(rng));
  const Eigen::Index constant_cols = p.d > 1 ? uniform_int(0, p.d / 3) : 0;
  for (Eigen::Index c = 0; c < constant_cols; ++c) X.col(uniform_int(0, p.d - 1)).setConstant(static_cast<T>(p.offset));
  const Eigen::Index duplicates = uniform_int(0, p.n / 4);
  for (Eigen::Index r = 0; r < duplicates; ++r) X.row(uniform_int(0, p.n - 1)) = X.row(uniform_int(0, p.n - 1)).eval();
  std::ostringstream s;
  s << "n=" << p.n << " d=" << p.d << " scale=" << p.scale << " offset=" << p.offset << " constant columns<=" << constant_cols
    << " duplicated rows<=" << duplicates;
  p.text = s.str();
  return X;
}

template <class T>
double slack() {
  return std::is_same_v<T, float> ? 1e-3 : 1e-9;
}

/// k-means, one Lloyd iteration from an array init of random rows: the device's inertia and centers against the
/// host's, and its labels the nearest centers wherever the two nearest are clearly apart.
template <class T>
void kmeans_case(const gpuml::Backend& device, std::mt19937_64& rng, int index) {
  Problem p;
  const Matrix<T> X = draw<T>(rng, p, 1500, 300);
  const int k = static_cast<int>(std::uniform_int_distribution<Eigen::Index>(1, std::min<Eigen::Index>(p.n, 300))(rng));
  SCOPED_TRACE("kmeans case " + std::to_string(index) + " " + p.text + " k=" + std::to_string(k));
  gpuml::KMeansParams params;
  params.n_clusters = k;
  Matrix<double> init(k, p.d);
  for (int c = 0; c < k; ++c) init.row(c) = X.row(std::uniform_int_distribution<Eigen::Index>(0, p.n - 1)(rng)).template cast<double>();
  params.init_centers = init;
  params.max_iter = 1;
  params.tol = 0;
  gpuml::KMeans<T> dev(params, device), host(params, gpuml::Backend::host());
  dev.fit(X);
  host.fit(X);
  // The spread around the offset sets the rounding scale of every distance (data are centred before the fit).
  const double unit = p.scale * p.scale * static_cast<double>(p.d) * static_cast<double>(p.n);
  EXPECT_NEAR(dev.inertia(), host.inertia(), slack<T>() * (host.inertia() + unit));
  const Matrix<T>& C = dev.cluster_centers();
  const double cscale = slack<T>() * (p.scale + std::abs(p.offset));
  // The centers must agree where both engines' first E-step gave the same labels. Their float32 distance formulas
  // round differently, so a sample whose two nearest distinct centers lie within rounding may take either one, and
  // a single such sample moves a center by a large step (or empties a cluster, which relocation then fills with a
  // different far point). Replay that E-step on the centred data, as fit does, to tell the two cases apart.
  const Eigen::Matrix<T, 1, Eigen::Dynamic> mean = (X.template cast<double>().colwise().sum() / static_cast<double>(p.n)).template cast<T>();
  const Matrix<T> Xc = X.rowwise() - mean, init_c = init.template cast<T>().rowwise() - mean;
  gpuml::KMeans<T> dev_step(params, device), host_step(params, gpuml::Backend::host());
  dev_step.set_cluster_centers(init_c);
  host_step.set_cluster_centers(init_c);
  const gpuml::Labels dev_first = dev_step.predict(Xc), host_first = host_step.predict(Xc);
  int near_ties = 0;
  for (Eigen::Index i = 0; i < p.n; ++i) {
    if (dev_first[i] == host_first[i]) continue;
    const auto a = Xc.row(i).template cast<double>();
    const double da = (a - init_c.row(dev_first[i]).template cast<double>()).squaredNorm();
    const double db = (a - init_c.row(host_first[i]).template cast<double>()).squaredNorm();
    const double norms = a.squaredNorm() + init_c.row(dev_first[i]).template cast<double>().squaredNorm() +
                         init_c.row(host_first[i]).template cast<double>().squaredNorm();
    ASSERT_LE(std::abs(da - db), slack<T>() * 1e-1 * norms)
        << "first E-step: sample " << i << " labelled " << dev_first[i] << " on the device and " << host_first[i]
        << " on the host, and the two distances are not within rounding";
    ++near_ties;
  }
  if (near_ties == 0) {
    EXPECT_LE((C - host.cluster_centers()).cwiseAbs().maxCoeff(), 10 * cscale);
  }
  for (Eigen::Index i = 0; i < p.n; ++i) {
    double best = INFINITY, second = INFINITY;
    Eigen::Index arg = -1;
    for (Eigen::Index j = 0; j < k; ++j) {
      const double d2 = (X.row(i).template cast<double>() - C.row(j).template cast<double>()).squaredNorm();
      if (d2 < best) second = best, best = d2, arg = j;
      else if (d2 < second) second = d2;
    }
    if (second - best > slack<T>() * p.scale * p.scale * static_cast<double>(p.d) * 10) {
      ASSERT_EQ(dev.labels()[i], arg) << "sample " << i;
    }
  }
}

/// k-NN with a random metric and k: the device's j-th value of every query against the host's j-th value (indices
/// may differ only where values tie within rounding).
template <class T>
void knn_case(const gpuml::Backend& device, std::mt19937_64& rng, int index) {
  static const char* metrics[] = {"euclidean", "sqeuclidean", "manhattan", "cosine", "chebyshev", "inner_product"};
  Problem p;
  const Matrix<T> db = draw<T>(rng, p, 3000, 200);
  const Eigen::Index m = std::uniform_int_distribution<Eigen::Index>(1, 150)(rng);
  Matrix<T> q(m, p.d);
  for (Eigen::Index i = 0; i < m; ++i)  // rows of the database (exact matches), or new points around it
    q.row(i) = std::uniform_int_distribution<int>(0, 3)(rng) == 0
                   ? db.row(std::uniform_int_distribution<Eigen::Index>(0, p.n - 1)(rng)).eval()
                   : (db.row(std::uniform_int_distribution<Eigen::Index>(0, p.n - 1)(rng)).array() +
                      static_cast<T>(p.scale * 0.1))
                         .matrix()
                         .eval();
  const int k = static_cast<int>(std::uniform_int_distribution<Eigen::Index>(1, std::min<Eigen::Index>(p.n, 64))(rng));
  const std::string metric = metrics[std::uniform_int_distribution<int>(0, 5)(rng)];
  SCOPED_TRACE("knn case " + std::to_string(index) + " " + p.text + " m=" + std::to_string(m) + " k=" + std::to_string(k) +
               " metric=" + metric);
  gpuml::NearestNeighbors<T> dev({k, metric}, device), host({k, metric}, gpuml::Backend::host());
  dev.fit(db);
  host.fit(db);
  const auto a = dev.kneighbors(q), b = host.kneighbors(q);
  ASSERT_EQ(a.indices.rows(), m);
  ASSERT_EQ(a.indices.cols(), k);
  const double magnitude = p.scale + std::abs(p.offset);
  const double unit = metric == "cosine" ? 1.0
                      : (metric == "sqeuclidean" || metric == "inner_product") ? magnitude * magnitude * static_cast<double>(p.d)
                      : metric == "chebyshev" ? magnitude
                                              : magnitude * static_cast<double>(p.d);
  for (Eigen::Index i = 0; i < m; ++i)
    for (int j = 0; j < k; ++j) {
      ASSERT_NEAR(static_cast<double>(a.distances(i, j)), static_cast<double>(b.distances(i, j)), 10 * slack<T>() * unit)
          << "query " << i << " column " << j << " (device index " << a.indices(i, j) << ", host " << b.indices(i, j) << ")";
      ASSERT_GE(a.indices(i, j), 0);
      ASSERT_LT(a.indices(i, j), p.n);
    }
}

template <class T>
class Differential : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Differential, Scalars);

TYPED_TEST(Differential, VulkanAgainstHostOnRandomProblems) {
  using T = TypeParam;
  bool any = false;
  for (const auto& b : gpuml::testing::backends()) {
    if (!b.backend.is_vulkan()) continue;
    if (std::is_same_v<T, double> && !b.backend.device()->info().float64) continue;
    any = true;
    std::mt19937_64 rng(gpuml::testing::test_seed() + (std::is_same_v<T, float> ? 0 : 1));
    const int cases = case_count();
    for (int c = 0; c < cases; ++c) {
      kmeans_case<T>(b.backend, rng, c);
      if (this->HasFatalFailure()) return;
      knn_case<T>(b.backend, rng, c);
      if (this->HasFatalFailure()) return;
    }
  }
  if (!any) GTEST_SKIP() << "no Vulkan device with this scalar type";
}

}  // namespace
