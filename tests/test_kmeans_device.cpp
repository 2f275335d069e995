// The Vulkan k-means engine against the host engine and an independent double-precision reference: awkward sizes,
// large k and d (partial sums in global memory, several feature tiles), data above one storage-buffer binding,
// and bitwise-identical repeated fits.
#include "support.hpp"

#include <cmath>
#include <cstring>

namespace {

using gpuml::KMeans;
using gpuml::KMeansParams;
using gpuml::Labels;
using gpuml::Matrix;
using gpuml::testing::random_matrix;

std::vector<gpuml::testing::NamedBackend> devices() {
  auto all = gpuml::testing::backends();
  std::vector<gpuml::testing::NamedBackend> out;
  for (auto& b : all)
    if (b.backend.is_vulkan()) out.push_back(b);
  return out;
}

/// Blobs: k well-separated centres in d dimensions plus uniform noise of the given spread.
template <class T>
Matrix<T> blobs(Eigen::Index n, Eigen::Index d, Eigen::Index k, std::uint64_t salt, double spread = 0.3) {
  const Matrix<double> centres = random_matrix<double>(k, d, salt, -10.0, 10.0);
  const Matrix<double> noise = random_matrix<double>(n, d, salt + 1, -spread, spread);
  Matrix<T> X(n, d);
  for (Eigen::Index i = 0; i < n; ++i) X.row(i) = (centres.row(i % k) + noise.row(i)).template cast<T>();
  return X;
}

/// Checks labels against the nearest centre in double precision wherever the two nearest are clearly apart.
template <class T>
void expect_nearest(const Matrix<T>& X, const Matrix<T>& C, const Labels& labels, double rel_gap) {
  Eigen::Index checked = 0;
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    double best = INFINITY, second = INFINITY;
    Eigen::Index arg = -1;
    for (Eigen::Index j = 0; j < C.rows(); ++j) {
      const double d2 = (X.row(i).template cast<double>() - C.row(j).template cast<double>()).squaredNorm();
      if (d2 < best) {
        second = best;
        best = d2;
        arg = j;
      } else if (d2 < second) {
        second = d2;
      }
    }
    if (second - best > rel_gap * (1.0 + X.row(i).template cast<double>().squaredNorm())) {
      ASSERT_EQ(labels[i], arg) << "sample " << i;
      ++checked;
    }
  }
  EXPECT_GT(checked, X.rows() / 2) << "too few samples had a clear nearest centre to check";
}

template <class T>
class KMeansDeviceTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KMeansDeviceTest, Scalars);

template <class T>
double gap() {
  return std::is_same_v<T, float> ? 1e-4 : 1e-10;
}

TYPED_TEST(KMeansDeviceTest, PredictMatchesReferenceOnAwkwardShapes) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    struct Shape { Eigen::Index n, d, k; };
    for (Shape s : {Shape{1, 1, 1}, Shape{517, 3, 5}, Shape{1031, 14, 127}, Shape{333, 37, 19}, Shape{250, 301, 9}}) {
      const Matrix<T> X = random_matrix<T>(s.n, s.d, 100 + s.d);
      const Matrix<T> C = random_matrix<T>(s.k, s.d, 200 + s.k);
      KMeansParams p;
      p.n_clusters = static_cast<int>(s.k);
      p.init_centers = C.template cast<double>();
      p.max_iter = 1;
      KMeans<T> km(p, dev.backend);
      const Labels gpu = gpuml::detail::run_assign<T, gpuml::kmeans_default_policy>(dev.backend, X, C);
      const Labels host = gpuml::detail::run_assign<T, gpuml::kmeans_default_policy>(gpuml::Backend::host(), X, C);
      ASSERT_EQ(gpu.size(), s.n);
      expect_nearest<T>(X, C, gpu, gap<T>());
      Eigen::Index differ = 0;
      for (Eigen::Index i = 0; i < s.n; ++i) differ += gpu[i] != host[i];
      EXPECT_LE(differ, s.n / 100 + 1) << "n=" << s.n << " d=" << s.d << " k=" << s.k;
    }
  }
}

TYPED_TEST(KMeansDeviceTest, FitMatchesHostOnAwkwardSizes) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    struct Shape { Eigen::Index n, d, k; };
    for (Shape s : {Shape{2003, 14, 127}, Shape{777, 5, 3}, Shape{611, 129, 21}}) {
      const Matrix<T> X = blobs<T>(s.n, s.d, s.k, 300 + s.k);
      KMeansParams p;
      p.n_clusters = static_cast<int>(s.k);
      // Start from a perturbed copy of the first k samples, so both engines run several iterations.
      p.init_centers = (X.topRows(s.k).template cast<double>().array() + 0.5).matrix();
      p.max_iter = 50;
      KMeans<T> gpu(p, dev.backend), host(p, gpuml::Backend::host());
      gpu.fit(X);
      host.fit(X);
      EXPECT_NEAR(gpu.inertia(), host.inertia(), 1e-5 * host.inertia()) << "n=" << s.n << " d=" << s.d;
      EXPECT_EQ(gpu.n_iter(), host.n_iter());
      expect_nearest<T>(X, gpu.cluster_centers(), gpu.labels(), gap<T>());
      EXPECT_TRUE(gpu.labels() == gpu.predict(X));
      const double scale = 1e-4 * (1.0 + X.cwiseAbs().maxCoeff());
      EXPECT_LE((gpu.cluster_centers() - host.cluster_centers()).cwiseAbs().maxCoeff(), scale);
    }
  }
}

// k and d far beyond one shared tile: the partial sums live in global memory and features stream in tiles.
TYPED_TEST(KMeansDeviceTest, LargeKAndD) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    struct Shape { Eigen::Index n, d, k; };
    for (Shape s : {Shape{1100, 1024, 1024}, Shape{1500, 45, 700}}) {
      const Matrix<T> X = blobs<T>(s.n, s.d, s.k, 400 + s.d, 0.5);
      KMeansParams p;
      p.n_clusters = static_cast<int>(s.k);
      p.init_centers = X.topRows(s.k).template cast<double>();
      p.max_iter = 3;
      KMeans<T> gpu(p, dev.backend), host(p, gpuml::Backend::host());
      gpu.fit(X);
      host.fit(X);
      EXPECT_NEAR(gpu.inertia(), host.inertia(), 1e-5 * host.inertia()) << "d=" << s.d << " k=" << s.k;
      EXPECT_EQ(gpu.n_iter(), host.n_iter());
      Eigen::Index differ = 0;
      for (Eigen::Index i = 0; i < s.n; ++i) differ += gpu.labels()[i] != host.labels()[i];
      EXPECT_EQ(differ, 0);
    }
  }
}

TYPED_TEST(KMeansDeviceTest, RepeatedFitsAreBitwiseIdentical) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    const Matrix<T> X = blobs<T>(4099, 7, 13, 500, 2.0);
    const Eigen::VectorX<T> w = (random_matrix<T>(4099, 1, 501, 0.5, 2.0)).col(0);
    KMeansParams p;
    p.n_clusters = 13;
    p.random_state = 7;
    p.max_iter = 40;
    KMeans<T> a(p, dev.backend), b(p, dev.backend);
    a.fit(X, w);
    b.fit(X, w);
    ASSERT_EQ(a.n_iter(), b.n_iter());
    EXPECT_EQ(std::memcmp(a.cluster_centers().data(), b.cluster_centers().data(), sizeof(T) * a.cluster_centers().size()), 0);
    EXPECT_TRUE(a.labels() == b.labels());
    EXPECT_EQ(a.inertia(), b.inertia());
  }
}

// X above one binding (128 MiB on lavapipe): the samples are split across buffers and dispatches.
TEST(KMeansDevice, DataAboveOneBindingIsSplit) {
  for (const auto& dev : devices()) {
    const auto limit = dev.backend.device()->max_binding_bytes();
    const Eigen::Index d = 14;
    const Eigen::Index n = static_cast<Eigen::Index>(limit / (d * sizeof(float))) + 4321;
    if (double(n) * d * sizeof(float) > 2.5e9) GTEST_SKIP() << "binding limit too large to exceed in a test";
    const Matrix<float> X = blobs<float>(n, d, 6, 600, 1.0);
    ASSERT_GT(std::uint64_t(X.size()) * sizeof(float), limit);
    KMeansParams p;
    p.n_clusters = 6;
    p.init_centers = (X.topRows(6).cast<double>().array() + 0.25).matrix();
    p.max_iter = 4;
    KMeans<float> gpu(p, dev.backend), host(p, gpuml::Backend::host());
    gpu.fit(X);
    host.fit(X);
    EXPECT_NEAR(gpu.inertia(), host.inertia(), 1e-5 * host.inertia());
    EXPECT_EQ(gpu.n_iter(), host.n_iter());
    Eigen::Index differ = 0;
    for (Eigen::Index i = 0; i < n; ++i) differ += gpu.labels()[i] != host.labels()[i];
    EXPECT_EQ(differ, 0);
    // The last samples sit in the last buffer: their labels are the nearest centres too.
    expect_nearest<float>(X.bottomRows(5000), gpu.cluster_centers(), gpu.labels().tail(5000), 1e-4);
  }
}

}  // namespace
