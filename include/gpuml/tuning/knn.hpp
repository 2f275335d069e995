// k-NN search as a TunableKernel: a representative problem per shape class (the benchmark shapes on GPUs; on CPU
// devices, searches sized like small real ones, see knn_rows), candidate tiles per device class, and a bench that
// times knn_search against a database kept on the device (the select and merge kernels; GPU timestamps where the
// queue has them).
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/kernels/knn.hpp>
#include <gpuml/tuning/tunable.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

namespace gpuml::tuning {

using KnnTraits = kernels::KnnTileTraits;

struct KnnShape {
  std::uint32_t k = 0, d = 0;
};

/// The problem each shape class is tuned on: gpuml's k-NN benchmark shapes (d = 128, k = 10 and d = 16,
/// k = 100) and their crossings.
inline KnnShape knn_representative(const std::string& shape) {
  if (shape == "d<=32,k<=32") return {10, 16};
  if (shape == "d<=32,k>32") return {100, 16};
  if (shape == "d>32,k<=32") return {10, 128};
  if (shape == "d>32,k>32") return {100, 128};
  throw invalid_input("unknown k-NN shape class '" + shape + "'");
}

inline std::vector<std::string> knn_shape_classes() { return {"d<=32,k<=32", "d<=32,k>32", "d>32,k<=32", "d>32,k>32"}; }

/// Queries per search: the benchmark's on GPUs (2k at d = 128, 1k at d = 16); 100 on CPU devices, a count that is
/// not a multiple of any candidate's query tile (64 or 128: both fill 100 of 128 slots, as a real search of an odd
/// count leaves part of its last tile idle) and small enough for the tuner's time budget (see knn_rows).
inline std::uint64_t knn_queries(const vulkan::DeviceInfo& device, KnnShape s) {
  if (device.type == vulkan::DeviceType::cpu) return 100;
  return s.d > 32 ? 2048 : 1024;
}

/// Candidate tiles, the catalogue's first. GPUs: tiles of 64 to 128 queries x 64 to 128 rows (and 64 x 64 for
/// float64), two feature steps, four target workgroup counts (searches with candidate lists pay no warm-up per
/// split, and take many). CPU devices:
/// a handful of small tiles (llvmpipe's loop limit; groups matter little there, the kernel caps the splits).
inline std::vector<Params> knn_candidates(const vulkan::DeviceInfo& device, const std::string& shape) {
  knn_representative(shape);  // checks the name
  using kernels::KnnTileParams;
  // The float32 catalogue tile leads (the candidate list does not depend on the scalar); float64's follows.
  std::vector<KnnTileParams> tiles{KnnTraits::catalogue<float>(device), KnnTraits::catalogue<double>(device)};
  if (device.type == vulkan::DeviceType::cpu) {
    for (KnnTileParams t : {KnnTileParams{8, 8, 8, 8, 16}, KnnTileParams{16, 16, 4, 4, 8},
                            KnnTileParams{16, 8, 8, 8, 8}, KnnTileParams{8, 16, 8, 8, 8}})
      tiles.push_back(t);
  } else {
    const std::uint32_t shapes[][4] = {{16, 16, 8, 8}, {16, 16, 4, 8}, {16, 16, 4, 4}, {16, 8, 8, 8}, {8, 16, 8, 8}};
    for (auto [wx, wy, tm, tn] : shapes)
      for (std::uint32_t bk : {8u, 16u})
        for (std::uint32_t groups : {1024u, 2048u, 4096u, 8192u}) tiles.push_back({wx, wy, tm, tn, bk, groups});
    tiles.push_back({8, 8, 8, 8, 16});
  }
  std::set<Params> seen;
  std::vector<Params> out;
  for (const auto& t : tiles)
    if (seen.insert(KnnTraits::encode(t)).second) out.push_back(KnnTraits::encode(t));
  return out;
}

/// Database rows: fixed at the benchmark's sizes on GPUs (1M at d = 128, 2M at d = 16), within 512 MiB and a
/// quarter of the device's memory.
///
/// CPU devices: 32768 rows at d <= 32 and 16384 at d > 32, fixed (no scaling to a call time). On a CPU device the
/// kernel cuts the database into splits of at most 32 row tiles (2048 or 4096 rows; llvmpipe's loop limit) and runs
/// one workgroup per query tile and split, one per core at a time. A real search (say 100k x 16, 100 queries) has
/// dozens of workgroups, each paying a heap warm-up of about k insertions per query, and the candidates with
/// 128-row tiles (fewer, longer splits) are the fastest at large k. A problem of a few thousand rows has one or two
/// splits: there the catalogue's 128 x 128 tile ran 64 queries as one workgroup on one core while 64-row tiles ran
/// two, and their winners, two to three times as fast on such problems, were up to 30% slower on real searches. At
/// these sizes, with 100 queries, the catalogue tile has 16 workgroups at d <= 32, k <= 32, 8 at d <= 32, k > 32,
/// 8 at d > 32, k <= 32 and 4 at d > 32, k > 32 (the smaller tiles more), so the candidates rank as on larger
/// searches; a search takes about 60 to 120 ms on lavapipe with 2 cores, which keeps the four classes within the
/// tuner's default budget. The tuner's margin on CPU devices (TuneOptions::min_gain) then keeps the catalogue tile
/// unless a candidate is clearly faster.
inline RowRange knn_rows(const vulkan::DeviceInfo& device, const std::string& shape, const std::string& scalar) {
  const KnnShape s = knn_representative(shape);
  if (device.type == vulkan::DeviceType::cpu) {
    const std::uint64_t rows = s.d > 32 ? 16384 : 32768;
    return {rows, rows};
  }
  std::uint64_t max_bytes = std::uint64_t(512) << 20;
  if (device.device_local_bytes) max_bytes = std::min(max_bytes, device.device_local_bytes / 4);
  const std::uint64_t row_bytes = std::uint64_t(s.d + 1) * (scalar == "f64" ? 8 : 4);  // the row and its norm
  const std::uint64_t wanted = s.d > 32 ? std::uint64_t(1) << 20 : std::uint64_t(2) << 20;
  const std::uint64_t rows = std::max<std::uint64_t>(4096, std::min(wanted, max_bytes / row_bytes));
  return {rows, rows};
}

/// Uniform values in [-1, 1) from each element's index and a seed (SplitMix64).
template <class T>
Matrix<T> knn_bench_data(std::uint64_t n, std::uint32_t d, std::uint64_t seed) {
  Matrix<T> X(static_cast<Eigen::Index>(n), d);
  parallel_chunks(static_cast<std::int64_t>(n), 1 << 14, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      for (std::uint32_t j = 0; j < d; ++j) {
        std::uint64_t z = (seed * 0x632BE59BD9B4E019ull + std::uint64_t(i) * d + j + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        X(i, j) = static_cast<T>(static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-52 - 1.0);
      }
  });
  return X;
}

template <class T>
class KnnBench final : public ShapeBench {
 public:
  KnnBench(vulkan::Device& device, KnnShape shape, std::uint64_t rows)
      : device_(device), shape_(shape), X_(knn_bench_data<T>(std::max<std::uint64_t>(rows, shape.k), shape.d, 1)),
        Q_(knn_bench_data<T>(knn_queries(device.info(), shape), shape.d, 2)), database_(device, X_) {}

  std::string problem() const override {
    return "n=" + std::to_string(X_.rows()) + " m=" + std::to_string(Q_.rows()) + " d=" + std::to_string(shape_.d) +
           " k=" + std::to_string(shape_.k) + " " + scalar_name<T>();
  }

  double time_ms(const Params& params, int warmups, int reps) override {
    const auto tile = KnnTraits::decode(params);
    if (!tile) throw invalid_input("not a k-NN tile");
    kernels::KnnSearchOptions options = kernels::KnnSearchOptions::from(config());
    options.policy.tile = *tile;
    auto search = [&] {
      kernels::knn_search<T>(device_, X_, Q_, static_cast<int>(shape_.k), Metric::euclidean, &database_, options, &stats_);
    };
    for (int i = 0; i < warmups; ++i) search();
    std::vector<double> ms;
    for (int i = 0; i < std::max(reps, 1); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      search();
      const double device_ms = stats_.device_ms;  // the GPU's time, without the host's merge
      ms.push_back(device_ms >= 0 ? device_ms
                                  : std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

 private:
  vulkan::Device& device_;
  KnnShape shape_;
  Matrix<T> X_, Q_;
  kernels::KnnDatabase<T> database_;
  kernels::KnnSearchStats stats_;
};

inline TunableKernel knn_tunable() {
  TunableKernel t;
  describe_tiles<KnnTraits>(t, knn_representative);
  t.shapes = knn_shape_classes();
  t.candidates = knn_candidates;
  t.rows = knn_rows;
  t.bench = [](vulkan::Device& device, const std::string& shape, const std::string& scalar,
               std::uint64_t rows) -> std::unique_ptr<ShapeBench> {
    const KnnShape s = knn_representative(shape);
    if (scalar == "f64") return std::make_unique<KnnBench<double>>(device, s, rows);
    return std::make_unique<KnnBench<float>>(device, s, rows);
  };
  return t;
}

}  // namespace gpuml::tuning
