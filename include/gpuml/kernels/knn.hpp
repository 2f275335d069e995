// Brute-force k-nearest-neighbour search on a Vulkan device: the fused distance + k-selection kernel
// (shaders/knn_select.comp) and its host-side driver.
//
// Work split. The database is processed in blocks that fit one storage-buffer binding (and a quarter of the
// device's memory), the queries in batches that fit one binding and the dispatch limits. Within a (block, batch)
// pair the select kernel runs a grid of query tiles x database splits; the splits exist so that a few queries
// against a large database still fill the device.
//
// Bounded searches with candidate lists (the usual case: k up to 128 with 48 KiB of shared memory, 64 with 32 KiB;
// knn_detail::append_slots). A sample of about 1/F^2 of the block (F = knn_sample_fraction: 16 for small k, less for
// larger k and d; a few splits, their values written whole and each query's k-th picked by radix rounds, or where
// they do not fit heaps keeping the k best per query, merged) bounds a list pass over 1/F of it, spread over the
// block and containing the first; knn_gather.comp keeps the k best of that pass's lists, and its k-th best value
// per query, about the F k-th best of the block, bounds the whole block's list pass. Every pair at most its query's
// bound is appended to the query's list (about F k of them), and knn_gather.comp keeps the k best of each list
// (knn_detail::bound_sample_for_lists).
// On devices with VK_NV_cooperative_matrix, the list passes of float32 (squared) euclidean searches run on tensor
// cores instead (knn_filter_coop.comp: float16 products and a rigorous bound on their error pick candidates, a
// superset of the pairs under the bound; knn_gather.comp forms their values exactly as knn_select.comp does), so
// they select the same pairs; the block and the query batch are converted to float16 once (knn_half.comp).
// A list that overflows (thousands of pairs tied at a bound) sends its batch to the heap pass, from the bounds
// that hold. Heaps otherwise: every workgroup keeps the k best pairs of its split in a bounded heap, started from a
// sample's bound for k > 32 on large blocks (knn_detail::bound_sample), and a merge kernel folds the splits' heaps
// into split 0's, 8 at a time per pass. Either way only n_queries x k pairs come back (copied within the search's
// submission); those of successive database blocks are merged on the host into one running list per query,
// which is finished exactly as the host engine (host/knn.hpp) finishes its own (algorithms::search_exactly):
// euclidean, sqeuclidean and cosine values recomputed directly in the host engine's fixed order (exact duplicates
// at distance exactly 0, the cosine zero-vector rule), sorted by (returned value, index), inner product negated back
// to a similarity (descending). For those three metrics the kernels keep a few pairs beyond k per query
// (algorithms::first_selection_width; lists or heaps chosen as for k, the lists sized for the pairs kept), so that
// the last value bounds what the selection's rounding can have left out; the rare query it cannot settle is
// searched again with a wider selection.
//
// Selection values are formed by one FMA chain over the features for every (query, row) pair, so identical rows
// get identical values and ties go to the lower index; the kept set does not depend on the tiling, the splits or
// the batching. Against the host engine the selected sets agree wherever values differ by more than rounding.
//
// A resident database (KnnDatabase) keeps the search's buffers between searches (KnnWorkspace): device memory of
// about n_queries x (k + slots) pairs, and a batch's dense sample (within the lists' budget), stays allocated until
// the database is destroyed.
//
// Code: knn_detail::plan_search decides the blocks, batches, splits and passes (KnnSearchPlan, a pure function of
// the device's description, the shape, the options and the tile); KnnWorkspace holds the buffers, KnnKernels the
// kernels; KnnPasses records the passes one job each (heap pass, merge, list pass, gather, read-back), the list
// pass usable on its own with per-query bounds; knn_search runs the plan's blocks and batches through them
// (knn_detail::search_block_batch, knn_detail::merge_running) and finishes the results (algorithms::search_exactly).
//
// Limits: 1 <= k <= KnnSearchOptions::policy.max_k (kKnnMaxK, 4096, by default; the selection may keep a few more); larger k, float64 on a
// device without shaderFloat64, a policy the device cannot run or one row larger than a binding throw
// gpuml::unsupported (the estimators then use the host engine, see detail::run_knn). At most 2^32 - 1 database rows.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/algorithms/knn.hpp>
#include <gpuml/kernels/distance.hpp>
#include <gpuml/policy/knn.hpp>
#include <gpuml/policy/limits.hpp>
#include <gpuml/shaders/knn_exact_keys_kernel.hpp>
#include <gpuml/shaders/knn_filter_coop_kernel.hpp>
#include <gpuml/shaders/knn_gather_kernel.hpp>
#include <gpuml/shaders/knn_half_kernel.hpp>
#include <gpuml/shaders/knn_merge_kernel.hpp>
#include <gpuml/shaders/knn_select_kernel.hpp>
#include <gpuml/policy/device_class.hpp>
#include <gpuml/policy/store.hpp>
#include <gpuml/vulkan/transfer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpuml::kernels {

// The k-NN shaders' interfaces (push constants, bindings, specialisation constants, metric codes).
namespace merge_interface = shader_interface::knn_merge;
namespace gather_interface = shader_interface::knn_gather;
namespace filter_coop_interface = shader_interface::knn_filter_coop;
namespace half_interface = shader_interface::knn_half;
namespace exact_keys_interface = shader_interface::knn_exact_keys;

/// The merge kernel: threads per workgroup, and how many split heaps one thread merges per pass. The gather kernel:
/// threads per workgroup (one workgroup per query).
inline constexpr std::uint32_t kKnnMergeThreads = 64, kKnnMergeGroup = 8, kKnnGatherThreads = 256;

/// The cooperative-matrix list kernel (shaders/knn_filter_coop.comp): queries and database rows per tile. It runs
/// the list passes of float32 euclidean and squared euclidean searches on devices with
/// VkDeviceInfo::coop_matrix_f16; GPUML_KNN_COOP=0 keeps them on knn_select.comp (for comparisons).
inline constexpr std::uint32_t kKnnCoopQueries = filter_coop_interface::kBlockQueries,
                                kKnnCoopRows = filter_coop_interface::kBlockRows;
/// The uints (float16 pairs) of a row of d features as knn_filter_coop.comp reads it: padded to 16 features.
inline std::uint64_t knn_coop_row_pairs(std::uint64_t d) { return ceil_div(d, 16) * 8; }
/// The queries' uints knn_filter_coop.comp keeps in shared memory for a whole pass (its query tile's rows, padded),
/// or 0 where they do not fit in `max_shared_memory` bytes (it then stages them every step).
inline std::uint32_t knn_coop_resident_pairs(std::uint64_t d, std::uint64_t max_shared_memory) {
  namespace shader = filter_coop_interface;
  const std::uint64_t pairs = knn_coop_row_pairs(d);
  const std::uint64_t bytes = shader::kBlockQueries * (pairs + shader::kPadPairs) * 4 + shader::kFixedSharedBytes;
  return bytes <= max_shared_memory ? static_cast<std::uint32_t>(pairs) : 0u;
}

/// The switches of one k-NN search (comparisons and sweeps; the defaults are the fastest exact search). Config
/// gives the process's defaults (GPUML_KNN_SAMPLE, GPUML_KNN_APPEND, GPUML_KNN_COOP).
struct KnnSearchOptions {
  std::uint64_t sample_fraction = Config::kDefaultKnnSample;  // the bounding pass samples 1/F of a block; 0: none
  bool candidate_lists = true;                                 // false: heaps always
  bool cooperative_matrices = true;                            // false: float32 list passes everywhere
  bool dense_samples = true;  // false: the bounding sample always keeps heaps (KnnSearchPlan::dense_values)
  ProgressCallback on_progress;  // after each query batch of each database block: query rows x blocks done
  KnnTileChoice policy;          // the tile (none: resolved once for the search), k limit and list permission
  static KnnSearchOptions from(const Config& c) { return {c.knn_sample(), c.knn_append(), c.knn_coop(), true, {}, {}}; }
};

/// A matrix as float16 rows for knn_filter_coop.comp (knn_half.comp): every element times `scale`, a power of two
/// that keeps the largest below 2^14, rows padded with zeros to a multiple of 16 features; for database blocks also
/// each row's term of the filter's test.
struct KnnHalfRows {
  vulkan::Buffer rows, terms;
  float scale = 1;
};

namespace knn_detail {

/// The float16 scale of rows [first, last) of X: 2^(14 - e) where every |x_i| < 2^e, within 2^-60 .. 2^60 so that
/// products of two scales stay normal floats.
template <class T>
float half_scale(MatrixView<T> X, std::int64_t first, std::int64_t last) {
  const std::int64_t chunk = 1 << 10, n_chunks = ceil_div(std::max<std::int64_t>(last - first, 0), chunk);
  std::vector<T> largest(static_cast<std::size_t>(n_chunks), T(0));
  parallel_chunks(last - first, chunk, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    T most = 0;
    for (std::int64_t r = first + b; r < first + e; ++r) most = std::max(most, X.row(r).cwiseAbs().maxCoeff());
    largest[static_cast<std::size_t>(c)] = most;
  });
  const T most = largest.empty() ? T(0) : *std::max_element(largest.begin(), largest.end());
  if (!(most > T(0))) return 1.0f;
  int e = 0;
  std::frexp(static_cast<double>(most), &e);
  return std::ldexp(1.0f, std::clamp(14 - e, -60, 60));
}

/// Records knn_half.comp: rows_out float16 rows of (x, n x d), with their terms (from the squared norms) when
/// `terms` is given.
template <class T>
void record_half_rows(vulkan::Device& device, vulkan::Commands& cmds, const vulkan::Kernel& half, const vulkan::Buffer& x,
                      const vulkan::Buffer& norms, std::uint64_t n, std::uint64_t d, std::uint64_t rows_out, float scale,
                      const vulkan::Buffer& out, const vulkan::Buffer* terms) {
  const half_interface::Push push{.n = std::uint32_t(n), .d = std::uint32_t(d), .dpad = std::uint32_t(ceil_div(d, 16) * 16),
                                  .rows_out = std::uint32_t(rows_out), .scale = scale, .terms = terms ? 1u : 0u};
  const LinearGrid grid = linear_grid(device.info(), ceil_div(rows_out * push.dpad / 2, half_interface::kPairsPerGroup),
                                      "k-NN's float16 copy");
  namespace shader = half_interface;
  cmds.dispatch(half,
                {{shader::kBindingRows, x}, {shader::kBindingNorms, norms}, {shader::kBindingHalf, out},
                 {shader::kBindingTerms, terms ? *terms : norms}},
                push, grid.x, grid.y);
}

/// Database rows per block: one storage-buffer binding, and at most a quarter of the device's memory (or of
/// Config::device_memory_limit, as KMeans plans with it).
template <class T>
std::uint64_t database_block_rows(const vulkan::Device& device, std::uint64_t n, std::uint64_t d) {
  const std::uint64_t s = sizeof(T);
  const std::uint64_t max_bytes = std::min<std::uint64_t>(device.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
  std::uint64_t block_bytes = max_bytes;
  if (const auto budget = device_memory_budget(device.info()))
    block_bytes = std::min(block_bytes, std::max<std::uint64_t>(budget / 4, d * s));
  return rows_per_block(n, d * s, block_bytes, "the database");
}

/// How one search is cut: queries per batch, rows per split (a multiple of the tile), splits per block.
struct KnnPlan {
  std::uint64_t batch_queries = 0, split_rows = 0, splits = 0;
  std::uint32_t merge_group = kKnnMergeGroup;  // split heaps folded per thread and merge pass
};

/// The cut of a search on a device described by `info` (its largest buffer: `max_buffer_bytes`) with `tile`, of
/// database blocks of `block` rows, for m queries of d features and k neighbours; at most `max_batch` queries per
/// batch. A pure function.
template <class T>
KnnPlan cut(const vulkan::DeviceInfo& info, std::uint64_t max_buffer_bytes, const KnnTileParams& tile, std::uint64_t block,
            std::uint64_t m, std::uint64_t d, std::uint64_t k, std::uint64_t max_batch = UINT64_MAX) {
  const std::uint64_t s = sizeof(T), BQ = tile.block_queries(), BN = tile.block_rows();
  const std::uint64_t max_bytes = std::min<std::uint64_t>(max_buffer_bytes, std::uint64_t(UINT32_MAX));
  KnnPlan p;
  // Query batch: one binding for the queries, one split's candidate lists within one binding, the grid's x limit.
  std::uint64_t mb = rows_per_block(m, d * s, max_bytes, "the queries");
  mb = std::min<std::uint64_t>(mb, std::uint64_t(info.max_workgroup_count[0]) * BQ);
  mb = std::min<std::uint64_t>(mb, std::max<std::uint64_t>(1, max_bytes / (k * s)));
  mb = std::min<std::uint64_t>(mb, 1u << 16);  // bounds the candidate buffers (and the host merge per round)
  mb = std::min(mb, max_batch);
  p.batch_queries = std::max<std::uint64_t>(1, mb);
  // Splits: enough workgroups to fill the device. Every split pays a warm-up of about k heap insertions per
  // query before its threshold bites, so splits stay long against k (at least 64 k rows) and 16 tiles; candidate
  // lists within one binding and about 256 MiB.
  const std::uint64_t tiles = ceil_div(std::min(m, p.batch_queries), BQ);
  std::uint64_t splits = ceil_div(tile.groups, tiles);
  splits = std::min(splits, std::max<std::uint64_t>(1, block / std::max<std::uint64_t>(16 * BN, 64 * k)));
  const std::uint64_t list_bytes = std::min(m, p.batch_queries) * k * s;
  splits = std::min(splits, std::max<std::uint64_t>(1, std::min<std::uint64_t>(max_bytes, 256ull << 20) / list_bytes));
  splits = std::min<std::uint64_t>(splits, info.max_workgroup_count[1]);
  splits = std::max<std::uint64_t>(1, splits);
  p.split_rows = ceil_div(ceil_div(block, splits), BN) * BN;
  // CPU devices: llvmpipe stops an invocation after 65,535 loop iterations in all (silently), so a split there
  // holds at most 32 tiles.
  // Its candidate lists then bound the query batch instead, and the merge folds two heaps per thread and pass.
  if (info.type == vulkan::DeviceType::cpu) {
    p.split_rows = std::min<std::uint64_t>(p.split_rows, 32 * BN);
    const std::uint64_t lists = std::min<std::uint64_t>(max_bytes, 256ull << 20) / (ceil_div(block, p.split_rows) * k * s);
    p.batch_queries = std::max<std::uint64_t>(1, std::min(p.batch_queries, lists));
    p.merge_group = 2;
  }
  p.splits = ceil_div(block, p.split_rows);
  return p;
}

/// The sample pass that bounds a block's search (shaders/knn_select.comp, "Bounds"): about 1/16 of the block's
/// rows, in up to 8 splits spread evenly over it (at most 32 tiles each on CPU devices). Its k-th best value per
/// query starts every split of the real pass with a full heap, so splits no longer pay a warm-up of about k
/// insertions per query each, or bounds the candidate lists. None (splits = 0) where the sample would be small
/// against k or the tile, and with heaps for k <= 32 or searches of fewer than 8 splits. GPUML_KNN_SAMPLE=F samples
/// 1/F of the block instead (0: no sample pass, hence no lists), for sweeps.
struct KnnBoundSample {
  std::uint64_t splits = 0, rows = 0, stride = 0;  // split s covers rows [s * stride, s * stride + rows)
  // With candidate lists, two levels: the heap pass above covers a 1/F of a list pass over list_splits splits of
  // list_rows rows, list_stride apart (its splits are the heads of every (stride / list_stride)-th list split, so
  // at least k pairs pass the list pass), and the list pass's k-th best bounds the search. 0: one level.
  std::uint64_t list_splits = 0, list_rows = 0, list_stride = 0;
};
inline constexpr std::uint64_t kKnnSampleFraction = Config::kDefaultKnnSample;

/// The sample fraction of a search of d features keeping k pairs per query, from the configured F (KnnSearchOptions,
/// Config's knn_sample): F ((16 / k) (128 / d)^(2/3))^(1/3), at most F and at least 2 (0: no sample). The bounding
/// passes form about n / F^2 sample values per query, each at a cost that hardly depends on d, and exact values
/// of about F k candidates, each reading a row (a cost that grows about as d^(2/3)): the cheapest F falls as the
/// cube root of their ratio. F itself is the fraction for k = 16 at d = 128, and for any smaller k or d.
inline std::uint64_t knn_sample_fraction(std::uint64_t configured, std::uint64_t k, std::uint64_t d) {
  if (configured == 0) return 0;
  const double ratio = (16.0 / double(std::max<std::uint64_t>(k, 1))) * std::pow(128.0 / double(std::max<std::uint64_t>(d, 1)), 2.0 / 3);
  const double scaled = double(configured) * std::min(1.0, std::cbrt(ratio));
  return std::max<std::uint64_t>(2, static_cast<std::uint64_t>(std::lround(scaled)));
}

/// Candidate-list slots per query for a bounded search (knn_select.comp, "Append"), or 0 for heaps: about twice the
/// pairs expected under the bound (the bound is about the fraction x k-th best value of the block), rounded up to
/// a power of two, where knn_gather.comp can sort that many in shared memory.
/// `kept`: the pairs the search keeps per query; `k`: those it returns (at most kept), which decides whether lists
/// are used, so that the few pairs a search keeps beyond its k (algorithms::first_selection_width) never turn the
/// usual k of 64 or 128 from lists to heaps.
/// `candidates`: how many more pairs than pass the bound the list pass appends (knn_filter_coop.comp's candidates
/// are up to about twice as many as the pairs under the bound); the lists then get up to that many times more slots.
template <class T>
std::uint64_t append_slots(const vulkan::DeviceInfo& info, std::uint64_t k, std::uint64_t kept, std::uint64_t fraction,
                           std::uint64_t candidates = 1) {
  std::uint64_t fits = 1;
  while (2 * fits * (sizeof(T) + 4) + 64 <= info.max_shared_memory) fits *= 2;
  // kept + 4: at small k the bound (the sample's kept-th best) is a noisy quantile, and lists of 2 F k slots
  // overflowed.
  const std::uint64_t expected = fraction * (kept + 4);
  std::uint64_t want = 1;
  while (want < 2 * fraction * k) want *= 2;
  const std::uint64_t most = std::min<std::uint64_t>(fits, 4096);
  if (want > most) return 0;
  while (want < 2 * candidates * expected && 2 * want <= most) want *= 2;
  return want;
}

inline KnnBoundSample bound_sample(const KnnTileParams& tile, const KnnPlan& pl, std::uint64_t nb, std::uint64_t k,
                                   bool cpu, bool lists, std::uint64_t fraction) {
  if (fraction == 0) return {};
  const std::uint64_t BN = tile.block_rows(), sample = nb / fraction;
  // Measured no faster with the sample and heaps (H200, lavapipe): small k, which warms up in a few tiles, and
  // searches of a few splits (10k x 128 at k = 100 on lavapipe, 3 splits: 92 ms with the pass, 86 without). With
  // lists it pays at any k and any number of splits (H200, 1M x 128, 10k queries, k = 10: 97 ms of kernels against
  // 131 with heaps; k = 100 with 6 splits: 196 ms with heaps, about 100 with lists).
  if ((!lists && (k <= 32 || pl.splits < 8)) || sample < std::max<std::uint64_t>(4 * k, 4 * BN)) return {};
  std::uint64_t splits = std::min<std::uint64_t>(8, sample / (4 * BN));
  if (cpu) splits = std::max(splits, ceil_div(sample, 32 * BN));
  splits = std::max<std::uint64_t>(1, std::min(splits, pl.splits));
  KnnBoundSample b;
  b.rows = ceil_div(ceil_div(sample, splits), BN) * BN;
  if (cpu) b.rows = std::min(b.rows, 32 * BN);
  // Disjoint splits: a row sampled twice would count twice towards the k-th value and make it too small.
  if (b.rows * splits > nb || b.rows * splits < k) return {};
  b.splits = splits;
  b.stride = splits > 1 ? (nb - b.rows) / (splits - 1) : b.rows;
  return b;
}

/// With candidate lists the sample itself is searched with lists (see KnnBoundSample): the heap pass then covers
/// only about 1/F^2 of the block, in at most 8 splits, and the list pass 1/F in as many splits as the search (it has
/// no warm-up to pay), each of 8 tiles or more. One level where the block is too small for two.
inline KnnBoundSample bound_sample_for_lists(const KnnTileParams& tile, const KnnPlan& pl, std::uint64_t nb,
                                             std::uint64_t k, bool cpu, std::uint64_t batch_queries,
                                             std::uint64_t fraction) {
  const KnnBoundSample one = bound_sample(tile, pl, nb, k, cpu, true, fraction);
  if (!one.splits) return one;
  const std::uint64_t BN = tile.block_rows(), sample = nb / fraction;
  KnnBoundSample b;
  b.list_splits = std::max<std::uint64_t>(1, std::min(pl.splits, sample / (8 * BN)));  // 8 tiles or more each
  b.list_rows = ceil_div(ceil_div(sample, b.list_splits), BN) * BN;
  if (cpu) b.list_rows = std::min(b.list_rows, 32 * BN);
  if (b.list_rows * b.list_splits > nb) return one;
  b.list_stride = b.list_splits > 1 ? (nb - b.list_rows) / (b.list_splits - 1) : b.list_rows;
  // Few long heap splits (each pays a warm-up of about k insertions per query): about 256 workgroups, at most 8
  // splits, but at least 1/F of the list pass's, so that about F x k pairs pass it.
  const std::uint64_t query_tiles = ceil_div(batch_queries, tile.block_queries());
  const std::uint64_t want = std::max(ceil_div(b.list_splits, fraction), std::min<std::uint64_t>(8, ceil_div(256, query_tiles)));
  const std::uint64_t every = std::max<std::uint64_t>(1, b.list_splits / want);
  b.splits = ceil_div(b.list_splits, every);
  b.stride = every * b.list_stride;
  b.rows = std::min(b.list_rows, ceil_div(ceil_div(sample / fraction, b.splits), BN) * BN);
  if (b.rows * b.splits < std::max<std::uint64_t>(4 * k, 4 * BN) || 4 * b.rows * b.splits > b.list_rows * b.list_splits)
    return one;
  return b;
}

/// What a search's passes need to know of it (KnnPasses): the select kernel's tile, the queries' width, k (also
/// the stride of the bounds a heap pass starts from), the most queries of one batch (the workspace's buffers hold
/// that many), candidate-list slots per query and the merge's group.
struct KnnPassShape {
  KnnTileParams tile;
  std::uint64_t d = 0, k = 0, batch_queries = 0, slots = 0;
  std::uint32_t merge_group = kKnnMergeGroup;
  bool squared_on_device = false;  // the passes form the k best pairs' squared distances (exact_squared)
  std::uint64_t dense_values = 0;  // a dense bounding sample's values per query (KnnSearchPlan::dense_values)
};

/// Everything a search decides before it touches the device (plan_search): how it is cut into database blocks,
/// query batches and splits, and which passes it runs.
struct KnnSearchPlan {
  KnnTileParams tile;               // the select kernel's tile (the bounding passes are sized on it)
  KnnPlan cut;                      // split rows and the merge group (sized on the first block); queries per batch
  std::uint64_t n = 0, m = 0, d = 0, k = 0;
  std::uint64_t block_rows = 0;     // database rows per block (every block but the last)
  std::uint64_t batch_queries = 0;  // queries per batch (every batch but the last)
  std::uint64_t blocks = 0, batches = 0;
  std::uint64_t fraction = 0;       // a bounding pass samples 1/fraction of a block (0: none)
  std::uint64_t slots = 0;          // candidate-list slots per query; 0: heaps only
  bool cpu = false;                 // a CPU device: short splits, and the loop-limit report checked
  bool coop = false;                // the list passes on cooperative matrices (knn_filter_coop.comp)
  // The selected pairs' squared distances formed on the device as the host's finish forms them
  // (knn_exact_keys.comp): float32 (squared) euclidean searches of one database block on devices with float64.
  bool squared_on_device = false;
  KnnBoundSample first_sample;      // the first block's bounding passes (the sample buffers hold their heaps)
  // The bounding sample written whole (knn_select.comp's kModeDense) and each query's k-th value picked
  // (knn_gather.comp's DENSE) instead of heaps: its values per query (the first block's sample), or 0 for heaps.
  // Float32 searches whose batch of sample values fits the scratch a search may take.
  std::uint64_t dense_values = 0;

  /// Splits of the heap pass over a block of `rows` rows.
  std::uint64_t splits(std::uint64_t rows) const { return ceil_div(rows, cut.split_rows); }
  /// The bounding passes of a block of `rows` rows.
  KnnBoundSample sample(std::uint64_t rows) const {
    return slots ? bound_sample_for_lists(tile, cut, rows, k, cpu, batch_queries, fraction)
                 : bound_sample(tile, cut, rows, k, cpu, false, fraction);
  }
  /// Whether a block runs its bounding passes `s` (at most the first block's splits, whose heaps the buffers hold).
  bool bounded(const KnnBoundSample& s) const { return s.splits > 0 && s.splits <= first_sample.splits; }
  KnnPassShape pass_shape() const {
    return {tile, d, k, batch_queries, slots, cut.merge_group, squared_on_device, dense_values};
  }
};

/// The plan of a search of m > 0 queries against n database rows of d features, in blocks of `block_rows` rows,
/// keeping the k best pairs per query under `metric`, on a device described by `info` (its largest buffer:
/// `max_buffer_bytes`), with `tile` and `options`; `lists_allowed`: whether the tile policy allows candidate lists.
/// `returned_k` (at most k): the neighbours the search returns, which decides whether it uses candidate lists
/// (append_slots). A pure function.
template <class T>
KnnSearchPlan plan_search(const vulkan::DeviceInfo& info, std::uint64_t max_buffer_bytes, const KnnTileParams& tile,
                          bool lists_allowed, std::uint64_t block_rows, std::uint64_t n, std::uint64_t m, std::uint64_t d,
                          std::uint64_t k, std::uint64_t returned_k, Metric metric, const KnnSearchOptions& options) {
  const std::uint64_t s = sizeof(T);
  KnnSearchPlan p;
  p.tile = tile;
  p.n = n, p.m = m, p.d = d, p.k = k;
  p.block_rows = block_rows;
  const std::uint64_t nb_first = std::min(n, block_rows);
  p.cpu = info.type == vulkan::DeviceType::cpu;
  // Cooperative matrices for the list passes of float32 (squared) euclidean searches (knn_filter_coop.comp). Their
  // tile holds twice the queries of the usual one, so the plan asks for at least 8192 tile-sized workgroups (a
  // tuned 1024 left 6 splits and a quarter-filled H200: 93.9 against 83.5 ms at 1M x 128, 10k queries, k = 100).
  const bool coop_lists = std::is_same_v<T, float> && knn_metric_code(metric) == 0 && info.coop_matrix_f16 &&
                          options.cooperative_matrices;
  KnnTileParams plan_tile = tile;
  if (coop_lists) plan_tile.groups = std::max<std::uint32_t>(plan_tile.groups, 8192);
  p.cut = cut<T>(info, max_buffer_bytes, plan_tile, nb_first, m, d, k);
  // The bounding sample pass (its splits are at most the search's, so its heaps fit where the search's do) and,
  // where the lists fit, candidate lists instead of heaps for the bounded pass; the lists bound the query batch.
  if (!options.candidate_lists) lists_allowed = false;
  p.fraction = knn_sample_fraction(options.sample_fraction, k, d);
  std::uint64_t slots = lists_allowed ? append_slots<T>(info, returned_k, k, p.fraction, coop_lists ? 2 : 1) : 0;
  const std::uint64_t max_bytes = std::min<std::uint64_t>(max_buffer_bytes, std::uint64_t(UINT32_MAX));
  // Lists (and a dense sample) of up to 256 MiB, or a sixteenth of the device's memory where that is more; at most a
  // quarter of a configured device-memory limit.
  const std::uint64_t memory = device_memory_budget(info);
  std::uint64_t list_bytes = std::max<std::uint64_t>(256ull << 20, memory / 16);
  if (config().device_memory_limit()) list_bytes = std::min(list_bytes, std::max<std::uint64_t>(memory / 4, 1ull << 20));
  if (slots) {
    const std::uint64_t budget = std::min(max_bytes / slots / s, list_bytes / (slots * (s + 4)));
    if (budget == 0) slots = 0;
    else if (budget < p.cut.batch_queries) p.cut = cut<T>(info, max_buffer_bytes, plan_tile, nb_first, m, d, k, budget);
  }
  p.first_sample = bound_sample(tile, p.cut, nb_first, k, p.cpu, slots != 0, p.fraction);
  if (!p.first_sample.splits) slots = 0;
  p.batch_queries = std::min<std::uint64_t>(m, p.cut.batch_queries);
  if (slots) p.first_sample = bound_sample_for_lists(tile, p.cut, nb_first, k, p.cpu, p.batch_queries, p.fraction);
  p.slots = slots;
  p.coop = slots && coop_lists;
  if (std::is_same_v<T, float> && options.dense_samples && p.first_sample.splits) {
    const std::uint64_t values = p.first_sample.splits * p.first_sample.rows;
    if (p.batch_queries * values * s <= std::min(max_bytes, list_bytes)) p.dense_values = values;
  }
  p.blocks = ceil_div(n, block_rows);
  p.batches = ceil_div(m, p.batch_queries);
  p.squared_on_device = std::is_same_v<T, float> && (metric == Metric::euclidean || metric == Metric::sqeuclidean) &&
                        info.float64 && p.blocks == 1;
  return p;
}

}  // namespace knn_detail

/// The buffers of a search: queries, heaps, candidate lists and staging on the device, the running k best per query
/// on the host. Grown on demand and kept by a resident database between searches, since allocating them (and
/// faulting in fresh host pages) cost more than a small search's kernels. One search at a time uses them.
template <class T>
struct KnnWorkspace {
  std::mutex mutex;
  std::vector<std::pair<T, std::int64_t>> best;
  std::vector<T> best_squared;  // the pairs' squared distances formed on the device (KnnSearchPlan::squared_on_device)
  std::vector<int> best_count;
  vulkan::Buffer queries, query_norms, heap_v, heap_i, list_v, list_i, listed, out_v, out_i, sample_v, sample_i, upload,
      readback, bound_v, bound_i, sample_listed, query_half, out_squared, sample_dense;
  vulkan::Buffer pair_squared;  // knn_float64_squared's distances
  vulkan::Buffer status;  // CPU devices: set by a kernel that llvmpipe's loop limit cut short (host visible)

  /// Where the staged read-back holds, for batches of up to `batch_queries` queries, the k best per query's indices
  /// (its values come first), the search's list counts and the list sample's, and where `squared` the pairs'
  /// squared distances formed on the device (float); `bytes`: its size.
  struct ReadbackLayout {
    std::uint64_t indices = 0, listed = 0, sample_listed = 0, squared = 0, bytes = 0;
  };
  static ReadbackLayout readback_layout(std::uint64_t batch_queries, std::uint64_t k, bool squared) {
    ReadbackLayout r;
    r.indices = batch_queries * k * sizeof(T);
    r.listed = r.indices + batch_queries * k * sizeof(std::uint32_t);
    r.sample_listed = r.listed + batch_queries * sizeof(std::uint32_t);
    r.squared = r.sample_listed + batch_queries * sizeof(std::uint32_t);
    r.bytes = r.squared + (squared ? batch_queries * k * sizeof(float) : 0);
    return r;
  }

  /// `b`, reallocated when smaller than `bytes`.
  static const vulkan::Buffer& fit(vulkan::Device& device, vulkan::Buffer& b, std::uint64_t bytes,
                                   vulkan::MemoryUse use = vulkan::MemoryUse::device) {
    if (!b || b.size() < bytes) {
      b = vulkan::Buffer();  // free first: the old and the new buffer need not fit together
      b = device.buffer(bytes, use);
    }
    return b;
  }

  /// The buffers `plan` uses: heaps for a search without lists (with lists they are fitted only where a batch's
  /// lists overflow, fit_heaps), the staging where the device's buffers are not mapped (staged()).
  void prepare(vulkan::Device& device, const knn_detail::KnnSearchPlan& plan) {
    using vulkan::MemoryUse;
    const std::uint64_t s = sizeof(T), mb = plan.batch_queries, d = plan.d, k = plan.k, u = sizeof(std::uint32_t);
    fit(device, queries, mb * d * s);
    fit(device, query_norms, mb * s);
    if (plan.slots) {
      fit(device, list_v, mb * plan.slots * s);
      fit(device, list_i, mb * plan.slots * u);
      fit(device, listed, mb * u);
      fit(device, out_v, mb * k * s);  // the gathered k best per query
      fit(device, out_i, mb * k * u);
      fit(device, bound_v, mb * k * s);  // the list sample's k best per query
      fit(device, bound_i, mb * k * u);
      fit(device, sample_listed, mb * u);
    } else {
      fit_heaps(device, plan);
    }
    if (plan.first_sample.splits) {
      fit(device, sample_v, plan.first_sample.splits * mb * k * s);
      fit(device, sample_i, plan.first_sample.splits * mb * k * u);
    }
    if (plan.dense_values) fit(device, sample_dense, mb * plan.dense_values * s);
    // Staging: the queries in, and the counts and k best per query out (copied within the search's own submission).
    if (staged()) {
      fit(device, upload, mb * d * s, MemoryUse::upload);
      fit(device, readback, readback_layout(mb, k, plan.squared_on_device).bytes, MemoryUse::readback);
    }
    fit(device, status, 16, MemoryUse::readback);
    if (plan.coop) fit(device, query_half, ceil_div(mb, kKnnCoopQueries) * kKnnCoopQueries * knn_coop_row_pairs(d) * 4);
    if (plan.squared_on_device) fit(device, out_squared, mb * k * sizeof(float));
  }

  /// Heaps: one per query and split.
  void fit_heaps(vulkan::Device& device, const knn_detail::KnnSearchPlan& plan) {
    fit(device, heap_v, plan.cut.splits * plan.batch_queries * plan.k * sizeof(T));
    fit(device, heap_i, plan.cut.splits * plan.batch_queries * plan.k * sizeof(std::uint32_t));
  }

  /// Whether the device's buffers are not mapped, so that queries and results pass through staging buffers.
  bool staged() const noexcept { return queries.mapped() == nullptr; }
};

/// A database on the device: its rows in blocks of one binding each, with their squared norms. Built once (by
/// NearestNeighbors::fit on a Vulkan backend) so that every search reads it in place.
template <class T>
class KnnDatabase {
 public:
  struct Block {
    std::uint64_t first = 0, rows = 0;
    vulkan::Buffer x, norms;
  };

  /// Uploads X. Throws gpuml::unsupported when it would take more than half of the device's memory or of
  /// Config::device_memory_limit (searches then stream the database through one block at a time, see knn_search).
  KnnDatabase(vulkan::Device& device, MatrixView<T> X) : device_(&device), rows_(X.rows()), cols_(X.cols()) {
    require_scalar_support<T>(device);
    const std::uint64_t bytes = rows_ * (cols_ + 1) * sizeof(T), local = device_memory_budget(device.info());
    if (local && bytes > local / 2)
      throw unsupported("a database of " + std::to_string(bytes >> 20) + " MiB does not stay resident on " +
                        device.info().name + " (" + std::to_string(local >> 20) + " MiB)");
    const std::uint64_t block = knn_detail::database_block_rows<T>(device, rows_, cols_);
    for (std::uint64_t r0 = 0; r0 < rows_; r0 += block) blocks_.push_back(upload_block(device, X, r0, std::min(block, rows_ - r0)));
  }

  /// Rows [first, first + rows) of X and their squared norms, on the device.
  static Block upload_block(vulkan::Device& device, MatrixView<T> X, std::uint64_t first, std::uint64_t rows) {
    Block b{first, rows, device.buffer(rows * X.cols() * sizeof(T)), device.buffer(rows * sizeof(T))};
    vulkan::upload_rows<T>(device, b.x, 0, X, first, first + rows);
    vulkan::Commands cmds(device);
    record_row_sq_norms<T>(device, cmds, b.x, b.norms, static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>(X.cols()));
    cmds.submit_and_wait();
    return b;
  }

  vulkan::Device& device() const noexcept { return *device_; }
  std::uint64_t rows() const noexcept { return rows_; }
  std::uint64_t cols() const noexcept { return cols_; }
  const std::vector<Block>& blocks() const noexcept { return blocks_; }
  KnnWorkspace<T>& workspace() const noexcept { return *workspace_; }
  /// The blocks as float16 rows (knn_filter_coop.comp), made by the first search that uses them (under the
  /// workspace's lock).
  std::vector<KnnHalfRows>& half_blocks() const noexcept { return half_blocks_; }
  /// Whether X holds only integers, with its largest squared row norm (algorithms::knn_boundary::integer_rows_norm),
  /// found by the first search that needs it (under the workspace's lock) from X, its database.
  std::optional<double> integer_rows_norm(MatrixView<T> X) const {
    if (!integer_rows_norm_) integer_rows_norm_ = algorithms::knn_boundary::integer_rows_norm<T>(X);
    return *integer_rows_norm_;
  }

 private:
  vulkan::Device* device_;
  std::uint64_t rows_, cols_;
  std::vector<Block> blocks_;
  std::unique_ptr<KnnWorkspace<T>> workspace_ = std::make_unique<KnnWorkspace<T>>();
  mutable std::vector<KnnHalfRows> half_blocks_;
  mutable std::optional<std::optional<double>> integer_rows_norm_;
};

/// What a knn_search did (its `stats` argument, and its result's `stats`).
using KnnSearchStats = algorithms::KnnSearchStats;

/// The kernels a search records, held while it records and submits; null where its plan does not use them.
struct KnnKernels {
  vulkan::KernelRef select;       // knn_select.comp keeping heaps
  vulkan::KernelRef merge;        // knn_merge.comp
  vulkan::KernelRef append;       // knn_select.comp appending to candidate lists
  vulkan::KernelRef gather;       // knn_gather.comp
  vulkan::KernelRef filter_coop;  // knn_filter_coop.comp: the list passes on cooperative matrices
  vulkan::KernelRef half;         // knn_half.comp: float16 rows for filter_coop
  vulkan::KernelRef exact_keys;   // knn_exact_keys.comp: the selected pairs' squared distances
  vulkan::KernelRef dense;        // knn_select.comp writing a bounding sample's values whole
  vulkan::KernelRef kth;          // knn_gather.comp picking each query's k-th value of them

  /// knn_select.comp with `tile` for `metric` in `mode` (heaps, candidate lists or a dense sample: knn_select.h's
  /// kMode*); `cpu`: the loop-limit report of CPU devices.
  template <class T>
  static vulkan::KernelRef make_select(vulkan::Device& device, const KnnTileParams& tile, Metric metric, std::uint32_t mode,
                                       bool cpu) {
    return device.kernel(shaders::knn_select_kernel::spec<T>(tile.constants(knn_metric_code(metric), mode, cpu)));
  }
  template <class T>
  static vulkan::KernelRef make_merge(vulkan::Device& device) {
    return device.kernel(shaders::knn_merge_kernel::spec<T>(
        spec_constants(merge_interface::kSpecCount, {{merge_interface::kSpecThreads, kKnnMergeThreads}})));
  }
  /// knn_gather.comp for lists of `slots` slots; `exact`: it forms the values of the listed pairs (filter_coop's
  /// lists hold indices only); `dense`: it picks the k-th value of a dense sample (no lists: two slots will do).
  template <class T>
  static vulkan::KernelRef make_gather(vulkan::Device& device, std::uint64_t slots, bool exact, bool cpu, bool dense = false) {
    namespace shader = gather_interface;
    return device.kernel(shaders::knn_gather_kernel::spec<T>(spec_constants(
        shader::kSpecCount, {{shader::kSpecThreads, kKnnGatherThreads},
                             {shader::kSpecCapacity, static_cast<std::uint32_t>(slots)},
                             {shader::kSpecExact, exact ? 1u : 0u}, {shader::kSpecLoopGuard, cpu ? 1u : 0u},
                             {shader::kSpecDense, dense ? 1u : 0u}})));
  }

  /// Those that `plan` uses, for `metric`.
  template <class T>
  static KnnKernels for_plan(vulkan::Device& device, const knn_detail::KnnSearchPlan& plan, Metric metric) {
    KnnKernels k;
    k.select = make_select<T>(device, plan.tile, metric, select_interface::kModeHeaps, plan.cpu);
    k.merge = make_merge<T>(device);
    if constexpr (std::is_same_v<T, float>) {
      if (plan.coop) {
        const auto& info = device.info();
        const std::uint32_t resident = knn_coop_resident_pairs(plan.d, info.max_shared_memory);
        k.filter_coop = device.kernel(shaders::knn_filter_coop_kernel::spec<T>(
            spec_constants(filter_coop_interface::kSpecCount,
                           {{filter_coop_interface::kSpecResidentPairs, resident},
                            {filter_coop_interface::kSpecWideSteps, resident % (2 * filter_coop_interface::kStepPairs) == 0 &&
                                                                     resident != 0}}),
            info.min_subgroup_size != info.max_subgroup_size ? 32u : 0u));
        k.half = device.kernel(shaders::knn_half_kernel::spec<T>(spec_constants(half_interface::kSpecCount, {})));
      }
      if (plan.squared_on_device)
        k.exact_keys = device.kernel(shaders::knn_exact_keys_kernel::spec<T>(spec_constants(
            exact_keys_interface::kSpecCount,
            {{exact_keys_interface::kSpecLoopGuard, plan.cpu ? 1u : 0u}, {exact_keys_interface::kSpecFloat64Distances, 0u}})));
    }
    if (plan.slots) {
      k.append = make_select<T>(device, plan.tile, metric, select_interface::kModeLists, plan.cpu);
      k.gather = make_gather<T>(device, plan.slots, k.filter_coop != nullptr, plan.cpu);
    }
    if (plan.dense_values) {
      k.dense = make_select<T>(device, plan.tile, metric, select_interface::kModeDense, plan.cpu);
      k.kth = make_gather<T>(device, 2, false, plan.cpu, true);
    }
    return k;
  }
};

namespace knn_detail {

/// Makes `out` (unless made already) the float16 rows of `block` of X for knn_filter_coop.comp, padded by a filter
/// tile past its end, with their terms; `half`: knn_half.comp.
template <class T>
void make_half_block(vulkan::Device& device, const vulkan::Kernel& half, MatrixView<T> X,
                     const typename KnnDatabase<T>::Block& block, KnnHalfRows& out) {
  if (out.rows) return;
  const std::uint64_t nb = block.rows, d = X.cols();
  const std::uint64_t rows_out = ceil_div(nb, 16) * 16 + kKnnCoopRows;
  out.scale = half_scale<T>(X, static_cast<std::int64_t>(block.first), static_cast<std::int64_t>(block.first + nb));
  out.rows = device.buffer(rows_out * knn_coop_row_pairs(d) * 4);
  out.terms = device.buffer(rows_out * 4);
  vulkan::Commands convert(device);
  record_half_rows<T>(device, convert, half, block.x, block.norms, nb, d, rows_out, out.scale, out.rows, &out.terms);
  convert.submit_and_wait();
}

}  // namespace knn_detail

/// The passes of a search, each recorded into `cmds` with one job, for one (database block, query batch) pair at a
/// time: the batch loaded into the workspace (load_queries) against the block set by set_block. A pass records its
/// dispatches only; the caller orders passes with barriers, then reads back and submits (read_back, submit).
template <class T>
class KnnPasses {
 public:
  using Block = typename KnnDatabase<T>::Block;

  /// `ws` holds the buffers of `shape` (KnnWorkspace::prepare, or fitted by the caller for the passes it runs);
  /// `kernels` those of the passes run; the passes add to `stats`.
  KnnPasses(vulkan::Device& device, vulkan::Commands& cmds, const KnnKernels& kernels, KnnWorkspace<T>& ws,
            KnnSearchStats& stats, const knn_detail::KnnPassShape& shape)
      : device_(device), cmds_(cmds), kernels_(kernels), ws_(ws), stats_(stats), shape_(shape),
        layout_(KnnWorkspace<T>::readback_layout(shape.batch_queries, shape.k, shape.squared_on_device)) {}

  /// The points of a recording whose timestamps time the search's phases (KnnSearchStats::Phases): a phase ends
  /// at its mark and starts at the latest mark recorded before it.
  enum Mark : std::uint32_t { kMarkBegin, kMarkLoaded, kMarkSampled, kMarkBound, kMarkScanned, kMarkGathered, kMarkEnd, kMarks };

  /// Starts a new recording; clears the loop-limit report first where `clear_status` (CPU devices).
  void begin(bool clear_status) {
    cmds_.reset();
    marked_ = 0;
    squared_recorded_ = false;
    if (clear_status) {
      cmds_.fill(ws_.status, 0, 16, 0u);
      cmds_.barrier();
    }
    mark(kMarkBegin);
  }
  /// Where the passes' device time starts (submit ends it): after the queries' load.
  void start_clock() { mark(kMarkLoaded); }
  /// Records the timestamp of `m` (once per recording).
  void mark(Mark m) {
    cmds_.timestamp(m);
    marked_ |= 1u << m;
  }
  /// Makes every earlier pass's writes visible to every later pass.
  void barrier() { cmds_.barrier(); }

  /// Records the upload of query rows [first, first + rows) into the workspace (at most the shape's batch), their
  /// squared norms and, where the cooperative-matrix filter runs, their float16 rows.
  void load_queries(MatrixView<T> queries, std::uint64_t first, std::uint64_t rows) {
    const auto q0 = static_cast<std::int64_t>(first), q1 = static_cast<std::int64_t>(first + rows);
    // Rows packed straight into mapped memory.
    vulkan::pack_rows<T>(queries, q0, q1, static_cast<T*>(ws_.staged() ? ws_.upload.mapped() : ws_.queries.mapped()));
    if (ws_.staged()) {
      cmds_.copy(ws_.upload, 0, ws_.queries, 0, rows * shape_.d * sizeof(T));
      cmds_.barrier();
    }
    record_row_sq_norms<T>(device_, cmds_, ws_.queries, ws_.query_norms, rows, shape_.d);
    if (kernels_.filter_coop) {
      query_scale_ = knn_detail::half_scale<T>(queries, q0, q1);
      knn_detail::record_half_rows<T>(device_, cmds_, *kernels_.half, ws_.queries, ws_.query_norms, rows, shape_.d,
                                      ceil_div(rows, kKnnCoopQueries) * kKnnCoopQueries, query_scale_, ws_.query_half,
                                      nullptr);
    }
    cmds_.barrier();
  }

  /// The database block the next passes read (`half`: its float16 rows where the cooperative-matrix filter runs),
  /// against the first `queries` queries loaded.
  void set_block(const Block& block, const KnnHalfRows* half, std::uint64_t queries) {
    block_ = &block;
    half_ = half;
    mb_ = queries;
  }

  /// The heap pass (knn_select.comp): every query's k best pairs of each of n_splits splits of split_rows rows,
  /// stride apart, into heaps (v, i): split s's at s x queries x k. From +inf, or from the bounds where given (query
  /// q's at element q x k of `bounds`: a merged heap's root).
  void heap_pass(std::uint64_t n_splits, std::uint64_t split_rows, std::uint64_t stride, const vulkan::Buffer* bounds,
                 const vulkan::Buffer& v, const vulkan::Buffer& i) {
    const select_interface::Push push{.m = std::uint32_t(mb_), .n = std::uint32_t(block_->rows), .d = std::uint32_t(shape_.d),
                                      .k = std::uint32_t(shape_.k), .split_rows = std::uint32_t(split_rows),
                                      .base = std::uint32_t(block_->first), .split_stride = std::uint32_t(stride),
                                      .bounded = bounds ? 1u : 0u, .cap = 0u};
    namespace shader = select_interface;
    cmds_.dispatch(kernels_.select,
                   {{shader::kBindingQueries, ws_.queries}, {shader::kBindingRows, block_->x},
                    {shader::kBindingQueryNorms, ws_.query_norms}, {shader::kBindingRowNorms, block_->norms},
                    {shader::kBindingValues, v}, {shader::kBindingIndices, i}, {shader::kBindingBound, bounds ? *bounds : v},
                    {shader::kBindingListed, i}, {shader::kBindingStatus, ws_.status}},  // no lists: any buffer
                   push, query_tiles(), static_cast<std::uint32_t>(n_splits));
  }

  /// The bounding sample's pass: each query's k-th best value over `sample`'s splits (sample.splits of sample.rows
  /// rows, sample.stride apart) at element q x k of ws.sample_v, where a merged heap's root is read as a bound. The
  /// sample's values written whole and their k-th picked where the shape has room for them (dense_values), the same
  /// value as the root of its heaps (the kernels form the same values); heaps, merged, otherwise. Returns whether
  /// it was dense.
  bool sample_pass(const knn_detail::KnnBoundSample& sample) {
    const std::uint64_t values = sample.splits * sample.rows;
    if (!kernels_.dense || values > shape_.dense_values) {
      heap_pass(sample.splits, sample.rows, sample.stride, nullptr, ws_.sample_v, ws_.sample_i);
      merge_heaps(ws_.sample_v, ws_.sample_i, sample.splits);
      return false;
    }
    {
      const select_interface::Push push{.m = std::uint32_t(mb_), .n = std::uint32_t(block_->rows),
                                        .d = std::uint32_t(shape_.d), .k = std::uint32_t(shape_.k),
                                        .split_rows = std::uint32_t(sample.rows), .base = std::uint32_t(block_->first),
                                        .split_stride = std::uint32_t(sample.stride), .bounded = 0u,
                                        .cap = std::uint32_t(values)};
      namespace shader = select_interface;
      cmds_.dispatch(kernels_.dense,
                     {{shader::kBindingQueries, ws_.queries}, {shader::kBindingRows, block_->x},
                      {shader::kBindingQueryNorms, ws_.query_norms}, {shader::kBindingRowNorms, block_->norms},
                      {shader::kBindingValues, ws_.sample_dense}, {shader::kBindingIndices, ws_.sample_i},
                      {shader::kBindingBound, ws_.sample_v}, {shader::kBindingListed, ws_.sample_i},
                      {shader::kBindingStatus, ws_.status}},  // values only: any buffer for the rest
                     push, query_tiles(), static_cast<std::uint32_t>(sample.splits));
    }
    cmds_.barrier();
    // Values only: the indices' and counts' bindings take any buffer.
    dispatch_gather(kernels_.kth, ws_.sample_dense, ws_.sample_i, ws_.sample_i, ws_.sample_v, ws_.sample_i, values);
    return true;
  }

  /// Merges the heaps of n_splits splits (heap_pass) into split 0's, the shape's merge group at a time.
  void merge_heaps(const vulkan::Buffer& v, const vulkan::Buffer& i, std::uint64_t n_splits) {
    const std::uint32_t group = shape_.merge_group;
    for (std::uint64_t stride = 1; stride < n_splits; stride *= group) {
      cmds_.barrier();
      const merge_interface::Push push{.m = std::uint32_t(mb_), .k = std::uint32_t(shape_.k), .splits = std::uint32_t(n_splits),
                                       .stride = std::uint32_t(stride), .group = group};
      cmds_.dispatch(kernels_.merge, {{merge_interface::kBindingValues, v}, {merge_interface::kBindingIndices, i}}, push,
                     static_cast<std::uint32_t>(ceil_div(mb_, kKnnMergeThreads)),
                     static_cast<std::uint32_t>(ceil_div(n_splits, stride * group)));
    }
  }

  /// Records the zeroing of the list counts `listed` (one per query), before a list pass appends to them.
  void clear_counts(const vulkan::Buffer& listed) { cmds_.fill(listed, 0, mb_ * sizeof(std::uint32_t), 0u); }

  /// The list pass, usable on its own given per-query bounds (a radius search: every bound the radius, on the
  /// selection scale: squared for euclidean, -similarity for the inner product): over n_splits splits of split_rows
  /// rows, stride apart, every pair whose value is at most its query's bound (query q's at element q x bound_stride
  /// of `bounds`; widened by 2^-20 of its size, as knn_select.comp does) is appended to the query's candidate list in
  /// the workspace (list_v, list_i: the shape's slots per query) and counted in `listed`, which the caller zeroes
  /// first (clear_counts). A count above the slots means the list overflowed: only the first pairs appended are kept.
  /// With the cooperative-matrix filter (float32 (squared) euclidean), the lists hold the indices of candidates, a
  /// superset of those pairs, and no values: knn_gather.comp (EXACT) forms and tests them.
  void list_pass(std::uint64_t n_splits, std::uint64_t split_rows, std::uint64_t stride, const vulkan::Buffer& bounds,
                 std::uint64_t bound_stride, const vulkan::Buffer& listed) {
    if (kernels_.filter_coop) {
      const filter_coop_interface::Push push{
          .m = std::uint32_t(mb_), .k = std::uint32_t(bound_stride), .pairs = std::uint32_t(knn_coop_row_pairs(shape_.d)),
          .split_rows = std::uint32_t(split_rows), .split_stride = std::uint32_t(stride), .base = std::uint32_t(block_->first),
          .cap = std::uint32_t(shape_.slots), .nb = std::uint32_t(block_->rows), .qscale = query_scale_,
          .d = std::uint32_t(shape_.d), .fold = -0.5f * query_scale_ * half_->scale};
      namespace shader = filter_coop_interface;
      cmds_.dispatch(kernels_.filter_coop,
                     {{shader::kBindingQueryHalf, ws_.query_half}, {shader::kBindingRowHalf, half_->rows},
                      {shader::kBindingQueryNorms, ws_.query_norms}, {shader::kBindingRowTerms, half_->terms},
                      {shader::kBindingIndices, ws_.list_i}, {shader::kBindingListed, listed}, {shader::kBindingBound, bounds}},
                     push,
                     static_cast<std::uint32_t>(ceil_div(mb_, kKnnCoopQueries)), static_cast<std::uint32_t>(n_splits));
      ++stats_.coop_passes;
      return;
    }
    const select_interface::Push push{.m = std::uint32_t(mb_), .n = std::uint32_t(block_->rows), .d = std::uint32_t(shape_.d),
                                      .k = std::uint32_t(bound_stride), .split_rows = std::uint32_t(split_rows),
                                      .base = std::uint32_t(block_->first), .split_stride = std::uint32_t(stride),
                                      .bounded = 1u, .cap = std::uint32_t(shape_.slots)};
    namespace shader = select_interface;
    cmds_.dispatch(kernels_.append,
                   {{shader::kBindingQueries, ws_.queries}, {shader::kBindingRows, block_->x},
                    {shader::kBindingQueryNorms, ws_.query_norms}, {shader::kBindingRowNorms, block_->norms},
                    {shader::kBindingValues, ws_.list_v}, {shader::kBindingIndices, ws_.list_i}, {shader::kBindingBound, bounds},
                    {shader::kBindingListed, listed}, {shader::kBindingStatus, ws_.status}},
                   push, query_tiles(), static_cast<std::uint32_t>(n_splits));
  }

  /// The gather of the candidate lists counted in `listed` (knn_gather.comp): each query's k best pairs, into (v, i),
  /// written k-th best first, so that its first pair is the bound a heap root gives.
  void gather_lists(const vulkan::Buffer& listed, const vulkan::Buffer& v, const vulkan::Buffer& i) {
    dispatch_gather(kernels_.gather, ws_.list_v, ws_.list_i, listed, v, i, shape_.slots);
  }

  /// The squared distances of the k pairs per query whose indices `i` holds (the gathered lists' or the merged
  /// heaps'), as the host's finish forms them (knn_exact_keys.comp), into ws.out_squared; read back with them
  /// (squared()).
  void exact_squared(const vulkan::Buffer& i) {
    cmds_.barrier();
    const exact_keys_interface::Push push{.m = std::uint32_t(mb_), .k = std::uint32_t(shape_.k), .d = std::uint32_t(shape_.d),
                                          .base = std::uint32_t(block_->first)};
    const LinearGrid grid = linear_grid(device_.info(), ceil_div(mb_ * shape_.k, exact_keys_interface::kThreads),
                                        "k-NN's exact distances");
    namespace shader = exact_keys_interface;
    cmds_.dispatch(kernels_.exact_keys,
                   {{shader::kBindingQueries, ws_.queries}, {shader::kBindingRows, block_->x},
                    {shader::kBindingIndices, i}, {shader::kBindingSquared, ws_.out_squared},
                    {shader::kBindingStatus, ws_.status}},
                   push, grid.x, grid.y);
    squared_recorded_ = true;
  }

  /// Makes the k best per query (v, i) and, `with_counts`, the list counts (the search's and the list sample's)
  /// readable by the host after submit (results, overflowed), with the pairs' squared distances where recorded.
  void read_back(const vulkan::Buffer& v, const vulkan::Buffer& i, bool with_counts) {
    cmds_.barrier();
    if (ws_.staged()) {
      cmds_.copy(v, 0, ws_.readback, 0, mb_ * shape_.k * sizeof(T));
      cmds_.copy(i, 0, ws_.readback, layout_.indices, mb_ * shape_.k * sizeof(std::uint32_t));
      if (with_counts) {
        cmds_.copy(ws_.listed, 0, ws_.readback, layout_.listed, mb_ * sizeof(std::uint32_t));
        cmds_.copy(ws_.sample_listed, 0, ws_.readback, layout_.sample_listed, mb_ * sizeof(std::uint32_t));
      }
      if (squared_recorded_) cmds_.copy(ws_.out_squared, 0, ws_.readback, layout_.squared, mb_ * shape_.k * sizeof(float));
    }
    cmds_.host_barrier();
  }

  /// After submit: the squared distances of the k pairs per query (exact_squared; NaN: left to the host), or null
  /// where this submission did not form them.
  const float* squared() const {
    if (!squared_recorded_) return nullptr;
    return static_cast<const float*>(
        ws_.staged() ? static_cast<const void*>(static_cast<const char*>(ws_.readback.mapped()) + layout_.squared)
                     : ws_.out_squared.mapped());
  }

  /// Submits the recording and waits; adds its device time (from start_clock) to the stats. Throws
  /// gpuml::unsupported where llvmpipe cut a kernel short.
  void submit() {
    mark(kMarkEnd);
    const auto waited = std::chrono::steady_clock::now();
    cmds_.submit_and_wait();
    stats_.ms.wait += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - waited).count();
    add_device_ms(stats_.device_ms, cmds_.elapsed_ms(kMarkLoaded, kMarkEnd));
    double* phase[kMarks] = {nullptr,         &stats_.ms.load, &stats_.ms.sample, &stats_.ms.bound,
                             &stats_.ms.scan, &stats_.ms.gather, &stats_.ms.read};
    for (std::uint32_t from = kMarkBegin, to = from + 1; to < kMarks; ++to) {
      if (!(marked_ >> to & 1u)) continue;
      add_device_ms(*phase[to], cmds_.elapsed_ms(from, to));
      from = to;
    }
    if (device_.info().type == vulkan::DeviceType::cpu && *static_cast<const std::uint32_t*>(ws_.status.mapped()) != 0)
      throw unsupported(device_.info().name + " cut the k-NN kernels short (llvmpipe's limit of 65535 loop iterations "
                        "per invocation) for d=" + std::to_string(shape_.d) + ", k=" + std::to_string(shape_.k));
  }

  /// After submit: whether a list counted in the workspace's `listed` (ws.listed or ws.sample_listed, read back with
  /// counts) overflowed its slots (thousands of pairs tied at a bound).
  bool overflowed(const vulkan::Buffer& listed) const {
    const std::uint64_t at = &listed == &ws_.sample_listed ? layout_.sample_listed : layout_.listed;
    const auto* c = static_cast<const std::uint32_t*>(
        ws_.staged() ? static_cast<const void*>(static_cast<const char*>(ws_.readback.mapped()) + at) : listed.mapped());
    return std::any_of(c, c + mb_, [&](std::uint32_t n_listed) { return n_listed > shape_.slots; });
  }

  /// After submit: the k best per query read back from (v, i), in mapped memory (queries x k each).
  std::pair<const T*, const std::uint32_t*> results(const vulkan::Buffer& v, const vulkan::Buffer& i) const {
    const void* vals = ws_.staged() ? ws_.readback.mapped() : v.mapped();
    const void* idx = ws_.staged() ? static_cast<const char*>(ws_.readback.mapped()) + layout_.indices : i.mapped();
    return {static_cast<const T*>(vals), static_cast<const std::uint32_t*>(idx)};
  }

 private:
  /// knn_gather.comp (`kernel`: lists, or a dense sample's k-th) over the batch, one workgroup per query: lists
  /// (values, indices, counts) of `cap` slots per query, the k best (or the k-th) into (v, i).
  void dispatch_gather(const vulkan::KernelRef& kernel, const vulkan::Buffer& values, const vulkan::Buffer& indices,
                       const vulkan::Buffer& listed, const vulkan::Buffer& v, const vulkan::Buffer& i, std::uint64_t cap) {
    const gather_interface::Push push{.m = std::uint32_t(mb_), .k = std::uint32_t(shape_.k), .cap = std::uint32_t(cap),
                                      .d = std::uint32_t(shape_.d), .base = std::uint32_t(block_->first)};
    const auto gx = static_cast<std::uint32_t>(std::min<std::uint64_t>(mb_, device_.info().max_workgroup_count[0]));
    namespace shader = gather_interface;
    cmds_.dispatch(kernel,
                   {{shader::kBindingListValues, values}, {shader::kBindingListIndices, indices},
                    {shader::kBindingListed, listed}, {shader::kBindingOutValues, v}, {shader::kBindingOutIndices, i},
                    {shader::kBindingQueries, ws_.queries}, {shader::kBindingRows, block_->x},
                    {shader::kBindingQueryNorms, ws_.query_norms}, {shader::kBindingRowNorms, block_->norms},
                    {shader::kBindingStatus, ws_.status}},
                   push, gx, static_cast<std::uint32_t>(ceil_div(mb_, gx)));
  }

  std::uint32_t query_tiles() const { return static_cast<std::uint32_t>(ceil_div(mb_, shape_.tile.block_queries())); }

  vulkan::Device& device_;
  vulkan::Commands& cmds_;
  const KnnKernels& kernels_;
  KnnWorkspace<T>& ws_;
  KnnSearchStats& stats_;
  knn_detail::KnnPassShape shape_;
  typename KnnWorkspace<T>::ReadbackLayout layout_;
  const Block* block_ = nullptr;
  const KnnHalfRows* half_ = nullptr;
  std::uint64_t mb_ = 0;
  std::uint32_t marked_ = 0;  // the marks recorded since begin (bit per Mark)
  bool squared_recorded_ = false;  // exact_squared recorded since begin
  float query_scale_ = 1;  // the loaded queries' float16 scale
};

namespace knn_detail {

/// The heap pass over a whole block of `rows` rows (from the bounds where given), its merge, read-back and
/// submission: the k best per query in ws.heap_v / heap_i.
template <class T>
void search_with_heaps(vulkan::Device& device, KnnPasses<T>& passes, KnnWorkspace<T>& ws, const KnnSearchPlan& plan,
                       std::uint64_t rows, const vulkan::Buffer* bounds) {
  ws.fit_heaps(device, plan);
  const std::uint64_t splits = plan.splits(rows);
  passes.heap_pass(splits, plan.cut.split_rows, plan.cut.split_rows, bounds, ws.heap_v, ws.heap_i);
  passes.merge_heaps(ws.heap_v, ws.heap_i, splits);
  passes.mark(KnnPasses<T>::kMarkScanned);
  if (plan.squared_on_device) {
    passes.exact_squared(ws.heap_i);  // split 0's heap: the merged k best
    passes.mark(KnnPasses<T>::kMarkGathered);
  }
  passes.read_back(ws.heap_v, ws.heap_i, false);
  passes.submit();
}

/// The search of one (database block of `rows` rows, query batch) pair, recorded after the batch's load and
/// start_clock: the bounding passes `sample` where the plan runs them (a heap pass over a sample, then with lists a
/// list pass over a larger one and its gather), then the list pass over the block and its gather (and, where a
/// list overflowed, heaps for the batch from the bounds that hold), or heaps; submitted. Returns whether the k best
/// per query came from the lists (ws.out_v / out_i) rather than the heaps (ws.heap_v / heap_i).
template <class T>
bool search_block_batch(vulkan::Device& device, KnnPasses<T>& passes, KnnWorkspace<T>& ws, const KnnSearchPlan& plan,
                        const KnnBoundSample& sample, std::uint64_t rows, KnnSearchStats& st) {
  const bool bounded = plan.bounded(sample);
  const bool lists = bounded && plan.slots;
  const bool list_sample = lists && sample.list_splits > 0;
  if (lists) passes.clear_counts(ws.listed);
  if (list_sample) passes.clear_counts(ws.sample_listed);
  if (bounded) {
    if (passes.sample_pass(sample)) ++st.dense_samples;
    passes.barrier();
    st.sample_rows += sample.splits * sample.rows;
    passes.mark(KnnPasses<T>::kMarkSampled);
  }
  if (list_sample) {
    passes.list_pass(sample.list_splits, sample.list_rows, sample.list_stride, ws.sample_v, plan.k, ws.sample_listed);
    passes.barrier();
    passes.gather_lists(ws.sample_listed, ws.bound_v, ws.bound_i);
    passes.barrier();
    st.sample_rows += sample.list_splits * sample.list_rows;
  }
  if (bounded) passes.mark(KnnPasses<T>::kMarkBound);
  const vulkan::Buffer& bound = list_sample ? ws.bound_v : ws.sample_v;
  if (!lists) {
    search_with_heaps(device, passes, ws, plan, rows, bounded ? &bound : nullptr);
    return false;
  }
  passes.list_pass(plan.splits(rows), plan.cut.split_rows, plan.cut.split_rows, bound, plan.k, ws.listed);
  passes.barrier();
  passes.mark(KnnPasses<T>::kMarkScanned);
  passes.gather_lists(ws.listed, ws.out_v, ws.out_i);
  if (plan.squared_on_device) passes.exact_squared(ws.out_i);
  passes.mark(KnnPasses<T>::kMarkGathered);
  passes.read_back(ws.out_v, ws.out_i, true);
  passes.submit();
  // Overflowed lists (many pairs tied at a bound): the list sample's, whose bounds are then unusable, or the
  // search's. Heaps for this batch then, from the bounds that hold.
  const bool sample_overflow = list_sample && passes.overflowed(ws.sample_listed);
  const bool from_lists = !sample_overflow && !passes.overflowed(ws.listed);
  ++(from_lists ? st.list_batches : st.list_overflows);
  if (!from_lists) {
    passes.begin(true);
    passes.start_clock();
    search_with_heaps(device, passes, ws, plan, rows, sample_overflow ? &ws.sample_v : &bound);
  }
  return from_lists;
}

/// Merges a batch's k best per query (vals, idx: queries x k; sentinels skipped) into the running lists of queries
/// [q0, q0 + queries) (best: k (value, index) pairs per query, the first best_count[q] in use), cut to the k best.
/// Sorted where `sort_now`; otherwise (the first block, where the finish sorts anyway) kept unsorted.
template <class T>
void merge_running(std::vector<std::pair<T, std::int64_t>>& best, std::vector<int>& best_count, const T* vals,
                   const std::uint32_t* idx, std::uint64_t q0, std::uint64_t queries, int k, bool sort_now) {
  using Cand = std::pair<T, std::int64_t>;
  parallel_chunks(static_cast<std::int64_t>(queries), 64, [&](std::int64_t, std::int64_t qb, std::int64_t qe) {
    std::vector<Cand> cand;
    for (std::int64_t lq = qb; lq < qe; ++lq) {
      const std::size_t q = static_cast<std::size_t>(q0 + lq);
      cand.assign(best.begin() + q * k, best.begin() + q * k + best_count[q]);
      const std::size_t off = static_cast<std::size_t>(lq * k);
      for (int c = 0; c < k; ++c)
        if (idx[off + c] != UINT32_MAX) cand.emplace_back(vals[off + c], static_cast<std::int64_t>(idx[off + c]));
      const std::size_t keep = std::min<std::size_t>(cand.size(), static_cast<std::size_t>(k));
      if (sort_now) std::partial_sort(cand.begin(), cand.begin() + keep, cand.end());
      std::copy_n(cand.begin(), keep, best.begin() + q * k);
      best_count[q] = static_cast<int>(keep);
    }
  });
}

/// The selection of a search on the device: the best k (selection value, index) pairs of every query
/// (algorithms::Candidates) into `best`, through the plan's blocks and batches. `tile`: the select kernel's;
/// `returned_k`: the neighbours the search returns (plan_search); `ws`: the search's workspace, locked.
template <class T>
void select_on_device(vulkan::Device& device, MatrixView<T> database, MatrixView<T> queries, int k, std::uint64_t returned_k,
                      Metric metric, const KnnDatabase<T>* resident, const KnnTileParams& tile, bool lists_allowed,
                      const KnnSearchOptions& options, KnnWorkspace<T>& ws, std::vector<std::pair<T, std::int64_t>>& best,
                      std::vector<T>& squared, KnnSearchStats& st) {
  const std::int64_t n = database.rows(), d = database.cols(), m = queries.rows();
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); };
  auto t0 = Clock::now();
  // The plan.
  const std::uint64_t nb_max = resident ? resident->blocks().front().rows : database_block_rows<T>(device, n, d);
  const KnnSearchPlan plan = plan_search<T>(device.info(), device.max_buffer_bytes(), tile, lists_allowed, nb_max, n, m,
                                            d, k, returned_k, metric, options);

  // The workspace and the kernels.
  ws.prepare(device, plan);
  const KnnKernels kernels = KnnKernels::for_plan<T>(device, plan, metric);

  // Running k best per query, merged from every database block; (value, index) ordered.
  auto& best_count = ws.best_count;
  best.resize(static_cast<std::size_t>(m) * k);
  best_count.assign(static_cast<std::size_t>(m), 0);
  // The pairs' squared distances, in best's order (one block: its pairs are kept as read back), NaN where the host
  // forms them.
  if (plan.squared_on_device) squared.resize(best.size());
  else squared.clear();

  st.database_blocks = plan.blocks;
  st.streamed = resident == nullptr;

  // The blocks and batches, through the passes.
  vulkan::Commands cmds(device, KnnPasses<T>::kMarks);
  KnnPasses<T> passes(device, cmds, kernels, ws, st, plan.pass_shape());
  if (plan.coop && resident) resident->half_blocks().resize(plan.blocks);
  st.ms.setup += since(t0);
  for (std::uint64_t blk = 0; blk < plan.blocks; ++blk) {
    t0 = Clock::now();
    const std::uint64_t b0 = blk * nb_max;
    typename KnnDatabase<T>::Block streamed;
    if (!resident) streamed = KnnDatabase<T>::upload_block(device, database, b0, std::min<std::uint64_t>(nb_max, n - b0));
    const auto& block = resident ? resident->blocks()[blk] : streamed;
    KnnHalfRows streamed_half;
    KnnHalfRows* xhalf = plan.coop ? (resident ? &resident->half_blocks()[blk] : &streamed_half) : nullptr;
    if (xhalf) make_half_block<T>(device, *kernels.half, database, block, *xhalf);
    const KnnBoundSample sample = plan.sample(block.rows);
    st.ms.setup += since(t0);
    for (std::uint64_t q0 = 0; q0 < std::uint64_t(m); q0 += plan.batch_queries) {
      const std::uint64_t mb = std::min<std::uint64_t>(plan.batch_queries, m - q0);
      t0 = Clock::now();
      passes.begin(plan.cpu);
      if (plan.batches > 1 || blk == 0) passes.load_queries(queries, q0, mb);
      passes.start_clock();
      st.ms.pack += since(t0);
      passes.set_block(block, xhalf, mb);
      const bool from_lists = search_block_batch<T>(device, passes, ws, plan, sample, block.rows, st);
      const auto [vals, idx] = from_lists ? passes.results(ws.out_v, ws.out_i) : passes.results(ws.heap_v, ws.heap_i);
      // The first block's pairs are all kept unsorted: the finish sorts them anyway.
      t0 = Clock::now();
      merge_running<T>(best, best_count, vals, idx, q0, mb, k, blk > 0);
      if constexpr (std::is_same_v<T, float>) {
        if (plan.squared_on_device) {
          const auto at = squared.begin() + static_cast<std::ptrdiff_t>(q0 * k);
          if (const float* sq = passes.squared()) {
            std::atomic<std::uint64_t> formed{0};
            parallel_chunks(static_cast<std::int64_t>(mb), 256, [&](std::int64_t, std::int64_t b, std::int64_t e) {
              std::copy(sq + b * k, sq + e * k, at + b * k);
              formed += static_cast<std::uint64_t>(std::count_if(sq + b * k, sq + e * k, [](float v) { return v > 0.0f; }));
            });
            st.squared_on_device += formed.load();
          } else {
            std::fill_n(at, mb * k, std::numeric_limits<float>::quiet_NaN());
          }
        }
      }
      st.ms.merge += since(t0);
      if (options.on_progress &&
          !options.on_progress(WorkProgress{blk * std::uint64_t(m) + q0 + mb, plan.blocks * std::uint64_t(m)}))
        throw cancelled("the k-NN search was cancelled");
    }
  }
  for (int c : best_count)
    if (c != k) throw error("knn_search: the device returned fewer than k neighbours for a query");
}

}  // namespace knn_detail

/// The k nearest database rows of every query row, computed on `device`; the same contract as host::knn_search
/// (algorithms/knn.hpp: the first k of every row by (returned value, index), inner product descending, exact values
/// for the selected rows; the same result bit for bit where the engines' returned values agree, as they do for the
/// metrics they recompute). `resident`, when given, is `database` already on this device; otherwise the database is
/// uploaded block by block for this search. `options`: the search's switches (default: the process's Config);
/// `stats`, when given, receives what the search did.
template <class T>
algorithms::KnnResult<T> knn_search(vulkan::Device& device, MatrixView<T> database, MatrixView<T> queries, int k, Metric metric,
                                    const KnnDatabase<T>* resident = nullptr,
                                    const KnnSearchOptions& options = KnnSearchOptions::from(config()),
                                    KnnSearchStats* stats = nullptr) {
  static_assert(is_supported_scalar<T>, "gpuml supports float and double");
  using Index = std::int64_t;
  const Index n = database.rows(), d = database.cols(), m = queries.rows();
  algorithms::check_search(n, d, queries.cols(), k);
  const std::uint32_t max_k = options.policy.max_k;
  if (static_cast<std::uint64_t>(k) > max_k)
    throw unsupported("knn_search on a Vulkan device supports k <= " + std::to_string(max_k) + ", got k = " +
                      std::to_string(k) + " (use the host engine)");
  if (static_cast<std::uint64_t>(n) >= UINT32_MAX)
    throw unsupported("knn_search on a Vulkan device supports at most 2^32 - 2 database rows");
  require_scalar_support<T>(device);
  const KnnTileParams tile = choose_tile<KnnTileTraits, T>(options.policy.tile, device.info(),
                                                           {static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(d)});
  if (auto why = tile.misfit<T>(device.info()); !why.empty())
    throw unsupported("k-NN tile policy cannot run on " + device.info().name + ": " + why);
  if (resident && (&resident->device() != &device || resident->rows() != std::uint64_t(n) || resident->cols() != std::uint64_t(d)))
    throw error("knn_search: the resident database does not match the database given");

  KnnSearchStats local_stats;
  KnnSearchStats& st = stats ? *stats : local_stats;
  st = KnnSearchStats{.device_ms = 0};
  if (m == 0) {
    algorithms::KnnResult<T> result{Matrix<T>(m, k), IndexMatrix(m, k)};
    result.stats = st;
    return result;
  }
  const bool lists_allowed = options.policy.candidate_lists;

  KnnWorkspace<T> scratch;
  KnnWorkspace<T>& ws = resident ? resident->workspace() : scratch;
  std::lock_guard ws_lock(ws.mutex);
  // (timed from here: the wait for another search of the same resident database is not this search's time)
  using Clock = std::chrono::steady_clock;
  const auto search_start = Clock::now();
  double selecting_ms = 0;  // in the selections on the device; the rest of the search is the host's finish
  // Selections wider than the kernel's k (a query with thousands of ties at its k-th value) are scanned on the host.
  bool first = true;
  algorithms::KnnResult<T> result = algorithms::search_exactly<T>(
      database, queries, k, metric, static_cast<Index>(max_k) + 1, ws.best, ws.best_squared,
      [&](MatrixView<T> batch, Index width, algorithms::Candidates<T>& out, std::vector<T>& squared) {
        // The first selection gives the search's statistics and progress; a wider one for a few queries adds its
        // device time.
        const auto selecting = Clock::now();
        KnnSearchStats wider{.device_ms = 0};
        KnnSearchOptions round = options;
        if (!first) round.on_progress = nullptr;
        const std::uint64_t returned_k = first ? std::uint64_t(k) : std::uint64_t(width);
        knn_detail::select_on_device<T>(device, database, batch, static_cast<int>(width), returned_k, metric, resident, tile,
                                        lists_allowed, round, ws, out, squared, first ? st : wider);
        if (!first) {
          add_device_ms(st.device_ms, wider.device_ms);
          st.ms.add(wider.ms);
        }
        first = false;
        selecting_ms += std::chrono::duration<double, std::milli>(Clock::now() - selecting).count();
      },
      [&] {
        return resident ? resident->integer_rows_norm(database) : algorithms::knn_boundary::integer_rows_norm<T>(database);
      });
  st.boundary_queries = result.stats.boundary_queries;
  st.ms.total = std::chrono::duration<double, std::milli>(Clock::now() - search_start).count();
  st.ms.finish = st.ms.total - selecting_ms;
  result.stats = st;
  return result;
}

/// Whether knn_float64_squared can run on `db`'s device: float64 arithmetic, the database in one block.
inline bool knn_float64_squared_can_run(const KnnDatabase<float>& db) noexcept {
  return db.device().info().float64 && db.blocks().size() == 1;
}

namespace knn_detail {

/// knn_float64_squared for the pairs of query i at [offsets(i), offsets(i + 1)) of indices and out: every query's
/// k pairs (k > 0: the indices go up alone) or ragged lists (k = 0: each pair goes up as (query row, index)).
template <class Offsets>
void float64_squared(const KnnDatabase<float>& db, const MatrixView<float>* queries, std::uint64_t m,
                     const Offsets& offsets, std::uint64_t k, const std::int64_t* indices, double* out) {
  namespace shader = exact_keys_interface;
  if (!knn_float64_squared_can_run(db)) throw unsupported("float64 distances on " + db.device().info().name);
  // Batches of whole queries, at most 2^22 pairs each where a query has fewer.
  constexpr std::uint64_t kBatchPairs = std::uint64_t(1) << 22;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> batches;  // [first, last) queries
  std::uint64_t most_rows = 0, most_pairs = 0;
  for (std::uint64_t first = 0; first < m;) {
    std::uint64_t last = first + 1;
    while (last < m && std::uint64_t(offsets(last + 1) - offsets(first)) <= kBatchPairs) ++last;
    batches.emplace_back(first, last);
    most_rows = std::max(most_rows, last - first);
    most_pairs = std::max(most_pairs, std::uint64_t(offsets(last) - offsets(first)));
    first = last;
  }
  if (most_pairs == 0) return;
  vulkan::Device& device = db.device();
  const bool cpu = device.info().type == vulkan::DeviceType::cpu, paired = k == 0;
  const std::uint64_t d = db.cols(), per_pair = paired ? 2 : 1;  // uints per pair
  vulkan::KernelRef kernel = device.kernel(shaders::knn_exact_keys_kernel::spec<float>(spec_constants(
      shader::kSpecCount, {{shader::kSpecLoopGuard, cpu ? 1u : 0u}, {shader::kSpecFloat64Distances, 1u}})));
  KnnWorkspace<float>& ws = db.workspace();
  std::lock_guard lock(ws.mutex);
  using W = KnnWorkspace<float>;
  const std::uint64_t query_bytes = queries ? most_rows * d * sizeof(float) : 0;
  const std::uint64_t index_offset = (query_bytes + 255) / 256 * 256;  // the indices' place in the staging
  W::fit(device, ws.queries, std::max<std::uint64_t>(query_bytes, 16));
  W::fit(device, ws.out_i, most_pairs * per_pair * sizeof(std::uint32_t));
  W::fit(device, ws.pair_squared, most_pairs * sizeof(double));
  W::fit(device, ws.status, 16, vulkan::MemoryUse::readback);
  const bool staged = ws.staged();  // the device's buffers are not mapped
  if (staged) {
    W::fit(device, ws.upload, index_offset + most_pairs * per_pair * sizeof(std::uint32_t), vulkan::MemoryUse::upload);
    W::fit(device, ws.readback, most_pairs * sizeof(double), vulkan::MemoryUse::readback);
  }
  vulkan::Commands cmds(device);
  for (const auto& [first, last] : batches) {
    const std::uint64_t n = last - first, p0 = std::uint64_t(offsets(first)), pairs = std::uint64_t(offsets(last)) - p0;
    if (pairs == 0) continue;
    char* up = staged ? static_cast<char*>(ws.upload.mapped()) : nullptr;
    if (queries)
      vulkan::pack_rows<float>(*queries, Eigen::Index(first), Eigen::Index(last),
                               reinterpret_cast<float*>(staged ? up : static_cast<char*>(ws.queries.mapped())));
    auto* to = reinterpret_cast<std::uint32_t*>(staged ? up + index_offset : static_cast<char*>(ws.out_i.mapped()));
    // A pair's query row: in the uploaded batch, or the database's own row.
    const std::uint64_t row_base = queries ? first : 0;
    parallel_chunks(std::int64_t(n), std::max<std::int64_t>(1, std::int64_t(n * (1 << 16) / pairs)),
                    [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (std::uint64_t i = first + std::uint64_t(b); i < first + std::uint64_t(e); ++i)
        for (auto q = std::uint64_t(offsets(i)); q < std::uint64_t(offsets(i + 1)); ++q) {
          if (paired) {
            to[2 * (q - p0)] = static_cast<std::uint32_t>(i - row_base);
            to[2 * (q - p0) + 1] = static_cast<std::uint32_t>(indices[q]);
          } else {
            to[q - p0] = static_cast<std::uint32_t>(indices[q]);
          }
        }
    });
    cmds.reset();
    if (cpu) cmds.fill(ws.status, 0, 16, 0u);
    if (staged) {
      if (queries) cmds.copy(ws.upload, 0, ws.queries, 0, n * d * sizeof(float));
      cmds.copy(ws.upload, index_offset, ws.out_i, 0, pairs * per_pair * sizeof(std::uint32_t));
    }
    cmds.barrier();
    // Queries from the database itself: its rows from `first` on.
    const shader::Push push{.m = std::uint32_t(paired ? pairs : n), .k = std::uint32_t(paired ? 1 : k),
                            .d = std::uint32_t(d), .base = 0, .first_query = queries || paired ? 0u : std::uint32_t(first),
                            .paired = paired ? 1u : 0u};
    const LinearGrid grid = linear_grid(device.info(), ceil_div(pairs, shader::kThreads), "float64 distances");
    cmds.dispatch(kernel,
                  {{shader::kBindingQueries, queries ? ws.queries : db.blocks()[0].x}, {shader::kBindingRows, db.blocks()[0].x},
                   {shader::kBindingIndices, ws.out_i}, {shader::kBindingSquared, ws.pair_squared},
                   {shader::kBindingStatus, ws.status}},
                  push, grid.x, grid.y);
    if (staged) {
      cmds.barrier();
      cmds.copy(ws.pair_squared, 0, ws.readback, 0, pairs * sizeof(double));
    }
    cmds.submit_and_wait();
    if (cpu && *static_cast<const std::uint32_t*>(ws.status.mapped()) != 0)
      throw unsupported(device.info().name + " cut the float64 distances short (llvmpipe's limit of 65535 loop "
                        "iterations per invocation) for d=" + std::to_string(d));
    const void* result = staged ? ws.readback.mapped() : ws.pair_squared.mapped();
    vulkan::transfer_detail::copy_bytes(out + p0, result, pairs * sizeof(double));
  }
}

}  // namespace knn_detail

/// The float64 squared distances of host/float64_distances.hpp from each query to its k chosen database rows,
/// formed on the device (knn_exact_keys.comp, FLOAT64_DISTANCES): out[i * k + j] for query i and the row
/// indices[i * k + j] (each in [0, db.rows())); NaN where a pair has a subnormal value, which the host forms.
/// `queries`: m rows of db.cols() features, or null for the database's own first m rows. Requires
/// knn_float64_squared_can_run(db). Batches of whole queries and at most 2^22 pairs (where a query has fewer), each
/// one submission through the database's workspace (one search or batch at a time): the queries and the indices
/// (as uint32) written into its staging, copied, the distances formed and copied back.
inline void knn_float64_squared(const KnnDatabase<float>& db, const MatrixView<float>* queries, std::uint64_t m,
                                std::uint64_t k, const std::int64_t* indices, double* out) {
  if (k == 0) return;
  knn_detail::float64_squared(db, queries, m, [k](std::uint64_t i) { return i * k; }, k, indices, out);
}

/// knn_float64_squared for ragged lists (radius searches): the pairs of query i are indices[offsets[i]] up to
/// indices[offsets[i + 1]] (offsets: m + 1 ascending entries from 0), out likewise.
inline void knn_float64_squared_lists(const KnnDatabase<float>& db, const MatrixView<float>* queries, std::uint64_t m,
                                      const std::int64_t* offsets, const std::int64_t* indices, double* out) {
  knn_detail::float64_squared(db, queries, m, [offsets](std::uint64_t i) { return std::uint64_t(offsets[i]); }, 0,
                              indices, out);
}

}  // namespace gpuml::kernels
