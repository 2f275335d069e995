// Tile policies of the Vulkan k-NN kernel (shaders/knn_select.comp): the tile shape, compile-time tiles, the traits
// the tile-policy system's resolver reads (policy/tile.hpp), and the shader's metric codes.
#pragma once

#include <gpuml/core/config.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/policy/device_class.hpp>
#include <gpuml/policy/limits.hpp>
#include <gpuml/policy/store.hpp>
#include <gpuml/policy/tile.hpp>
#include <gpuml/shaders/knn_select.h>
#include <gpuml/vulkan/instance.hpp>

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuml::kernels {

namespace select_interface = shader_interface::knn_select;

/// The tile shape of the k-NN kernel on one device: a workgroup of wx x wy threads computes (wy*tm) queries x
/// (wx*tn) database rows per tile, tm x tn values per thread (multiples of 4), bk features staged in shared memory
/// per step (shaders/tile_product.glsl). Each query has a queue of wx slots in shared memory. groups: how many
/// workgroups a dispatch aims for (database splits are added until query tiles x splits reaches it; every split
/// pays a warm-up of about k heap insertions per query, so more is not always faster).
struct KnnTileParams {
  std::uint32_t wx, wy, tm, tn, bk, groups = 1024;

  constexpr std::uint32_t block_queries() const { return wy * tm; }
  constexpr std::uint32_t block_rows() const { return wx * tn; }
  /// Staging tiles, query and (two tiles of) row norms, thresholds, queue counts and queues, two flags.
  template <class T>
  constexpr std::uint64_t shared_bytes() const {
    const std::uint64_t bq = block_queries(), bn = block_rows();
    return sizeof(T) * (std::uint64_t(bk) * (bq + 4 + bn + 4) + 2 * bq + 2 * bn) + sizeof(std::uint32_t) * (2 * bq + 2) +
           (sizeof(T) + sizeof(std::uint32_t)) * bq * wx;
  }
  /// Why the device cannot run this tile (empty: it can).
  template <class T>
  std::string misfit(const vulkan::DeviceInfo& d) const {
    if (tm % 4 || tn % 4 || tn > 32 || !wx || !wy || !bk || !groups)
      return "tm and tn must be multiples of 4 (tn at most 32), the rest positive";
    return workgroup_misfit(d, wx, wy, shared_bytes<T>());
  }
  /// Specialisation constants: the tile, the metric (see knn_metric_code), the mode (heaps, candidate lists or a
  /// dense sample: knn_select.h's kMode*) and the loop-limit report (CPU devices, see shaders/common.glsl).
  std::vector<std::uint32_t> constants(std::uint32_t metric_code, std::uint32_t mode = select_interface::kModeHeaps,
                                       bool loop_guard = false) const {
    namespace shader = select_interface;
    return spec_constants(shader::kSpecCount, {{shader::kSpecWX, wx}, {shader::kSpecWY, wy}, {shader::kSpecTM, tm},
                                               {shader::kSpecTN, tn}, {shader::kSpecBK, bk}, {shader::kSpecMetric, metric_code},
                                               {shader::kSpecMode, mode},
                                               {shader::kSpecLoopGuard, loop_guard ? 1u : 0u}});
  }
};

/// The largest k the kernel selects on the device (larger k: the host engine).
inline constexpr std::uint32_t kKnnMaxK = 4096;

/// A fixed tile as a compile-time policy. MaxK bounds k; TargetGroups is KnnTileParams::groups; Lists: bounded
/// searches may use candidate lists (false: heaps always).
template <std::uint32_t WX = 16, std::uint32_t WY = 16, std::uint32_t TM = 8, std::uint32_t TN = 8, std::uint32_t BK = 16,
          std::uint32_t MaxK = kKnnMaxK, std::uint32_t TargetGroups = 1024, bool Lists = true>
struct KnnTile {
  static_assert(WX > 0 && WY > 0 && TM > 0 && TN > 0 && BK > 0, "tile dimensions must be positive");
  static_assert(WX * WY <= 1024, "at most 1024 threads per workgroup");
  static_assert(TM * TN <= 256, "at most 256 accumulators per thread");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN are multiples of 4 (shared tiles are read as 4-vectors)");
  static_assert(TN <= 32, "at most 32 columns per thread (a bit mask of them is kept)");
  static_assert(MaxK >= 1 && MaxK <= kKnnMaxK, "k from 1 to the kernel's largest, kKnnMaxK");
  static_assert(TargetGroups >= 1, "at least one workgroup");
  static constexpr std::uint32_t max_k = MaxK;
  static constexpr bool candidate_lists = Lists;
  static constexpr KnnTileParams tile{WX, WY, TM, TN, BK, TargetGroups};
  static constexpr std::optional<KnnTileParams> fixed_tile{tile};
  template <class T>
  static bool can_implement(const vulkan::DeviceInfo& d) {
    return tile.misfit<T>(d).empty();
  }
};

/// The k-NN kernel's tiles in the tile-policy system (policy/tile.hpp). Catalogue, per device class: NVIDIA
/// 64 queries x 128 rows per tile, 4 x 8 values per thread, 16 features per step, 8192 target workgroups (the
/// fastest on the H200 at 1M x 128 with k = 10 and k = 100, and within 4% of the fastest at 10M x 16); other GPUs
/// 128 x 128 with 8 x 8 per thread and 16 features per step where shared memory allows (35 KiB: AMD and Intel GPUs
/// have 48 KiB or more); CPU devices 8 features per step (lavapipe allows 32 KiB); float64 uses 64 x 64 tiles to
/// stay within 32 KiB.
struct KnnTileTraits {
  using Params = KnnTileParams;
  static constexpr const char* kernel = "knn_select";
  static constexpr const char* override_syntax = "wx,wy,tm,tn,bk[,groups]";

  /// The tuning store's form, {wx, wy, tm, tn, bk, groups}, and back.
  static std::vector<std::uint32_t> encode(const Params& t) { return {t.wx, t.wy, t.tm, t.tn, t.bk, t.groups}; }
  static std::optional<Params> decode(const std::vector<std::uint32_t>& p) {
    if (p.size() != 6) return std::nullopt;
    return Params{p[0], p[1], p[2], p[3], p[4], p[5]};
  }
  /// "wx,wy,tm,tn,bk,groups": GPUML_KNN_TILE's syntax.
  static std::string text(const Params& t) {
    std::string s;
    for (auto v : encode(t)) s += (s.empty() ? "" : ",") + std::to_string(v);
    return s;
  }
  /// Config::knn_tile (GPUML_KNN_TILE): one tile for every k-NN search, for sweeps.
  static std::string override_value() { return config().knn_tile(); }
  static std::optional<Params> parse_override(const std::string& text) {
    auto values = tuning::parse_tile_list(text.c_str(), (1u << 20));
    if (values && values->size() == 5) values->push_back(1024);
    return values ? decode(*values) : std::nullopt;
  }

  /// Shape classes, each tuned and stored once: few features (d <= 32) or many, small k (the per-split warm-up
  /// is short) or large.
  static std::string shape_class(const TileProblem& p) {
    return std::string(p.d <= 32 ? "d<=32" : "d>32") + (p.k <= 32 ? ",k<=32" : ",k>32");
  }

  template <class T>
  static Params catalogue(const vulkan::DeviceInfo& device, const TileProblem& = {}) {
    if (sizeof(T) == 8) return {8, 8, 8, 8, 8};
    const Params nvidia{16, 16, 4, 8, 16, 8192};
    if (tuning::device_class(device) == tuning::DeviceClass::nvidia && nvidia.misfit<T>(device).empty()) return nvidia;
    const Params wide{16, 16, 8, 8, 16};
    if (device.type != vulkan::DeviceType::cpu && wide.misfit<T>(device).empty()) return wide;
    return {16, 16, 8, 8, 8};
  }

  /// Why `t` is not a usable tile on `device` (empty: it is): the kernel's check plus the register bound. The
  /// kernel splits any problem to fit a usable tile, so no tile fails a problem alone.
  template <class T>
  static std::string shape_misfit(const vulkan::DeviceInfo& device, const Params& t) {
    if (t.wx > 1024 || t.wy > 1024 || t.bk > 1024 || t.tm > 256 || t.tm * t.tn > 256)
      return "at most 256 values per thread, 1024 threads or features per dimension";
    return t.misfit<T>(device);
  }
  template <class T>
  static std::string misfit(const vulkan::DeviceInfo& device, const Params& t, const TileProblem&) {
    return shape_misfit<T>(device, t);
  }
};

/// The default policy: no fixed tile, so the kernel resolves one (GPUML_KNN_TILE, else the stored winner, else the
/// catalogue: resolve_tile), with the kernel's limits: k up to max_k, candidate lists allowed.
struct knn_default_policy : DefaultTile<KnnTileTraits> {
  static constexpr std::uint32_t max_k = kKnnMaxK;
  static constexpr bool candidate_lists = true;
};

/// What NearestNeighbors<T, Policy> and the k-NN estimators ask of a policy: a static fixed_tile (none: the
/// resolver's), max_k and candidate_lists, as knn_default_policy and KnnTile<...> give.
template <class Policy>
concept KnnPolicy = requires {
  { Policy::fixed_tile } -> std::convertible_to<std::optional<KnnTileParams>>;
  { Policy::max_k } -> std::convertible_to<std::uint32_t>;
  { Policy::candidate_lists } -> std::convertible_to<bool>;
};

/// A k-NN policy as the one value the kernel takes (KnnSearchOptions::policy): its fixed tile (none: resolved once
/// per search), the largest k searched on the device, and whether bounded searches may use candidate lists.
struct KnnTileChoice {
  std::optional<KnnTileParams> tile;
  std::uint32_t max_k = kKnnMaxK;
  bool candidate_lists = true;
};

template <KnnPolicy Policy>
constexpr KnnTileChoice knn_tile_choice() {
  return {Policy::fixed_tile, Policy::max_k, Policy::candidate_lists};
}

/// The shader's METRIC constant: euclidean selects on squared distances.
constexpr std::uint32_t knn_metric_code(Metric m) {
  switch (m) {
    case Metric::euclidean:
    case Metric::sqeuclidean: return select_interface::kMetricSqeuclidean;
    case Metric::manhattan: return select_interface::kMetricManhattan;
    case Metric::chebyshev: return select_interface::kMetricChebyshev;
    case Metric::cosine: return select_interface::kMetricCosine;
    case Metric::inner_product: return select_interface::kMetricInnerProduct;
  }
  return select_interface::kMetricSqeuclidean;
}

}  // namespace gpuml::kernels
