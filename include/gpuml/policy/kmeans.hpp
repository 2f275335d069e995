// Tile policies of the Vulkan k-means kernel: workgroup size, register and shared tiles (specialisation
// constants) and an optional pinned subgroup size. Compile-time policies (KMeansTile) check their shape with
// static_asserts; every tile, whatever its source, is checked against the device and the problem before anything
// is dispatched (kmeans_tile_misfit: the rules below, then plan_lloyd's shared-memory and workgroup limits).
// The default policy is the tile-policy system's resolver (policy/tile.hpp) over KMeansTileTraits: the
// GPUML_KMEANS_TILE override (for sweeps), the tuner's stored winner, the catalogue's tile for the device class.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/policy/device_class.hpp>
#include <gpuml/policy/limits.hpp>
#include <gpuml/policy/store.hpp>
#include <gpuml/policy/tile.hpp>
#include <gpuml/shaders/kmeans_lloyd.h>
#include <gpuml/vulkan/instance.hpp>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace gpuml {

/// The tile shape a policy resolves to on one device.
struct KMeansTileParams {
  std::uint32_t threads, samples_per_thread, centers_per_thread, feature_tile, center_tile;
  std::uint32_t subgroup_size = 0;  // pinned through VK_EXT_subgroup_size_control; 0: the driver's choice

  bool operator==(const KMeansTileParams&) const = default;

  /// The tuning store's form: the six numbers in declaration order.
  std::vector<std::uint32_t> to_params() const {
    return {threads, samples_per_thread, centers_per_thread, feature_tile, center_tile, subgroup_size};
  }
  static std::optional<KMeansTileParams> from_params(const std::vector<std::uint32_t>& p) {
    if (p.size() != 6) return std::nullopt;
    return KMeansTileParams{p[0], p[1], p[2], p[3], p[4], p[5]};
  }
  /// "threads,spt,kt,ds,ks" plus ",subgroup" when one is pinned: GPUML_KMEANS_TILE's syntax.
  std::string text() const {
    const auto p = to_params();
    std::string s = std::to_string(p[0]);
    for (std::size_t i = 1; i < (subgroup_size ? 6u : 5u); ++i) s += "," + std::to_string(p[i]);
    return s;
  }
};

/// Threads per workgroup (a multiple of 32), samples per thread, centers per thread (register tile), features
/// per tile, centers per shared tile (a multiple of CentersPerThread), and a subgroup size to pin (0: none).
template <std::uint32_t Threads = 128, std::uint32_t SamplesPerThread = 4, std::uint32_t CentersPerThread = 8,
          std::uint32_t FeatureTile = 16, std::uint32_t CenterTile = 128, std::uint32_t SubgroupSize = 0>
struct KMeansTile {
  static_assert(Threads % 32 == 0 && Threads >= 32 && Threads <= 1024, "threads: a multiple of 32, at most 1024");
  static_assert(SamplesPerThread >= 1 && SamplesPerThread <= 16, "1 to 16 samples per thread");
  static_assert(CentersPerThread >= 1 && FeatureTile >= 1, "tiles must be non-empty");
  static_assert(CenterTile % CentersPerThread == 0, "the shared center tile is a whole number of register tiles");
  static_assert(SamplesPerThread * (FeatureTile + CentersPerThread) <= 256, "register tile too large");
  static_assert((SubgroupSize & (SubgroupSize - 1)) == 0, "the subgroup size is 0 or a power of two");
  static constexpr KMeansTileParams tile{Threads, SamplesPerThread, CentersPerThread, FeatureTile, CenterTile, SubgroupSize};
  static constexpr std::optional<KMeansTileParams> fixed_tile{tile};
};

/// The kernel's name in the tuning store.
inline constexpr const char* kKMeansKernel = "kmeans_lloyd";

/// Problem-shape classes, each tuned and stored once (the store's shape key): few features (d <= 32, one or
/// two feature tiles) or many, and few centers (k <= 128, all resident in one shared tile) or many.
inline std::string kmeans_shape_class(std::uint64_t k, std::uint64_t d) {
  return std::string(d <= 32 ? "d<=32" : "d>32") + (k <= 128 ? ",k<=128" : ",k>128");
}

/// Lavapipe (Mesa's llvmpipe) silently ends a shader invocation after 65535 loop iterations in all: one limiter
/// is shared by every loop (LP_MAX_TGSI_LOOP_ITERATIONS). A tile's loop over center tiles x feature tiles must
/// therefore stay far below that on CPU devices, as a workgroup may run several tiles; and register tiles of
/// SPT x KT x DS above 128 miscompute there too (measured; likely inner loops left unrolled, counting as well).
inline constexpr std::uint64_t kCpuMaxTileLoops = 4096;
/// An invocation's loop iterations, counted by kmeans_invocation_loops, stay within this on CPU devices, half the
/// limit as the count is an estimate: llvmpipe crashed at times on kernels it cut short (their workgroups' barriers
/// left unmatched), so nothing is dispatched that could reach the limit; such problems run on the host.
inline constexpr std::uint64_t kCpuMaxInvocationLoops = 32768;
inline constexpr std::uint32_t kCpuMaxRegisterTile = 128;

/// Why `t` is not a usable tile on `device` whatever the problem, before limits that depend on k and d;
/// empty when it is.
inline std::string kmeans_tile_shape_misfit(const vulkan::DeviceInfo& device, const KMeansTileParams& t) {
  if (t.threads % 32 != 0 || t.threads < 32 || t.threads > 1024) return "threads must be a multiple of 32 from 32 to 1024";
  if (t.samples_per_thread < 1 || t.samples_per_thread > 16) return "samples per thread must be 1 to 16";
  if (t.centers_per_thread < 1 || t.feature_tile < 1 || t.feature_tile > 1024 || t.centers_per_thread > 1024)
    return "tiles must be non-empty (and at most 1024)";
  if (t.center_tile < t.centers_per_thread || t.center_tile % t.centers_per_thread != 0)
    return "the shared center tile must be a whole number of register tiles";
  if (t.samples_per_thread * (t.feature_tile + t.centers_per_thread) > 256) return "register tile too large";
  if (device.type == vulkan::DeviceType::cpu &&
      t.samples_per_thread * t.centers_per_thread * t.feature_tile > kCpuMaxRegisterTile)
    return "register tiles above " + std::to_string(kCpuMaxRegisterTile) + " (SPT x KT x DS) miscompute on CPU devices";
  return tuning::subgroup_size_misfit(device, t.subgroup_size, t.threads);
}

namespace kernels {

namespace lloyd_interface = shader_interface::kmeans_lloyd;

/// The specialisation of kmeans_lloyd for one problem (k, d) on one device: tiles shrink, and the partial sums
/// move from shared to global memory, until the workgroup fits the device's shared memory.
struct LloydPlan {
  std::uint32_t threads = 0, spt = 0, kt = 0, ks = 0, ds = 0, k = 0, d = 0, acc_shared = 0;
  std::uint32_t sum_rounds = 1;  // rounds of `threads` samples that the partial sums sort by cluster at once
  std::uint32_t loop_guard = 0;  // CPU devices: the shader reports llvmpipe's loop limit (shaders/common.glsl)
  std::uint32_t bounds = 0;      // 1: the bounded E-step
  std::uint32_t split = 0;       // 1: the threads split each center tile (kmeans_lloyd.comp's split_search)
  std::uint64_t shared_bytes = 0;
  /// The specialisation of one dispatch: kStageFull, or a stage of a bounded step.
  std::vector<std::uint32_t> constants(std::uint32_t stage = lloyd_interface::kStageFull) const {
    namespace shader = lloyd_interface;
    return spec_constants(shader::kSpecCount,
                          {{shader::kSpecThreads, threads}, {shader::kSpecSamplesPerThread, spt},
                           {shader::kSpecCentersPerThread, kt}, {shader::kSpecCenterTile, ks},
                           {shader::kSpecFeatureTile, ds}, {shader::kSpecClusters, k}, {shader::kSpecFeatures, d},
                           {shader::kSpecAccShared, acc_shared}, {shader::kSpecLoopGuard, loop_guard},
                           {shader::kSpecStage, stage}, {shader::kSpecSumRounds, sum_rounds},
                           {shader::kSpecSplitCenters, split}});
  }
  std::uint32_t tile() const { return threads * spt; }
};

/// Plans kmeans_lloyd for k centers of d features with `tile` on `info` into `pl`; returns why the tile cannot run
/// the problem there (empty: it can, and `pl` holds the plan). `bounded`: plan the bounded E-step where the device
/// can run it (subgroup ballots and sums); the plan's `bounds` says whether it does. `split_allowed` false: the walk
/// over the centers even where the rows span several feature tiles (where the split search's arrays do not fit).
template <class T>
std::string plan_lloyd(const vulkan::DeviceInfo& info, const KMeansTileParams& tile, std::uint32_t k, std::uint32_t d,
                       bool bounded, LloydPlan& pl, bool split_allowed = true) {
  pl = LloydPlan{};
  pl.threads = tile.threads;
  pl.spt = tile.samples_per_thread;
  pl.k = k;
  pl.d = d;
  pl.loop_guard = info.type == vulkan::DeviceType::cpu ? 1 : 0;
  pl.ds = std::min<std::uint32_t>(d, tile.feature_tile);
  pl.kt = std::min<std::uint32_t>(k, tile.centers_per_thread);
  const std::uint32_t nds = (d + pl.ds - 1) / pl.ds;
  // Where the rows span several feature tiles, the threads split each center tile as a matrix product does
  // (split_search): one sample per thread, each thread a register tile of kSplitSamples samples x kt centers, so
  // center tiles of kSplitSamples * kt centers. Otherwise every thread would walk every center with its rows read
  // again for each register tile. Rows of one feature tile stay in registers: there walking the centers is faster.
  const std::uint32_t all_centers = (k + pl.kt - 1) / pl.kt * pl.kt;
  const bool one_tile = nds == 1 && all_centers <= tile.center_tile;
  if (split_allowed && nds > 1 && pl.kt % 4 == 0 && pl.threads % lloyd_interface::kSplitSamples == 0) {
    pl.split = 1;
    pl.spt = 1;
  }
  const std::uint64_t s = sizeof(T), words = pl.threads / 32;
  // The bounded E-step lists uncertain samples with subgroup ballots and searches with subgroup minima.
  if (bounded && !(info.subgroup_arithmetic && info.subgroup_ballot))
    return plan_lloyd<T>(info, tile, k, d, false, pl, split_allowed);
  // Its check gathers listed rows in shared memory (kmeans_lloyd.comp): where they do not fit, the plain E-step.
  if (bounded && 8 * std::uint64_t(lloyd_interface::kCheckAppendRounds) * pl.threads + 16 > info.max_shared_memory)
    return plan_lloyd<T>(info, tile, k, d, false, pl, split_allowed);
  // Batches of the partial sums (kmeans_lloyd.comp). Where one owner per cluster may walk them (k <= threads,
  // d < 32), one round: owners gain nothing from longer walks. Otherwise the (cluster, feature) walks get as many
  // rounds of the tile as keep the cluster masks within kSumMaskBytes: more members per walk for the same barriers.
  constexpr std::uint64_t kSumMaskBytes = 16 << 10;
  const bool owners = k <= pl.threads && d + 1 <= 32;
  for (std::uint32_t r = owners ? 1 : pl.spt; r >= 1; --r)
    if (pl.spt % r == 0 && (4 * std::uint64_t(k) * words * r <= kSumMaskBytes || r == 1)) {
      pl.sum_rounds = r;
      break;
    }
  // Beside the arrays counted below, the shader declares one spare element per array (six of T or int64, six of
  // uint), seven uint counters and flags, and the compiler may pad each array to its type's alignment: counted in
  // full, so that a plan within a few bytes of the limit still fits it (the validation layer counts the padding too).
  constexpr std::uint64_t exact = sizeof(std::int64_t);  // the partial sums' type (exact, algorithms::ClusterSums)
  auto shared_extra_bytes = [&](std::uint64_t scalar) {
    const std::uint64_t widest = std::max(scalar, exact);
    return 6 * widest + 52 + 12 * 4 * widest;
  };
  auto bytes = [&](std::uint32_t ks, bool acc) {
    // center tile and norms (split: the sample and center feature tiles, the merge's values and indices, the
    // tile's rows); a batch's cluster masks, sorted positions, per-cluster ranges and the list of clusters with
    // members; the sums; flags and counters
    const std::uint64_t batch = std::uint64_t(pl.threads) * pl.sum_rounds;
    const std::uint64_t tile_bytes =
        pl.split ? s * pl.ds * (std::uint64_t(pl.threads) + ks + 8) +
                       std::uint64_t(pl.threads) * lloyd_interface::kSplitSamples * (2 * s + 4) + 4 * pl.threads
                 : s * (std::uint64_t(ks) * ((pl.ds + 3) / 4 * 4) + ks);
    return tile_bytes + 4 * std::uint64_t(k) * (batch / 32 + 1) +
           4 * (batch + std::min<std::uint64_t>(k, batch)) + exact * (acc ? std::uint64_t(k) * (d + 1) : 0) +
           shared_extra_bytes(s);
  };
  // All centers resident in shared memory when they fit one tile; otherwise the split search's center tile, or (the
  // walk) the kernel reads them from global memory and the shared tile shrinks to one register tile.
  const bool resident = one_tile && bytes(all_centers, false) <= info.max_shared_memory;
  pl.ks = pl.split ? lloyd_interface::kSplitSamples * pl.kt : resident ? all_centers : pl.kt;
  pl.acc_shared = bytes(pl.ks, true) <= info.max_shared_memory ? 1 : 0;
  pl.shared_bytes = bytes(pl.ks, pl.acc_shared);
  pl.bounds = bounded ? 1 : 0;
  const std::string why = workgroup_misfit(info, pl.threads, 1, pl.shared_bytes);
  if (why.empty()) return {};
  // The split search's tiles and merge where they do not fit beside the rest: the walk, which needs less.
  if (pl.split) return plan_lloyd<T>(info, tile, k, d, bounded, pl, false);
  return why + " for k=" + std::to_string(k) + ", d=" + std::to_string(d) + " (a tile with fewer threads may fit)";
}

}  // namespace kernels

/// Center tiles x feature tiles that one sample tile of `plan` loops over: what llvmpipe's loop limit counts.
inline std::uint64_t kmeans_tile_loops(const kernels::LloydPlan& plan) {
  return (std::uint64_t(plan.k) + plan.ks - 1) / plan.ks * ((std::uint64_t(plan.d) + plan.ds - 1) / plan.ds);
}

/// Loop iterations of one invocation over its sample tile (kmeans_lloyd.comp), at most, as llvmpipe counts them
/// (inner loops counted as if not unrolled): the E-step's center x feature tiles, each over its features and
/// register centers; then the partial sums, per batch of `sum_rounds` rounds: clearing the cluster masks, one pass
/// over the clusters, and the (cluster, feature) pairs with the members each walks (all of a batch's samples in one
/// cluster at worst). The owner walk, where it runs, does fewer (one thread per cluster, under 32 features).
inline std::uint64_t kmeans_invocation_loops(const kernels::LloydPlan& plan) {
  const std::uint64_t k = plan.k, d = plan.d;
  auto up = [](std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; };
  // split_search: per center x feature tile, its share of the two tiles fetched and then stored, and the feature
  // loop; per center tile, its centers' values; the merge.
  const std::uint64_t split_loads = plan.ds + up(std::uint64_t(plan.ks) * plan.ds, plan.threads);
  const std::uint64_t e_step =
      plan.split ? up(k, plan.ks) * (up(d, plan.ds) * (2 * split_loads + plan.ds) + plan.kt) +
                       2 * kernels::lloyd_interface::kSplitSamples
                 : up(k, plan.ks) * up(d, plan.ds) * (plan.ds + plan.kt);
  const std::uint64_t threads = plan.threads, batch = threads * plan.sum_rounds;
  const std::uint64_t per_batch = up(std::uint64_t(k) * up(batch, 32), threads) + up(k, threads) +
                                  up(std::uint64_t(k) * d, threads) + up(d, threads) * batch;
  return e_step + up(plan.spt, plan.sum_rounds) * per_batch;
}

/// Why `tile` cannot run k-means with k centers of d features on `device`; empty when it can. Nothing is
/// dispatched with a tile that fails this.
template <class T>
std::string kmeans_tile_misfit(const vulkan::DeviceInfo& device, const KMeansTileParams& tile, std::uint32_t k,
                               std::uint32_t d) {
  if (auto why = kmeans_tile_shape_misfit(device, tile); !why.empty()) return why;
  kernels::LloydPlan plan;
  if (auto why = kernels::plan_lloyd<T>(device, tile, k, d, false, plan); !why.empty()) return why;
  if (device.type == vulkan::DeviceType::cpu) {
    if (const std::uint64_t loops = kmeans_tile_loops(plan); loops > kCpuMaxTileLoops)
      return std::to_string(loops) + " center x feature tiles per sample tile exceed CPU devices' " +
             std::to_string(kCpuMaxTileLoops) + " (llvmpipe's loop limit)";
    if (const std::uint64_t all = kmeans_invocation_loops(plan); all > kCpuMaxInvocationLoops)
      return std::to_string(all) + " loop iterations per invocation exceed CPU devices' " +
             std::to_string(kCpuMaxInvocationLoops) + " (llvmpipe's loop limit)";
  }
  return {};
}

template <class T>
bool kmeans_can_implement(const vulkan::DeviceInfo& device, const KMeansTileParams& tile, std::uint32_t k, std::uint32_t d) {
  return kmeans_tile_misfit<T>(device, tile, k, d).empty();
}

/// The catalogue: the default tile of each device class, used where nothing is tuned. NVIDIA's is the tile of
/// gpuml's H200 measurements; the CPU class (lavapipe) keeps register tiles small for correctness. The others
/// follow each architecture's registers and wave size but are not measured: the tuner corrects them on the
/// user's device. No class pins a subgroup size: the kernel uses no subgroup operations, so the driver's choice
/// stands unless the tuner measures a better one.
inline KMeansTileParams kmeans_catalogue_tile(const vulkan::DeviceInfo& device) {
  using tuning::DeviceClass;
  switch (tuning::device_class(device)) {
    case DeviceClass::cpu: return KMeansTile<128, 4, 4, 8, 128>::tile;
    // Gen9 to Xe-HPG: 128 registers of 8 floats per thread; a 2 x 8 tile leaves room to compile SIMD16.
    case DeviceClass::intel_gen_igpu:
    case DeviceClass::intel_gen_dgpu: return KMeansTile<128, 2, 8, 16, 128>::tile;
    // GCN runs wave64 only: four whole waves per workgroup.
    case DeviceClass::amd_gcn: return KMeansTile<256, 4, 8, 16, 128>::tile;
    default: return KMeansTile<128, 4, 8, 16, 128>::tile;  // NVIDIA, AMD RDNA, Intel Xe2, others
  }
}

/// The catalogue tile for a k x d problem. Where the class tile does not fit the problem (shared memory grows
/// with k: a mask per cluster and thread group), the same tile with fewer threads is tried. On CPU devices a problem
/// whose center x feature tiles would pass llvmpipe's loop limit with the class tile takes the CPU tile with the
/// fewest such loops instead; where even that tile would run more than kCpuMaxInvocationLoops (k = d = 1024, say),
/// the engine refuses the problem before dispatching anything and the fit runs on the host.
template <class T>
KMeansTileParams kmeans_catalogue_tile(const vulkan::DeviceInfo& device, std::uint32_t k, std::uint32_t d) {
  const KMeansTileParams tile = kmeans_catalogue_tile(device);
  if (kmeans_can_implement<T>(device, tile, k, d)) return tile;
  std::vector<KMeansTileParams> candidates{tile};
  if (device.type == vulkan::DeviceType::cpu)
    for (const KMeansTileParams& t : {KMeansTile<128, 1, 4, 32, 128>::tile, KMeansTile<128, 1, 8, 16, 128>::tile,
                                      KMeansTile<128, 1, 2, 64, 128>::tile})
      candidates.push_back(t);
  for (std::size_t i = 0, n = candidates.size(); i < n; ++i)
    for (KMeansTileParams t = candidates[i]; t.threads > 32;) {
      t.threads /= 2;
      candidates.push_back(t);
    }
  KMeansTileParams best = tile;
  std::uint64_t best_loops = ~std::uint64_t(0);
  bool best_fits = false;
  for (const KMeansTileParams& t : candidates) {
    kernels::LloydPlan plan;
    if (!kmeans_tile_shape_misfit(device, t).empty() || !kernels::plan_lloyd<T>(device, t, k, d, false, plan).empty())
      continue;  // past the device's limits
    const std::uint64_t loops = kmeans_tile_loops(plan);
    const bool fits = kmeans_can_implement<T>(device, t, k, d);
    if ((fits && !best_fits) || (fits == best_fits && loops < best_loops)) best = t, best_loops = loops, best_fits = fits;
  }
  return best;
}

/// The k-means kernel's tiles in the tile-policy system (policy/tile.hpp).
struct KMeansTileTraits {
  using Params = KMeansTileParams;
  static constexpr const char* kernel = kKMeansKernel;
  static constexpr const char* override_syntax = "threads,spt,kt,ds,ks[,subgroup]";
  static std::vector<std::uint32_t> encode(const Params& p) { return p.to_params(); }
  static std::optional<Params> decode(const std::vector<std::uint32_t>& numbers) { return Params::from_params(numbers); }
  static std::string text(const Params& p) { return p.text(); }
  /// Config::kmeans_tile (GPUML_KMEANS_TILE): one tile for every k-means problem, for sweeps.
  static std::string override_value() { return config().kmeans_tile(); }
  static std::optional<Params> parse_override(const std::string& text) {
    auto values = tuning::parse_tile_list(text.c_str(), 1024);
    if (values && values->size() == 5) values->push_back(0);
    return values ? Params::from_params(*values) : std::nullopt;
  }
  static std::string shape_class(const kernels::TileProblem& p) { return kmeans_shape_class(p.k, p.d); }
  template <class T>
  static Params catalogue(const vulkan::DeviceInfo& device, const kernels::TileProblem& p) {
    return kmeans_catalogue_tile<T>(device, p.k, p.d);
  }
  template <class T>
  static std::string shape_misfit(const vulkan::DeviceInfo& device, const Params& tile) {
    return kmeans_tile_shape_misfit(device, tile);
  }
  template <class T>
  static std::string misfit(const vulkan::DeviceInfo& device, const Params& tile, const kernels::TileProblem& p) {
    return kmeans_tile_misfit<T>(device, tile, p.k, p.d);
  }
};

/// The default policy: GPUML_KMEANS_TILE, else the stored winner, else the catalogue (kernels::resolve_tile).
struct kmeans_default_policy : kernels::DefaultTile<KMeansTileTraits> {};

/// What KMeans<T, Policy> asks of a policy: a static fixed_tile (none: the resolver's tile), as kmeans_default_policy
/// and KMeansTile<...> give.
template <class Policy>
concept KMeansPolicy = requires {
  { Policy::fixed_tile } -> std::convertible_to<std::optional<KMeansTileParams>>;
};

}  // namespace gpuml
