// Shared test helpers: the backends every test runs on, and fresh random data.
#pragma once

#include <gpuml/gpuml.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace gpuml::testing {

struct NamedBackend {
  std::string name;
  Backend backend;
};

/// The host backend, plus the Vulkan device named by GPUML_TEST_DEVICE (default "cpu": lavapipe) when present.
/// GPUML_TEST_DEVICE=none runs the host alone; GPUML_REQUIRE_DEVICE=1 (set in CI) makes a missing device fatal.
inline std::vector<NamedBackend> backends() {
  std::vector<NamedBackend> out{{"host", Backend::host()}};
  const char* env = std::getenv("GPUML_TEST_DEVICE");
  const std::string choice = env && *env ? env : "cpu";
  if (choice == "none") return out;
  try {
    out.push_back({"vulkan", select_backend(choice)});
  } catch (const gpuml::error& e) {
    if (const char* require = std::getenv("GPUML_REQUIRE_DEVICE"); require && gpuml::parse_switch(require).value_or(false)) {
      std::fprintf(stderr, "GPUML_REQUIRE_DEVICE is set but no Vulkan device: %s\n", e.what());
      std::abort();
    }
    std::fprintf(stderr, "note: testing the host backend only (%s)\n", e.what());
  }
  return out;
}

/// Fails the run if the Khronos validation layer said anything (GPUML_VALIDATION=1).
class ValidationEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    EXPECT_EQ(vulkan::validation_message_count(), 0u) << "the Vulkan validation layer reported problems (see stderr)";
  }
};
inline ::testing::Environment* const validation_environment =
    ::testing::AddGlobalTestEnvironment(new ValidationEnvironment);

inline std::string backend_name(const ::testing::TestParamInfo<NamedBackend>& info) { return info.param.name; }

/// Fresh random data: a new seed per process unless GPUML_TEST_SEED is set; printed so a failure can be replayed.
inline std::uint64_t test_seed() {
  static const std::uint64_t seed = [] {
    std::uint64_t s = std::random_device{}();
    if (const char* e = std::getenv("GPUML_TEST_SEED")) s = std::strtoull(e, nullptr, 10);
    s &= 0x7FFFFFFFu;  // a seed plus a salt stays a numpy RandomState seed (below 2**32)
    std::printf("GPUML_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

/// Uniform random matrix in [lo, hi); never all zeros.
template <class T>
Matrix<T> random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint64_t salt, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(test_seed() * 0x9E3779B97F4A7C15ull + salt);
  std::uniform_real_distribution<double> dist(lo, hi);
  Matrix<T> m(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) m(i, j) = static_cast<T>(dist(rng));
  return m;
}

/// The metric's value between A's row i and B's row j as the estimators report it (a distance, or the inner
/// product), in double with plain loops: the independent reference the k-NN tests check against.
template <class T>
double reference_value(MatrixView<T> A, Eigen::Index i, MatrixView<T> B, Eigen::Index j, Metric m) {
  double acc = 0, na = 0, nb = 0;
  for (Eigen::Index f = 0; f < A.cols(); ++f) {
    const double a = A(i, f), b = B(j, f);
    switch (m) {
      case Metric::euclidean:
      case Metric::sqeuclidean: acc += (a - b) * (a - b); break;
      case Metric::manhattan: acc += std::abs(a - b); break;
      case Metric::chebyshev: acc = std::max(acc, std::abs(a - b)); break;
      case Metric::cosine:
      case Metric::inner_product:
        acc += a * b;
        na += a * a;
        nb += b * b;
        break;
    }
  }
  if (m == Metric::euclidean) return std::sqrt(acc);
  if (m == Metric::cosine) return (na == 0 || nb == 0) ? 1.0 : std::clamp(1.0 - acc / std::sqrt(na * nb), 0.0, 2.0);
  return acc;
}

/// One E-step of a Lloyd engine (host or device) with its exact sums rounded to T, as lloyd_loop rounds them.
template <class Engine, class T>
bool e_step_rounded(Engine& engine, const Matrix<T>& C, Matrix<T>& sums, Vector<T>& weights) {
  algorithms::ClusterSums exact;
  const bool changed = engine.e_step(C, exact);
  exact.round_to(sums, weights);
  return changed;
}

}  // namespace gpuml::testing
