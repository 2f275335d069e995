// The Vulkan k-NN kernel (kernels::knn_search) directly: against the host engine and against an independent
// double-precision brute force, for every metric, k from 1 to the kernel's maximum, float and double, awkward
// shapes, duplicates and exact ties, a database larger than one storage-buffer binding, strided views, bad input.
#include "support.hpp"

#include <gpuml/estimators/neighbors.hpp>
#include <gpuml/host/float64_distances.hpp>
#include <gpuml/kernels/knn.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace {

using gpuml::IndexMatrix;
using gpuml::Matrix;
using gpuml::MatrixView;
using gpuml::Metric;
using gpuml::testing::random_matrix;
using gpuml::testing::reference_value;
template <class T>
using Result = gpuml::host::KnnResult<T>;

const std::vector<Metric> kMetrics = {Metric::euclidean, Metric::sqeuclidean, Metric::manhattan,
                                      Metric::cosine,    Metric::chebyshev,   Metric::inner_product};

/// The Vulkan backend of the test backends (lavapipe by default), or nullptr.
const gpuml::Backend* test_backend() {
  static const std::vector<gpuml::testing::NamedBackend> all = gpuml::testing::backends();
  for (const auto& b : all)
    if (b.backend.is_vulkan()) return &b.backend;
  return nullptr;
}

/// Its device, or nullptr.
gpuml::vulkan::Device* test_device() { return test_backend() ? test_backend()->device() : nullptr; }

#define REQUIRE_DEVICE()                                                 \
  gpuml::vulkan::Device* device = test_device();                         \
  if (!device) GTEST_SKIP() << "no Vulkan device (GPUML_TEST_DEVICE)"; \
  static_cast<void>(0)

template <class T>
double tolerance(double scale) {
  return (std::is_same_v<T, float> ? 2e-4 : 1e-9) * (1.0 + std::abs(scale));
}

/// Checks `got` against the double brute force: every reported value within tolerance of the exact value of its
/// index, sorted (ties by index), no repeats, and the index set exact wherever the k-th value is separated from
/// the next one by more than rounding (otherwise every returned index must be within rounding of the cut).
template <class T>
void expect_matches_reference(const Result<T>& got, MatrixView<T> db, MatrixView<T> q, int k, Metric m) {
  ASSERT_EQ(got.indices.rows(), q.rows());
  ASSERT_EQ(got.indices.cols(), k);
  const double sign = m == Metric::inner_product ? -1.0 : 1.0;
  std::vector<std::pair<double, Eigen::Index>> all(static_cast<std::size_t>(db.rows()));
  for (Eigen::Index i = 0; i < q.rows(); ++i) {
    for (Eigen::Index j = 0; j < db.rows(); ++j) all[j] = {sign * reference_value<T>(q, i, db, j, m), j};
    // Only the first k + 1 of the (value, index) order are read (pairs are distinct: the order is total), so only
    // they are sorted: the full sort's prefix, at a fraction of its cost.
    const auto top = all.begin() + std::min<Eigen::Index>(k + 1, db.rows());
    std::nth_element(all.begin(), top - 1, all.end());
    std::sort(all.begin(), top);
    const double kth = all[k - 1].first, tol = tolerance<T>(kth);
    const bool separated = k == db.rows() || all[k].first - kth > tol;
    std::set<std::int64_t> seen;
    for (int c = 0; c < k; ++c) {
      const std::int64_t j = got.indices(i, c);
      ASSERT_TRUE(j >= 0 && j < db.rows()) << "query " << i << " column " << c;
      ASSERT_TRUE(seen.insert(j).second) << "query " << i << " repeats index " << j;
      const double exact = reference_value<T>(q, i, db, j, m);
      EXPECT_NEAR(static_cast<double>(got.distances(i, c)), exact, tolerance<T>(exact))
          << metric_name(m) << " query " << i << " column " << c << " index " << j;
      EXPECT_LE(sign * exact, kth + tol) << metric_name(m) << " query " << i << " index " << j << " is not among the k best";
      if (c > 0) {
        const T prev = got.distances(i, c - 1), cur = got.distances(i, c);
        if (m == Metric::inner_product) {
          EXPECT_GE(prev, cur) << "query " << i;
        } else {
          EXPECT_LE(prev, cur) << "query " << i;
        }
        if (prev == cur) {
          EXPECT_LT(got.indices(i, c - 1), j) << "tie not broken by the lower index, query " << i;
        }
      }
    }
    if (separated) {
      for (int c = 0; c < k; ++c)
        EXPECT_TRUE(seen.count(all[c].second)) << metric_name(m) << " query " << i << " misses index " << all[c].second;
    }
  }
}

/// The kernel against the host engine: identical index sets (and order) wherever values are separated by more
/// than rounding; values within tolerance everywhere.
template <class T>
void expect_matches_host(const Result<T>& got, const Result<T>& host, Metric m) {
  ASSERT_EQ(got.indices.rows(), host.indices.rows());
  ASSERT_EQ(got.indices.cols(), host.indices.cols());
  const int k = static_cast<int>(got.indices.cols());
  for (Eigen::Index i = 0; i < got.indices.rows(); ++i) {
    for (int c = 0; c < k; ++c) {
      const double h = host.distances(i, c);
      EXPECT_NEAR(static_cast<double>(got.distances(i, c)), h, tolerance<T>(h)) << metric_name(m) << " query " << i;
      const double tol = tolerance<T>(h);
      const bool left = c == 0 || std::abs(h - static_cast<double>(host.distances(i, c - 1))) > tol;
      // The last column may tie within rounding with the host's unreported (k+1)-th value, so it is compared only
      // through expect_matches_reference's separation test.
      const bool right = c < k - 1 && std::abs(static_cast<double>(host.distances(i, c + 1)) - h) > tol;
      // Values equal (not just close) in both engines must be ordered by index in both, so they agree too.
      if (left && right) {
        EXPECT_EQ(got.indices(i, c), host.indices(i, c)) << metric_name(m) << " query " << i << " column " << c;
      }
    }
  }
}

template <class T>
class KnnKernel : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KnnKernel, Scalars);

TYPED_TEST(KnnKernel, EveryMetricAndKOnAwkwardShapes) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  struct Shape {
    Eigen::Index n, m, d;
  };
  // Sizes that are multiples of no tile; k = 1, small, and larger than the tiles (64 x 64).
  for (const Shape s : {Shape{1003, 77, 19}, Shape{301, 5, 3}}) {
    const Matrix<T> db = random_matrix<T>(s.n, s.d, 11 + s.n), q = random_matrix<T>(s.m, s.d, 12 + s.n);
    for (Metric m : kMetrics)
      for (int k : {1, 7, 150}) {
        SCOPED_TRACE(std::string(metric_name(m)) + " n=" + std::to_string(s.n) + " k=" + std::to_string(k));
        const auto got = gpuml::kernels::knn_search<T>(*device, db, q, k, m);
        expect_matches_reference<T>(got, db, q, k, m);
        expect_matches_host<T>(got, gpuml::host::knn_search<T>(db, q, k, m), m);
      }
  }
}

TYPED_TEST(KnnKernel, SmallTilesManySplitsAndMergePasses) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  // 16 x 16 tiles (four threads per query, so four values at a time enter its queue), heaps only: a split holds
  // at least 16 tiles and 64k rows, so k = 1 and 8 give 19 and 9 splits, folded by the device merge in two
  // passes, and k = 33 gives 2.
  using Small = gpuml::kernels::KnnTile<4, 4, 4, 4, 4, 64, 4096, false>;
  ASSERT_TRUE(Small::can_implement<T>(device->info()));
  gpuml::kernels::KnnSearchOptions small = gpuml::kernels::KnnSearchOptions::from(gpuml::config());
  small.policy = gpuml::kernels::knn_tile_choice<Small>();
  const Matrix<T> db = random_matrix<T>(5003, 7, 81), q = random_matrix<T>(21, 7, 82);
  for (Metric m : kMetrics)
    for (int k : {1, 8, 33}) {
      SCOPED_TRACE(std::string(metric_name(m)) + " k=" + std::to_string(k));
      gpuml::kernels::KnnSearchStats stats;
      const auto got = gpuml::kernels::knn_search<T>(*device, db, q, k, m, nullptr, small, &stats);
      EXPECT_EQ(got.stats.sample_rows, stats.sample_rows) << "the result's copy";
      EXPECT_EQ(got.stats.database_blocks, stats.database_blocks) << "the result's copy";
      EXPECT_GT(got.stats.database_blocks, 0u);
      // k = 33 takes the bounding sample pass where the plan has 8 or more splits: on CPU devices (splits of at
      // most 32 tiles, 10 here), not on GPUs (2 splits here).
      if (k <= 32) {
        EXPECT_EQ(stats.sample_rows, 0u);
      } else if (device->info().type == gpuml::vulkan::DeviceType::cpu) {
        EXPECT_GT(stats.sample_rows, 0u);
      }
      expect_matches_reference<T>(got, db, q, k, m);
      expect_matches_host<T>(got, gpuml::host::knn_search<T>(db, q, k, m), m);
    }
  EXPECT_THROW((gpuml::kernels::knn_search<T>(*device, db, q, 65, Metric::euclidean, nullptr, small)), gpuml::unsupported);
}

TYPED_TEST(KnnKernel, KAtTheKernelMaximum) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  constexpr int kmax = static_cast<int>(gpuml::kernels::kKnnMaxK);
  static_assert(kmax >= 4096, "k = 4096 on the device");
  // A database of about three times k, so that the heaps keep a third of it.
  const Matrix<T> db = random_matrix<T>(3 * kmax + 37, 6, 21), q = random_matrix<T>(5, 6, 22);
  for (Metric m : {Metric::sqeuclidean, Metric::inner_product})
    for (int k : {kmax - 1, kmax}) {
      gpuml::kernels::KnnSearchStats stats;
      const auto got = gpuml::kernels::knn_search<T>(*device, db, q, k, m, nullptr,
                                                     gpuml::kernels::KnnSearchOptions::from(gpuml::config()), &stats);
      expect_matches_reference<T>(got, db, q, k, m);
      expect_matches_host<T>(got, gpuml::host::knn_search<T>(db, q, k, m), m);
      // Selected on the device (heaps at this k), the distances formed there where it can.
      EXPECT_EQ(stats.list_batches, 0u);
      EXPECT_GE(stats.database_blocks, 1u);
      if (m == Metric::sqeuclidean && std::is_same_v<T, float> && device->info().float64) {
        EXPECT_GT(stats.squared_on_device, std::uint64_t(q.rows()) * std::uint64_t(k) / 2);
      }
    }
  // k = n: every row, in order.
  const Matrix<T> small = random_matrix<T>(90, 6, 23);
  expect_matches_reference<T>(gpuml::kernels::knn_search<T>(*device, small, q, 90, Metric::euclidean), small, q, 90,
                              Metric::euclidean);
}

TYPED_TEST(KnnKernel, DuplicatesAndExactTiesGoToTheLowerIndex) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  // Small integer data: every value is exact in both engines, so ties are exact and both must agree exactly.
  Matrix<T> db = random_matrix<T>(517, 4, 31, 0.0, 3.0).array().floor().matrix();
  for (Eigen::Index i = 0; i < 60; ++i) db.row(300 + i) = db.row(i);  // duplicates far apart
  const Matrix<T> q = db.topRows(45);
  for (Metric m : {Metric::euclidean, Metric::sqeuclidean, Metric::manhattan, Metric::chebyshev, Metric::inner_product})
    for (int k : {1, 9, 70}) {
      SCOPED_TRACE(std::string(metric_name(m)) + " k=" + std::to_string(k));
      const auto got = gpuml::kernels::knn_search<T>(*device, db, q, k, m);
      const auto host = gpuml::host::knn_search<T>(db, q, k, m);
      EXPECT_EQ(got.indices, host.indices);
      EXPECT_EQ(got.distances, host.distances);
      expect_matches_reference<T>(got, db, q, k, m);
      if (m != Metric::inner_product) {
        for (Eigen::Index i = 0; i < q.rows(); ++i) EXPECT_EQ(got.distances(i, 0), T(0)) << "query " << i;
      }
    }
  // Non-integer duplicates: the query itself and its copy at distance exactly 0, lower index first.
  Matrix<T> r = random_matrix<T>(200, 33, 32);
  r.row(150) = r.row(20);
  for (Metric m : {Metric::euclidean, Metric::sqeuclidean, Metric::cosine}) {
    const auto got = gpuml::kernels::knn_search<T>(*device, r, r.middleRows(20, 1), 3, m);
    EXPECT_EQ(got.indices(0, 0), 20);
    EXPECT_EQ(got.indices(0, 1), 150);
    EXPECT_EQ(got.distances(0, 0), T(0));
    EXPECT_EQ(got.distances(0, 1), T(0));
  }
}

TYPED_TEST(KnnKernel, BoundedSearchKeepsExactTies) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  // Databases large enough for the bounding sample pass (1/16 of the rows, spread over the block), made of small
  // integers: thousands of rows tie with the sample's k-th value, and every tie must still go to the lower index.
  // 81 distinct rows (about 1000 copies each), then 4 (about 20000 copies each: at k = 40 the ties at the bound
  // overflow any candidate list, and the batch is searched again with heaps).
  for (const int d : {4, 2}) {
    const T top = d == 4 ? T(3) : T(2);
    const Matrix<T> db = random_matrix<T>(80011, d, 35, 0.0, top).array().floor().matrix();  // 8+ splits
    const Matrix<T> q = random_matrix<T>(37, d, 36, 0.0, top).array().floor().matrix();
    for (Metric m : {Metric::euclidean, Metric::manhattan, Metric::chebyshev, Metric::inner_product})
      for (int k : {1, 40, 100}) {  // k = 100: heaps where shared memory sorts at most 2048 pairs (lavapipe)
        SCOPED_TRACE(std::string(metric_name(m)) + " d=" + std::to_string(d) + " k=" + std::to_string(k));
        gpuml::kernels::KnnSearchStats stats;
        const auto got = gpuml::kernels::knn_search<T>(*device, db, q, k, m, nullptr,
                                                       gpuml::kernels::KnnSearchOptions::from(gpuml::config()), &stats);
        EXPECT_GT(stats.sample_rows, 4u * k);
        // float32: the sample's values written whole and its k-th value picked (knn_gather.comp's radix rounds
        // through thousands of tied values); float64 keeps heaps.
        EXPECT_EQ(stats.dense_samples > 0, (std::is_same_v<T, float>));
        if (k == 40 && d == 2) {
          EXPECT_EQ(stats.list_overflows, 1u);
        }
        const auto host = gpuml::host::knn_search<T>(db, q, k, m);
        EXPECT_EQ(got.indices, host.indices);
        EXPECT_EQ(got.distances, host.distances);
        // The same bound from heaps: the same candidates, overflows and result.
        auto heap_options = gpuml::kernels::KnnSearchOptions::from(gpuml::config());
        heap_options.dense_samples = false;
        gpuml::kernels::KnnSearchStats heap_stats;
        const auto heaps = gpuml::kernels::knn_search<T>(*device, db, q, k, m, nullptr, heap_options, &heap_stats);
        EXPECT_EQ(heap_stats.dense_samples, 0u);
        EXPECT_EQ(heap_stats.list_overflows, stats.list_overflows);
        EXPECT_EQ(heaps.indices, got.indices);
        EXPECT_EQ(heaps.distances, got.distances);
      }
  }
}

TYPED_TEST(KnnKernel, CandidateListsMatchTheReference) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  // Bounded searches with k small enough for candidate lists (k <= 64 on every device): continuous data, a few
  // exact duplicate rows (ties across the lists), every metric, both engines.
  Matrix<T> db = random_matrix<T>(90001, 6, 61);
  for (Eigen::Index r = 5; r < db.rows(); r += 7919) db.row(r - 1) = db.row(r);
  const Matrix<T> q = random_matrix<T>(45, 6, 62);
  for (Metric m : kMetrics)
    for (int k : {33, 64}) {
      SCOPED_TRACE(std::string(metric_name(m)) + " k=" + std::to_string(k));
      gpuml::kernels::KnnSearchStats stats;
      const auto got = gpuml::kernels::knn_search<T>(*device, db, q, k, m, nullptr,
                                                     gpuml::kernels::KnnSearchOptions::from(gpuml::config()), &stats);
      EXPECT_GE(stats.list_batches, 1u);
      EXPECT_EQ(stats.list_overflows, 0u);
      EXPECT_EQ(stats.dense_samples > 0, (std::is_same_v<T, float>));
      // The same search with heaps, without the bounding pass, and bounded by the sample's heaps instead of its
      // values written whole, chosen per call: the same neighbours (the last: the same values bit for bit).
      auto heap_bound_options = gpuml::kernels::KnnSearchOptions::from(gpuml::config());
      heap_bound_options.dense_samples = false;
      const auto heap_bound = gpuml::kernels::knn_search<T>(*device, db, q, k, m, nullptr, heap_bound_options);
      EXPECT_EQ(heap_bound.indices, got.indices);
      EXPECT_EQ(heap_bound.distances, got.distances);
      gpuml::kernels::KnnSearchStats heap_stats, plain_stats;
      const auto heaps = gpuml::kernels::knn_search<T>(*device, db, q, k, m, nullptr, {.candidate_lists = false}, &heap_stats);
      EXPECT_EQ(heap_stats.list_batches, 0u);
      const auto plain = gpuml::kernels::knn_search<T>(*device, db, q, k, m, nullptr, {.sample_fraction = 0}, &plain_stats);
      EXPECT_EQ(plain_stats.sample_rows, 0u);
      EXPECT_EQ(plain_stats.list_batches, 0u);
      expect_matches_reference<T>(got, db, q, k, m);
      const auto host = gpuml::host::knn_search<T>(db, q, k, m);
      expect_matches_host<T>(got, host, m);
      expect_matches_host<T>(heaps, host, m);
      expect_matches_host<T>(plain, host, m);
    }
}

TYPED_TEST(KnnKernel, BothEnginesReturnTheBestByReturnedValueAndIndex) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  // Data far from the origin, where the kernels' selection values (norm expansions) are off by more than the gaps
  // between neighbours, for the metrics whose returned values are recomputed: both engines return the first k of
  // the (returned value, index) order of every row, which a search for every row (it selects nothing) gives, bit for
  // bit, with candidate lists (k <= 64) and heaps.
  const double offset = std::is_same_v<T, float> ? 100.0 : 1e6;
  const Matrix<T> db = random_matrix<T>(20011, 6, 91, offset - 1, offset + 1);
  const Matrix<T> q = random_matrix<T>(23, 6, 92, offset - 1, offset + 1);
  for (Metric m : {Metric::euclidean, Metric::sqeuclidean, Metric::cosine}) {
    const auto all = gpuml::host::knn_search<T>(db, q, static_cast<int>(db.rows()), m);
    std::uint64_t searched_again = 0;
    for (int k : {1, 10, 64, 150}) {
      SCOPED_TRACE(std::string(metric_name(m)) + " k=" + std::to_string(k));
      const auto got = gpuml::kernels::knn_search<T>(*device, db, q, k, m);
      const auto host = gpuml::host::knn_search<T>(db, q, k, m);
      EXPECT_TRUE(got.indices == all.indices.leftCols(k));
      EXPECT_TRUE(got.distances == all.distances.leftCols(k));
      EXPECT_TRUE(host.indices == all.indices.leftCols(k));
      EXPECT_TRUE(host.distances == all.distances.leftCols(k));
      searched_again += got.stats.boundary_queries;
    }
    EXPECT_GT(searched_again, 0u) << "no query's k-th neighbour needed a wider selection: the test data are too easy";
  }
}

TYPED_TEST(KnnKernel, CooperativeMatrixListsMatchTheReference) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  // The float16 filter of float32 (squared) euclidean list passes (devices with cooperative matrices; elsewhere the
  // same searches run on knn_select.comp): its error bound must never drop a pair under the bound. Data far from
  // the origin (norms dozens of times the distances, where the bound is widest against them), rows of very
  // different scales, exact duplicates; d below, at and above a multiple of 16, with and without 4-vector rows;
  // batches and databases that are not multiples of the 128 x 128 tile; resident and streamed databases; queries
  // kept in shared memory for the whole pass (d up to 128 with 48 KiB; rows staged 32 features a step where d is a
  // multiple of 32: d = 96) and staged every step (d = 130).
  const bool coop = std::is_same_v<T, float> && device->info().coop_matrix_f16;
  struct Shape {
    Eigen::Index n, m;
    int d, k;
    double offset;
  };
  const Shape shapes[] = {Shape{60013, 301, 36, 10, 2.0}, Shape{40009, 129, 130, 64, 0.0}, Shape{50021, 77, 16, 1, 3.0},
                          Shape{30011, 140, 7, 40, 0.0}, Shape{30029, 150, 96, 20, 1.0}};
  // Without cooperative matrices every shape runs the plain list passes that the other tests cover: one shape checks
  // that the filter is not used there.
  for (const Shape s : std::span(shapes, coop ? std::size(shapes) : 1)) {
    Matrix<T> db = random_matrix<T>(s.n, s.d, 81 + s.d);
    Matrix<T> q = random_matrix<T>(s.m, s.d, 82 + s.d);
    db.array() += T(s.offset);
    q.array() += T(s.offset);
    if (s.offset == 0.0) {  // rows scaled over six orders of magnitude
      for (Eigen::Index r = 0; r < db.rows(); r += 3) db.row(r) *= T(r % 2 ? 1e-3 : 1e3);
      for (Eigen::Index r = 0; r < q.rows(); r += 5) q.row(r) *= T(1e3);
    }
    for (Eigen::Index r = 11; r < db.rows(); r += 4001) db.row(r - 1) = db.row(r);
    const gpuml::kernels::KnnDatabase<T> resident(*device, db);
    for (Metric m : {Metric::sqeuclidean, Metric::euclidean}) {
      SCOPED_TRACE(std::string(metric_name(m)) + " d=" + std::to_string(s.d) + " k=" + std::to_string(s.k));
      gpuml::kernels::KnnSearchStats stats;
      const auto got = gpuml::kernels::knn_search<T>(*device, db, q, s.k, m, &resident,
                                                     gpuml::kernels::KnnSearchOptions::from(gpuml::config()), &stats);
      // A query scaled by 1e3 against rows of norm about 1 has a float16 error bound wider than the spread of its
      // distances: every row is a candidate, the lists overflow and the batch is searched with heaps (exactly).
      // At k = 1 (d = 16, rows far from the origin) the bound is the sample's 9th best, a noisy quantile, and with
      // the filter's wide error bound the lists of some data overflow too (about half of the seeds on an H100):
      // searched with heaps then, as exactly.
      if ((s.offset != 0.0 && s.k > 1) || !coop) {
        EXPECT_GE(stats.list_batches, 1u);
        EXPECT_EQ(stats.list_overflows, 0u);
      } else if (s.offset != 0.0) {
        EXPECT_EQ(stats.list_batches + stats.list_overflows, 1u);
      }
      EXPECT_EQ(stats.coop_passes > 0, coop);
      expect_matches_reference<T>(got, db, q, s.k, m);
      expect_matches_host<T>(got, gpuml::host::knn_search<T>(db, q, s.k, m), m);
      const auto streamed = gpuml::kernels::knn_search<T>(*device, db, q, s.k, m);
      EXPECT_EQ(streamed.indices, got.indices);
      EXPECT_EQ(streamed.distances, got.distances);
      // The plain float32 list passes (knn_select.comp) return the same lists and values, bit for bit.
      auto plain_options = gpuml::kernels::KnnSearchOptions::from(gpuml::config());
      plain_options.cooperative_matrices = false;
      gpuml::kernels::KnnSearchStats plain_stats;
      const auto plain = gpuml::kernels::knn_search<T>(*device, db, q, s.k, m, &resident, plain_options, &plain_stats);
      EXPECT_EQ(plain_stats.coop_passes, 0u);
      EXPECT_EQ(plain.indices, got.indices);
      EXPECT_EQ(plain.distances, got.distances);
    }
  }
}

TYPED_TEST(KnnKernel, SelectedPairsDistancesFormedOnTheDeviceAreTheHosts) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  // Float32 (squared) euclidean searches on a device with float64 form their pairs' returned values on the device
  // (knn_exact_keys.comp) as the host's finish forms them, from candidate lists and from heaps: the results are the
  // host engine's bit for bit. (Float64 sums of float32 squares hide most slips of their order once rounded to
  // float32; a product rounded in float32, or a feature lost, shows here.) Among them pairs the device must leave to the host: subnormal values, and exact duplicates of a
  // query (distance 0). d = 37 leaves a tail after the groups of four.
  const Eigen::Index n = 20011, m = 257;
  const int d = 37, k = 17;
  Matrix<T> db = random_matrix<T>(n, d, 91);
  Matrix<T> q = random_matrix<T>(m, d, 92);
  q.array() *= T(0.8);
  for (Eigen::Index r = 0; r < m; r += 7) db.row(r * 61 + 5) = q.row(r);  // duplicates of every 7th query
  for (Eigen::Index r = 1; r < m; r += 11) {  // subnormal features, in the query and in a near row
    q(r, 3) = std::numeric_limits<T>::denorm_min() * T(3);
    db.row(r * 61 + 6) = q.row(r);
    db(r * 61 + 6, 0) += T(1e-3);
  }
  const gpuml::kernels::KnnDatabase<T> resident(*device, db);
  const bool on_device = std::is_same_v<T, float> && device->info().float64;
  for (const bool lists : {true, false})
    for (Metric metric : {Metric::sqeuclidean, Metric::euclidean}) {
      SCOPED_TRACE(std::string(metric_name(metric)) + (lists ? ", candidate lists" : ", heaps"));
      gpuml::kernels::KnnSearchOptions options = gpuml::kernels::KnnSearchOptions::from(gpuml::config());
      options.candidate_lists = lists;
      gpuml::kernels::KnnSearchStats stats;
      const auto got = gpuml::kernels::knn_search<T>(*device, db, q, k, metric, &resident, options, &stats);
      const auto host = gpuml::host::knn_search<T>(db, q, k, metric);
      EXPECT_EQ(got.indices, host.indices);
      EXPECT_EQ(got.distances, host.distances);
      expect_matches_reference<T>(got, db, q, k, metric);
      EXPECT_EQ(stats.list_batches >= 1, lists);
      const std::uint64_t pairs =
          std::uint64_t(m) * std::uint64_t(gpuml::algorithms::first_selection_width(n, d, k, metric));
      if (on_device) {
        // Most pairs formed there; left to the host: every pair of a query with a subnormal feature, and each other
        // query's exact duplicate (distance 0).
        const auto width = std::uint64_t(gpuml::algorithms::first_selection_width(n, d, k, metric));
        std::uint64_t left = 0;
        for (Eigen::Index r = 0; r < m; ++r) left += r % 11 == 1 ? width : (r % 7 == 0 ? 1 : 0);
        EXPECT_GT(stats.squared_on_device, pairs / 2);
        EXPECT_LE(stats.squared_on_device, pairs - left);
      } else {
        EXPECT_EQ(stats.squared_on_device, 0u);
      }
    }
}

/// host/float64_distances.hpp's squared distance, written out plainly: float64 differences, eight sums (feature f
/// to sum f % 8 below d - d % 8) in a fixed tree, the rest in feature order.
double float64_squared_reference(const float* q, const float* x, Eigen::Index d) {
  double s[8] = {}, tail = 0;
  const Eigen::Index body = d - d % 8;
  for (Eigen::Index f = 0; f < d; ++f) {
    const double e = double(x[f]) - double(q[f]), sq = e * e;
    if (f < body) s[f % 8] += sq;
    else tail += sq;
  }
  return (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) + tail;
}

TYPED_TEST(KnnKernel, Float64DistancesFormedOnTheDeviceAreTheHosts) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  if constexpr (!std::is_same_v<T, float>) {
    GTEST_SKIP() << "float32 databases only";
  } else {
    if (!device->info().float64) GTEST_SKIP() << "no float64 on " << device->info().name;
    // The distances the Python estimators return for float32 data, formed on the device (knn_float64_squared):
    // bit for bit the plain reference above, for queries given and for the database's own rows, at widths with a
    // tail of 5 features (scalar loads), of 4 (16-byte loads) and none. Features of magnitudes 1e-6 to 1e6, so
    // that differences and squares round in float64; rows and queries with a subnormal feature come back NaN (the
    // host's), every other pair formed there.
    for (const Eigen::Index d : {45, 44, 48}) {
      SCOPED_TRACE("d = " + std::to_string(d));
      const Eigen::Index n = 3001, m = 97, k = 13;
      Matrix<T> db = random_matrix<T>(n, d, 301), q = random_matrix<T>(m, d, 302);
      const Matrix<T> scale = random_matrix<T>(1, d, 303, -6.0, 6.0);
      for (Eigen::Index f = 0; f < d; ++f) {
        const T s = std::pow(T(10), std::round(scale(0, f)));
        db.col(f) *= s;
        q.col(f) *= s;
      }
      for (Eigen::Index r = 3; r < n; r += 401) db(r, r % d) = std::numeric_limits<T>::denorm_min() * T(5);
      q(10, 7) = std::numeric_limits<T>::denorm_min();
      IndexMatrix indices(m, k);
      for (Eigen::Index i = 0; i < m; ++i)
        for (Eigen::Index j = 0; j < k; ++j) indices(i, j) = (i * 7919 + j * 104729 + d) % n;
      indices(5, 2) = 3;  // a row with a subnormal value
      const gpuml::kernels::KnnDatabase<T> resident(*device, db);
      ASSERT_TRUE(gpuml::kernels::knn_float64_squared_can_run(resident));
      for (const bool self : {false, true}) {
        SCOPED_TRACE(self ? "the database's rows as queries" : "queries");
        const MatrixView<T> queries = self ? MatrixView<T>(db.topRows(m)) : MatrixView<T>(q);
        Matrix<double> got(m, k);
        gpuml::kernels::knn_float64_squared(resident, self ? nullptr : &queries, m, k, indices.data(), got.data());
        Matrix<double> host(m, k);
        gpuml::host::float64_distances<double>(queries, db, indices.data(), [k](std::int64_t i) { return i * k; },
                                               Metric::sqeuclidean, host.data());
        std::uint64_t formed = 0, left = 0;
        for (Eigen::Index i = 0; i < m; ++i)
          for (Eigen::Index j = 0; j < k; ++j) {
            const float* qi = queries.row(i).data();
            const float* xj = db.row(indices(i, j)).data();
            const double expected = float64_squared_reference(qi, xj, d);
            EXPECT_EQ(host(i, j), expected) << i << ", " << j;  // the host engine is the reference, bit for bit
            const auto subnormal = [d](const float* v) {
              for (Eigen::Index f = 0; f < d; ++f)
                if (v[f] != 0 && std::fpclassify(v[f]) == FP_SUBNORMAL) return true;
              return false;
            };
            if (subnormal(qi) || subnormal(xj)) {
              EXPECT_TRUE(std::isnan(got(i, j))) << i << ", " << j;
              ++left;
            } else {
              EXPECT_EQ(got(i, j), expected) << i << ", " << j;
              ++formed;
            }
          }
        EXPECT_GE(left, std::uint64_t(self ? 1 : k + 1));
        EXPECT_GT(formed, std::uint64_t(m * k * 9 / 10));
      }
      // Through the estimator (euclidean: the square roots of those values, every pair filled in).
      gpuml::NearestNeighbors<T> nn({.n_neighbors = int(k)}, *test_backend());
      nn.fit(db);
      const Matrix<double> distances = nn.float64_distances(q, indices);
      for (Eigen::Index i = 0; i < m; ++i)
        for (Eigen::Index j = 0; j < k; ++j)
          EXPECT_EQ(distances(i, j), std::sqrt(float64_squared_reference(q.row(i).data(), db.row(indices(i, j)).data(), d)));
      // Ragged lists (radius searches): every query its own number of pairs, some none; sent to the device as
      // (query, row) pairs, from queries given and from the database's own rows.
      gpuml::RadiusResult<T> lists;
      lists.offsets.push_back(0);
      for (Eigen::Index i = 0; i < m; ++i) {
        for (Eigen::Index j = 0; j < (i * 37) % 23 - (i % 5 == 0 ? 30 : 0); ++j) lists.indices.push_back((i * 131 + j * 7901) % n);
        lists.offsets.push_back(std::int64_t(lists.indices.size()));
      }
      lists.indices[4] = 3;  // a row with a subnormal value
      ASSERT_GT(lists.indices.size(), std::size_t(m));
      for (const bool self : {false, true}) {
        SCOPED_TRACE(self ? "lists of the database's rows" : "lists of queries");
        const MatrixView<T> queries = self ? MatrixView<T>(db.topRows(m)) : MatrixView<T>(q);
        std::vector<double> got(lists.indices.size());
        gpuml::kernels::knn_float64_squared_lists(resident, self ? nullptr : &queries, m, lists.offsets.data(),
                                                  lists.indices.data(), got.data());
        std::size_t left = 0;
        for (Eigen::Index i = 0; i < m; ++i)
          for (auto p = lists.offsets[i]; p < lists.offsets[i + 1]; ++p) {
            const double expected = float64_squared_reference(queries.row(i).data(), db.row(lists.indices[p]).data(), d);
            if (std::isnan(got[p])) ++left;
            else EXPECT_EQ(got[p], expected) << i << ", " << p;
          }
        EXPECT_LE(left, lists.indices.size() / 10);
        // The estimator's self form takes a list per training sample: those past the first m empty.
        gpuml::RadiusResult<T> every = lists;
        every.offsets.resize(std::size_t(n) + 1, lists.offsets.back());
        const std::vector<double> through = self ? nn.float64_distances_self(every) : nn.float64_distances(q, lists);
        ASSERT_EQ(through.size(), lists.indices.size());
        for (Eigen::Index i = 0; i < m; ++i)
          for (auto p = lists.offsets[i]; p < lists.offsets[i + 1]; ++p)
            EXPECT_EQ(through[p], std::sqrt(float64_squared_reference(queries.row(i).data(), db.row(lists.indices[p]).data(), d)));
      }
      gpuml::RadiusResult<T> short_lists = lists;
      short_lists.offsets.pop_back();
      EXPECT_THROW(nn.float64_distances(q, short_lists), gpuml::invalid_input);
      IndexMatrix outside = indices;
      outside(m - 1, k - 1) = n;
      EXPECT_THROW(nn.float64_distances(q, outside), gpuml::invalid_input);
      EXPECT_THROW(nn.float64_distances(q.topRows(m - 1), indices), gpuml::invalid_input);
    }
  }
}

TYPED_TEST(KnnKernel, ResidentDatabaseReusesItsBuffers) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  // One resident database, searches of growing and shrinking batches and k (lists and heaps, the workspace grown
  // and then reused with stale contents): each as the host engine finds it, and as a search without the resident
  // copy (fresh buffers) finds it.
  const Matrix<T> db = random_matrix<T>(70001, 5, 71);
  const gpuml::kernels::KnnDatabase<T> resident(*device, db);
  struct Search {
    Eigen::Index m;
    int k;
  };
  for (const Search s : {Search{37, 40}, Search{300, 5}, Search{11, 100}, Search{37, 40}, Search{5, 64}}) {
    SCOPED_TRACE("m=" + std::to_string(s.m) + " k=" + std::to_string(s.k));
    const Matrix<T> q = random_matrix<T>(s.m, 5, 72 + s.m + s.k);
    const auto got = gpuml::kernels::knn_search<T>(*device, db, q, s.k, Metric::sqeuclidean, &resident);
    const auto fresh = gpuml::kernels::knn_search<T>(*device, db, q, s.k, Metric::sqeuclidean);
    EXPECT_EQ(got.indices, fresh.indices);
    EXPECT_EQ(got.distances, fresh.distances);
    expect_matches_host<T>(got, gpuml::host::knn_search<T>(db, q, s.k, Metric::sqeuclidean), Metric::sqeuclidean);
  }
}

TYPED_TEST(KnnKernel, CosineOfZeroVectorIsOne) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  Matrix<T> db = random_matrix<T>(70, 5, 41);
  db.row(3).setZero();
  Matrix<T> q = random_matrix<T>(4, 5, 42);
  q.row(1).setZero();
  const auto got = gpuml::kernels::knn_search<T>(*device, db, q, 70, Metric::cosine);
  for (int c = 0; c < 70; ++c) EXPECT_EQ(got.distances(1, c), T(1));
  for (int c = 0; c < 70; ++c) EXPECT_EQ(got.indices(1, c), c);  // all ties: index order
  expect_matches_reference<T>(got, db, q, 70, Metric::cosine);
}

TYPED_TEST(KnnKernel, StridedViews) {
  using T = TypeParam;
  REQUIRE_DEVICE();
  const Matrix<T> big = random_matrix<T>(400, 30, 51);
  const MatrixView<T> db = big.block(10, 3, 350, 17), q = big.block(0, 5, 40, 17);
  for (Metric m : {Metric::euclidean, Metric::manhattan}) {
    const auto got = gpuml::kernels::knn_search<T>(*device, db, q, 12, m);
    expect_matches_reference<T>(got, db, q, 12, m);
    expect_matches_host<T>(got, gpuml::host::knn_search<T>(db, q, 12, m), m);
  }
}

TEST(KnnKernelLarge, DatabaseLargerThanOneBinding) {
  REQUIRE_DEVICE();
  const std::uint64_t row_bytes = 128 * sizeof(float);
  const auto rows = static_cast<Eigen::Index>(std::min<std::uint64_t>(device->max_buffer_bytes() / row_bytes + 7001, 2'000'000));
  if (rows * row_bytes <= device->max_buffer_bytes()) GTEST_SKIP() << "the device's bindings are too large to test";
  const Matrix<float> db = random_matrix<float>(rows, 128, 61), q = random_matrix<float>(3, 128, 62);
  // The same query rows copied at both ends of the database: each query's first two neighbours cross blocks.
  Matrix<float> dbx = db;
  dbx.row(5) = q.row(0);
  dbx.row(rows - 3) = q.row(0);
  for (Metric m : {Metric::euclidean, Metric::inner_product}) {
    const auto got = gpuml::kernels::knn_search<float>(*device, dbx, q, 5, m);
    expect_matches_host<float>(got, gpuml::host::knn_search<float>(dbx, q, 5, m), m);
    if (m == Metric::euclidean) {
      EXPECT_EQ(got.indices(0, 0), 5);
      EXPECT_EQ(got.indices(0, 1), rows - 3);
      EXPECT_EQ(got.distances(0, 1), 0.0f);
    }
  }
}

TEST(KnnKernelInput, RejectsBadInput) {
  REQUIRE_DEVICE();
  const Matrix<float> db = random_matrix<float>(50, 4, 71), q = random_matrix<float>(3, 4, 72);
  const Matrix<float> q5 = random_matrix<float>(3, 5, 73), empty(0, 4);
  EXPECT_THROW(gpuml::kernels::knn_search<float>(*device, db, q, 0, Metric::euclidean), gpuml::invalid_input);
  EXPECT_THROW(gpuml::kernels::knn_search<float>(*device, db, q, 51, Metric::euclidean), gpuml::invalid_input);
  EXPECT_THROW(gpuml::kernels::knn_search<float>(*device, db, q5, 2, Metric::euclidean), gpuml::invalid_input);
  EXPECT_THROW(gpuml::kernels::knn_search<float>(*device, empty, q, 1, Metric::euclidean), gpuml::invalid_input);
  // No queries: an empty result of the right shape.
  const auto none = gpuml::kernels::knn_search<float>(*device, db, Matrix<float>(0, 4), 3, Metric::cosine);
  EXPECT_EQ(none.indices.rows(), 0);
  EXPECT_EQ(none.indices.cols(), 3);
  // k above the kernel's limit: unsupported on the device, while the estimator falls back to the host engine.
  constexpr int kmax = static_cast<int>(gpuml::kernels::kKnnMaxK);
  const Matrix<float> wide = random_matrix<float>(kmax + 5, 2, 74);
  EXPECT_THROW(gpuml::kernels::knn_search<float>(*device, wide, q.leftCols(2), kmax + 1, Metric::euclidean),
               gpuml::unsupported);
  const auto backend = gpuml::Backend::on(std::shared_ptr<gpuml::vulkan::Device>(std::shared_ptr<void>(), device));
  const auto via_estimator =
      gpuml::detail::run_knn<float>(backend, wide, q.leftCols(2), kmax + 1, Metric::euclidean);
  EXPECT_EQ(via_estimator.indices, gpuml::host::knn_search<float>(wide, q.leftCols(2), kmax + 1, Metric::euclidean).indices);
}

}  // namespace
