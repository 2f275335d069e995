// The bounded k-means E-step (kmeans_lloyd.comp with BOUNDS = 1) against the plain one: every fit, step and
// labelling must be the same bit for bit (labels, centers, inertia, n_iter, partial sums), on awkward shapes, k and d
// up to 1024, duplicated points (exact ties), data far off the origin, zero weights, steps submitted in parts, and
// samples streamed from host memory. Each case also checks that the bounded fit kept labels without searching,
// so a bounded engine that silently fell back to the plain one would fail.
#include "support.hpp"

#include <cstring>

namespace {

using gpuml::KMeans;
using gpuml::KMeansEStep;
using gpuml::KMeansParams;
using gpuml::Matrix;
using gpuml::testing::random_matrix;

std::vector<gpuml::testing::NamedBackend> devices() {
  std::vector<gpuml::testing::NamedBackend> out;
  for (auto& b : gpuml::testing::backends())
    if (b.backend.is_vulkan()) out.push_back(b);
  return out;
}

/// k centers in [-10, 10]^d plus uniform noise of the given spread, shifted by `offset` in every feature.
template <class T>
Matrix<T> blobs(Eigen::Index n, Eigen::Index d, Eigen::Index k, std::uint64_t salt, double spread, double offset = 0) {
  const Matrix<double> centers = random_matrix<double>(k, d, salt, -10.0, 10.0);
  const Matrix<double> noise = random_matrix<double>(n, d, salt + 1, -spread, spread);
  Matrix<double> X(n, d);
  for (Eigen::Index i = 0; i < n; ++i) X.row(i) = (centers.row(i % k) + noise.row(i)).array() + offset;
  return X.template cast<T>();
}

struct Case {
  const char* name;
  Eigen::Index n, d;
  int k, max_iter;
  int kind;  // 0: blobs, 1: uniform noise, 2: few distinct rows repeated (ties), 3: blobs far off the origin
  bool expect_skips;  // long enough for the bounds to settle labels (the others may search every step)
};

template <class T>
Matrix<T> data_for(const Case& c, std::uint64_t salt) {
  switch (c.kind) {
    case 1: return random_matrix<T>(c.n, c.d, salt, -1.0, 1.0);
    case 2: {
      const Matrix<T> distinct = random_matrix<T>(std::max<Eigen::Index>(c.k / 2, 2), c.d, salt, -3.0, 3.0);
      Matrix<T> X(c.n, c.d);
      for (Eigen::Index i = 0; i < c.n; ++i) X.row(i) = distinct.row((i * 7) % distinct.rows());
      return X;
    }
    case 3: return blobs<T>(c.n, c.d, c.k, salt, 2.0, 1000.0);
    default: return blobs<T>(c.n, c.d, c.k, salt, 2.5);
  }
}

template <class T>
class KMeansBoundsTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KMeansBoundsTest, Scalars);

template <class T>
void expect_same_fit(const KMeans<T>& plain, const KMeans<T>& bounded, const std::string& what) {
  ASSERT_EQ(bounded.n_iter(), plain.n_iter()) << what;
  EXPECT_TRUE(bounded.labels() == plain.labels()) << what;
  ASSERT_EQ(bounded.cluster_centers().size(), plain.cluster_centers().size()) << what;
  EXPECT_EQ(std::memcmp(bounded.cluster_centers().data(), plain.cluster_centers().data(),
                        sizeof(T) * plain.cluster_centers().size()), 0) << what << ": centers differ";
  EXPECT_EQ(bounded.inertia(), plain.inertia()) << what;
}

/// Whether some iteration of the fit kept labels on the bounds alone.
inline bool skipped_searches(const gpuml::algorithms::StepTimes& times, Eigen::Index n) {
  for (auto searched : times.e_step_searched)
    if (searched < static_cast<std::uint64_t>(n)) return true;
  return false;
}

TYPED_TEST(KMeansBoundsTest, BoundedFitsAreThePlainFitsBitForBit) {
  using T = TypeParam;
  // Shapes: resident centers (the seed's d), several feature tiles, centers read from memory (k above a shared
  // tile), d = 1024 and k = 1024, one feature, and the data kinds above.
  const std::vector<Case> cases = {
      {"blobs 20011x14 k=31", 20011, 14, 31, 40, 0, true},
      {"noise 9001x5 k=23", 9001, 5, 23, 25, 1, true},
      {"blobs 7919x33 k=130", 7919, 33, 130, 12, 0, false},
      {"duplicates 6007x6 k=40", 6007, 6, 40, 20, 2, false},
      {"off-center 8009x7 k=19", 8009, 7, 19, 25, 3, true},
      {"one feature 5003x1 k=9", 5003, 1, 9, 25, 1, false},
      {"d=1024 1031x1024 k=16", 1031, 1024, 16, 10, 1, false},
      {"k=1024 6151x16 k=1024", 6151, 16, 1024, 12, 1, false},
  };
  std::uint64_t salt = 100;
  for (const auto& dev : devices())
    for (const Case& c : cases) {
      salt += 10;
      const Matrix<T> X = data_for<T>(c, salt);
      Eigen::VectorX<T> w = random_matrix<T>(c.n, 1, salt + 5, 0.5, 2.0).col(0);
      for (Eigen::Index i = 0; i < c.n; i += 11) w[i] = T(0);  // zero weights
      KMeansParams p;
      p.n_clusters = c.k;
      p.max_iter = c.max_iter;
      p.tol = 0;
      p.init_centers = X.topRows(c.k).template cast<double>();  // poor starts: many moving iterations
      p.e_step = KMeansEStep::plain;
      KMeans<T> plain(p, dev.backend);
      plain.fit(X, w);
      p.e_step = KMeansEStep::bounded;
      KMeans<T> bounded(p, dev.backend);
      bounded.fit(X, w);
      const std::string what = dev.name + ": " + c.name;
      SCOPED_TRACE(what);
      ASSERT_FALSE(bounded.step_times().e_step_searched.empty()) << "the bounded E-step did not run";
      EXPECT_TRUE(plain.step_times().e_step_searched.empty());
      expect_same_fit(plain, bounded, what);
      if (c.expect_skips && plain.n_iter() > 10) {
        EXPECT_TRUE(skipped_searches(bounded.step_times(), c.n)) << "every sample was searched in every iteration";
      }
    }
}

// k-means++ seeding (n_init = 2) and the automatic choice: the same fit with the bounded, automatic and plain
// E-steps, and with Config::kmeans_bounds off.
TYPED_TEST(KMeansBoundsTest, SeededFitsAgreeWhateverTheEStep) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    const Matrix<T> X = blobs<T>(12007, 10, 24, 300, 3.0);
    KMeansParams p;
    p.n_clusters = 24;
    p.n_init = 2;
    p.random_state = 11;
    p.max_iter = 30;
    p.e_step = KMeansEStep::plain;
    KMeans<T> plain(p, dev.backend);
    plain.fit(X);
    for (KMeansEStep e : {KMeansEStep::bounded, KMeansEStep::automatic}) {
      p.e_step = e;
      KMeans<T> other(p, dev.backend);
      other.fit(X);
      expect_same_fit(plain, other, dev.name);
      EXPECT_TRUE(other.predict(X.topRows(777)) == plain.predict(X.topRows(777)));
    }
    gpuml::ScopedConfig off(gpuml::config().set_kmeans_bounds(false));
    p.e_step = KMeansEStep::automatic;
    KMeans<T> switched_off(p, dev.backend);
    switched_off.fit(X);
    EXPECT_TRUE(switched_off.step_times().e_step_searched.empty()) << "GPUML_KMEANS_BOUNDS=0 runs the plain E-step";
    expect_same_fit(plain, switched_off, dev.name);
  }
}

// Engine steps: the bounded engine's partial sums, weights, changed flags and labels equal the plain engine's at
// every step, also when its steps are submitted in parts (cancellation polls), when they move the terms of changed
// labels between the running sums, and for labelling-only steps.
TYPED_TEST(KMeansBoundsTest, BoundedStepsAreThePlainStepsInPartsToo) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    const Eigen::Index n = 30011, d = 9;
    const std::uint32_t k = 37;
    const Matrix<T> X = blobs<T>(n, d, k, 500, 4.0);
    const Eigen::VectorX<T> w = random_matrix<T>(n, 1, 501, 0.5, 2.0).col(0);
    using Engine = gpuml::kernels::LloydEngine<T>;
    Engine plain(*dev.backend.device(), X, w.data(), k, KMeansEStep::plain);
    Engine bounded(*dev.backend.device(), X, w.data(), k, KMeansEStep::bounded);
    ASSERT_FALSE(plain.bounded_e_step());
    ASSERT_TRUE(bounded.bounded_e_step());
    plain.reset_labels();
    bounded.reset_labels();
    int polls = 0;
    bounded.set_keep_going([&polls] { return ++polls > 0; }, 0.0);
    Matrix<T> C = X.topRows(k), sums_plain, sums_bounded;
    Eigen::VectorX<T> weights_plain, weights_bounded;
    for (int step = 0; step < 12; ++step) {
      const bool changed_plain = gpuml::testing::e_step_rounded(plain, C, sums_plain, weights_plain);
      const bool changed_bounded = gpuml::testing::e_step_rounded(bounded, C, sums_bounded, weights_bounded);
      EXPECT_EQ(changed_plain, changed_bounded) << "step " << step;
      ASSERT_EQ(sums_plain.size(), sums_bounded.size());
      ASSERT_EQ(std::memcmp(sums_plain.data(), sums_bounded.data(), sizeof(T) * sums_plain.size()), 0) << "step " << step;
      ASSERT_EQ(std::memcmp(weights_plain.data(), weights_bounded.data(), sizeof(T) * k), 0) << "step " << step;
      ASSERT_TRUE(plain.labels() == bounded.labels()) << "step " << step;
      for (std::uint32_t j = 0; j < k; ++j)
        if (weights_plain[j] > 0) C.row(j) = sums_plain.row(j) / weights_plain[j];
      if (step == 6) {  // centers that jump: most bounds fail at once
        C.row(0) = X.row(n - 1);
        C.row(1) = X.row(n - 2);
      }
    }
    EXPECT_GE(polls, 3) << "the steps after the first ran in parts";
    const auto& searched = bounded.step_times().e_step_searched;
    ASSERT_EQ(searched.size(), 12u);
    EXPECT_LT(*std::min_element(searched.begin(), searched.end()), static_cast<std::uint64_t>(n) / 2);
    // Steps after one that searched few samples moved the changed samples' terms between the exact sums instead of
    // adding them again: the same sums, bit for bit, as the plain step's (checked above at every step).
    EXPECT_GE(bounded.step_times().moved_steps, 1);
    C.row(2) = X.row(n / 2);
    plain.assign(C);
    bounded.assign(C);
    EXPECT_TRUE(plain.labels() == bounded.labels()) << "a labelling step after the fit's steps";
  }
}

// Under a device-memory limit: where the samples fit but the bounds do not, and where the samples are streamed from
// host memory, the plain E-step runs instead, with the same result.
TYPED_TEST(KMeansBoundsTest, BoundsBeyondTheMemoryLimitFallBackToThePlainStep) {
  using T = TypeParam;
  for (const auto& dev : devices()) {
    const Eigen::Index n = 20011, d = 11;
    const Matrix<T> X = blobs<T>(n, d, 9, 800, 2.5);
    KMeansParams p;
    p.n_clusters = 9;
    p.random_state = 3;
    p.max_iter = 30;
    p.e_step = KMeansEStep::plain;
    KMeans<T> resident(p, dev.backend);
    resident.fit(X);
    p.e_step = KMeansEStep::bounded;
    using Engine = gpuml::kernels::LloydEngine<T>;
    // Room for the samples, labels and partial sums, not for the bounds; then room for half the samples.
    for (const std::uint64_t limit : {std::uint64_t(n) * (d + 2) * sizeof(T) + (64u << 10),
                                      std::uint64_t(n) * d * sizeof(T) / 2 + std::uint64_t(n) * 4 + (64u << 10)}) {
      gpuml::ScopedConfig scoped(gpuml::config().set_device_memory_limit(limit));
      {
        Engine engine(*dev.backend.device(), X, nullptr, 9, KMeansEStep::bounded);
        EXPECT_FALSE(engine.bounded_e_step()) << "limit " << limit;
        Engine unlimited_bounds(*dev.backend.device(), X.topRows(n / 8), nullptr, 9, KMeansEStep::bounded);
        EXPECT_TRUE(unlimited_bounds.bounded_e_step()) << "an eighth of the samples and their bounds fit";
      }
      KMeans<T> limited(p, dev.backend);
      limited.fit(X);
      EXPECT_TRUE(limited.step_times().e_step_searched.empty());
      expect_same_fit(resident, limited, dev.name);
    }
  }
}

TEST(KMeansBounds, AlgorithmIsChecked) {
  KMeansParams p;
  p.algorithm = "elkan";
  EXPECT_NO_THROW(gpuml::algorithms::check_kmeans_params(p));
  p.algorithm = "full";
  try {
    gpuml::algorithms::check_kmeans_params(p);
    FAIL() << "algorithm='full' was accepted";
  } catch (const gpuml::invalid_input& e) {
    EXPECT_NE(std::string(e.what()).find("'algorithm' parameter of KMeans must be a str among {'lloyd', 'elkan'}"),
              std::string::npos);
  }
}

}  // namespace
