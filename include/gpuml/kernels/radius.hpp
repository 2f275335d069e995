// Radius-neighbour search on a Vulkan device (shaders/radius.comp) with the host engine's result bit for bit.
//
// A float kernel decides every pair whose value is clear of the radius by more than a rigorous rounding bound
// (algorithms::radius_band); the few pairs within it are re-checked on the host with the host engine's own
// fixed-order function (algorithms::radius_distance), as k-NN recomputes its chosen neighbours. Per database block
// and query batch: a COUNT pass (per query and split, the pairs in and the uncertain ones), a prefix sum of the
// counts on the host, then a FILL pass into exactly that many slots (no size guess). The host then keeps the
// certain pairs and the uncertain ones the exact function accepts, computes the returned distances with that same
// function (threaded over queries), and orders each list by index or by (distance, index): the sets, the order
// and the distances are host::radius_search's.
//
// Memory: queries in batches within a slice of Config::device_memory_limit (or the device's memory); the database
// in blocks of knn_detail::database_block_rows, resident (KnnDatabase) or uploaded block by block; a FILL larger
// than one binding or its slice of memory runs over ranges of the batch's queries. Limits: fewer than 2^31 database
// rows, no query with more neighbours in one block than one binding holds; beyond them, float64 without
// shaderFloat64, a tile the device cannot run or llvmpipe's loop limit, gpuml::unsupported (the estimator then runs
// the host engine).
#pragma once

#include <gpuml/algorithms/knn.hpp>
#include <gpuml/algorithms/radius.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/kernels/distance.hpp>
#include <gpuml/kernels/knn.hpp>
#include <gpuml/policy/limits.hpp>
#include <gpuml/shaders/radius_kernel.hpp>
#include <gpuml/vulkan/transfer.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace gpuml::kernels {

namespace radius_interface = shader_interface::radius;

/// What one radius search returns besides the lists (sorted by (distance, index) or in index order), and how it
/// is cut (tests force batching with max_batch_queries).
struct RadiusSearchOptions {
  bool sort = false;
  bool distances = true;      ///< false: RadiusResult::distances stays empty
  bool exclude_self = false;  ///< the queries are the database, row i is not its own neighbour
  /// >= 0: the database and the queries are both sorted (ascending) by this feature; each query tile then scans only
  /// the rows within the radius's reach in it (algorithms::sorted_windows). Ignored for cosine.
  Eigen::Index sorted_feature = -1;
  std::uint64_t max_batch_queries = 0;  ///< 0: as many as memory and bindings allow
};

/// What a radius search did: pairs found certain and uncertain (re-checked on the host), batches, FILL ranges.
struct RadiusSearchStats {
  std::uint64_t certain = 0, uncertain = 0, batches = 0, fills = 0, database_blocks = 0;
  bool streamed = false;
  // Wall seconds: the setup (radius_self_graph: windows, kernels, rows sent), the COUNT passes (upload, dispatch,
  // counts back), the FILL passes (dispatch, pairs back), and the host's finish (re-checks, distances, ordering, the
  // result's assembly; radius_self_graph: the rows with uncertain pairs resolved).
  double setup_seconds = 0, count_seconds = 0, fill_seconds = 0, finish_seconds = 0;
};

/// The kernel's tile: 16 x 16 threads, 8 x 8 pairs each (128 queries against 128 rows per step), features staged
/// BK at a time, BK = d up to 16 (8 for double, within lavapipe's 32 KiB of shared memory) so that small d forms
/// no padding features.
struct RadiusTile {
  std::uint32_t wx = 16, wy = 16, tm = 8, tn = 8, bk = 16;
  std::uint32_t block_queries() const { return wy * tm; }
  std::uint32_t block_rows() const { return wx * tn; }
  template <class T>
  static RadiusTile for_features(std::uint64_t d) {
    RadiusTile t;
    t.bk = static_cast<std::uint32_t>(std::min<std::uint64_t>(d, sizeof(T) == 4 ? 16 : 8));
    return t;
  }
  template <class T>
  std::uint64_t shared_bytes() const {
    return sizeof(T) * 4 * std::uint64_t(bk) * (block_queries() / 4 + 1 + block_rows() / 4 + 1) +
           sizeof(T) * (block_queries() + 2 * block_rows()) + 8 * block_queries();
  }
};

namespace radius_detail {

inline std::uint32_t metric_code(Metric metric) {
  switch (metric) {
    case Metric::euclidean:
    case Metric::sqeuclidean: return radius_interface::kMetricSquared;
    case Metric::manhattan: return radius_interface::kMetricManhattan;
    case Metric::chebyshev: return radius_interface::kMetricChebyshev;
    case Metric::cosine: return radius_interface::kMetricCosine;
    case Metric::inner_product: break;
  }
  throw invalid_input("radius search: metric inner_product has no radius (it is a similarity)");
}

template <class T>
vulkan::KernelRef make_kernel(vulkan::Device& device, const RadiusTile& tile, Metric metric, std::uint32_t mode, bool cpu,
                              bool windowed) {
  namespace shader = radius_interface;
  return device.kernel(shaders::radius_kernel::spec<T>(
      spec_constants(shader::kSpecCount, {{shader::kSpecWX, tile.wx}, {shader::kSpecWY, tile.wy}, {shader::kSpecTM, tile.tm},
                                          {shader::kSpecTN, tile.tn}, {shader::kSpecBK, tile.bk},
                                          {shader::kSpecMetric, metric_code(metric)}, {shader::kSpecMode, mode},
                                          {shader::kSpecLoopGuard, cpu ? 1u : 0u}, {shader::kSpecWindowed, windowed ? 1u : 0u}})));
}

/// A buffer of at least `bytes` (grown, never shrunk).
inline void ensure(vulkan::Device& device, vulkan::Buffer& b, std::uint64_t bytes, vulkan::MemoryUse use = vulkan::MemoryUse::device) {
  bytes = std::max<std::uint64_t>(bytes, 16);
  if (b.size() < bytes) b = device.buffer(bytes, use);
}

/// How a database block of up to `block_rows` rows is split among workgroups (y of the grid): on CPU devices at most
/// 16 tile steps of 16 features per invocation (llvmpipe's loop limit); on GPUs more splits where few query tiles
/// would leave a large GPU idle (at least 16 tiles each, about 1024 workgroups).
struct SplitRule {
  bool cpu;
  std::uint64_t BM, BN, min_split, max_splits;
  SplitRule(const vulkan::DeviceInfo& info, const RadiusTile& tile, std::uint64_t d, std::uint64_t block_rows)
      : cpu(info.type == vulkan::DeviceType::cpu), BM(tile.block_queries()), BN(tile.block_rows()),
        min_split(cpu ? std::max<std::uint64_t>(1, 16 / ceil_div(d, 16)) * BN : 16 * BN),
        max_splits(std::min<std::uint64_t>(info.max_workgroup_count[1],
                                           cpu ? ceil_div(block_rows, min_split)
                                               : std::min<std::uint64_t>(ceil_div(block_rows, min_split), 1024))) {}
  /// Rows per split (a multiple of the tile) for mb queries against `rows` rows.
  std::uint64_t rows_per_split(std::uint64_t mb, std::uint64_t rows) const {
    std::uint64_t splits = cpu ? ceil_div(rows, min_split) : std::min(ceil_div(rows, min_split), ceil_div(1024, ceil_div(mb, BM)));
    splits = std::clamp<std::uint64_t>(splits, 1, max_splits);
    return ceil_div(ceil_div(rows, splits), BN) * BN;
  }
  /// The most splits a batch's counts must hold per query.
  std::uint64_t count_splits() const { return cpu ? max_splits : 1; }
};

/// Per query, its window of rows [first, last) when both sides are sorted by `sorted_feature` (>= 0) and the metric
/// bounds a single feature; empty otherwise (every query scans every row).
template <class T>
std::vector<std::uint32_t> windows_for(MatrixView<T> database, MatrixView<T> queries, double radius, Metric metric,
                                       Eigen::Index sorted_feature) {
  if (sorted_feature >= database.cols())
    throw invalid_input("radius search: sorted_feature " + std::to_string(sorted_feature) + " of " +
                        std::to_string(database.cols()) + " features");
  std::vector<std::uint32_t> windows;
  if (sorted_feature < 0) return windows;
  const double reach = algorithms::radius_reach<T>(radius, metric, database.cols(),
                                                   algorithms::feature_scale(database, queries, sorted_feature));
  if (std::isinf(reach)) return windows;
  const std::vector<std::int64_t> w = algorithms::sorted_windows(database, queries, sorted_feature, reach);
  windows.assign(w.begin(), w.end());
  return windows;
}

/// One block's pairs for a run of queries: query i's are found[offsets[i] .. offsets[i + 1]) (global row indices,
/// kUncertain set on uncertain ones, in no particular order).
struct BlockPairs {
  std::vector<std::int64_t> offsets{0};
  std::vector<std::uint32_t> found;
};

}  // namespace radius_detail

/// Every database row within `radius` of each query, computed on `device`; host::radius_search's result bit for
/// bit (sets, order, distances). `resident`: the database already on this device (else uploaded block by block).
template <class T>
algorithms::RadiusResult<T> radius_search(vulkan::Device& device, MatrixView<T> database, MatrixView<T> queries, double radius,
                                          Metric metric, const KnnDatabase<T>* resident = nullptr,
                                          const RadiusSearchOptions& options = {}, RadiusSearchStats* stats = nullptr) {
  static_assert(is_supported_scalar<T>, "gpuml supports float and double");
  namespace shader = radius_interface;
  using Index = std::int64_t;
  const Index n = database.rows(), d = database.cols(), m = queries.rows();
  if (n == 0 || d == 0) throw invalid_input("radius search: the database is empty");
  if (queries.cols() != d)
    throw invalid_input("radius search: queries have " + std::to_string(queries.cols()) + " features, but the database has " +
                        std::to_string(d));
  if (!(radius >= 0) || std::isnan(radius)) throw invalid_input("radius must be a number >= 0, got " + std::to_string(radius));
  if (options.exclude_self && m != n) throw invalid_input("radius search: exclude_self needs the database as the queries");
  radius_detail::metric_code(metric);  // refuses inner_product
  if (std::uint64_t(n) >= shader::kUncertain)
    throw unsupported("radius search on a Vulkan device supports at most 2^31 - 1 database rows");
  require_scalar_support<T>(device);
  if (resident && (&resident->device() != &device || resident->rows() != std::uint64_t(n) || resident->cols() != std::uint64_t(d)))
    throw error("radius search: the resident database does not match the database given");
  const auto& info = device.info();
  const RadiusTile tile = RadiusTile::for_features<T>(std::uint64_t(d));
  if (auto why = workgroup_misfit(info, tile.wx, tile.wy, tile.shared_bytes<T>()); !why.empty())
    throw unsupported("the radius kernel's tile cannot run on " + info.name + ": " + why);

  RadiusSearchStats local_stats;
  RadiusSearchStats& st = stats ? *stats : local_stats;
  st = RadiusSearchStats{};
  const T r = algorithms::radius_in<T>(radius);
  const algorithms::RadiusBand<T> band = algorithms::radius_band<T>(radius, metric, d);

  // The cut: database blocks (resident, or uploaded one at a time), query batches, splits per block.
  const std::uint64_t s = sizeof(T), BM = tile.block_queries();
  const bool cpu = info.type == vulkan::DeviceType::cpu;
  const std::uint64_t nb_max = resident ? resident->blocks().front().rows : knn_detail::database_block_rows<T>(device, n, d);
  const std::uint64_t n_blocks = resident ? resident->blocks().size() : ceil_div(std::uint64_t(n), nb_max);
  const std::uint64_t max_bytes = std::min<std::uint64_t>(device.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
  const std::uint64_t budget = device_memory_budget(info);
  if (d * s > max_bytes)
    throw unsupported("radius search: one row (" + std::to_string(d * s) + " bytes) exceeds the device's largest buffer binding");
  const radius_detail::SplitRule split_rule(info, tile, std::uint64_t(d), nb_max);
  auto split_rows_for = [&](std::uint64_t mb, std::uint64_t rows) { return split_rule.rows_per_split(mb, rows); };
  // Query batches: the queries and the counts (per query and split, at most max_splits on CPU devices, else at
  // most 1024 x 128 queries in all) within one binding and an eighth of the memory, the grid within its x limit.
  const std::uint64_t count_splits = split_rule.count_splits();
  std::uint64_t batch = std::min<std::uint64_t>(std::uint64_t(std::max<Index>(m, 1)), max_bytes / (d * s));
  batch = std::min<std::uint64_t>(batch, std::uint64_t(info.max_workgroup_count[0]) * BM);
  batch = std::min<std::uint64_t>(batch, max_bytes / (8 * count_splits));
  if (budget) batch = std::min<std::uint64_t>(batch, std::max<std::uint64_t>(1, budget / 8 / (d * s + s + 8 * count_splits)));
  if (options.max_batch_queries) batch = std::min(batch, options.max_batch_queries);
  batch = std::max<std::uint64_t>(1, batch);
  // FILL ranges: the pairs of one range within one binding and an eighth of the memory.
  std::uint64_t fill_cap = max_bytes / 4;
  if (budget) fill_cap = std::min<std::uint64_t>(fill_cap, std::max<std::uint64_t>(1, budget / 8 / 4));

  // Sorted rows: each query's window of rows (global indices), uploaded per batch.
  const std::vector<std::uint32_t> windows = radius_detail::windows_for<T>(database, queries, radius, metric, options.sorted_feature);
  const bool windowed = !windows.empty();
  const vulkan::KernelRef count_kernel = radius_detail::make_kernel<T>(device, tile, metric, shader::kModeCount, cpu, windowed);
  const vulkan::KernelRef fill_kernel = radius_detail::make_kernel<T>(device, tile, metric, shader::kModeFill, cpu, windowed);
  vulkan::Buffer window_buf = device.buffer(std::max<std::uint64_t>(windowed ? batch * 8 : 16, 16));
  vulkan::Buffer qbuf = device.buffer(std::max<std::uint64_t>(batch * d * s, 16));
  vulkan::Buffer qnorms = device.buffer(std::max<std::uint64_t>(batch * s, 16));
  vulkan::Buffer band_buf = device.buffer(2 * s);
  vulkan::Buffer counts;
  vulkan::Buffer status = device.buffer(16, vulkan::MemoryUse::readback);
  vulkan::Buffer found;
  const T band_values[2] = {band.lo, band.hi};
  vulkan::upload(device, band_buf, 0, band_values, 2 * s);

  st.database_blocks = n_blocks;
  st.streamed = resident == nullptr;
  std::vector<radius_detail::BlockPairs> pairs(n_blocks);
  std::vector<std::uint32_t> host_counts;
  std::vector<std::uint32_t> offsets;

  auto submit = [&](vulkan::Commands& cmds) {
    cmds.submit_and_wait();
    if (cpu && *static_cast<const std::uint32_t*>(status.mapped()) != 0)
      throw unsupported(info.name + " cut the radius kernel short (llvmpipe's limit of 65535 loop iterations per "
                        "invocation) for d=" + std::to_string(d));
  };

  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  for (std::uint64_t blk = 0; blk < n_blocks; ++blk) {
    const std::uint64_t b0 = blk * nb_max;
    typename KnnDatabase<T>::Block streamed;
    if (!resident) streamed = KnnDatabase<T>::upload_block(device, database, b0, std::min<std::uint64_t>(nb_max, n - b0));
    const auto& block = resident ? resident->blocks()[blk] : streamed;
    auto& out = pairs[blk];
    out.offsets.reserve(std::size_t(m) + 1);
    for (std::uint64_t q0 = 0; q0 < std::uint64_t(m); q0 += batch) {
      const std::uint64_t mb = std::min<std::uint64_t>(batch, m - q0);
      const std::uint64_t tiles = ceil_div(mb, BM);
      const std::uint64_t rows_per_split = split_rows_for(mb, block.rows);
      const std::uint64_t splits = ceil_div(block.rows, rows_per_split);
      radius_detail::ensure(device, counts, 8 * mb * splits);
      ++st.batches;

      // COUNT.
      auto started = Clock::now();
      vulkan::upload_rows<T>(device, qbuf, 0, queries, Index(q0), Index(q0 + mb));
      if (windowed) vulkan::upload(device, window_buf, 0, windows.data() + 2 * q0, mb * 8);
      {
        vulkan::Commands cmds(device);
        if (cpu) {
          cmds.fill(status, 0, 16, 0u);
          cmds.barrier();
        }
        if (metric == Metric::cosine) {
          record_row_sq_norms<T>(device, cmds, qbuf, qnorms, static_cast<std::uint32_t>(mb), static_cast<std::uint32_t>(d));
          cmds.barrier();
        }
        const shader::Push push{.q0 = 0, .m = std::uint32_t(mb), .n = std::uint32_t(block.rows), .d = std::uint32_t(d),
                                .base = std::uint32_t(block.first), .split_rows = std::uint32_t(rows_per_split),
                                .splits = std::uint32_t(splits)};
        cmds.dispatch(count_kernel,
                      {{shader::kBindingQueries, qbuf}, {shader::kBindingRows, block.x}, {shader::kBindingQueryNorms, qnorms},
                       {shader::kBindingRowNorms, block.norms}, {shader::kBindingBand, band_buf},
                       {shader::kBindingCounts, counts}, {shader::kBindingFound, counts}, {shader::kBindingStatus, status},
                       {shader::kBindingWindows, window_buf}},
                      push, static_cast<std::uint32_t>(tiles), static_cast<std::uint32_t>(splits));
        cmds.host_barrier();
        submit(cmds);
      }
      host_counts.resize(2 * mb * splits);
      vulkan::download(device, counts, 0, host_counts.data(), host_counts.size() * sizeof(std::uint32_t));
      st.count_seconds += since(started);
      started = Clock::now();

      // FILL, over ranges of the batch's queries whose pairs fit one binding.
      const std::size_t base_found = out.found.size();
      std::uint64_t total = 0;
      for (std::uint64_t q = 0; q < mb; ++q) {
        std::uint64_t here = 0;
        for (std::uint64_t sp = 0; sp < splits; ++sp)
          here += std::uint64_t(host_counts[2 * (q * splits + sp)]) + host_counts[2 * (q * splits + sp) + 1];
        if (here > fill_cap)
          throw unsupported("radius search: a query has " + std::to_string(here) + " neighbours in one database block, "
                            "more than one device buffer holds");
        total += here;
        out.offsets.push_back(Index(base_found + total));
      }
      out.found.resize(base_found + total);
      for (std::uint64_t a = 0; a < mb;) {
        // Queries [a, e) with at most fill_cap pairs.
        std::uint64_t e = a, pairs_in_range = 0;
        offsets.clear();
        while (e < mb) {
          std::uint64_t here = 0;
          for (std::uint64_t sp = 0; sp < splits; ++sp)
            here += std::uint64_t(host_counts[2 * (e * splits + sp)]) + host_counts[2 * (e * splits + sp) + 1];
          if (pairs_in_range + here > fill_cap) break;
          for (std::uint64_t sp = 0; sp < splits; ++sp) {
            offsets.push_back(static_cast<std::uint32_t>(pairs_in_range));
            pairs_in_range += std::uint64_t(host_counts[2 * (e * splits + sp)]) + host_counts[2 * (e * splits + sp) + 1];
          }
          ++e;
        }
        if (pairs_in_range > 0) {
          ++st.fills;
          radius_detail::ensure(device, found, pairs_in_range * 4);
          vulkan::upload(device, counts, 0, offsets.data(), offsets.size() * sizeof(std::uint32_t));
          vulkan::Commands cmds(device);
          if (cpu) {
            cmds.fill(status, 0, 16, 0u);
            cmds.barrier();
          }
          const shader::Push push{.q0 = std::uint32_t(a), .m = std::uint32_t(e - a), .n = std::uint32_t(block.rows),
                                  .d = std::uint32_t(d), .base = std::uint32_t(block.first),
                                  .split_rows = std::uint32_t(rows_per_split), .splits = std::uint32_t(splits)};
          cmds.dispatch(fill_kernel,
                        {{shader::kBindingQueries, qbuf}, {shader::kBindingRows, block.x}, {shader::kBindingQueryNorms, qnorms},
                         {shader::kBindingRowNorms, block.norms}, {shader::kBindingBand, band_buf},
                         {shader::kBindingCounts, counts}, {shader::kBindingFound, found}, {shader::kBindingStatus, status},
                         {shader::kBindingWindows, window_buf}},
                        push, static_cast<std::uint32_t>(ceil_div(e - a, BM)), static_cast<std::uint32_t>(splits));
          cmds.host_barrier();
          submit(cmds);
          const std::size_t at = std::size_t(out.offsets[std::size_t(q0 + a)]);
          vulkan::download(device, found, 0, out.found.data() + at, pairs_in_range * 4);
        }
        a = e;
      }
      st.fill_seconds += since(started);
    }
  }
  const auto finish_started = Clock::now();

  // The finish on the host: certain pairs kept, uncertain ones decided by the exact function, distances from it,
  // each list ordered as the host engine orders it.
  std::vector<T> dn, qn;
  if (metric == Metric::cosine) {
    dn.resize(std::size_t(n));
    qn.resize(std::size_t(m));
    parallel_chunks(n, 4096, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (Index j = b; j < e; ++j) dn[std::size_t(j)] = algorithms::dot_fixed(database.row(j).data(), database.row(j).data(), d);
    });
    parallel_chunks(m, 4096, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (Index i = b; i < e; ++i) qn[std::size_t(i)] = algorithms::dot_fixed(queries.row(i).data(), queries.row(i).data(), d);
    });
  }
  const bool with_values = options.distances || options.sort;
  constexpr Index kChunk = 256;
  const Index n_chunks = ceil_div(std::max<Index>(m, 0), kChunk);
  struct Chunk {
    std::vector<std::int64_t> indices;
    std::vector<T> values;
    std::uint64_t certain = 0, uncertain = 0;
  };
  std::vector<Chunk> chunks(static_cast<std::size_t>(n_chunks));
  std::vector<std::int64_t> list_counts(static_cast<std::size_t>(m), 0);
  parallel_chunks(n_chunks, 1, [&](std::int64_t, std::int64_t cb, std::int64_t ce) {
    std::vector<std::pair<T, std::int64_t>> row;
    for (Index c = cb; c < ce; ++c) {
      Chunk& out = chunks[std::size_t(c)];
      for (Index i = c * kChunk; i < std::min(m, (c + 1) * kChunk); ++i) {
        row.clear();
        const T* q = queries.row(i).data();
        const T qni = metric == Metric::cosine ? qn[std::size_t(i)] : T(0);
        for (const auto& block : pairs) {
          const std::size_t first = row.size();
          for (Index f = block.offsets[std::size_t(i)]; f < block.offsets[std::size_t(i) + 1]; ++f) {
            const std::uint32_t word = block.found[std::size_t(f)];
            const Index j = Index(word & ~shader::kUncertain);
            if (options.exclude_self && j == i) continue;
            const bool uncertain = (word & shader::kUncertain) != 0;
            T v = T(0);
            if (uncertain || with_values)
              v = algorithms::radius_distance(q, database.row(j).data(), d, metric, qni,
                                              metric == Metric::cosine ? dn[std::size_t(j)] : T(0));
            if (uncertain) {
              ++out.uncertain;
              if (!(v <= r)) continue;
            } else {
              ++out.certain;
            }
            row.emplace_back(v, j);
          }
          // Each block's pairs arrive in no particular order; blocks follow each other in index order.
          if (!options.sort)
            std::sort(row.begin() + std::ptrdiff_t(first), row.end(),
                      [](const auto& x, const auto& y) { return x.second < y.second; });
        }
        if (options.sort) std::sort(row.begin(), row.end());
        list_counts[std::size_t(i)] = Index(row.size());
        for (const auto& [v, j] : row) {
          out.indices.push_back(j);
          if (options.distances) out.values.push_back(v);
        }
      }
    }
  });
  pairs.clear();

  algorithms::RadiusResult<T> result;
  result.offsets.resize(std::size_t(m) + 1, 0);
  for (Index i = 0; i < m; ++i) result.offsets[std::size_t(i) + 1] = result.offsets[std::size_t(i)] + list_counts[std::size_t(i)];
  // Each chunk's lists copied to their place in parallel (chunk c starts at its first query's offset).
  result.indices.resize(std::size_t(result.offsets.back()));
  if (options.distances) result.distances.resize(std::size_t(result.offsets.back()));
  parallel_chunks(n_chunks, 1, [&](std::int64_t, std::int64_t cb, std::int64_t ce) {
    for (Index c = cb; c < ce; ++c) {
      const Chunk& chunk = chunks[std::size_t(c)];
      const auto at = std::ptrdiff_t(result.offsets[std::size_t(c * kChunk)]);
      std::copy(chunk.indices.begin(), chunk.indices.end(), result.indices.begin() + at);
      if (options.distances) std::copy(chunk.values.begin(), chunk.values.end(), result.distances.begin() + at);
    }
  });
  for (const Chunk& c : chunks) {
    st.certain += c.certain;
    st.uncertain += c.uncertain;
  }
  st.finish_seconds = since(finish_started);
  return result;
}

/// A radius graph of rows with themselves left on the device (DBSCAN's components read it there): every row's
/// pairs as the FILL pass wrote them, with the exact neighbourhood sizes and, for the few rows that had uncertain
/// pairs, their whole exact lists decided on the host.
struct RadiusDeviceGraph {
  std::uint64_t rows = 0, pairs = 0;
  /// Per row, contiguous from row_offsets[i]: its pairs' row indices in no particular order, kUncertain set on the
  /// uncertain ones (which a reader skips: `resolved` holds those rows whole).
  vulkan::Buffer found;
  vulkan::Buffer row_offsets;             ///< rows + 1 uint32 offsets into found
  std::vector<std::int64_t> counts;       ///< per row: its exact neighbourhood size (itself included where within)
  /// The rows that had uncertain pairs (increasing) and, as compressed rows in that order, each one's every exact
  /// neighbour (increasing).
  std::vector<std::int64_t> resolved_rows, resolved_offsets, resolved_indices;
};

/// The radius graph of X with itself (each row its own query) on `device`, with host::radius_search's
/// neighbourhoods: a COUNT pass, offsets on the host, a FILL pass into one device buffer, nothing read back but the
/// counts; rows with uncertain pairs are then scanned whole on the host by the exact function (within their window
/// when the rows are sorted). `options.sorted_feature` as radius_search's; `options.max_batch_queries` cuts the
/// queries (tests). Throws gpuml::unsupported where the rows exceed one database block, the pairs one binding or
/// the memory budget, or uncertain rows would make the host's scan long (callers then use radius_search).
template <class T>
RadiusDeviceGraph radius_self_graph(vulkan::Device& device, MatrixView<T> X, double radius, Metric metric,
                                    const RadiusSearchOptions& options = {}, RadiusSearchStats* stats = nullptr) {
  static_assert(is_supported_scalar<T>, "gpuml supports float and double");
  namespace shader = radius_interface;
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  const std::uint64_t n = std::uint64_t(X.rows()), d = std::uint64_t(X.cols()), s = sizeof(T);
  if (n == 0 || d == 0) throw invalid_input("radius search: the database is empty");
  if (!(radius >= 0) || std::isnan(radius)) throw invalid_input("radius must be a number >= 0, got " + std::to_string(radius));
  radius_detail::metric_code(metric);
  if (n >= shader::kUncertain) throw unsupported("radius search on a Vulkan device supports at most 2^31 - 1 database rows");
  require_scalar_support<T>(device);
  const auto& info = device.info();
  const RadiusTile tile = RadiusTile::for_features<T>(d);
  if (auto why = workgroup_misfit(info, tile.wx, tile.wy, tile.shared_bytes<T>()); !why.empty())
    throw unsupported("the radius kernel's tile cannot run on " + info.name + ": " + why);
  if (n > knn_detail::database_block_rows<T>(device, n, d))
    throw unsupported("radius graph on the device: the rows exceed one database block");
  RadiusSearchStats local_stats;
  RadiusSearchStats& st = stats ? *stats : local_stats;
  st = RadiusSearchStats{};
  st.database_blocks = 1;
  const T r = algorithms::radius_in<T>(radius);
  const algorithms::RadiusBand<T> band = algorithms::radius_band<T>(radius, metric, std::int64_t(d));
  const bool cpu = info.type == vulkan::DeviceType::cpu;
  const std::uint64_t BM = tile.block_queries();
  const std::uint64_t max_bytes = std::min<std::uint64_t>(device.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
  const std::uint64_t budget = device_memory_budget(info);
  const radius_detail::SplitRule split_rule(info, tile, d, n);
  std::uint64_t batch = std::min<std::uint64_t>(n, std::uint64_t(info.max_workgroup_count[0]) * BM);
  batch = std::min<std::uint64_t>(batch, max_bytes / (8 * split_rule.count_splits()));
  if (budget) batch = std::min<std::uint64_t>(batch, std::max<std::uint64_t>(1, budget / 8 / (8 * split_rule.count_splits())));
  if (options.max_batch_queries) batch = std::min(batch, options.max_batch_queries);
  batch = std::max<std::uint64_t>(1, batch);

  auto started = Clock::now();
  const std::vector<std::uint32_t> windows = radius_detail::windows_for<T>(X, X, radius, metric, options.sorted_feature);
  const bool windowed = !windows.empty();
  const vulkan::KernelRef count_kernel = radius_detail::make_kernel<T>(device, tile, metric, shader::kModeCount, cpu, windowed);
  const vulkan::KernelRef fill_kernel = radius_detail::make_kernel<T>(device, tile, metric, shader::kModeFill, cpu, windowed);
  const typename KnnDatabase<T>::Block block = KnnDatabase<T>::upload_block(device, X, 0, n);
  vulkan::Buffer window_buf = device.buffer(std::max<std::uint64_t>(windowed ? n * 8 : 16, 16));
  if (windowed) vulkan::upload(device, window_buf, 0, windows.data(), n * 8);
  vulkan::Buffer band_buf = device.buffer(2 * s);
  const T band_values[2] = {band.lo, band.hi};
  vulkan::upload(device, band_buf, 0, band_values, 2 * s);
  vulkan::Buffer counts = device.buffer(std::max<std::uint64_t>(8 * batch * split_rule.count_splits(), 16));
  vulkan::Buffer status = device.buffer(16, vulkan::MemoryUse::readback);
  RadiusDeviceGraph graph;
  graph.rows = n;
  st.setup_seconds = since(started);
  started = Clock::now();

  auto dispatch = [&](const vulkan::KernelRef& kernel, const vulkan::Buffer& found, std::uint64_t q0, std::uint64_t mb,
                      std::uint64_t rows_per_split, std::uint64_t splits) {
    vulkan::Commands cmds(device);
    if (cpu) {
      cmds.fill(status, 0, 16, 0u);
      cmds.barrier();
    }
    const shader::Push push{.q0 = std::uint32_t(q0), .m = std::uint32_t(mb), .n = std::uint32_t(n), .d = std::uint32_t(d),
                            .base = 0, .split_rows = std::uint32_t(rows_per_split), .splits = std::uint32_t(splits)};
    cmds.dispatch(kernel,
                  {{shader::kBindingQueries, block.x}, {shader::kBindingRows, block.x}, {shader::kBindingQueryNorms, block.norms},
                   {shader::kBindingRowNorms, block.norms}, {shader::kBindingBand, band_buf}, {shader::kBindingCounts, counts},
                   {shader::kBindingFound, found}, {shader::kBindingStatus, status}, {shader::kBindingWindows, window_buf}},
                  push, static_cast<std::uint32_t>(ceil_div(mb, BM)), static_cast<std::uint32_t>(splits));
    cmds.host_barrier();
    cmds.submit_and_wait();
    if (cpu && *static_cast<const std::uint32_t*>(status.mapped()) != 0)
      throw unsupported(info.name + " cut the radius kernel short (llvmpipe's limit of 65535 loop iterations per "
                        "invocation) for d=" + std::to_string(d));
  };

  // COUNT, batch by batch; every (query, split) count kept for FILL's offsets.
  struct Batch {
    std::uint64_t q0, mb, rows_per_split, splits;
    std::vector<std::uint32_t> counts;
  };
  std::vector<Batch> batches;
  std::uint64_t kept_bytes = 0;
  graph.counts.assign(n, 0);
  std::vector<std::uint32_t> uncertain(n, 0);
  std::vector<std::uint64_t> offsets(n + 1, 0);
  for (std::uint64_t q0 = 0; q0 < n; q0 += batch) {
    Batch b{q0, std::min(batch, n - q0), 0, 0, {}};
    b.rows_per_split = split_rule.rows_per_split(b.mb, n);
    b.splits = ceil_div(n, b.rows_per_split);
    kept_bytes += 8 * b.mb * b.splits;
    if (kept_bytes > (std::uint64_t(1) << 29)) throw unsupported("radius graph on the device: too many (query, split) counts to keep");
    dispatch(count_kernel, counts, b.q0, b.mb, b.rows_per_split, b.splits);
    b.counts.resize(2 * b.mb * b.splits);
    vulkan::download(device, counts, 0, b.counts.data(), b.counts.size() * 4);
    parallel_chunks(std::int64_t(b.mb), 1 << 15, [&](std::int64_t, std::int64_t q0, std::int64_t q1) {
      for (std::uint64_t q = std::uint64_t(q0); q < std::uint64_t(q1); ++q) {
        std::uint64_t in = 0, unsure = 0;
        for (std::uint64_t sp = 0; sp < b.splits; ++sp) {
          in += b.counts[2 * (q * b.splits + sp)];
          unsure += b.counts[2 * (q * b.splits + sp) + 1];
        }
        graph.counts[b.q0 + q] = std::int64_t(in);
        uncertain[b.q0 + q] = std::uint32_t(unsure);
        offsets[b.q0 + q + 1] = in + unsure;
      }
    });
    batches.push_back(std::move(b));
    ++st.batches;
  }
  for (std::uint64_t i = 0; i < n; ++i) {
    st.uncertain += uncertain[i];
    offsets[i + 1] += offsets[i];
  }
  graph.pairs = offsets[n];
  st.certain = graph.pairs - st.uncertain;
  if (graph.pairs * 4 > max_bytes || (budget && graph.pairs * 4 > budget / 2))
    throw unsupported("radius graph on the device: " + std::to_string(graph.pairs) + " pairs exceed one binding or the memory budget");
  st.count_seconds = since(started);

  // FILL, batch by batch, into the one buffer at each (query, split)'s offset.
  started = Clock::now();
  graph.found = device.buffer(std::max<std::uint64_t>(graph.pairs * 4, 16));
  std::vector<std::uint32_t> fill_offsets;
  for (const Batch& b : batches) {
    fill_offsets.resize(b.mb * b.splits);
    parallel_chunks(std::int64_t(b.mb), 1 << 15, [&](std::int64_t, std::int64_t q0, std::int64_t q1) {
      for (std::uint64_t q = std::uint64_t(q0); q < std::uint64_t(q1); ++q) {
        std::uint64_t at = offsets[b.q0 + q];
        for (std::uint64_t sp = 0; sp < b.splits; ++sp) {
          fill_offsets[q * b.splits + sp] = std::uint32_t(at);
          at += std::uint64_t(b.counts[2 * (q * b.splits + sp)]) + b.counts[2 * (q * b.splits + sp) + 1];
        }
      }
    });
    vulkan::upload(device, counts, 0, fill_offsets.data(), fill_offsets.size() * 4);
    dispatch(fill_kernel, graph.found, b.q0, b.mb, b.rows_per_split, b.splits);
    ++st.fills;
  }
  graph.row_offsets = device.buffer((n + 1) * 4);
  vulkan::upload_filled(device, graph.row_offsets, 0, (n + 1) * 4, 4, [&](void* to, std::size_t begin, std::size_t bytes) {
    auto* out = static_cast<std::uint32_t*>(to);
    parallel_chunks(std::int64_t(bytes / 4), 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (std::int64_t k = b; k < e; ++k) out[k] = std::uint32_t(offsets[begin / 4 + std::size_t(k)]);
    });
  });
  st.fill_seconds = since(started);

  // Rows with uncertain pairs: their whole neighbourhood by the exact function, over their window (or every row).
  started = Clock::now();
  std::uint64_t scan = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (!uncertain[i]) continue;
    graph.resolved_rows.push_back(std::int64_t(i));
    scan += windowed ? windows[2 * i + 1] - windows[2 * i] : n;
  }
  if (scan > 64 * n + (std::uint64_t(1) << 24))
    throw unsupported("radius graph on the device: " + std::to_string(graph.resolved_rows.size()) +
                      " rows with pairs at the radius's rounding would make a long exact scan");
  std::vector<T> norms;
  if (metric == Metric::cosine) {
    norms.resize(n);
    parallel_chunks(std::int64_t(n), 4096, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (std::int64_t j = b; j < e; ++j) norms[std::size_t(j)] = algorithms::dot_fixed(X.row(j).data(), X.row(j).data(), std::int64_t(d));
    });
  }
  const std::int64_t resolved = std::int64_t(graph.resolved_rows.size());
  std::vector<std::vector<std::int64_t>> lists{std::size_t(resolved)};
  parallel_chunks(resolved, 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (std::int64_t k = b; k < e; ++k) {
      const std::uint64_t i = std::uint64_t(graph.resolved_rows[std::size_t(k)]);
      const std::uint64_t j0 = windowed ? windows[2 * i] : 0, j1 = windowed ? windows[2 * i + 1] : n;
      const T ni = norms.empty() ? T(0) : norms[i];
      auto& list = lists[std::size_t(k)];
      for (std::uint64_t j = j0; j < j1; ++j)
        if (algorithms::radius_distance(X.row(Eigen::Index(i)).data(), X.row(Eigen::Index(j)).data(), std::int64_t(d), metric, ni,
                                        norms.empty() ? T(0) : norms[j]) <= r)
          list.push_back(std::int64_t(j));
      graph.counts[i] = std::int64_t(list.size());
    }
  });
  graph.resolved_offsets.assign(std::size_t(resolved) + 1, 0);
  for (std::int64_t k = 0; k < resolved; ++k) {
    const auto& list = lists[std::size_t(k)];
    graph.resolved_offsets[std::size_t(k) + 1] = graph.resolved_offsets[std::size_t(k)] + std::int64_t(list.size());
    graph.resolved_indices.insert(graph.resolved_indices.end(), list.begin(), list.end());
  }
  st.finish_seconds = since(started);
  return graph;
}

}  // namespace gpuml::kernels
