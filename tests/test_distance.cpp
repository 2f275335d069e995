// Row norms and pairwise squared distances: every backend against an independent double-precision reference.
#include "support.hpp"

#include <cmath>

namespace {

using gpuml::Matrix;
using gpuml::testing::NamedBackend;
using gpuml::testing::random_matrix;

template <class T>
Matrix<double> reference_sq_distances(const Matrix<T>& X, const Matrix<T>& Y) {
  Matrix<double> D(X.rows(), Y.rows());
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (Eigen::Index j = 0; j < Y.rows(); ++j) {
      double s = 0;
      for (Eigen::Index k = 0; k < X.cols(); ++k) {
        const double diff = double(X(i, k)) - double(Y(j, k));
        s += diff * diff;
      }
      D(i, j) = s;
    }
  return D;
}

// The norm expansion loses about eps * (|x|^2 + |y|^2) to cancellation; that is the bound each entry must meet.
template <class T>
double tolerance(double x_norm, double y_norm, Eigen::Index d) {
  const double eps = std::numeric_limits<T>::epsilon();
  return 4.0 * eps * std::sqrt(double(d)) * (x_norm + y_norm) + 1e-30;
}

class DistanceTest : public ::testing::TestWithParam<NamedBackend> {};

template <class T>
void check_shape(const gpuml::Backend& backend, Eigen::Index n, Eigen::Index m, Eigen::Index d, std::uint64_t salt) {
  const Matrix<T> X = random_matrix<T>(n, d, salt, -2.0, 3.0);
  const Matrix<T> Y = random_matrix<T>(m, d, salt + 1, -1.0, 2.0);
  const Matrix<T> D = gpuml::pairwise_sq_distances<T>(X, Y, backend);
  const Matrix<double> ref = reference_sq_distances(X, Y);
  ASSERT_EQ(D.rows(), n);
  ASSERT_EQ(D.cols(), m);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j) {
      const double tol = tolerance<T>(X.row(i).template cast<double>().squaredNorm(),
                                      Y.row(j).template cast<double>().squaredNorm(), d);
      ASSERT_NEAR(double(D(i, j)), ref(i, j), tol) << "n=" << n << " m=" << m << " d=" << d << " at (" << i << "," << j << ")";
    }
  const gpuml::Vector<T> norms = gpuml::row_sq_norms<T>(X, backend);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double expect = X.row(i).template cast<double>().squaredNorm();
    ASSERT_NEAR(double(norms[i]), expect, 4.0 * std::numeric_limits<T>::epsilon() * d * expect);
  }
}

TEST_P(DistanceTest, AwkwardShapesMatchReferenceFloat) {
  const auto& b = GetParam().backend;
  check_shape<float>(b, 1, 1, 1, 1);
  check_shape<float>(b, 3, 5, 2, 2);
  check_shape<float>(b, 131, 77, 13, 3);
  check_shape<float>(b, 257, 129, 130, 4);
  check_shape<float>(b, 50, 301, 17, 5);
  check_shape<float>(b, 129, 1, 33, 6);
}

TEST_P(DistanceTest, AwkwardShapesMatchReferenceDouble) {
  const auto& b = GetParam().backend;
  // A device without shaderFloat64 runs these on the host (gpuml::run_on): the same reference checks hold.
  check_shape<double>(b, 1, 1, 1, 11);
  check_shape<double>(b, 131, 77, 13, 12);
  check_shape<double>(b, 70, 201, 41, 13);
}

TEST_P(DistanceTest, IdenticalRowsGiveZero) {
  const auto& b = GetParam().backend;
  const Matrix<float> X = random_matrix<float>(37, 19, 21);
  const Matrix<float> D = gpuml::pairwise_sq_distances<float>(X, X, b);
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    EXPECT_GE(D(i, i), 0.0f);
    EXPECT_LE(D(i, i), 1e-5f * X.row(i).squaredNorm());
  }
}

TEST_P(DistanceTest, BackendsAgree) {
  const auto& b = GetParam().backend;
  const Matrix<float> X = random_matrix<float>(203, 45, 31), Y = random_matrix<float>(99, 45, 32);
  const Matrix<float> host = gpuml::pairwise_sq_distances<float>(X, Y, gpuml::Backend::host());
  const Matrix<float> here = gpuml::pairwise_sq_distances<float>(X, Y, b);
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (Eigen::Index j = 0; j < Y.rows(); ++j)
      ASSERT_NEAR(here(i, j), host(i, j), 1e-5 * (X.row(i).squaredNorm() + Y.row(j).squaredNorm()));
}

TEST_P(DistanceTest, BadInputIsRejected) {
  const auto& b = GetParam().backend;
  const Matrix<float> X = random_matrix<float>(5, 3, 41), Y = random_matrix<float>(4, 4, 42);
  EXPECT_THROW(gpuml::pairwise_sq_distances<float>(X, Y, b), gpuml::invalid_input);
  EXPECT_THROW(gpuml::pairwise_sq_distances<float>(Matrix<float>(0, 3), X, b), gpuml::invalid_input);
  Matrix<float> bad = X;
  bad(2, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(gpuml::pairwise_sq_distances<float>(bad, X, b), gpuml::invalid_input);
  bad(2, 1) = std::numeric_limits<float>::infinity();
  EXPECT_THROW(gpuml::pairwise_sq_distances<float>(X, bad, b), gpuml::invalid_input);
  EXPECT_THROW(gpuml::row_sq_norms<float>(bad, b), gpuml::invalid_input);
}

// An operand larger than one storage-buffer binding (128 MiB on lavapipe) is processed in blocks.
TEST_P(DistanceTest, OperandLargerThanOneBindingIsSplit) {
  const auto& b = GetParam().backend;
  if (b.is_host()) GTEST_SKIP() << "buffer limits concern Vulkan devices";
  const auto limit = b.device()->max_binding_bytes();
  const Eigen::Index d = 128;
  const Eigen::Index n = static_cast<Eigen::Index>(limit / (d * sizeof(float))) + 1237;
  if (double(n) * d * sizeof(float) > 2.5e9) GTEST_SKIP() << "binding limit too large to exceed in a test";
  ASSERT_GT(std::uint64_t(n) * d * sizeof(float), limit);
  const Matrix<float> X = random_matrix<float>(n, d, 51);
  const Matrix<float> Y = random_matrix<float>(5, d, 52);
  // A narrow tile (16 columns) keeps the work proportional to the 5 columns of D on a slow CPU device.
  using NarrowTile = gpuml::kernels::DistanceTile<4, 8, 4, 4, 8>;
  const Matrix<float> D = gpuml::pairwise_sq_distances<float, NarrowTile>(X, Y, b);
  const gpuml::Vector<float> norms = gpuml::row_sq_norms<float>(X, b);
  ASSERT_EQ(D.rows(), n);
  for (Eigen::Index i : {Eigen::Index(0), n / 3, n - 1300, n - 1237, n - 1}) {
    for (Eigen::Index j = 0; j < Y.rows(); ++j) {
      const double ref = (X.row(i).cast<double>() - Y.row(j).cast<double>()).squaredNorm();
      ASSERT_NEAR(D(i, j), ref, 1e-4 * (X.row(i).squaredNorm() + Y.row(j).squaredNorm())) << "row " << i;
    }
    ASSERT_NEAR(norms[i], X.row(i).squaredNorm(), 1e-4 * X.row(i).squaredNorm());
  }
}

// A dispatch names each buffer's binding: the list's order does not matter, and a binding given twice or one the
// kernel does not have is refused before anything is recorded.
TEST_P(DistanceTest, DispatchBindsBuffersByName) {
  const auto& b = GetParam().backend;
  if (b.is_host()) GTEST_SKIP() << "dispatches concern Vulkan devices";
  namespace vk = gpuml::vulkan;
  namespace shader = gpuml::shader_interface::row_sq_norms;
  vk::Device& dev = *b.device();
  const Matrix<float> X = random_matrix<float>(37, 5, 61, -2.0, 2.0);
  vk::Buffer x = dev.buffer(X.size() * sizeof(float)), out = dev.buffer(X.rows() * sizeof(float));
  vk::upload_rows<float>(dev, x, 0, X, 0, X.rows());
  const auto kernel = dev.kernel(
      gpuml::shaders::row_sq_norms_kernel::spec(gpuml::kernels::spec_constants(shader::kSpecCount, {{shader::kSpecThreads, 64}})));
  const shader::Push push{.rows = std::uint32_t(X.rows()), .cols = std::uint32_t(X.cols())};
  {
    vk::Commands cmds(dev);
    cmds.dispatch(kernel, {{shader::kBindingNorms, out}, {shader::kBindingRows, x}}, push, 1);  // listed out of order
    cmds.submit_and_wait();
  }
  std::vector<float> norms(static_cast<std::size_t>(X.rows()));
  vk::download(dev, out, 0, norms.data(), norms.size() * sizeof(float));
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    EXPECT_NEAR(norms[static_cast<std::size_t>(i)], X.row(i).cast<double>().squaredNorm(), 1e-5) << "row " << i;
  vk::Commands cmds(dev);
  EXPECT_THROW(cmds.dispatch(kernel, {{shader::kBindingRows, x}, {shader::kBindingRows, out}}, push, 1), gpuml::error);
  EXPECT_THROW(cmds.dispatch(kernel, {{shader::kBindingRows, x}, {shader::kBindingCount, out}}, push, 1), gpuml::error);
  EXPECT_THROW(cmds.dispatch(kernel, {{shader::kBindingRows, x}}, push, 1), gpuml::error);
}

INSTANTIATE_TEST_SUITE_P(Backends, DistanceTest, ::testing::ValuesIn(gpuml::testing::backends()),
                         gpuml::testing::backend_name);

TEST(DeviceSelection, NamesAndFallbacks) {
  EXPECT_TRUE(gpuml::select_backend("host").is_host());
  EXPECT_THROW(gpuml::select_backend("no-such-device-name-xyz"), gpuml::unsupported);
  EXPECT_THROW(gpuml::select_backend("4096"), gpuml::unsupported);
  const auto devices = gpuml::vulkan_devices();
  bool any_gpu = false;
  for (const auto& d : devices) {
    any_gpu = any_gpu || d.is_gpu();
    const auto by_index = gpuml::select_backend(std::to_string(d.index));
    ASSERT_TRUE(by_index.is_vulkan());
    EXPECT_EQ(by_index.device()->info().name, d.name);
    EXPECT_GT(d.max_storage_buffer_range, 0u);
    EXPECT_GT(d.max_shared_memory, 0u);
  }
  // With no GPU, automatic selection is the host (the host beats a CPU Vulkan device).
  if (!any_gpu) EXPECT_TRUE(gpuml::select_backend("auto").is_host());
  else EXPECT_TRUE(gpuml::select_backend("auto").is_vulkan());
}

}  // namespace
