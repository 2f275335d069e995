// k-means as a TunableKernel: a representative problem per shape class, candidate tiles per device class, and a
// bench that times LloydEngine's E-step (the fused kernel, the reduction of the partial sums and their read-back:
// one Lloyd iteration but the host's k x d averaging).
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/kernels/kmeans.hpp>
#include <gpuml/tuning/tunable.hpp>

#include <algorithm>
#include <chrono>
#include <set>
#include <tuple>

namespace gpuml::tuning {

/// LloydEngine passes KMeansTileParams::subgroup_size to its pipeline, so pinned sizes are candidates too.
inline constexpr bool kKMeansEnginePinsSubgroupSize = true;

struct KMeansShape {
  std::uint32_t k = 0, d = 0;
};

/// The problem each shape class is tuned on; the first is the seed workload's shape.
inline KMeansShape kmeans_representative(const std::string& shape) {
  if (shape == "d<=32,k<=128") return {127, 14};
  if (shape == "d<=32,k>128") return {512, 16};
  if (shape == "d>32,k<=128") return {64, 64};
  if (shape == "d>32,k>128") return {256, 64};
  throw invalid_input("unknown k-means shape class '" + shape + "'");
}

inline std::vector<std::string> kmeans_shape_classes() { return {"d<=32,k<=128", "d<=32,k>128", "d>32,k<=128", "d>32,k>128"}; }

/// Candidate tiles for a shape on a device, the catalogue's first. Tiles that would run the same kernel on the
/// representative problem (k and d clamp the register and feature tiles) are tried once.
inline std::vector<Params> kmeans_candidates(const vulkan::DeviceInfo& device, const std::string& shape) {
  const KMeansShape s = kmeans_representative(shape);
  std::vector<KMeansTileParams> tiles{kmeans_catalogue_tile(device)};
  const std::uint32_t center_tiles[] = {128, 512};  // 512: all of a k = 512 problem's centers in shared memory
  if (device.type == vulkan::DeviceType::cpu) {
    // Lavapipe: small register tiles only (see kCpuMaxRegisterTile), at most 64 values.
    const std::uint32_t small[][3] = {{1, 4, 8}, {2, 4, 8}, {4, 2, 8}, {1, 8, 8}, {2, 8, 4}, {4, 4, 4}};
    for (std::uint32_t threads : {64u, 128u})
      for (auto [spt, kt, ds] : small) tiles.push_back({threads, spt, kt, ds, 128});
  } else {
    const std::uint32_t register_tiles[][2] = {{2, 8}, {2, 16}, {4, 4}, {4, 8}, {4, 16}, {8, 4}, {8, 8}};
    for (std::uint32_t threads : {64u, 128u, 256u})
      for (auto [spt, kt] : register_tiles)
        for (std::uint32_t ds : {16u, 32u})
          for (std::uint32_t ks : center_tiles)
            if (spt * (ds + kt) <= 256 && (ks == 128 || s.k > 128)) tiles.push_back({threads, spt, kt, ds, ks});
  }
  if (kKMeansEnginePinsSubgroupSize && device.subgroup_size_control)
    for (std::uint32_t size = device.min_subgroup_size; size <= device.max_subgroup_size && size > 0; size *= 2) {
      KMeansTileParams pinned = tiles.front();
      pinned.subgroup_size = size;
      tiles.push_back(pinned);
    }
  // The kernel a tile runs on the representative problem: clamped tiles, and whether all centers can be resident.
  std::set<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t, bool, std::uint32_t>> seen;
  std::vector<Params> out;
  for (const auto& t : tiles) {
    const std::uint32_t kt = std::min(t.centers_per_thread, s.k), ds = std::min(t.feature_tile, s.d);
    const bool resident = ds == s.d && (s.k + kt - 1) / kt * kt <= t.center_tile;
    if (seen.insert({t.threads, t.samples_per_thread, kt, ds, resident, t.subgroup_size}).second) out.push_back(t.to_params());
  }
  return out;
}

inline RowRange kmeans_rows(const vulkan::DeviceInfo& device, const std::string& shape, const std::string& scalar) {
  const KMeansShape s = kmeans_representative(shape);
  const std::uint64_t row_bytes = std::uint64_t(s.d) * (scalar == "f64" ? 8 : 4);
  if (device.type == vulkan::DeviceType::cpu) return {2048, std::uint64_t(1) << 16};
  // GPUs: the probe scales with the work per row (about 1M rows for the seed shape); the data stays under
  // 512 MiB and a quarter of the device's memory.
  const std::uint64_t probe = std::max<std::uint64_t>(std::uint64_t(1) << 16, (std::uint64_t(1) << 20) * 14 * 127 / (std::uint64_t(s.k) * s.d));
  std::uint64_t max_bytes = std::uint64_t(512) << 20;
  if (device.device_local_bytes) max_bytes = std::min(max_bytes, device.device_local_bytes / 4);
  return {probe, std::max(probe, max_bytes / row_bytes)};
}

/// Blobs around k centers (the values matter little: every E-step does the same work).
template <class T>
Matrix<T> kmeans_bench_data(std::uint64_t n, KMeansShape s) {
  auto uniform = [](std::uint64_t i) {  // SplitMix64 of the element's index, in [-1, 1)
    std::uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-52 - 1.0;
  };
  Matrix<T> X(static_cast<Eigen::Index>(n), s.d);
  parallel_chunks(static_cast<std::int64_t>(n), 1 << 15, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      for (std::uint32_t j = 0; j < s.d; ++j) {
        const std::uint64_t center = std::uint64_t(i % s.k) * s.d + j;
        X(i, j) = static_cast<T>(10.0 * uniform(~center) + uniform(std::uint64_t(i) * s.d + j));
      }
  });
  return X;
}

template <class T>
class KMeansBench final : public ShapeBench {
 public:
  KMeansBench(vulkan::Device& device, KMeansShape shape, std::uint64_t rows)
      : device_(device), shape_(shape), X_(kmeans_bench_data<T>(std::max<std::uint64_t>(rows, shape.k), shape)),
        w_(Vector<T>::Ones(X_.rows())), C_(X_.topRows(shape.k)) {}

  std::string problem() const override {
    return "n=" + std::to_string(X_.rows()) + " d=" + std::to_string(shape_.d) + " k=" + std::to_string(shape_.k) +
           " " + scalar_name<T>();
  }

  double time_ms(const Params& params, int warmups, int reps) override {
    const auto tile = KMeansTileParams::from_params(params);
    if (!tile) throw invalid_input("not a k-means tile");
    kernels::LloydEngine<T> engine(device_, X_, w_.data(), shape_.k, KMeansEStep::plain, nullptr, *tile);
    engine.reset_labels();
    algorithms::ClusterSums sums;
    for (int i = 0; i < warmups; ++i) engine.e_step(C_, sums);
    std::vector<double> ms;
    for (int i = 0; i < std::max(reps, 1); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      engine.e_step(C_, sums);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

 private:
  vulkan::Device& device_;
  KMeansShape shape_;
  Matrix<T> X_;
  Vector<T> w_;
  Matrix<T> C_;
};

inline TunableKernel kmeans_tunable() {
  TunableKernel t;
  describe_tiles<KMeansTileTraits>(t, kmeans_representative);
  t.shapes = kmeans_shape_classes();
  t.candidates = kmeans_candidates;
  t.rows = kmeans_rows;
  t.bench = [](vulkan::Device& device, const std::string& shape, const std::string& scalar,
               std::uint64_t rows) -> std::unique_ptr<ShapeBench> {
    const KMeansShape s = kmeans_representative(shape);
    if (scalar == "f64") return std::make_unique<KMeansBench<double>>(device, s, rows);
    return std::make_unique<KMeansBench<float>>(device, s, rows);
  };
  return t;
}

}  // namespace gpuml::tuning
