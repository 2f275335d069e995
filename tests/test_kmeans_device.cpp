// The Vulkan k-means engine against the host engine and an independent double-precision reference: awkward sizes,
// large k and d (partial sums in global memory, several feature tiles), data above one storage-buffer binding,
// and bitwise-identical repeated fits. k-means++ seeding on the device against the host engine: the same centers
// for the same seed, zero weights, data split across chunks, repeatability.
#include "support.hpp"

#include <cmath>
#include <limits>
#include <cstring>
#include <random>
#include <set>
#include <atomic>
#include <chrono>
#include <thread>
#include <tuple>
#include <utility>

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

/// Blobs: k well-separated centers in d dimensions plus uniform noise of the given spread.
template <class T>
Matrix<T> blobs(Eigen::Index n, Eigen::Index d, Eigen::Index k, std::uint64_t salt, double spread = 0.3) {
  const Matrix<double> centers = random_matrix<double>(k, d, salt, -10.0, 10.0);
  const Matrix<double> noise = random_matrix<double>(n, d, salt + 1, -spread, spread);
  Matrix<T> X(n, d);
  for (Eigen::Index i = 0; i < n; ++i) X.row(i) = (centers.row(i % k) + noise.row(i)).template cast<T>();
  return X;
}

/// Checks labels against the nearest center in double precision wherever the two nearest are clearly apart.
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
  EXPECT_GT(checked, X.rows() / 2) << "too few samples had a clear nearest center to check";
}

/// Blobs on an integer lattice with integer noise in {-1, 0, 1}: with integer weights up to 3 every distance, mass,
/// block sum and potential is an integer below 2^24, so both engines compute them exactly in float and double and
/// the same seed must give the same draws and choices. (On real-valued data both engines' sums are exact, but the
/// device accumulates distances with fma, so a draw may rarely land on a neighbouring sample.)
template <class T>
Matrix<T> lattice_blobs(Eigen::Index n, Eigen::Index d, Eigen::Index k, std::uint64_t salt) {
  const Matrix<double> centers = random_matrix<double>(k, d, salt, -2.0, 3.0).array().floor() * 4.0;
  const Matrix<double> noise = random_matrix<double>(n, d, salt + 1, -1.0, 2.0).array().floor();
  Matrix<T> X(n, d);
  for (Eigen::Index i = 0; i < n; ++i) X.row(i) = (centers.row(i % k) + noise.row(i)).template cast<T>();
  return X;
}

/// Integer weights 0..3, a quarter of them zero.
template <class T>
Eigen::VectorX<T> integer_weights(Eigen::Index n, std::uint64_t salt) {
  return random_matrix<double>(n, 1, salt, 0.0, 4.0).col(0).array().floor().template cast<T>();
}

template <class T>
Matrix<T> device_plus_plus(const gpuml::testing::NamedBackend& dev, const Matrix<T>& X, const Eigen::VectorX<T>& w, int k,
                           std::uint64_t seed, std::uint64_t max_chunk_bytes = 0) {
  gpuml::algorithms::NumpyRandomState rng(seed);
  return gpuml::kernels::kmeans_plus_plus<T>(*dev.backend.device(), X, w, k, rng, max_chunk_bytes);
}

template <class T>
Matrix<T> host_plus_plus(const Matrix<T>& X, const Eigen::VectorX<T>& w, int k, std::uint64_t seed) {
  gpuml::algorithms::NumpyRandomState rng(seed);
  return gpuml::host::kmeans_plus_plus<T>(X, w, k, rng);
}

/// The row of X equal to c (the first), or -1.
template <class T>
Eigen::Index row_of(const Matrix<T>& X, const Eigen::Ref<const Eigen::RowVectorX<T>>& c) {
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    if (X.row(i) == c) return i;
  return -1;
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
      const Labels gpu = gpuml::detail::run_assign<T>(dev.backend, X, C);
      const Labels host = gpuml::detail::run_assign<T>(gpuml::Backend::host(), X, C);
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

// Rows of several feature tiles are searched by threads that split each center tile (kmeans_lloyd.comp's
// split_search, each sample's result merged from several threads); rows of one feature tile by threads that walk
// every center. Both form each value as one FMA chain in feature order, so a tile whose feature tile holds all the
// features fits the same labels, centers, inertia and iterations, bit for bit, with the plain and the bounded
// E-step. Duplicated starting centers tie exactly: the lowest index must win on both paths.
TYPED_TEST(KMeansDeviceTest, SplitCenterTilesAreTheWalkBitForBit) {
  using T = TypeParam;
  using Split = gpuml::KMeansTile<64, 1, 4, 8, 128>;  // 45 features: six feature tiles, center tiles of 32
  using Walk = gpuml::KMeansTile<128, 1, 2, 64, 128>;  // one feature tile: every thread walks the centers
  const Eigen::Index n = 1237, d = 45, k = 150;
  Matrix<T> X = random_matrix<T>(n, d, 4501, -3.0, 5.0);
  X.row(7) = X.row(3);  // starting centers 3, 7 and 101 are one point
  X.row(101) = X.row(3);
  for (const auto& dev : devices()) {
    for (const auto e_step : {gpuml::KMeansEStep::plain, gpuml::KMeansEStep::bounded}) {
      KMeansParams p;
      p.n_clusters = static_cast<int>(k);
      p.init_centers = X.topRows(k).template cast<double>();
      p.max_iter = 12;
      p.e_step = e_step;
      gpuml::KMeans<T, Split> split(p, dev.backend);
      gpuml::KMeans<T, Walk> walk(p, dev.backend);
      std::vector<std::string> on_host;  // a tile the device cannot run would leave the fit to the host
      const auto previous = gpuml::set_warning_handler([&](const std::string& m) {
        if (m.find("runs on the host") != std::string::npos) on_host.push_back(m);
      });
      split.fit(X);
      walk.fit(X);
      gpuml::set_warning_handler(previous);
      EXPECT_TRUE(on_host.empty()) << on_host.front();
      EXPECT_TRUE(split.labels() == walk.labels()) << dev.name;
      EXPECT_TRUE(split.cluster_centers() == walk.cluster_centers()) << dev.name;
      EXPECT_EQ(split.inertia(), walk.inertia()) << dev.name;
      EXPECT_EQ(split.n_iter(), walk.n_iter()) << dev.name;
      EXPECT_TRUE(split.predict(X) == walk.predict(X)) << dev.name;
      expect_nearest<T>(X, split.cluster_centers(), split.labels(), gap<T>());
    }
  }
}

// Shapes whose invocations run past llvmpipe's loop limit (65535 iterations in all per invocation) on CPU devices:
// a very large d, and large k and d with constant columns through the narrow-register CPU tile. The device
// must never return what a cut-short kernel computed: the answer is the host's (GPUs run these normally).
TYPED_TEST(KMeansDeviceTest, LongInvocationsNeverGiveWrongAnswers) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    struct Shape { Eigen::Index n, d, k; int max_iter; double offset; };
    for (Shape s : {Shape{30, 50000, 3, 10, 0.0}, Shape{1214, 255, 969, 1, 0.93}}) {
      Matrix<T> X = blobs<T>(s.n, s.d, s.k, 900 + s.d, 0.5);
      X.array() += T(s.offset);
      for (Eigen::Index j = 0; j < s.d; j += 7) X.col(j).setConstant(T(s.offset + 0.25));  // constant columns
      KMeansParams p;
      p.n_clusters = static_cast<int>(s.k);
      p.init_centers = X.topRows(s.k).template cast<double>();
      p.max_iter = s.max_iter;
      p.tol = 1e-4;
      KMeans<T> gpu(p, dev.backend), host(p, gpuml::Backend::host());
      auto previous = gpuml::set_warning_handler([](const std::string&) {});  // CPU devices say they used the host
      gpu.fit(X);
      gpuml::set_warning_handler(previous);
      host.fit(X);
      EXPECT_NEAR(gpu.inertia(), host.inertia(), 1e-5 * host.inertia()) << "d=" << s.d << " k=" << s.k;
      EXPECT_EQ(gpu.n_iter(), host.n_iter());
      expect_nearest<T>(X, gpu.cluster_centers(), gpu.labels(), gap<T>());
      Eigen::Index differ = 0;
      for (Eigen::Index i = 0; i < s.n; ++i) differ += gpu.labels()[i] != host.labels()[i];
      EXPECT_EQ(differ, 0) << "d=" << s.d << " k=" << s.k;
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

// An E-step submitted in parts (a cancellation poll is set and the last step ran longer than a slice; a slice of
// 0 ms splits every step after the first) gives the whole step's sums, weights, labels and changed flag bit for
// bit; the poll runs between the parts, and its false cancels the step.
TYPED_TEST(KMeansDeviceTest, StepsInPartsMatchWholeStepsAndCancel) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    const Eigen::Index n = 30011, d = 9;
    const std::uint32_t k = 17;
    const Matrix<T> X = random_matrix<T>(n, d, 700, -1.0, 1.0);  // no clusters: centers keep moving for many steps
    const Eigen::VectorX<T> w = (random_matrix<T>(n, 1, 701, 0.5, 2.0)).col(0);
    using Engine = gpuml::kernels::LloydEngine<T>;
    Engine whole(*dev.backend.device(), X, w.data(), k), parted(*dev.backend.device(), X, w.data(), k);
    whole.reset_labels();
    parted.reset_labels();
    int polls = 0;
    parted.set_keep_going([&polls] { return ++polls > 0; }, 0.0);
    Matrix<T> C = X.topRows(k), sums_whole, sums_parted;
    Eigen::VectorX<T> weights_whole, weights_parted;
    for (int step = 0; step < 4; ++step) {
      const bool changed_whole = gpuml::testing::e_step_rounded(whole, C, sums_whole, weights_whole);
      const bool changed_parted = gpuml::testing::e_step_rounded(parted, C, sums_parted, weights_parted);
      EXPECT_EQ(changed_whole, changed_parted) << "step " << step;
      ASSERT_EQ(sums_whole.size(), sums_parted.size());
      EXPECT_EQ(std::memcmp(sums_whole.data(), sums_parted.data(), sizeof(T) * sums_whole.size()), 0) << "step " << step;
      EXPECT_EQ(std::memcmp(weights_whole.data(), weights_parted.data(), sizeof(T) * k), 0) << "step " << step;
      for (std::uint32_t j = 0; j < k; ++j)
        if (weights_whole[j] > 0) C.row(j) = sums_whole.row(j) / weights_whole[j];
    }
    EXPECT_TRUE(whole.labels() == parted.labels());
    EXPECT_TRUE(gpuml::testing::e_step_rounded(whole, C, sums_whole, weights_whole)) << "labels still change, so stale partial sums would show";
    EXPECT_GE(polls, 3) << "the steps after the first ran in parts with a poll between them";
    parted.set_keep_going([] { return false; }, 0.0);
    EXPECT_THROW(gpuml::testing::e_step_rounded(parted, C, sums_parted, weights_parted), gpuml::cancelled);
  }
}

// Cancellation across shards (ShardedLloydEngine): the poll runs on the calling thread while the shards step, and
// each shard's step runs in parts (a slice of 0 ms); polled steps give the unsharded engine's sums bit for bit, and
// a false poll stops every shard with gpuml::cancelled. Through KMeans: a fit on a device list cancelled by
// keep_going leaves the estimator unfitted; one whose keep_going says go on is the fit without it.
TYPED_TEST(KMeansDeviceTest, ShardedStepsPollOnTheCallingThreadAndCancel) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    const Eigen::Index n = 24007, d = 7;
    const std::uint32_t k = 13;
    const Matrix<T> X = random_matrix<T>(n, d, 710, -2.0, 5.0);
    const Eigen::VectorX<T> w = random_matrix<T>(n, 1, 711, 0.5, 2.0).col(0);
    const auto frame = gpuml::algorithms::SumFrame::of<T>(gpuml::ShiftedView<T>{X}, w);
    using Engine = gpuml::kernels::LloydEngine<T>;
    auto& device = *dev.backend.device();
    Engine whole(device, X, w.data(), k, gpuml::KMeansEStep::automatic, nullptr, {}, frame);
    whole.reset_labels();
    std::vector<std::unique_ptr<Engine>> shards;
    const std::vector<std::int64_t> first{0, 9001, 17003};
    for (std::size_t s = 0; s < first.size(); ++s) {
      const std::int64_t end = s + 1 < first.size() ? first[s + 1] : n;
      shards.push_back(std::make_unique<Engine>(device, X.middleRows(first[s], end - first[s]), w.data() + first[s], k,
                                                gpuml::KMeansEStep::automatic, nullptr, std::nullopt, frame));
      shards.back()->reset_labels();
    }
    gpuml::algorithms::ShardedLloydEngine<Engine, T> sharded(std::move(shards), first, n);
    const auto caller = std::this_thread::get_id();
    int polls = 0, elsewhere = 0;
    sharded.set_keep_going([&] {
      if (std::this_thread::get_id() != caller) ++elsewhere;
      return ++polls > 0;
    }, 0.0);
    Matrix<T> C = X.topRows(k), sums_whole, sums_sharded;
    Eigen::VectorX<T> weights_whole, weights_sharded;
    for (int step = 0; step < 4; ++step) {
      const bool changed_whole = gpuml::testing::e_step_rounded(whole, C, sums_whole, weights_whole);
      const bool changed_sharded = gpuml::testing::e_step_rounded(sharded, C, sums_sharded, weights_sharded);
      EXPECT_EQ(changed_whole, changed_sharded) << "step " << step;
      EXPECT_EQ(std::memcmp(sums_whole.data(), sums_sharded.data(), sizeof(T) * sums_whole.size()), 0) << "step " << step;
      EXPECT_EQ(std::memcmp(weights_whole.data(), weights_sharded.data(), sizeof(T) * k), 0) << "step " << step;
      for (std::uint32_t j = 0; j < k; ++j)
        if (weights_whole[j] > 0) C.row(j) = sums_whole.row(j) / weights_whole[j];
    }
    EXPECT_TRUE(whole.labels() == sharded.labels());
    EXPECT_GE(polls, 4) << "one poll as each step starts";
    EXPECT_EQ(elsewhere, 0) << "keep_going is asked on the calling thread only";
    sharded.set_keep_going([] { return false; }, 0.0);
    EXPECT_THROW(gpuml::testing::e_step_rounded(sharded, C, sums_sharded, weights_sharded), gpuml::cancelled);

    const std::string index = std::to_string(device.info().index);
    const gpuml::Backend pair = gpuml::select_backend(index + "," + index);
    KMeansParams p;
    p.n_clusters = static_cast<int>(k);
    p.init_centers = X.topRows(k).template cast<double>();
    p.max_iter = 20;
    p.tol = 0;
    KMeans<T> plain(p, pair);
    plain.fit(X, w);
    int asked = 0;
    p.keep_going = [&asked] { return ++asked > 0; };
    KMeans<T> polled(p, pair);
    polled.fit(X, w);
    EXPECT_GE(asked, 1);
    EXPECT_TRUE(polled.labels() == plain.labels());
    EXPECT_EQ(polled.inertia(), plain.inertia());
    EXPECT_EQ(polled.n_iter(), plain.n_iter());
    int left = 3;
    p.keep_going = [&left] { return --left > 0; };
    KMeans<T> stopped(p, pair);
    EXPECT_THROW(stopped.fit(X, w), gpuml::cancelled);
    EXPECT_FALSE(stopped.fitted());
  }
}

/// The shapes of the partial-sum tests: one owner per cluster walks a batch, or (cluster, feature) pairs do (a
/// crowded batch, more clusters than threads, wide rows).
struct SumShape {
  Eigen::Index n, d;
  std::uint32_t k;
};
constexpr SumShape kSumShapes[] = {{12011, 14, 97}, {9001, 5, 3}, {7001, 6, 300}, {3001, 40, 20}};

// The partial sums on lattice data with integer weights, where every sum is exact in float: the engine's sums and
// weights per cluster equal the host's from the engine's own labels, whichever way the kernel walks a batch of
// samples (one owner per cluster; (cluster, feature) pairs for a crowded batch, for more clusters than threads, and
// for wide rows), plain and bounded, over steps whose centers move and after a labelling-only step. A member added
// twice or missed, or a workgroup's stale sums, shows.
TYPED_TEST(KMeansDeviceTest, PartialSumsAreExactOnLatticeData) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    for (const SumShape& shape : kSumShapes) {
      const Matrix<T> X = lattice_blobs<T>(shape.n, shape.d, shape.k, 950 + shape.k);
      const Eigen::VectorX<T> w = integer_weights<T>(shape.n, 951 + shape.k);
      for (const auto e_step : {gpuml::KMeansEStep::plain, gpuml::KMeansEStep::bounded}) {
        using Engine = gpuml::kernels::LloydEngine<T>;
        Engine engine(*dev.backend.device(), X, w.data(), shape.k, e_step);
        engine.reset_labels();
        Matrix<T> C = X.topRows(shape.k), sums;
        Eigen::VectorX<T> weights;
        for (int step = 0; step < 3; ++step) {
          // Before the last step a labelling-only step with other centers, then the step with those centers: the
          // labels the first changed must still count as changed for the second's sums (the bounded step adds
          // again only workgroups where a label changed), though the second changes none.
          if (step == 2) {
            C = X.bottomRows(shape.k);
            engine.assign(C);
          }
          gpuml::testing::e_step_rounded(engine, C, sums, weights);
          const Labels& labels = engine.labels();
          Matrix<double> expected_sums = Matrix<double>::Zero(shape.k, shape.d);
          Eigen::VectorXd expected_weights = Eigen::VectorXd::Zero(shape.k);
          for (Eigen::Index i = 0; i < shape.n; ++i) {
            expected_sums.row(labels[i]) += X.row(i).template cast<double>() * double(w[i]);
            expected_weights[labels[i]] += double(w[i]);
          }
          const std::string where = "n=" + std::to_string(shape.n) + " d=" + std::to_string(shape.d) +
                                    " k=" + std::to_string(shape.k) + " step " + std::to_string(step);
          ASSERT_TRUE(sums.template cast<double>() == expected_sums) << where;
          ASSERT_TRUE(weights.template cast<double>() == expected_weights) << where;
          // Integer centers keep every later distance exact as well.
          for (std::uint32_t j = 0; j < shape.k; ++j)
            if (weights[j] > 0) C.row(j) = (sums.row(j) / weights[j]).array().round().matrix();
        }
      }
    }
  }
}

// The exact sums on real-valued data: the device's integer sums per cluster, weight sums and inertia equal the
// host's fixed point of every term (algorithms::fixed_point of w_i x_if, w_i and w_i ||x_i - c||^2 as T forms them),
// from the device's own labels, for every walk of a batch (one owner per cluster; (cluster, feature) pairs for a
// crowded batch, many clusters or wide rows), plain and bounded (the lattice test's shapes): any difference between
// the kernels' roundEven (exact_sum.glsl) and the host's round_to_even shows here.
TYPED_TEST(KMeansDeviceTest, ExactSumsAreTheHostsFixedPointOfEveryTerm) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    for (const SumShape& shape : kSumShapes) {
      const Matrix<T> X = random_matrix<T>(shape.n, shape.d, 960 + shape.k, -4.0, 9.0);
      const Eigen::VectorX<T> w = random_matrix<T>(shape.n, 1, 961 + shape.k, 0.1, 3.0).col(0);
      const auto frame = gpuml::algorithms::SumFrame::of<T>(X, w);
      for (const auto e_step : {gpuml::KMeansEStep::plain, gpuml::KMeansEStep::bounded}) {
        gpuml::kernels::LloydEngine<T> engine(*dev.backend.device(), X, w.data(), shape.k, e_step, nullptr, {}, frame);
        engine.reset_labels();
        Matrix<T> C = X.topRows(shape.k);
        for (int step = 0; step < 2; ++step) {
          gpuml::algorithms::ClusterSums sums;
          engine.e_step(C, sums);
          const Labels& labels = engine.labels();
          const double value_scale = std::ldexp(1.0, sums.value_exponent), weight_scale = std::ldexp(1.0, sums.weight_exponent);
          gpuml::algorithms::ClusterSums expected;
          expected.reset<T>(shape.k, shape.d, frame);
          for (Eigen::Index i = 0; i < shape.n; ++i) {
            for (Eigen::Index f = 0; f < shape.d; ++f)
              expected.values(labels[i], f) += gpuml::algorithms::fixed_point<T>(static_cast<T>(X(i, f) * w[i]), value_scale);
            expected.weights[labels[i]] += gpuml::algorithms::fixed_point<T>(w[i], weight_scale);
          }
          const std::string where = "n=" + std::to_string(shape.n) + " d=" + std::to_string(shape.d) +
                                    " k=" + std::to_string(shape.k) + " step " + std::to_string(step);
          ASSERT_EQ(sums.value_exponent, expected.value_exponent) << where;
          ASSERT_TRUE(sums.values == expected.values) << where;
          ASSERT_TRUE(sums.weights == expected.weights) << where;
          const auto inertia = engine.inertia(C);
          const auto host_inertia = gpuml::host::exact_inertia<T>(X, w, C, labels, frame);
          ASSERT_EQ(inertia.exponent, host_inertia.exponent) << where;
          ASSERT_EQ(inertia.value, host_inertia.value) << where;
          gpuml::Vector<T> weights;
          sums.round_to(C, weights);
          for (std::uint32_t j = 0; j < shape.k; ++j)
            if (weights[j] > 0) C.row(j) /= weights[j];
        }
      }
    }
  }
}

// With a device-memory limit below the data (Config::device_memory_limit), the samples stay in pinned host memory
// and the kernels read them there: Lloyd, k-means++ and predict give what the resident fit gives, bit for bit.
TYPED_TEST(KMeansDeviceTest, DataBeyondTheDeviceMemoryLimitIsStreamedWithTheSameResult) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    const Eigen::Index n = 20011, d = 11;
    const Matrix<T> X = blobs<T>(n, d, 9, 800, 2.5);
    const Eigen::VectorX<T> w = (random_matrix<T>(n, 1, 801, 0.5, 2.0)).col(0);
    KMeansParams p;
    p.n_clusters = 9;
    p.random_state = 3;
    p.max_iter = 30;
    KMeans<T> resident(p, dev.backend);
    resident.fit(X, w);
    const Labels resident_predict = resident.predict(X.topRows(5003));
    const std::uint64_t limit = std::uint64_t(n) * d * sizeof(T) / 2;  // half of X: the samples cannot stay
    gpuml::ScopedConfig scoped(gpuml::config().set_device_memory_limit(limit));
    {
      gpuml::kernels::LloydEngine<T> engine(*dev.backend.device(), X, w.data(), 9);
      EXPECT_TRUE(engine.streamed());
      gpuml::kernels::PlusPlusEngine<T> seeding(*dev.backend.device(), X, w, 3);
      EXPECT_TRUE(seeding.streamed());
    }
    KMeans<T> streamed(p, dev.backend);
    streamed.fit(X, w);
    ASSERT_EQ(streamed.n_iter(), resident.n_iter());
    EXPECT_EQ(std::memcmp(streamed.cluster_centers().data(), resident.cluster_centers().data(),
                          sizeof(T) * resident.cluster_centers().size()), 0);
    EXPECT_TRUE(streamed.labels() == resident.labels());
    EXPECT_EQ(streamed.inertia(), resident.inertia());
    EXPECT_TRUE(streamed.predict(X.topRows(5003)) == resident_predict);
  }
}

// Rows uploaded as they are and centred on the device (shaders/shift_rows.comp) are the host's X - mean bit for
// bit, staged or read in place by the device (Upload::imported).
TYPED_TEST(KMeansDeviceTest, RowsCentredOnTheDeviceAreTheHostsBitForBit) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    gpuml::vulkan::Device& device = *dev.backend.device();
    if (std::is_same_v<T, double> && !device.info().float64) continue;
    const Eigen::Index n = 1237, d = 13;
    const Matrix<T> X = random_matrix<T>(n, d, 901, -3.0, 5.0);
    const Eigen::Matrix<T, 1, Eigen::Dynamic> mean = X.colwise().mean();
    const Matrix<T> expected = X.rowwise() - mean;
    for (const auto mode : {gpuml::Upload::staged, gpuml::Upload::imported}) {
      gpuml::ScopedConfig scoped(gpuml::config().set_upload(mode));
      const auto shift = device.buffer(d * sizeof(T));
      gpuml::vulkan::upload(device, shift, 0, mean.data(), d * sizeof(T));
      const auto rows = device.buffer(n * d * sizeof(T));
      gpuml::ShiftedView<T> view(X, mean.data());
      view.subnormal_free = true;
      gpuml::kernels::upload_centred_rows<T>(device, rows, view, 0, n, &shift);
      Matrix<T> got(n, d);
      gpuml::vulkan::download(device, rows, 0, got.data(), n * d * sizeof(T));
      EXPECT_EQ(std::memcmp(got.data(), expected.data(), sizeof(T) * n * d), 0) << "upload mode " << int(mode);
    }
  }
}

// The fit with its rows read in place and centred on the device (Upload::imported, where the device imports host
// memory) is the staged fit bit for bit; with a subnormal in X the rows are centred on the host, the same again.
TYPED_TEST(KMeansDeviceTest, FitsReadingHostMemoryInPlaceAreTheStagedFitsBitForBit) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    if (!dev.backend.device()->info().host_memory_import) continue;
    Matrix<T> X = blobs<T>(3001, 7, 5, 910, 1.5);
    Matrix<T> with_subnormal = X;
    with_subnormal(17, 3) = std::numeric_limits<T>::denorm_min() * 3;
    for (const Matrix<T>* data : {&X, &with_subnormal}) {
      KMeansParams p;
      p.n_clusters = 5;
      p.random_state = 4;
      p.max_iter = 20;
      KMeans<T> staged(p, dev.backend), imported(p, dev.backend);
      {
        gpuml::ScopedConfig scoped(gpuml::config().set_upload(gpuml::Upload::staged));
        staged.fit(*data);
      }
      {
        gpuml::ScopedConfig scoped(gpuml::config().set_upload(gpuml::Upload::imported));
        imported.fit(*data);
      }
      ASSERT_EQ(imported.n_iter(), staged.n_iter());
      EXPECT_EQ(std::memcmp(imported.cluster_centers().data(), staged.cluster_centers().data(),
                            sizeof(T) * staged.cluster_centers().size()), 0);
      EXPECT_TRUE(imported.labels() == staged.labels());
      EXPECT_EQ(imported.inertia(), staged.inertia());
    }
  }
}

// The device centres rows only where no value, mean or difference can be subnormal (a device may flush those):
// every nonzero magnitude at least 2^-101 in float (2^-968 in double).
TEST(KMeansDevice, RowsAreCentredOnTheDeviceOnlyWithoutSubnormals) {
  using gpuml::algorithms::subnormal_free;
  auto range_of = [](const Matrix<float>& X) {
    gpuml::algorithms::ColumnRange range;
    EXPECT_TRUE(gpuml::algorithms::column_range(X, range, /*smallest=*/true));
    return range;
  };
  const Eigen::RowVector2f mean(0.5f, -0.25f);
  Matrix<float> X = random_matrix<float>(101, 2, 920, 1e-3, 2.0);
  X(3, 0) = 0.0f;  // zeros are fine
  EXPECT_TRUE(subnormal_free<float>(range_of(X), mean));
  X(5, 1) = std::ldexp(1.0f, -101);  // the threshold itself
  EXPECT_TRUE(subnormal_free<float>(range_of(X), mean));
  EXPECT_TRUE(subnormal_free<float>(range_of(X), Eigen::RowVector2f(0.0f, 0.0f)));
  X(5, 1) = std::ldexp(1.0f, -102);  // normal, but its difference with a value close to it may not be
  EXPECT_FALSE(subnormal_free<float>(range_of(X), mean));
  X(5, 1) = std::numeric_limits<float>::denorm_min();
  EXPECT_FALSE(subnormal_free<float>(range_of(X), mean));
  X(5, 1) = 1.0f;
  EXPECT_FALSE(subnormal_free<float>(range_of(X), Eigen::RowVector2f(0.5f, 1e-35f)));  // a tiny mean
  const Matrix<double> Xd = random_matrix<double>(33, 2, 921, -2.0, 2.0);
  gpuml::algorithms::ColumnRange rd;
  gpuml::algorithms::column_range(Xd, rd, /*smallest=*/true);
  EXPECT_TRUE(subnormal_free<double>(rd, Eigen::RowVector2d(0.1, 0.2)));
  gpuml::algorithms::column_range(Xd, rd);  // not asked for: unknown, so the host centres
  EXPECT_FALSE(subnormal_free<double>(rd, Eigen::RowVector2d(0.1, 0.2)));
  EXPECT_FALSE(subnormal_free<double>(rd, Eigen::RowVector2d(0.1, 1e-300)));
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
    // The last samples sit in the last buffer: their labels are the nearest centers too.
    expect_nearest<float>(X.bottomRows(5000), gpu.cluster_centers(), gpu.labels().tail(5000), 1e-4);
    // k-means++ over the split data, on integer-valued samples so that the sums are exact (see lattice_blobs):
    // the host's centers.
    const Matrix<float> Xi = X.array().round().matrix();
    const Eigen::VectorXf w = Eigen::VectorXf::Ones(n);
    const std::uint64_t seed = gpuml::testing::test_seed() + 601;
    EXPECT_EQ(device_plus_plus<float>(dev, Xi, w, 6, seed), host_plus_plus<float>(Xi, w, 6, seed));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// k-means++ seeding

TYPED_TEST(KMeansDeviceTest, PlusPlusMatchesHostOnExactData) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    struct Shape { Eigen::Index n, d; int k; };
    for (Shape s : {Shape{3001, 5, 9}, Shape{2050, 3, 4}, Shape{777, 7, 31}}) {
      const Matrix<T> X = lattice_blobs<T>(s.n, s.d, s.k, 700 + s.n);
      const Eigen::VectorX<T> w = integer_weights<T>(s.n, 701 + s.n);
      const std::uint64_t seed = gpuml::testing::test_seed() + s.n;
      const Matrix<T> gpu = device_plus_plus<T>(dev, X, w, s.k, seed);
      EXPECT_EQ(gpu, host_plus_plus<T>(X, w, s.k, seed)) << "n=" << s.n << " d=" << s.d << " k=" << s.k;
      for (int j = 0; j < s.k; ++j) {
        bool positive = false;  // some copy of the center has positive weight (the lattice repeats points)
        for (Eigen::Index i = 0; i < s.n; ++i) positive = positive || (X.row(i) == gpu.row(j) && w[i] > 0);
        EXPECT_TRUE(positive) << "center " << j << " is not a sample of positive weight";
      }
    }
  }
}

TYPED_TEST(KMeansDeviceTest, PlusPlusMatchesHostOnSeparatedBlobs) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    const Eigen::Index n = 2717, d = 6;
    const int k = 11;
    const Matrix<T> X = blobs<T>(n, d, k, 710, 0.1);
    const Eigen::VectorX<T> w = random_matrix<T>(n, 1, 711, 0.5, 2.0).col(0);
    const std::uint64_t seed = gpuml::testing::test_seed() + 712;
    const Matrix<T> gpu = device_plus_plus<T>(dev, X, w, k, seed), host = host_plus_plus<T>(X, w, k, seed);
    // Greedy k-means++ puts one center in each blob (sample i belongs to blob i % k).
    std::set<Eigen::Index> blobs_hit;
    for (int j = 0; j < k; ++j) {
      const Eigen::Index i = row_of<T>(X, gpu.row(j));
      ASSERT_GE(i, 0) << "center " << j << " is not a sample";
      blobs_hit.insert(i % k);
    }
    EXPECT_EQ(static_cast<int>(blobs_hit.size()), k);
    // double: rounding differences are far below any gap between draws or potentials, so the centers are the host's.
    // float: the block sums round on the device (see lattice_blobs), so only the first center is certain.
    if (std::is_same_v<T, double>) {
      EXPECT_EQ(gpu, host);
    }
    EXPECT_EQ(gpu.row(0), host.row(0));
  }
}

TYPED_TEST(KMeansDeviceTest, PlusPlusChoosesOnlyPositiveWeights) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    // Exactly k samples of positive weight, far apart in the index range: each round has mass on the unchosen ones
    // alone, so all k are chosen, the last one by every trial of the last round.
    const Eigen::Index n = 4099;
    const int k = 6;
    // The positive samples are small distinct integers, so every distance and mass the draws see is exact in both
    // engines and the same seed must make the same choices (with real values the device's float32 block sums
    // round differently from the host's, and a draw near a boundary took the other sample for seed 1523984044).
    Matrix<T> X = random_matrix<T>(n, 4, 720);
    Eigen::VectorX<T> w = Eigen::VectorX<T>::Zero(n);
    const std::set<Eigen::Index> positive{3, 1023, 1024, 2500, 4000, 4098};
    for (Eigen::Index i : positive) {
      w[i] = T(1 + i % 3);
      X.row(i) << T(i % 5), T(i % 7), T(i % 11), T(i % 13);
    }
    for (std::uint64_t cap : {std::uint64_t(0), std::uint64_t(1024 * 4 * sizeof(T))}) {
      const Matrix<T> gpu = device_plus_plus<T>(dev, X, w, k, gpuml::testing::test_seed() + 721, cap);
      std::set<Eigen::Index> chosen;
      for (int j = 0; j < k; ++j) chosen.insert(row_of<T>(X, gpu.row(j)));
      EXPECT_EQ(chosen, positive) << "chunk cap " << cap;
      EXPECT_EQ(gpu, host_plus_plus<T>(X, w, k, gpuml::testing::test_seed() + 721)) << "chunk cap " << cap;
    }
  }
}

// Chunks of whole sampling blocks (forced small here; above one binding on real data): the same centers as the host
// engine and as one chunk. The second shape has more sampling blocks than workgroups per dispatch.
TYPED_TEST(KMeansDeviceTest, PlusPlusAcrossChunks) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    struct Shape { Eigen::Index n, d; int k; std::uint64_t chunk_rows; };
    for (Shape s : {Shape{5003, 5, 7, 2048}, Shape{1'050'001, 3, 5, 0}}) {
      const Matrix<T> X = lattice_blobs<T>(s.n, s.d, s.k, 730 + s.d);
      const Eigen::VectorX<T> w = integer_weights<T>(s.n, 731 + s.d);
      const std::uint64_t seed = gpuml::testing::test_seed() + 732, cap = s.chunk_rows * s.d * sizeof(T);
      if (cap) {
        gpuml::kernels::PlusPlusEngine<T> engine(*dev.backend.device(), X, w, 2, cap);
        EXPECT_EQ(engine.chunks(), 3u);
      }
      const Matrix<T> split = device_plus_plus<T>(dev, X, w, s.k, seed, cap);
      EXPECT_EQ(split, host_plus_plus<T>(X, w, s.k, seed)) << "n=" << s.n;
      if (cap) {
        EXPECT_EQ(split, device_plus_plus<T>(dev, X, w, s.k, seed));
      }
    }
  }
}

// The engines take X less its mean without a centred copy: the upload subtracts (gpuml::ShiftedView). Rows of
// more than one staging chunk (64 MiB, filled a whole number of rows at a time), at an offset in the buffer, and a
// strided view must arrive as the host's X.rowwise() - shift, bit for bit.
TYPED_TEST(KMeansDeviceTest, ShiftedUploadIsTheHostsCentring) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    auto& device = *dev.backend.device();
    const Eigen::Index n = (Eigen::Index(65) << 20) / (13 * sizeof(T)) + 777, d = 13;
    const Matrix<T> wide = (random_matrix<T>(n, d + 2, 760, -3.0, 5.0).array() + T(1000)).matrix();
    const Eigen::Matrix<T, 1, Eigen::Dynamic> shift = wide.leftCols(d).colwise().mean();
    const Matrix<T> packed = wide.leftCols(d);
    for (const bool strided : {false, true}) {
      const gpuml::MatrixView<T> X = strided ? gpuml::MatrixView<T>(wide.middleCols(1, d)) : gpuml::MatrixView<T>(packed);
      const Matrix<T> expected = X.rowwise() - shift;
      const std::uint64_t offset = 64 * sizeof(T), bytes = std::uint64_t(n) * d * sizeof(T);
      auto buffer = device.buffer(offset + bytes);
      const Eigen::Index r0 = 3, r1 = n - 5;  // a range of rows, not the whole view
      gpuml::vulkan::upload_shifted_rows<T>(device, buffer, offset, gpuml::ShiftedView<T>(X, shift.data()), r0, r1);
      Matrix<T> got(r1 - r0, d);
      gpuml::vulkan::download(device, buffer, offset, got.data(), std::uint64_t(got.size()) * sizeof(T));
      EXPECT_EQ(std::memcmp(got.data(), expected.middleRows(r0, r1 - r0).eval().data(), got.size() * sizeof(T)), 0)
          << (strided ? "strided" : "contiguous");
    }
  }
}

// Lloyd and k-means++ on a shifted view give what they give on the centred copy, bit for bit: the same labels,
// centers, inertia and draws, including fits whose clusters empty and are refilled from the shifted rows.
TYPED_TEST(KMeansDeviceTest, ShiftedSamplesFitAsTheCentredCopy) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    auto& device = *dev.backend.device();
    const Eigen::Index n = 3001, d = 7;
    const Matrix<T> X = (blobs<T>(n, d, 9, 770, 2.0).array() + T(500)).matrix();
    const Eigen::VectorX<T> w = random_matrix<T>(n, 1, 771, 0.5, 2.0).col(0);
    const Eigen::Matrix<T, 1, Eigen::Dynamic> shift = X.colwise().mean();
    const Matrix<T> Xc = X.rowwise() - shift;
    const gpuml::ShiftedView<T> shifted(X, shift.data());
    // Twelve centers for nine blobs, three of them far away: those clusters empty in the first step.
    Matrix<T> init = Xc.topRows(12);
    init.bottomRows(3).array() += T(1e4);
    for (const auto e_step : {gpuml::KMeansEStep::plain, gpuml::KMeansEStep::automatic}) {
      const auto a = gpuml::kernels::lloyd<T>(device, shifted, w, init, 20, 0.0, false, {}, {}, e_step);
      const auto b = gpuml::kernels::lloyd<T>(device, Xc, w, init, 20, 0.0, false, {}, {}, e_step);
      EXPECT_TRUE(a.labels == b.labels);
      EXPECT_EQ(std::memcmp(a.centers.data(), b.centers.data(), sizeof(T) * a.centers.size()), 0);
      EXPECT_EQ(a.inertia, b.inertia);
      EXPECT_EQ(a.n_iter, b.n_iter);
      EXPECT_GT(a.n_iter, 2);
      EXPECT_LT(a.centers.cwiseAbs().maxCoeff(), T(1e3)) << "the far centers' clusters were not refilled";
    }
    const std::uint64_t seed = gpuml::testing::test_seed() + 772;
    gpuml::algorithms::NumpyRandomState r1(seed), r2(seed);
    const Matrix<T> p1 = gpuml::kernels::kmeans_plus_plus<T>(device, shifted, w, 11, r1);
    const Matrix<T> p2 = gpuml::kernels::kmeans_plus_plus<T>(device, Xc, w, 11, r2);
    EXPECT_EQ(std::memcmp(p1.data(), p2.data(), sizeof(T) * p1.size()), 0);
    // The host engine reads the same values from the shifted view where it refills empty clusters.
    gpuml::algorithms::NumpyRandomState r3(seed), r4(seed);
    EXPECT_TRUE(gpuml::host::random_init<T>(shifted, w, 11, r3) == gpuml::host::random_init<T>(Xc, w, 11, r4));
  }
}

// One upload per fit: the k-means++ engine leaves the samples on the device, the Lloyd engines of every run read
// them from there, and the results are those of engines that upload for themselves, bit for bit.
TYPED_TEST(KMeansDeviceTest, EnginesOfOneFitShareTheSamples) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    auto& device = *dev.backend.device();
    const Eigen::Index n = 4099, d = 6;
    const Matrix<T> X = blobs<T>(n, d, 8, 780, 1.5);
    const Eigen::VectorX<T> w = random_matrix<T>(n, 1, 781, 0.5, 2.0).col(0);
    const Eigen::Matrix<T, 1, Eigen::Dynamic> shift = X.colwise().mean();
    const gpuml::ShiftedView<T> Xc(X, shift.data());
    const std::uint64_t seed = gpuml::testing::test_seed() + 782;
    gpuml::kernels::ResidentSamples<T> resident;
    gpuml::algorithms::NumpyRandomState r1(seed), r2(seed);
    const Matrix<T> shared_init = gpuml::kernels::kmeans_plus_plus<T>(device, Xc, w, 8, r1, 0, &resident);
    const Matrix<T> own_init = gpuml::kernels::kmeans_plus_plus<T>(device, Xc, w, 8, r2);
    ASSERT_EQ(std::memcmp(shared_init.data(), own_init.data(), sizeof(T) * own_init.size()), 0);
    ASSERT_EQ(resident.chunks().size(), 1u) << "the seeding left no samples on the device";
    const gpuml::vulkan::Buffer* before = resident.chunks()[0].x.get();
    for (int run = 0; run < 2; ++run) {
      const auto shared = gpuml::kernels::lloyd<T>(device, Xc, w, shared_init, 10, 0.0, false, {}, {},
                                                   gpuml::KMeansEStep::automatic, &resident);
      const auto own = gpuml::kernels::lloyd<T>(device, Xc, w, own_init, 10, 0.0, false, {}, {});
      EXPECT_TRUE(shared.labels == own.labels);
      EXPECT_EQ(std::memcmp(shared.centers.data(), own.centers.data(), sizeof(T) * own.centers.size()), 0);
      EXPECT_EQ(shared.inertia, own.inertia);
      EXPECT_EQ(shared.n_iter, own.n_iter);
      EXPECT_EQ(resident.chunks()[0].x.get(), before) << "run " << run << " uploaded the samples again";
    }
  }
}

// Device memory reserved ahead for an engine's layout (reserve_samples, as a fit does while it checks its input) is
// what that engine fills: the same buffers, and the results of an engine that allocates for itself, bit for bit.
// A reservation for another layout is dropped, not used.
TYPED_TEST(KMeansDeviceTest, EnginesFillTheMemoryReservedForTheirLayout) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    auto& device = *dev.backend.device();
    const Eigen::Index n = 3037, d = 7;
    const Matrix<T> X = blobs<T>(n, d, 9, 795, 1.5);
    const Eigen::VectorX<T> w = random_matrix<T>(n, 1, 796, 0.5, 2.0).col(0);
    const Eigen::Matrix<T, 1, Eigen::Dynamic> shift = X.colwise().mean();
    const gpuml::ShiftedView<T> Xc(X, shift.data());
    const std::uint64_t seed = gpuml::testing::test_seed() + 797;
    gpuml::algorithms::NumpyRandomState random(seed);
    const Matrix<T> init = gpuml::kernels::kmeans_plus_plus<T>(device, Xc, w, 9, random);
    const auto own = gpuml::kernels::lloyd<T>(device, Xc, w, init, 10, 0.0, false, {}, {});

    const std::uint64_t chunk_rows = gpuml::kernels::LloydEngine<T>::sample_chunk_rows(device, n, d, 9, gpuml::KMeansEStep::automatic);
    ASSERT_GT(chunk_rows, 0u);
    gpuml::kernels::ResidentSamples<T> resident;
    gpuml::kernels::reserve_samples<T>(device, n, d, chunk_rows, resident);
    ASSERT_TRUE(resident.reserved());
    const auto reserved = resident.take_reserved(device, n, chunk_rows);
    ASSERT_EQ(reserved.size(), 1u);
    resident.reserve(device, n, chunk_rows, reserved);
    const auto filled = gpuml::kernels::lloyd<T>(device, Xc, w, init, 10, 0.0, false, {}, {},
                                                 gpuml::KMeansEStep::automatic, &resident);
    EXPECT_FALSE(resident.reserved());
    ASSERT_EQ(resident.chunks().size(), 1u);
    EXPECT_EQ(resident.chunks()[0].x.get(), reserved[0].x.get()) << "the engine allocated instead of filling";
    EXPECT_EQ(resident.chunks()[0].w.get(), reserved[0].w.get());
    EXPECT_TRUE(filled.labels == own.labels);
    EXPECT_EQ(std::memcmp(filled.centers.data(), own.centers.data(), sizeof(T) * own.centers.size()), 0);
    EXPECT_EQ(filled.inertia, own.inertia);
    EXPECT_EQ(filled.n_iter, own.n_iter);

    // Reserved for another layout (half the rows per chunk): dropped, the engine's own buffers used.
    gpuml::kernels::ResidentSamples<T> other;
    gpuml::kernels::reserve_samples<T>(device, n, d, (n + 1) / 2, other);
    ASSERT_TRUE(other.reserved());
    const auto not_for_it = other.take_reserved(device, n, (n + 1) / 2);  // held here: its address stays its own
    ASSERT_EQ(not_for_it.size(), 2u);
    other.reserve(device, n, (n + 1) / 2, not_for_it);
    const auto mismatched = gpuml::kernels::lloyd<T>(device, Xc, w, init, 10, 0.0, false, {}, {},
                                                     gpuml::KMeansEStep::automatic, &other);
    EXPECT_FALSE(other.reserved()) << "a reservation for another layout outlived the engine's placement";
    ASSERT_EQ(other.chunks().size(), 1u);
    EXPECT_NE(other.chunks()[0].x.get(), not_for_it[0].x.get());
    EXPECT_TRUE(mismatched.labels == own.labels);
    EXPECT_EQ(mismatched.inertia, own.inertia);

    // The seeding's layout, reserved, is filled by the seeding, which draws what it draws without it.
    const std::uint64_t seeding_rows = gpuml::kernels::PlusPlusEngine<T>::sample_chunk_rows(device, n, d);
    ASSERT_GT(seeding_rows, 0u);
    gpuml::kernels::ResidentSamples<T> seeding;
    gpuml::kernels::reserve_samples<T>(device, n, d, seeding_rows, seeding);
    const auto for_seeding = seeding.take_reserved(device, n, seeding_rows);
    ASSERT_EQ(for_seeding.size(), 1u);
    seeding.reserve(device, n, seeding_rows, for_seeding);
    gpuml::algorithms::NumpyRandomState again(seed);
    const Matrix<T> seeded = gpuml::kernels::kmeans_plus_plus<T>(device, Xc, w, 9, again, 0, &seeding);
    EXPECT_FALSE(seeding.reserved());
    ASSERT_EQ(seeding.chunks().size(), 1u);
    EXPECT_EQ(seeding.chunks()[0].x.get(), for_seeding[0].x.get()) << "the seeding allocated instead of filling";
    EXPECT_EQ(std::memcmp(seeded.data(), init.data(), sizeof(T) * init.size()), 0);
  }
}

// A reservation told it has enough stops after the chunk in hand (the first is always reserved), and placing the
// samples fills the reserved chunks and allocates the rest.
TEST(KMeansDevice, APartialReservationIsFilledAndTheRestAllocated) {
  for (const auto& dev : devices()) {
    auto& device = *dev.backend.device();
    const Matrix<float> X = random_matrix<float>(2003, 5, 800, -2.0, 3.0);
    const Eigen::VectorXf w = random_matrix<float>(2003, 1, 801, 0.5, 2.0).col(0);
    const std::uint64_t n = 2003, chunk_rows = 700;  // three chunks
    const std::atomic<bool> enough{true}, not_yet{false};
    gpuml::kernels::ResidentSamples<float> all, first;
    gpuml::kernels::reserve_samples<float>(device, n, 5, chunk_rows, all, &not_yet);
    EXPECT_EQ(all.take_reserved(device, n, chunk_rows).size(), 3u);
    gpuml::kernels::reserve_samples<float>(device, n, 5, chunk_rows, first, &enough);
    const auto reserved = first.take_reserved(device, n, chunk_rows);
    ASSERT_EQ(reserved.size(), 1u) << "the reservation went on after it had enough";
    first.reserve(device, n, chunk_rows, reserved);
    const gpuml::ShiftedView<float> view(X);
    const auto placed = gpuml::kernels::place_samples<float>(device, view, w.data(), chunk_rows,
                                                             gpuml::vulkan::MemoryUse::device, false, &first);
    ASSERT_EQ(placed.size(), 3u);
    EXPECT_EQ(placed[0].x.get(), reserved[0].x.get());
    EXPECT_EQ(placed[0].w.get(), reserved[0].w.get());
    EXPECT_EQ(placed[2].rows, n - 2 * chunk_rows);
    EXPECT_EQ(first.reserved_uploads(), 1);
    // Every chunk holds its rows, the reserved one and those allocated after it.
    for (std::size_t c = 0; c < placed.size(); ++c) {
      std::vector<float> back(static_cast<std::size_t>(placed[c].rows * 5));
      gpuml::vulkan::download(device, *placed[c].x, 0, back.data(), back.size() * sizeof(float));
      const Matrix<float> rows = X.middleRows(static_cast<Eigen::Index>(placed[c].first), static_cast<Eigen::Index>(placed[c].rows));
      EXPECT_EQ(std::memcmp(back.data(), rows.data(), back.size() * sizeof(float)), 0) << "chunk " << c;
    }
  }
}

/// Rows of every kind of magnitude for the column passes: per column its own scale (2^-60 to 2^60), signs, zeros of
/// both signs, subnormals and the extremes of float.
Matrix<float> awkward_columns(Eigen::Index n, Eigen::Index d, std::uint64_t salt) {
  Matrix<float> X = random_matrix<float>(n, d, salt, -1.0, 1.0);
  for (Eigen::Index f = 0; f < d; ++f) X.col(f) *= std::ldexp(1.0f, static_cast<int>((f * 37) % 121) - 60);
  X(0, 0) = -0.0f;
  X(1, 0) = 0.0f;
  if (d > 1) {
    X(2, 1) = std::numeric_limits<float>::denorm_min();
    X(3, 1) = -3.5e-41f;  // subnormal
    X(n - 1, d - 1) = std::numeric_limits<float>::max();
    X(n - 2, d - 1) = -std::numeric_limits<float>::max();
    X(n / 2, 1) = -std::numeric_limits<float>::min();
  }
  for (Eigen::Index i = 5; i < n; i += 97) X(i, d - 1) = 0.0f;
  return X;
}

// The input checks' column passes on a device (kernels/column_checks.hpp) over rows a reservation copied there as
// they are, against the host's passes: the same extremes, smallest magnitudes and exact sums' integers (of the values
// and of their squared deviations from the mean), with the fit's exponents and smaller ones (whose terms round at
// 2^-32), narrow rows and rows wider than a workgroup,
// across chunks; and a value that is not finite is seen.
TEST(KMeansDevice, ColumnChecksOnTheDeviceAreTheHosts) {
  for (const auto& dev : devices()) {
    auto& device = *dev.backend.device();
    for (const auto& [n, d, chunk_rows] : {std::tuple{3001, 13, 1000}, std::tuple{517, 1, 517}, std::tuple{211, 300, 90}}) {
      SCOPED_TRACE(testing::Message() << "n " << n << ", d " << d);
      Matrix<float> X = awkward_columns(n, d, 940 + d);
      const gpuml::MatrixView<float> view(X);
      gpuml::kernels::ResidentSamples<float> resident;
      gpuml::kernels::reserve_samples<float>(device, n, d, chunk_rows, resident, nullptr, &view);
      const auto& chunks = resident.reserved_rows();
      ASSERT_EQ(chunks.size(), static_cast<std::size_t>((n + chunk_rows - 1) / chunk_rows)) << "the rows were not copied";
      ASSERT_TRUE(gpuml::kernels::can_check_columns(device, chunk_rows, d));
      gpuml::algorithms::ColumnRange no_columns = gpuml::algorithms::ColumnRange::empty(0);
      EXPECT_THROW(gpuml::kernels::column_range_on_device(device, chunks, 0, no_columns), gpuml::unsupported);

      gpuml::algorithms::ColumnRange host, on_device = gpuml::algorithms::ColumnRange::empty(d);
      ASSERT_TRUE(gpuml::algorithms::column_range(X, host, /*smallest=*/true));
      ASSERT_TRUE(gpuml::kernels::column_range_on_device(device, chunks, d, on_device));
      for (Eigen::Index f = 0; f < d; ++f) {
        EXPECT_EQ(on_device.lowest[f], host.lowest[f]) << "column " << f;
        EXPECT_EQ(on_device.highest[f], host.highest[f]) << "column " << f;
        EXPECT_EQ(on_device.smallest[f], host.smallest[f]) << "column " << f;
      }
      if (d > 1) {
        EXPECT_EQ(on_device.smallest[1], std::numeric_limits<float>::denorm_min());
      }

      using gpuml::algorithms::ExactColumnSums;
      const Eigen::RowVectorXi fit_exponents = ExactColumnSums::exponents_for(gpuml::algorithms::column_bounds(host, nullptr), n);
      for (const int lower : {0, 9, 40, 200}) {
        const Eigen::RowVectorXi e = fit_exponents.array() - lower;
        const ExactColumnSums want = gpuml::algorithms::exact_column_sums(X, nullptr, e);
        ExactColumnSums got = ExactColumnSums::zero(e);
        gpuml::kernels::exact_column_sums_on_device(device, chunks, d, got);
        EXPECT_TRUE(got.whole == want.whole) << "exponents lowered by " << lower;
        EXPECT_TRUE(got.fraction == want.fraction) << "exponents lowered by " << lower;
        if (lower == 9) {
          EXPECT_NE(want.fraction.cwiseAbs().maxCoeff(), 0) << "no fractional parts: the test shows nothing";
        }
      }
      // The squared deviations from the mean (the variances behind tol), in float64 where the device has it.
      if (gpuml::kernels::can_sum_squares(device)) {
        const Eigen::RowVectorXd mean = gpuml::algorithms::exact_column_sums(X, nullptr, fit_exponents).to_double() / n;
        const Eigen::RowVectorXi square_exponents =
            ExactColumnSums::exponents_for(gpuml::algorithms::column_bounds(host, &mean), n);
        for (const int lower : {0, 9, 40}) {
          const Eigen::RowVectorXi e = square_exponents.array() - lower;
          const ExactColumnSums want = gpuml::algorithms::exact_column_sums(X, &mean, e);
          ExactColumnSums got = ExactColumnSums::zero(e);
          gpuml::kernels::exact_column_sums_on_device(device, chunks, d, got, &mean);
          EXPECT_TRUE(got.whole == want.whole) << "squares, exponents lowered by " << lower;
          EXPECT_TRUE(got.fraction == want.fraction) << "squares, exponents lowered by " << lower;
        }
      }
    }
    // A value that is not finite, in the last chunk.
    for (const float bad : {NAN, INFINITY, -INFINITY}) {
      Matrix<float> X = random_matrix<float>(700, 3, 950, -2.0, 2.0);
      X(650, 2) = bad;
      const gpuml::MatrixView<float> view(X);
      gpuml::kernels::ResidentSamples<float> resident;
      gpuml::kernels::reserve_samples<float>(device, 700, 3, 300, resident, nullptr, &view);
      gpuml::algorithms::ColumnRange range = gpuml::algorithms::ColumnRange::empty(3);
      EXPECT_FALSE(gpuml::kernels::column_range_on_device(device, resident.reserved_rows(), 3, range)) << bad;
    }
  }
}

// A fit whose input checks ran on its devices is the fit checked on the host, bit for bit: one device and shards,
// both inits, a relative tol (its variances on the device too), data with a subnormal (the rows are then centred on the
// host and uploaded again), and bad input gets the host's error. X below Config::device_checks_min_bytes (as here,
// unless set to 0) is checked on the host.
TEST(KMeansDevice, FitsCheckedOnTheDeviceAreTheHostCheckedFits) {
  for (const auto& dev : devices()) {
    const std::string index = std::to_string(dev.backend.device()->info().index);
    Matrix<float> X = random_matrix<float>(4099, 7, 960, -3.0, 5.0);
    X.col(2).array() += 1000.0f;
    Matrix<float> with_subnormal = X;
    with_subnormal(77, 4) = 1e-40f;
    for (const Matrix<float>* data : {&X, &with_subnormal}) {
      for (const std::string init : {"k-means++", "random"}) {
        SCOPED_TRACE(init + (data == &X ? "" : ", a subnormal"));
        KMeansParams p;
        p.n_clusters = 9;
        p.init = init;
        p.max_iter = 12;
        p.tol = 1e-4;
        p.random_state = 961;
        gpuml::KMeansFit<float> host_checked;
        {
          gpuml::ScopedConfig scoped(gpuml::config().set_device_checks(false));
          host_checked = gpuml::fit_kmeans<float>(dev.backend, *data, nullptr, p);
        }
        EXPECT_FALSE(host_checked.checks_on_device);
        for (const std::string& choice : {index, index + "," + index}) {
          // This X is below the size from which the devices check by default: the host checks.
          EXPECT_FALSE(gpuml::fit_kmeans<float>(gpuml::select_backend(choice), *data, nullptr, p).checks_on_device);
          gpuml::ScopedConfig any_size(gpuml::config().set_device_checks_min_bytes(0));
          const auto fit = gpuml::fit_kmeans<float>(gpuml::select_backend(choice), *data, nullptr, p);
          EXPECT_TRUE(fit.checks_on_device) << choice;
          EXPECT_TRUE(fit.labels == host_checked.labels) << choice;
          EXPECT_TRUE(fit.cluster_centers == host_checked.cluster_centers) << choice;
          EXPECT_EQ(fit.inertia, host_checked.inertia) << choice;
          EXPECT_EQ(fit.n_iter, host_checked.n_iter) << choice;
          EXPECT_EQ(fit.tol_absolute, host_checked.tol_absolute) << choice;
        }
      }
    }
    Matrix<float> bad = X;
    bad(4000, 5) = NAN;
    KMeansParams p;
    p.n_clusters = 4;
    std::string on_host, on_device;
    try {
      gpuml::ScopedConfig scoped(gpuml::config().set_device_checks(false));
      gpuml::fit_kmeans<float>(dev.backend, bad, nullptr, p);
    } catch (const gpuml::invalid_input& e) {
      on_host = e.what();
    }
    try {
      gpuml::ScopedConfig any_size(gpuml::config().set_device_checks_min_bytes(0));
      gpuml::fit_kmeans<float>(dev.backend, bad, nullptr, p);
    } catch (const gpuml::invalid_input& e) {
      on_device = e.what();
    }
    EXPECT_NE(on_host, "");
    EXPECT_EQ(on_device, on_host);
  }
}

// A fit reserves its samples' device memory while it checks its input, for the layout of its first engine (the
// seeding's for k-means++, else Lloyd's): each device's one upload fills it, on one device and on shards.
TEST(KMeansDevice, FitsUploadIntoMemoryReservedDuringTheirChecks) {
  for (const auto& dev : devices()) {
    const std::string index = std::to_string(dev.backend.device()->info().index);
    const Matrix<float> X = random_matrix<float>(5003, 6, 798, -2.0, 5.0);
    for (const std::string init : {"k-means++", "random"}) {
      KMeansParams p;
      p.n_clusters = 7;
      p.init = init;
      p.n_init = 2;
      p.max_iter = 8;
      p.random_state = 799;
      const auto one = gpuml::fit_kmeans<float>(dev.backend, X, nullptr, p);
      EXPECT_EQ(one.uploads, 1) << init;
      EXPECT_EQ(one.reserved_uploads, 1) << init << ": the upload did not fill the reserved memory";
      EXPECT_GT(one.times.reserve, 0.0) << init;
      const auto two = gpuml::fit_kmeans<float>(gpuml::select_backend(index + "," + index), X, nullptr, p);
      EXPECT_EQ(two.uploads, 2) << init;
      EXPECT_EQ(two.reserved_uploads, 2) << init;
      EXPECT_TRUE(two.labels == one.labels) << init;
      EXPECT_EQ(two.inertia, one.inertia) << init;
    }
  }
}

// A fit's samples leave the device on a thread of their own once its ResidentSamples goes (Device::release_later),
// and are gone before the device's next allocation.
TEST(KMeansDevice, ResidentSamplesAreFreedBeforeTheNextAllocation) {
  for (const auto& dev : devices()) {
    auto& device = *dev.backend.device();
    const Matrix<float> X = random_matrix<float>(3001, 5, 790, -2.0, 2.0);
    const Eigen::VectorXf w = random_matrix<float>(3001, 1, 791, 0.5, 2.0).col(0);
    const Eigen::Matrix<float, 1, Eigen::Dynamic> shift = X.colwise().mean();
    const gpuml::ShiftedView<float> Xc(X, shift.data());
    std::weak_ptr<const gpuml::vulkan::Buffer> x, weights;
    {
      gpuml::kernels::ResidentSamples<float> resident;
      gpuml::algorithms::NumpyRandomState random(gpuml::testing::test_seed() + 792);
      gpuml::kernels::kmeans_plus_plus<float>(device, Xc, w, 4, random, 0, &resident);
      ASSERT_EQ(resident.chunks().size(), 1u);
      x = resident.chunks()[0].x;
      weights = resident.chunks()[0].w;
    }
    const auto next = device.buffer(64);
    EXPECT_TRUE(x.expired()) << "the samples outlived the next allocation";
    EXPECT_TRUE(weights.expired());
  }
}

// What release_later hands off is destroyed on another thread, and the next allocation (on any device) waits for it:
// a release slower than the allocation still ends first.
TEST(KMeansDevice, ReleasesHandedOffEndBeforeTheNextAllocation) {
  for (const auto& dev : devices()) {
    auto& device = *dev.backend.device();
    std::atomic<bool> released{false};
    std::thread::id on;
    device.release_later(std::shared_ptr<void>(nullptr, [&](void*) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      on = std::this_thread::get_id();
      released = true;
    }));
    const auto next = device.buffer(64);
    EXPECT_TRUE(released.load()) << "the allocation did not wait for the release";
    EXPECT_NE(on, std::this_thread::get_id()) << "released on the caller's thread";
  }
}

// release_later_all (how the Lloyd and k-means++ engines give up their buffers): every object moved in is destroyed
// once, off the caller's thread, before the next allocation; the moved-from ones left with the caller own nothing.
TEST(KMeansDevice, ObjectsHandedOffTogetherEndBeforeTheNextAllocation) {
  struct Recorder {
    std::atomic<int>* count;
    std::thread::id* on;
    Recorder(std::atomic<int>* c, std::thread::id* t) : count(c), on(t) {}
    Recorder(Recorder&& o) noexcept : count(std::exchange(o.count, nullptr)), on(o.on) {}
    ~Recorder() {
      if (!count) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      *on = std::this_thread::get_id();
      ++*count;
    }
  };
  for (const auto& dev : devices()) {
    auto& device = *dev.backend.device();
    std::atomic<int> count{0};
    std::thread::id first, second;
    device.release_later_all(Recorder(&count, &first), std::vector<Recorder>{});
    std::vector<Recorder> many;
    many.emplace_back(&count, &second);
    device.release_later_all(std::move(many));
    const auto next = device.buffer(64);
    EXPECT_EQ(count.load(), 2) << "the allocation did not wait for every release, or one ran twice";
    EXPECT_NE(first, std::this_thread::get_id()) << "released on the caller's thread";
    EXPECT_NE(second, std::this_thread::get_id()) << "released on the caller's thread";
  }
}

TEST(KMeansDevice, PlusPlusIsBitwiseRepeatable) {
  for (const auto& dev : devices()) {
    const Matrix<float> X = blobs<float>(6007, 9, 17, 740, 3.0);
    const Eigen::VectorXf w = random_matrix<float>(6007, 1, 741, 0.0, 2.0).col(0);
    const std::uint64_t seed = gpuml::testing::test_seed() + 742;
    const Matrix<float> a = device_plus_plus<float>(dev, X, w, 17, seed, 2048 * 9 * sizeof(float));
    EXPECT_EQ(a, device_plus_plus<float>(dev, X, w, 17, seed, 2048 * 9 * sizeof(float)));
    EXPECT_NE(a, device_plus_plus<float>(dev, X, w, 17, seed + 1, 2048 * 9 * sizeof(float))) << "the seed is ignored";
    // The estimator seeds on the device too: two fits agree bit for bit.
    KMeansParams p;
    p.n_clusters = 17;
    p.random_state = seed;
    p.max_iter = 5;
    KMeans<float> f1(p, dev.backend), f2(p, dev.backend);
    f1.fit(X, w);
    f2.fit(X, w);
    EXPECT_EQ(std::memcmp(f1.cluster_centers().data(), f2.cluster_centers().data(), sizeof(float) * 17 * 9), 0);
    EXPECT_EQ(f1.inertia(), f2.inertia());
  }
}

}  // namespace

// One device used from several threads: two estimators fitting at once, and one fitted estimator predicting and
// searching from two threads. Vulkan's external-synchronisation rules (a command pool is one thread's at a time)
// are checked by the validation layer, whose messages fail the run; the results must equal the serial ones.
TEST(KMeansDevice, ThreadsShareOneDevice) {
  for (const auto& dev : devices()) {
    const Matrix<float> X = blobs<float>(3001, 11, 7, 77), Y = blobs<float>(2503, 6, 5, 78);
    KMeansParams p;
    p.n_clusters = 7;
    p.init_centers = X.topRows(7).cast<double>();
    p.max_iter = 20;
    KMeansParams q = p;
    q.n_clusters = 5;
    q.init_centers = Y.topRows(5).cast<double>();
    KMeans<float> serial_a(p, dev.backend), serial_b(q, dev.backend);
    serial_a.fit(X);
    serial_b.fit(Y);
    gpuml::NearestNeighbors<float> nn({4, "euclidean"}, dev.backend);
    nn.fit(X);
    const auto serial_knn = nn.kneighbors(Y.leftCols(6).replicate(1, 2).leftCols(11));

    for (int round = 0; round < 3; ++round) {
      KMeans<float> a(p, dev.backend), b(q, dev.backend);
      std::thread ta([&] { a.fit(X); }), tb([&] { b.fit(Y); });
      ta.join();
      tb.join();
      EXPECT_TRUE(a.labels() == serial_a.labels());
      EXPECT_TRUE(b.labels() == serial_b.labels());
      EXPECT_EQ(a.inertia(), serial_a.inertia());
      EXPECT_EQ(b.inertia(), serial_b.inertia());

      Labels la, lb;
      gpuml::KnnResult<float> ra, rb;
      const Matrix<float> queries = Y.leftCols(6).replicate(1, 2).leftCols(11);
      std::thread pa([&] { la = serial_a.predict(X); ra = nn.kneighbors(queries); }),
          pb([&] { lb = serial_a.predict(X); rb = nn.kneighbors(queries); });
      pa.join();
      pb.join();
      EXPECT_TRUE(la == serial_a.labels());
      EXPECT_TRUE(lb == serial_a.labels());
      EXPECT_TRUE(ra.indices == serial_knn.indices);
      EXPECT_TRUE(rb.indices == serial_knn.indices);
    }
  }
}

// Fits with many distinct k specialise as many pipelines; the device keeps a bounded number of them (a process
// fitting 200 shapes grew by hundreds of MB when every pipeline was kept). A second pass over the same shapes, after
// their pipelines were released, must give the first pass's results bit for bit: rebuilt pipelines are the same.
// (Against the host only the nearest-center property holds: with up to 40 clusters on 211 samples, float32 near-ties
// go either way between engines, and lavapipe's reduction order follows the CPU's vector width.)
TEST(KMeansDevice, PipelinesOfManyShapesAreNotAllKept) {
  for (const auto& dev : devices()) {
    const Matrix<float> X = blobs<float>(211, 3, 5, 79);
    const std::size_t before = dev.backend.device()->kernels_held();
    const int last = 2 + int(gpuml::vulkan::Device::kKeptKernels) + 6;
    std::vector<Labels> first_labels;
    std::vector<double> first_inertia;
    for (int pass = 0; pass < 2; ++pass) {
      for (int k = 2; k < last; ++k) {
        KMeansParams p;
        p.n_clusters = k;
        p.init_centers = X.topRows(k).cast<double>();
        p.max_iter = 2;
        KMeans<float> km(p, dev.backend);
        km.fit(X);
        if (pass == 0) {
          first_labels.push_back(km.labels());
          first_inertia.push_back(km.inertia());
          expect_nearest<float>(X, km.cluster_centers(), km.labels(), gap<float>());
        } else {
          EXPECT_TRUE(km.labels() == first_labels[std::size_t(k - 2)]) << "k=" << k;
          EXPECT_EQ(km.inertia(), first_inertia[std::size_t(k - 2)]) << "k=" << k;
        }
      }
      EXPECT_LE(dev.backend.device()->kernels_held(), std::max(before, gpuml::vulkan::Device::kKeptKernels));
    }
  }
}

// k near 2048: the class tile's per-cluster masks outgrow small shared memories (32 KiB on lavapipe); the default
// policy must find a tile the device runs (fewer threads), not refuse the problem or leave it to the host.
TYPED_TEST(KMeansDeviceTest, KNear2048RunsOnTheDevice) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    for (const Eigen::Index k : {Eigen::Index(2047), Eigen::Index(2048)}) {
      // Integer rows and their negations: the mean is exactly zero, so centring changes nothing, and every squared
      // distance to the initial centers (samples themselves) is exact in float32; both engines make the same first
      // assignment, ties to the lower index included. One iteration: the final labels against the averaged centers
      // may still differ on a float32 near-tie, which moves the inertia only by that tie's rounding gap (a second
      // iteration would move whole two-sample clusters).
      const Matrix<T> A = random_matrix<T>(k + 3, 3, 800 + k, -1000.0, 1000.0).array().round().matrix();
      Matrix<T> X(2 * A.rows(), 3);
      X << A, -A;
      KMeansParams p;
      p.n_clusters = static_cast<int>(k);
      p.init_centers = X.topRows(k).template cast<double>();
      p.max_iter = 1;
      std::vector<std::string> said;
      auto previous = gpuml::set_warning_handler([&](const std::string& m) { said.push_back(m); });
      KMeans<T> gpu(p, dev.backend);
      gpu.fit(X);
      gpuml::set_warning_handler(previous);
      for (const auto& m : said) EXPECT_EQ(m.find("host backend"), std::string::npos) << m;
      KMeans<T> host(p, gpuml::Backend::host());
      host.fit(X);
      EXPECT_NEAR(gpu.inertia(), host.inertia(), (std::is_same_v<T, float> ? 1e-5 : 1e-12) * host.inertia()) << "k=" << k;
      EXPECT_EQ(gpu.n_iter(), host.n_iter());
      expect_nearest<T>(X, gpu.cluster_centers(), gpu.labels(), gap<T>());
    }
  }
}

// Rows sharded across several logical devices (the device under test opened two and three times): labels,
// centers, inertia and n_iter identical, bit for bit, to one device's fit (the sums are exact, so no cut of the rows
// changes them). Real-valued random data without clusters, off the origin (centring matters), random weights, and
// a long run: a sum that depended on the cut would move a center by a rounding and, over the steps, labels with it.
// Awkward row counts, so the shards differ in size; the plain and the bounded E-step.
TYPED_TEST(KMeansDeviceTest, RowsShardedAcrossDevicesGiveTheOneDeviceFitBitForBit) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    const std::string index = std::to_string(dev.backend.device()->info().index);
    const Matrix<T> X = random_matrix<T>(20011, 5, 4242, -3.0, 7.0);
    const Eigen::VectorX<T> w = random_matrix<T>(X.rows(), 1, 4243, 0.25, 2.0).col(0);
    KMeansParams p;
    p.n_clusters = 37;
    p.init_centers = X.topRows(37).template cast<double>();
    p.max_iter = 60;
    p.tol = 0;
    for (const auto e_step : {gpuml::KMeansEStep::plain, gpuml::KMeansEStep::bounded}) {
      p.e_step = e_step;
      KMeans<T> one(p, dev.backend);
      one.fit(X, w);
      for (const std::string& list : {index + "," + index, index + "," + index + "," + index}) {
        const gpuml::Backend sharded = gpuml::select_backend(list);
        ASSERT_EQ(sharded.device_count(), std::size_t(std::count(list.begin(), list.end(), ',') + 1));
        EXPECT_NE(sharded.device(0), sharded.device(1));  // distinct logical devices
        KMeans<T> many(p, sharded);
        many.fit(X, w);
        const std::string where = list + (e_step == gpuml::KMeansEStep::plain ? " plain" : " bounded");
        EXPECT_TRUE(many.labels() == one.labels()) << where;
        EXPECT_EQ(many.n_iter(), one.n_iter()) << where;
        EXPECT_EQ(many.inertia(), one.inertia()) << where;
        EXPECT_TRUE((many.cluster_centers().array() == one.cluster_centers().array()).all()) << where;
        // The sharded engine's timing: one total per device, as many steps as the fit's, and the bounded step's
        // searched samples of every shard adding up to one device's (each sample's bounds are its own).
        const auto& times = many.step_times();
        EXPECT_EQ(times.shard_e_step_ms.size(), sharded.device_count()) << where;
        EXPECT_EQ(times.e_steps, one.step_times().e_steps) << where;
        EXPECT_EQ(times.e_step_each_ms.size(), one.step_times().e_step_each_ms.size()) << where;
        EXPECT_TRUE(times.e_step_searched == one.step_times().e_step_searched) << where;
      }
    }
  }
}

// k-means++ on a list of devices: each device seeds over its shard of the rows (shard boundaries inside sampling
// blocks), the blocks' and potentials' exact sums added across shards; the seeds and so the fit are one device's.
TYPED_TEST(KMeansDeviceTest, PlusPlusSeedingOnSeveralDevicesIsOneDevicesBitForBit) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    const std::string index = std::to_string(dev.backend.device()->info().index);
    const Matrix<T> X = random_matrix<T>(9001, 5, 4260, -6.0, 2.0);
    const Eigen::VectorX<T> w = random_matrix<T>(X.rows(), 1, 4261, 0.1, 4.0).col(0);
    KMeansParams p;
    p.n_clusters = 23;
    p.n_init = 2;
    p.random_state = gpuml::testing::test_seed() % 100000;
    p.max_iter = 15;
    KMeans<T> one(p, dev.backend);
    one.fit(X, w);
    for (const std::string& list : {index + "," + index, index + "," + index + "," + index}) {
      KMeans<T> many(p, gpuml::select_backend(list));
      many.fit(X, w);
      const std::string where = list + " random_state " + std::to_string(p.random_state);
      EXPECT_TRUE((many.cluster_centers().array() == one.cluster_centers().array()).all()) << where;
      EXPECT_TRUE(many.labels() == one.labels()) << where;
      EXPECT_EQ(many.inertia(), one.inertia()) << where;
      EXPECT_EQ(many.n_iter(), one.n_iter()) << where;
    }
  }
}

// predict, transform and score on a list of devices: each device takes its shard of the rows (the score's exact
// sums added in one fixed point), and the answers are one device's bit for bit; fewer rows than devices too.
TYPED_TEST(KMeansDeviceTest, PredictTransformAndScoreOnSeveralDevicesAreOneDevicesBitForBit) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    const std::string index = std::to_string(dev.backend.device()->info().index);
    const Matrix<T> X = random_matrix<T>(10007, 6, 4250, -4.0, 9.0);
    const Eigen::VectorX<T> w = random_matrix<T>(X.rows(), 1, 4251, 0.25, 3.0).col(0);
    const Matrix<T> C = random_matrix<T>(29, 6, 4252, -4.0, 9.0);
    KMeans<T> one({}, dev.backend);
    one.set_cluster_centers(C);
    const gpuml::Labels labels = one.predict(X);
    const Matrix<T> distances = one.transform(X);
    const double score = one.score(X, w);
    for (const std::string& list : {index + "," + index, index + "," + index + "," + index}) {
      KMeans<T> many({}, gpuml::select_backend(list));
      many.set_cluster_centers(C);
      EXPECT_TRUE(many.predict(X) == labels) << list;
      EXPECT_TRUE((many.transform(X).array() == distances.array()).all()) << list;
      EXPECT_EQ(many.score(X, w), score) << list;
      const Matrix<T> two_rows = X.topRows(2);
      EXPECT_TRUE(many.predict(two_rows) == labels.head(2)) << list << ", 2 rows";
      EXPECT_EQ(many.score(two_rows, w.head(2)), one.score(two_rows, w.head(2))) << list << ", 2 rows";
    }
  }
}

TEST(KMeansDevice, DeviceListsAreCheckedBeforeUse) {
  EXPECT_THROW(gpuml::select_backend("host,0"), gpuml::invalid_input);
  EXPECT_THROW(gpuml::select_backend("0,,0"), gpuml::invalid_input);
  EXPECT_THROW(gpuml::select_backend("0,no-such-device-name"), gpuml::unsupported);
}
