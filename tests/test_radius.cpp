// Radius neighbours on a Vulkan device against the host engine, bit for bit (sets, order, distances), on data with
// pairs at exactly the radius (integer grids scaled by a power of two, duplicated rows), float and double, every
// radius metric, sorted or not, X=None, the DBSCAN graph, batches, a device memory limit that streams the database,
// and a database sharded over the device opened twice. The host engine itself against an integer reference.
#include "support.hpp"

#include <gpuml/estimators/neighbors.hpp>
#include <gpuml/kernels/radius.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using gpuml::Matrix;
using gpuml::Metric;
using gpuml::RadiusResult;
using gpuml::testing::backends;
using gpuml::testing::random_matrix;
using gpuml::testing::test_seed;

const std::vector<Metric> kRadiusMetrics = {Metric::euclidean, Metric::sqeuclidean, Metric::manhattan, Metric::chebyshev,
                                            Metric::cosine};

/// Integers in [-span, span] times 2^-3 (exact in float and double, so many pairs tie at exactly one distance),
/// with every `dup`-th row a copy of an earlier one.
template <class T>
Matrix<T> grid(Eigen::Index rows, Eigen::Index cols, std::uint64_t salt, int span = 4, int dup = 7) {
  std::mt19937_64 rng(test_seed() * 0x9E3779B97F4A7C15ull + salt);
  std::uniform_int_distribution<int> v(-span, span);
  Matrix<T> X(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index f = 0; f < cols; ++f) X(i, f) = T(v(rng)) / T(8);
  for (Eigen::Index i = dup; i < rows; i += dup) X.row(i) = X.row(std::uniform_int_distribution<Eigen::Index>(0, i - 1)(rng));
  return X;
}

template <class T>
void expect_same(const RadiusResult<T>& got, const RadiusResult<T>& want, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.offsets, want.offsets);
  ASSERT_EQ(got.indices, want.indices);
  ASSERT_EQ(got.distances.size(), want.distances.size());
  for (std::size_t e = 0; e < want.distances.size(); ++e)
    ASSERT_EQ(std::memcmp(&got.distances[e], &want.distances[e], sizeof(T)), 0)
        << "pair " << e << ": " << got.distances[e] << " vs " << want.distances[e];
}

/// Radii at which pairs lie exactly: the host's distances of a few pairs, and one between.
template <class T>
std::vector<double> exact_radii(const Matrix<T>& db, const Matrix<T>& q, Metric metric) {
  std::vector<double> radii;
  for (Eigen::Index j : {Eigen::Index(3), Eigen::Index(11)}) {
    const T qn = gpuml::algorithms::dot_fixed(q.row(0).data(), q.row(0).data(), q.cols());
    const T xn = gpuml::algorithms::dot_fixed(db.row(j).data(), db.row(j).data(), db.cols());
    radii.push_back(double(gpuml::algorithms::radius_distance(q.row(0).data(), db.row(j).data(), db.cols(), metric, qn, xn)));
  }
  radii.push_back(0.5 * (radii[0] + radii[1]));
  return radii;
}

template <class T>
class Radius : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Radius, Scalars);

// The device kernel against host::radius_search for every metric, sort on and off, X=None, several batch sizes;
// the band must have caught uncertain pairs on this tie-rich data (else the test could not fail for them).
TYPED_TEST(Radius, DeviceKernelIsTheHostEngine) {
  using T = TypeParam;
  for (const auto& b : backends()) {
    if (!b.backend.is_vulkan()) continue;
    auto& device = *b.backend.device();
    if (std::is_same_v<T, double> && !device.info().float64) continue;
    for (Eigen::Index d : {Eigen::Index(3), Eigen::Index(19)}) {
      const Matrix<T> db = grid<T>(301, d, 1 + d), q = grid<T>(77, d, 2 + d);
      const gpuml::kernels::KnnDatabase<T> resident(device, db);
      for (Metric metric : kRadiusMetrics) {
        std::uint64_t uncertain = 0, certain = 0;
        const std::vector<double> radii = exact_radii<T>(db, q, metric);
        // (radius, sort, queries per batch: 0 as many as fit), at a radius with pairs exactly on it and between.
        struct Case {
          double radius;
          bool sort;
          std::uint64_t batch;
        };
        for (const Case& c : {Case{radii[0], false, 0}, Case{radii[0], true, 7}, Case{radii[2], true, 0}}) {
          const std::string what = std::string(gpuml::metric_name(metric)) + " d=" + std::to_string(d) + " r=" +
                                   std::to_string(c.radius) + (c.sort ? " sorted" : "") + " batch " + std::to_string(c.batch);
          gpuml::kernels::RadiusSearchStats stats;
          gpuml::kernels::RadiusSearchOptions options;
          options.sort = c.sort;
          options.max_batch_queries = c.batch;
          expect_same<T>(gpuml::kernels::radius_search<T>(device, db, q, c.radius, metric, &resident, options, &stats),
                         gpuml::host::radius_search<T>(db, q, c.radius, metric, c.sort), what);
          uncertain += stats.uncertain;
          certain += stats.certain;
          if (c.batch == 0 && !c.sort) {
            options.exclude_self = true;
            expect_same<T>(gpuml::kernels::radius_search<T>(device, db, db, c.radius, metric, &resident, options),
                           gpuml::host::radius_search<T>(db, db, c.radius, metric, false, true), what + " X=None");
          }
        }
        EXPECT_GT(uncertain, 0u) << std::string(gpuml::metric_name(metric)) << ": no pair fell in the band at an exact radius";
        EXPECT_GT(certain, 0u) << std::string(gpuml::metric_name(metric));
      }
    }
  }
}

// Continuous data, a radius between pairs, radius 0 (duplicates only) and one beyond every pair; through the
// estimator: radius_neighbors, radius_neighbors_self and radius_graph_self on the device equal the host backend's.
TYPED_TEST(Radius, EstimatorOnTheDeviceIsTheHostBackend) {
  using T = TypeParam;
  const Eigen::Index d = 6;
  Matrix<T> db = random_matrix<T>(257, d, 11);
  db.row(100) = db.row(17);  // a duplicate: at distance 0
  const Matrix<T> q = random_matrix<T>(41, d, 12);
  for (const auto& b : backends()) {
    if (!b.backend.is_vulkan()) continue;
    for (Metric metric : kRadiusMetrics) {
      gpuml::NearestNeighbors<T> host({5, std::string(gpuml::metric_name(metric))}, gpuml::Backend::host()), device({5, std::string(gpuml::metric_name(metric))}, b.backend);
      host.fit(db);
      device.fit(db);
      for (double radius : {0.0, metric == Metric::cosine ? 0.3 : 0.9, 1e30}) {
        const std::string what = std::string(gpuml::metric_name(metric)) + " r=" + std::to_string(radius);
        for (bool sort : {false, true}) {
          expect_same<T>(device.radius_neighbors(q, radius, sort), host.radius_neighbors(q, radius, sort), what);
          expect_same<T>(device.radius_neighbors_self(radius, sort), host.radius_neighbors_self(radius, sort), what + " X=None");
        }
        const auto graph = device.radius_graph_self(radius);
        EXPECT_TRUE(graph.distances.empty());
        auto want = gpuml::host::radius_search<T>(db, db, radius, metric, false);
        want.distances.clear();
        expect_same<T>(graph, want, what + " graph");
      }
    }
  }
}

// A device memory limit far below the data: the database is not kept resident, is streamed in several blocks, the
// queries come in several batches, and the result is still the host engine's.
TYPED_TEST(Radius, TinyDeviceMemoryStreamsTheDatabase) {
  using T = TypeParam;
  const Matrix<T> db = grid<T>(603, 5, 21), q = grid<T>(150, 5, 22);
  for (const auto& b : backends()) {
    if (!b.backend.is_vulkan()) continue;
    auto& device = *b.backend.device();
    if (std::is_same_v<T, double> && !device.info().float64) continue;
    gpuml::ScopedConfig small(gpuml::config().set_device_memory_limit(32 << 10));
    for (Metric metric : {Metric::euclidean, Metric::manhattan, Metric::cosine}) {
      const double radius = exact_radii<T>(db, q, metric)[0];
      gpuml::kernels::RadiusSearchStats stats;
      gpuml::kernels::RadiusSearchOptions options;
      options.sort = true;
      expect_same<T>(gpuml::kernels::radius_search<T>(device, db, q, radius, metric, nullptr, options, &stats),
                     gpuml::host::radius_search<T>(db, q, radius, metric, true), std::string(gpuml::metric_name(metric)) + " streamed");
      EXPECT_TRUE(stats.streamed);
      EXPECT_GT(stats.database_blocks, 1u);
      EXPECT_GT(stats.batches, stats.database_blocks);
      gpuml::NearestNeighbors<T> nn({5, std::string(gpuml::metric_name(metric))}, b.backend);
      nn.fit(db);
      expect_same<T>(nn.radius_neighbors_self(radius, false), gpuml::host::radius_search<T>(db, db, radius, metric, false, true),
                     std::string(gpuml::metric_name(metric)) + " estimator, streamed");
    }
  }
}

// The database sharded over the device opened twice: one device's lists, sorted or not, X=None and the graph.
TYPED_TEST(Radius, ShardedDatabaseGivesOneDevicesLists) {
  using T = TypeParam;
  const Matrix<T> db = grid<T>(409, 4, 31), q = grid<T>(53, 4, 32);
  for (const auto& b : backends()) {
    if (!b.backend.is_vulkan()) continue;
    const std::string index = std::to_string(b.backend.device()->info().index);
    const gpuml::Backend sharded = gpuml::select_backend(index + "," + index);
    for (Metric metric : kRadiusMetrics) {
      const double radius = exact_radii<T>(db, q, metric)[1];
      gpuml::NearestNeighbors<T> one({5, std::string(gpuml::metric_name(metric))}, b.backend), many({5, std::string(gpuml::metric_name(metric))}, sharded);
      one.fit(db);
      many.fit(db);
      for (bool sort : {false, true}) {
        expect_same<T>(many.radius_neighbors(q, radius, sort), one.radius_neighbors(q, radius, sort), std::string(gpuml::metric_name(metric)));
        expect_same<T>(many.radius_neighbors_self(radius, sort), one.radius_neighbors_self(radius, sort),
                       std::string(gpuml::metric_name(metric)) + " X=None");
      }
      expect_same<T>(many.radius_graph_self(radius), one.radius_graph_self(radius), std::string(gpuml::metric_name(metric)) + " graph");
    }
  }
}

/// X's rows sorted (stably) by feature f.
template <class T>
Matrix<T> sorted_by(const Matrix<T>& X, Eigen::Index f) {
  std::vector<Eigen::Index> order(std::size_t(X.rows()));
  for (Eigen::Index i = 0; i < X.rows(); ++i) order[std::size_t(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](Eigen::Index a, Eigen::Index b) { return X(a, f) < X(b, f); });
  Matrix<T> S(X.rows(), X.cols());
  for (Eigen::Index i = 0; i < X.rows(); ++i) S.row(i) = X.row(order[std::size_t(i)]);
  return S;
}

// Rows sorted by one feature: each query scans only its window of rows, on the host and on the device (whole
// batches, batches of 7, the sharded estimator), and the lists are those of the whole scan, on grid data where many
// pairs differ by exactly the radius in the sorted feature alone. Unsorted rows are refused.
TYPED_TEST(Radius, SortedRowsScanTheirWindowAndGiveTheWholeScan) {
  using T = TypeParam;
  const Eigen::Index d = 3, f = 1;
  const Matrix<T> db = sorted_by<T>(grid<T>(389, d, 51, 6), f), q = sorted_by<T>(grid<T>(61, d, 52, 6), f);
  for (Metric metric : kRadiusMetrics) {
    for (double radius : {0.25, 0.375, exact_radii<T>(db, q, metric)[2]}) {
      const std::string what = std::string(gpuml::metric_name(metric)) + " r=" + std::to_string(radius);
      const auto whole = gpuml::host::radius_search<T>(db, q, radius, metric, false);
      expect_same<T>(gpuml::host::radius_search<T>(db, q, radius, metric, false, false, f), whole, what + " host");
      const auto whole_self = gpuml::host::radius_search<T>(db, db, radius, metric, false);
      for (const auto& b : backends()) {
        if (!b.backend.is_vulkan()) continue;
        auto& device = *b.backend.device();
        if (std::is_same_v<T, double> && !device.info().float64) continue;
        for (std::uint64_t batch : {std::uint64_t(0), std::uint64_t(7)}) {
          gpuml::kernels::RadiusSearchOptions options;
          options.sorted_feature = f;
          options.max_batch_queries = batch;
          expect_same<T>(gpuml::kernels::radius_search<T>(device, db, q, radius, metric, nullptr, options), whole,
                         what + " device, batch " + std::to_string(batch));
        }
        const std::string index = std::to_string(device.info().index);
        gpuml::NearestNeighbors<T> nn({5, std::string(gpuml::metric_name(metric))}, gpuml::select_backend(index + "," + index));
        nn.fit(db);
        auto want = whole_self;
        want.distances.clear();
        expect_same<T>(nn.radius_graph_self(radius, f), want, what + " sharded graph");
      }
    }
  }
  const Matrix<T> unsorted = grid<T>(50, d, 53);
  EXPECT_THROW(gpuml::host::radius_search<T>(unsorted, unsorted, 0.5, Metric::euclidean, false, false, 0), gpuml::invalid_input);
  EXPECT_THROW(gpuml::host::radius_search<T>(db, db, 0.5, Metric::euclidean, false, false, d), gpuml::invalid_input);
}

// The DBSCAN path: rows sorted by their widest feature (a stable radix sort: negative values, -0 and +0, ties in
// index order), the graph over the sorted rows, mapped back: the graph over the original rows.
TYPED_TEST(Radius, GraphOverSortedRowsMapsBackToTheOriginalGraph) {
  using T = TypeParam;
  Matrix<T> X = grid<T>(233, 3, 61, 5);
  X.col(2) *= T(3);  // the widest feature
  X(5, 2) = T(-0.0);
  const Eigen::Index f = gpuml::algorithms::widest_feature<T>(X);
  ASSERT_EQ(f, 2);
  const std::vector<std::int64_t> order = gpuml::algorithms::rows_sorted_by<T>(X, f);
  Matrix<T> S(X.rows(), X.cols());
  for (Eigen::Index s = 0; s < X.rows(); ++s) {
    S.row(s) = X.row(order[std::size_t(s)]);
    if (s > 0) {
      ASSERT_LE(S(s - 1, f), S(s, f));
      if (S(s - 1, f) == S(s, f)) {
        ASSERT_LT(order[std::size_t(s) - 1], order[std::size_t(s)]) << "not stable at " << s;
      }
    }
  }
  for (Metric metric : {Metric::euclidean, Metric::chebyshev}) {
    auto want = gpuml::host::radius_search<T>(X, X, 0.5, metric, false);
    want.distances.clear();
    expect_same<T>(gpuml::algorithms::unsort_graph(gpuml::host::radius_search<T>(S, S, 0.5, metric, false, false, f), order), want,
                   gpuml::metric_name(metric));
  }
}

// The threaded radix sort and windows on many chunks: the order std::stable_sort gives (negative values, -0 and +0
// together, many equal values in index order), and each window the first row at or above q - reach and the first
// beyond q + reach, as a plain sweep finds them.
TYPED_TEST(Radius, SortAndWindowsOverManyChunksAreThePlainOnes) {
  using T = TypeParam;
  const Eigen::Index n = 200003;
  std::mt19937_64 rng(test_seed() + 91);
  std::uniform_int_distribution<int> v(-3000, 3000);
  Matrix<T> X(n, 2);
  for (Eigen::Index i = 0; i < n; ++i) {
    X(i, 0) = T(v(rng)) / T(7);
    X(i, 1) = T(i % 5 == 0 ? -0.0 : 0.0);
  }
  for (const Eigen::Index f : {Eigen::Index(0), Eigen::Index(1)}) {
    std::vector<std::int64_t> want(std::size_t(n), 0);
    for (Eigen::Index i = 0; i < n; ++i) want[std::size_t(i)] = i;
    std::stable_sort(want.begin(), want.end(), [&](std::int64_t a, std::int64_t b) { return X(a, f) < X(b, f); });
    ASSERT_EQ(gpuml::algorithms::rows_sorted_by<T>(X, f), want) << "feature " << f;
  }
  const Matrix<T> S = sorted_by<T>(X, 0);
  const double reach = 1.5;
  const auto w = gpuml::algorithms::sorted_windows<T>(S, S, 0, reach);
  std::int64_t lo = 0, hi = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    const double q = double(S(i, 0));
    while (lo < n && double(S(lo, 0)) < q - reach) ++lo;
    while (hi < n && double(S(hi, 0)) <= q + reach) ++hi;
    ASSERT_EQ(w[std::size_t(2 * i)], lo) << i;
    ASSERT_EQ(w[std::size_t(2 * i + 1)], hi) << i;
  }
  Matrix<T> unsorted = S;
  std::swap(unsorted(0, 0), unsorted(n - 1, 0));  // the smallest and largest values: unsorted at both ends
  EXPECT_THROW(gpuml::algorithms::sorted_windows<T>(unsorted, S, 0, reach), gpuml::invalid_input);
  EXPECT_THROW(gpuml::algorithms::sorted_windows<T>(S, unsorted, 0, reach), gpuml::invalid_input);
  EXPECT_EQ(gpuml::algorithms::widest_feature<T>(X), 0);
  double largest = 0;
  for (Eigen::Index i = 0; i < n; ++i) largest = std::max(largest, std::abs(double(X(i, 0))));
  EXPECT_EQ(gpuml::algorithms::feature_scale<T>(X, S, 0), largest);
}

// The graph DBSCAN keeps on the device (radius_self_graph): read back here, each row's certain pairs (a row without
// uncertain ones) or its resolved list (a row with them) is the host's neighbourhood as a set, and the counts are
// its sizes; every metric, sorted rows with windows and unsorted, whole batches and batches of 7, at a radius with
// pairs exactly on it (some rows must have been resolved, else the test could not fail for them).
TYPED_TEST(Radius, DeviceSelfGraphHoldsTheHostNeighbourhoods) {
  using T = TypeParam;
  for (const Eigen::Index d : {Eigen::Index(3), Eigen::Index(260)}) {  // 260: several splits per row on CPU devices
  Matrix<T> X = grid<T>(d == 3 ? 283 : 150, d, 71 + d, 5);
  X.col(0) *= T(2);
  const Eigen::Index f = gpuml::algorithms::widest_feature<T>(X);
  const Matrix<T> S = sorted_by<T>(X, f);
  for (const auto& b : backends()) {
    if (!b.backend.is_vulkan()) continue;
    auto& device = *b.backend.device();
    if (std::is_same_v<T, double> && !device.info().float64) continue;
    for (Metric metric : d == 3 ? kRadiusMetrics : std::vector<Metric>{Metric::euclidean, Metric::chebyshev}) {
      std::uint64_t resolved_rows = 0;
      for (const double radius : {exact_radii<T>(S, S, metric)[0], exact_radii<T>(S, S, metric)[2]}) {
        const auto want = gpuml::host::radius_search<T>(S, S, radius, metric, false);
        for (const bool sorted : {true, false}) {
          for (std::uint64_t batch : {std::uint64_t(0), std::uint64_t(7)}) {
            const std::string what = std::string(gpuml::metric_name(metric)) + " r=" + std::to_string(radius) +
                                     (sorted ? " sorted" : "") + " batch " + std::to_string(batch);
            SCOPED_TRACE(what);
            gpuml::kernels::RadiusSearchOptions options;
            options.sorted_feature = sorted && metric != Metric::cosine ? f : -1;
            options.max_batch_queries = batch;
            const auto g = gpuml::kernels::radius_self_graph<T>(device, S, radius, metric, options);
            const std::size_t n = std::size_t(S.rows());
            ASSERT_EQ(g.rows, n);
            std::vector<std::uint32_t> offsets(n + 1), found(std::max<std::size_t>(g.pairs, 1));
            gpuml::vulkan::download(device, g.row_offsets, 0, offsets.data(), offsets.size() * 4);
            gpuml::vulkan::download(device, g.found, 0, found.data(), g.pairs * 4);
            ASSERT_EQ(offsets[n], g.pairs);
            std::size_t next_resolved = 0;
            resolved_rows += g.resolved_rows.size();
            for (std::size_t i = 0; i < n; ++i) {
              const std::vector<std::int64_t> host(want.indices.begin() + want.offsets[i], want.indices.begin() + want.offsets[i + 1]);
              ASSERT_EQ(g.counts[i], std::int64_t(host.size())) << "row " << i;
              std::vector<std::int64_t> got;
              if (next_resolved < g.resolved_rows.size() && g.resolved_rows[next_resolved] == std::int64_t(i)) {
                got.assign(g.resolved_indices.begin() + g.resolved_offsets[next_resolved],
                           g.resolved_indices.begin() + g.resolved_offsets[next_resolved + 1]);
                ++next_resolved;
              } else {
                for (std::uint32_t e = offsets[i]; e < offsets[i + 1]; ++e) {
                  ASSERT_EQ(found[e] & gpuml::shader_interface::radius::kUncertain, 0u) << "row " << i << " not resolved";
                  got.push_back(found[e]);
                }
                std::sort(got.begin(), got.end());
              }
              ASSERT_EQ(got, host) << "row " << i;
            }
            ASSERT_EQ(next_resolved, g.resolved_rows.size());
          }
        }
      }
      EXPECT_GT(resolved_rows, 0u) << gpuml::metric_name(metric) << ": no row had pairs at the radius's rounding";
    }
  }
  }
}

// An independent reference: on the integer grid, squared euclidean, manhattan and chebyshev distances are exact
// in T, so the sets at an exact radius are those of integer arithmetic, on every backend.
TYPED_TEST(Radius, SetsAtAnExactRadiusAreTheIntegerReference) {
  using T = TypeParam;
  const Eigen::Index d = 7;
  const Matrix<T> db = grid<T>(211, d, 41), q = grid<T>(29, d, 42);
  for (const auto& b : backends()) {
    for (Metric metric : {Metric::euclidean, Metric::sqeuclidean, Metric::manhattan, Metric::chebyshev}) {
      gpuml::NearestNeighbors<T> nn({5, std::string(gpuml::metric_name(metric))}, b.backend);
      nn.fit(db);
      // In units of 1/8 (1/64 squared): the integer value of a pair.
      auto units = [&](Eigen::Index i, Eigen::Index j) {
        long long s = 0;
        for (Eigen::Index f = 0; f < d; ++f) {
          const long long e = std::llround(double(q(i, f)) * 8) - std::llround(double(db(j, f)) * 8);
          if (metric == Metric::manhattan) s += std::llabs(e);
          else if (metric == Metric::chebyshev) s = std::max(s, std::llabs(e));
          else s += e * e;
        }
        return s;
      };
      const long long at = units(0, 5);  // a pair exactly at the radius
      const double radius = metric == Metric::euclidean ? std::sqrt(double(at)) / 8
                            : metric == Metric::sqeuclidean ? double(at) / 64 : double(at) / 8;
      // Euclidean: the radius is sqrt rounded, so compare on the squared units only where the root is exact.
      if (metric == Metric::euclidean && std::sqrt(double(at)) != std::floor(std::sqrt(double(at)))) continue;
      const auto got = nn.radius_neighbors(q, radius, false);
      std::size_t e = 0;
      for (Eigen::Index i = 0; i < q.rows(); ++i) {
        std::vector<std::int64_t> want;
        for (Eigen::Index j = 0; j < db.rows(); ++j)
          if (units(i, j) <= at) want.push_back(j);
        const std::vector<std::int64_t> row(got.indices.begin() + got.offsets[i], got.indices.begin() + got.offsets[i + 1]);
        ASSERT_EQ(row, want) << b.name << " " << std::string(gpuml::metric_name(metric)) << " query " << i;
        e += want.size();
      }
      EXPECT_GT(e, std::size_t(q.rows()));  // some neighbours beyond the exact pair itself
    }
  }
}

TYPED_TEST(Radius, BadInputIsRefused) {
  using T = TypeParam;
  const Matrix<T> db = random_matrix<T>(20, 3, 51);
  for (const auto& b : backends()) {
    gpuml::NearestNeighbors<T> ip({5, "inner_product"}, b.backend);
    ip.fit(db);
    EXPECT_THROW(ip.radius_neighbors(db, 0.5), gpuml::invalid_input);
    EXPECT_THROW(ip.radius_graph_self(0.5), gpuml::invalid_input);
    gpuml::NearestNeighbors<T> nn({5, "euclidean"}, b.backend);
    nn.fit(db);
    EXPECT_THROW(nn.radius_graph_self(-1.0), gpuml::invalid_input);
    EXPECT_THROW(nn.radius_neighbors(random_matrix<T>(4, 2, 52), 0.5), gpuml::invalid_input);
  }
}

}  // namespace
