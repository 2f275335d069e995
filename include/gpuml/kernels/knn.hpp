// Brute-force k-nearest-neighbour search on a Vulkan device: the fused distance + k-selection kernel
// (shaders/knn_select.comp) and its host-side driver.
//
// Work split. The database is processed in blocks that fit one storage-buffer binding (and a quarter of the
// device's memory), the queries in batches that fit one binding and the dispatch limits. Within a (block, batch)
// pair the select kernel runs a grid of query tiles x database splits; every workgroup keeps, for each of its
// queries, the k best (value, index) pairs of its split in a bounded heap in the output buffers. The splits exist
// so that a few queries against a large database still fill the device. A merge kernel then folds the splits'
// heaps into split 0's, 8 at a time per pass, and only n_queries x k pairs are downloaded; those of successive
// database blocks are merged on the host into one running list per query, which is finished exactly as
// host::knn_search finishes its own: euclidean, sqeuclidean and cosine values recomputed directly in the host
// engine's fixed order (exact duplicates at distance exactly 0, the cosine zero-vector rule), sorted by
// (value, index), euclidean = sqrt(max(d2, 0)), inner product negated back to a similarity (descending).
//
// Selection values are formed by one FMA chain over the features for every (query, row) pair, so identical rows
// get identical values and ties go to the lower index; the kept set does not depend on the tiling, the splits or
// the batching. Against the host engine the selected sets agree wherever values differ by more than rounding.
//
// Limits: 1 <= k <= Policy::max_k (2048 by default); larger k, float64 on a device without shaderFloat64, a
// policy the device cannot run or one row larger than a binding throw gpuml::unsupported (the estimators then
// use the host engine, see detail::run_knn). At most 2^32 - 1 database rows.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/host/knn.hpp>
#include <gpuml/kernels/distance.hpp>
#include <gpuml/kernels/policy.hpp>
#include <gpuml/shaders/knn_select_f32.hpp>
#include <gpuml/shaders/knn_select_f64.hpp>
#include <gpuml/shaders/knn_merge_f32.hpp>
#include <gpuml/shaders/knn_merge_f64.hpp>
#include <gpuml/vulkan/transfer.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace gpuml::kernels {

/// Tile shape of the k-NN kernel: a workgroup of WX x WY threads computes (WY*TM) queries x (WX*TN) database
/// rows per tile, TM x TN values per thread, BK features staged in shared memory per step. MaxK bounds k.
/// TargetGroups is how many workgroups a dispatch aims for (database splits are added until the grid of query
/// tiles x splits reaches it).
template <std::uint32_t WX = 16, std::uint32_t WY = 16, std::uint32_t TM = 4, std::uint32_t TN = 4, std::uint32_t BK = 16,
          std::uint32_t MaxK = 2048, std::uint32_t TargetGroups = 1024>
struct KnnTile {
  static_assert(WX > 0 && WY > 0 && TM > 0 && TN > 0 && BK > 0, "tile dimensions must be positive");
  static_assert(WX * WY <= 1024, "at most 1024 threads per workgroup");
  static_assert(TM * TN <= 256, "at most 256 accumulators per thread");
  static_assert(MaxK >= 1, "k of at least 1 must be supported");
  static_assert(TargetGroups >= 1, "at least one workgroup");
  static constexpr std::uint32_t block_queries = WY * TM, block_rows = WX * TN, threads = WX * WY;
  static constexpr std::uint32_t max_k = MaxK, target_groups = TargetGroups;

  /// Staging tiles (reused for SR queries' values at a time), query and row norms, thresholds, flags.
  template <class T>
  static constexpr std::uint64_t shared_bytes() {
    const std::uint64_t stage = std::uint64_t(BK) * (block_queries + 1) + std::uint64_t(BK) * (block_rows + 1);
    return sizeof(T) * (stage + 2 * block_queries + block_rows) + sizeof(std::uint32_t) * (2 * block_queries + 1);
  }
  template <class T>
  static std::string misfit(const vulkan::DeviceInfo& d) {
    return workgroup_misfit(d, WX, WY, shared_bytes<T>());
  }
  template <class T>
  static bool can_implement(const vulkan::DeviceInfo& d) {
    return misfit<T>(d).empty();
  }
  /// Specialisation constants; the metric is the last one (see knn_metric_code).
  static std::vector<std::uint32_t> constants(std::uint32_t metric_code) { return {WX, WY, TM, TN, BK, metric_code}; }
};

/// Defaults: 128 queries x 128 rows per tile, 8 x 8 values per thread (as the distance kernel); double halves BK
/// to keep shared memory near 17 KiB (lavapipe allows 32 KiB, NVIDIA 48 KiB).
template <class T>
using default_knn_policy = KnnTile<16, 16, 8, 8, sizeof(T) == 4 ? 16 : 8>;

/// The shader's METRIC constant: euclidean selects on squared distances.
constexpr std::uint32_t knn_metric_code(Metric m) {
  switch (m) {
    case Metric::euclidean:
    case Metric::sqeuclidean: return 0;
    case Metric::manhattan: return 1;
    case Metric::chebyshev: return 2;
    case Metric::cosine: return 3;
    case Metric::inner_product: return 4;
  }
  return 0;
}

template <class T>
struct KnnShaders;
template <>
struct KnnShaders<float> {
  static vulkan::ShaderCode select() { return {shaders::knn_select_f32, std::size(shaders::knn_select_f32), "knn_select_f32"}; }
  static vulkan::ShaderCode merge() { return {shaders::knn_merge_f32, std::size(shaders::knn_merge_f32), "knn_merge_f32"}; }
};
template <>
struct KnnShaders<double> {
  static vulkan::ShaderCode select() { return {shaders::knn_select_f64, std::size(shaders::knn_select_f64), "knn_select_f64"}; }
  static vulkan::ShaderCode merge() { return {shaders::knn_merge_f64, std::size(shaders::knn_merge_f64), "knn_merge_f64"}; }
};

/// The merge kernel: threads per workgroup, and how many split heaps one thread merges per pass.
inline constexpr std::uint32_t kKnnMergeThreads = 64, kKnnMergeGroup = 8;

namespace knn_detail {

/// How one search is cut: database rows per block, queries per batch, rows per split, splits per block.
struct KnnPlan {
  std::uint64_t block_rows = 0, batch_queries = 0, split_rows = 0, splits = 0;
};

template <class T, class Policy>
KnnPlan plan(const vulkan::Device& device, std::uint64_t n, std::uint64_t m, std::uint64_t d, std::uint64_t k) {
  const auto& info = device.info();
  const std::uint64_t s = sizeof(T), BQ = Policy::block_queries, BN = Policy::block_rows;
  const std::uint64_t max_bytes = std::min<std::uint64_t>(device.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
  KnnPlan p;
  // Database block: one binding, a quarter of the device memory (data larger than the device goes in blocks).
  std::uint64_t block_bytes = max_bytes;
  if (info.device_local_bytes) block_bytes = std::min(block_bytes, std::max<std::uint64_t>(info.device_local_bytes / 4, d * s));
  p.block_rows = rows_per_block(n, d * s, block_bytes, "the database");
  // Query batch: one binding for the queries, one split's candidate lists within one binding, the grid's x limit.
  std::uint64_t mb = rows_per_block(m, d * s, max_bytes, "the queries");
  mb = std::min<std::uint64_t>(mb, std::uint64_t(info.max_workgroup_count[0]) * BQ);
  mb = std::min<std::uint64_t>(mb, std::max<std::uint64_t>(1, max_bytes / (k * s)));
  mb = std::min<std::uint64_t>(mb, 1u << 16);  // bounds the candidate buffers (and the host merge per round)
  p.batch_queries = std::max<std::uint64_t>(1, mb);
  // Splits: enough workgroups to fill the device; each split at least 16 tiles and 16k rows, so the warm-up of
  // its heaps (while every tile has candidates) stays a small part of it; candidate lists within one binding
  // and about 256 MiB.
  const std::uint64_t tiles = ceil_div(std::min(m, p.batch_queries), BQ);
  const std::uint64_t block = std::min(n, p.block_rows);
  std::uint64_t splits = ceil_div(Policy::target_groups, tiles);
  splits = std::min(splits, std::max<std::uint64_t>(1, block / std::max<std::uint64_t>(16 * BN, 16 * k)));
  const std::uint64_t list_bytes = std::min(m, p.batch_queries) * k * s;
  splits = std::min(splits, std::max<std::uint64_t>(1, std::min<std::uint64_t>(max_bytes, 256ull << 20) / list_bytes));
  splits = std::min<std::uint64_t>(splits, info.max_workgroup_count[1]);
  splits = std::max<std::uint64_t>(1, splits);
  p.split_rows = ceil_div(ceil_div(block, splits), BN) * BN;
  p.splits = ceil_div(block, p.split_rows);
  return p;
}

}  // namespace knn_detail

/// The k nearest database rows of every query row, computed on `device`; the same contract as host::knn_search
/// (sorted ascending, inner product descending, ties to the lower index, exact values for the selected rows).
template <class T, class Policy = default_knn_policy<T>>
host::KnnResult<T> knn_search(vulkan::Device& device, MatrixView<T> database, MatrixView<T> queries, int k, Metric metric) {
  static_assert(is_supported_scalar<T>, "gpuml supports float and double");
  using Index = std::int64_t;
  const Index n = database.rows(), d = database.cols(), m = queries.rows();
  host::knn_detail::check_search(n, d, queries.cols(), k);
  if (static_cast<std::uint64_t>(k) > Policy::max_k)
    throw unsupported("knn_search on a Vulkan device supports k <= " + std::to_string(Policy::max_k) + ", got k = " +
                      std::to_string(k) + " (use the host engine)");
  if (static_cast<std::uint64_t>(n) >= UINT32_MAX)
    throw unsupported("knn_search on a Vulkan device supports at most 2^32 - 2 database rows");
  require_scalar_support<T>(device);
  if (auto why = Policy::template misfit<T>(device.info()); !why.empty())
    throw unsupported("k-NN tile policy cannot run on " + device.info().name + ": " + why);

  host::KnnResult<T> result{Matrix<T>(m, k), IndexMatrix(m, k)};
  if (m == 0) return result;

  const std::uint64_t s = sizeof(T);
  const auto pl = knn_detail::plan<T, Policy>(device, n, m, d, k);
  const bool norms = metric == Metric::euclidean || metric == Metric::sqeuclidean || metric == Metric::cosine;
  const std::uint64_t mb_max = std::min<std::uint64_t>(m, pl.batch_queries);
  const std::uint64_t nb_max = std::min<std::uint64_t>(n, pl.block_rows);
  const std::uint64_t list_entries = pl.splits * mb_max * k;

  auto qbuf = device.buffer(mb_max * d * s), xbuf = device.buffer(nb_max * d * s);
  auto qn = device.buffer(mb_max * s), xn = device.buffer(nb_max * s);
  auto vbuf = device.buffer(list_entries * s), ibuf = device.buffer(list_entries * sizeof(std::uint32_t));
  const auto& kernel =
      device.kernel({KnnShaders<T>::select(), 6, 6 * sizeof(std::uint32_t), Policy::constants(knn_metric_code(metric))});
  const auto& merge = device.kernel({KnnShaders<T>::merge(), 2, 5 * sizeof(std::uint32_t), {kKnnMergeThreads}});

  // Running k best per query, merged from every (block, split); (value, index) ordered.
  using Cand = std::pair<T, Index>;
  std::vector<Cand> best(static_cast<std::size_t>(m) * k);
  std::vector<int> best_count(static_cast<std::size_t>(m), 0);
  std::vector<T> vals(mb_max * k);
  std::vector<std::uint32_t> idx(mb_max * k);

  const std::uint64_t n_batches = ceil_div(m, mb_max);
  for (std::uint64_t b0 = 0; b0 < std::uint64_t(n); b0 += nb_max) {
    const std::uint64_t nb = std::min<std::uint64_t>(nb_max, n - b0);
    const std::uint64_t splits = ceil_div(nb, pl.split_rows);
    vulkan::upload_rows<T>(device, xbuf, 0, database, b0, b0 + nb);
    bool xnorms_done = false;
    for (std::uint64_t q0 = 0; q0 < std::uint64_t(m); q0 += mb_max) {
      const std::uint64_t mb = std::min<std::uint64_t>(mb_max, m - q0);
      const bool new_queries = n_batches > 1 || b0 == 0;
      if (new_queries) vulkan::upload_rows<T>(device, qbuf, 0, queries, q0, q0 + mb);
      vulkan::Commands cmds(device);
      if (norms) {
        if (new_queries) record_row_sq_norms<T>(device, cmds, qbuf, qn, mb, d);
        if (!xnorms_done) record_row_sq_norms<T>(device, cmds, xbuf, xn, nb, d);
        xnorms_done = true;
        cmds.barrier();
      }
      const std::uint32_t push[6] = {std::uint32_t(mb), std::uint32_t(nb),         std::uint32_t(d),
                                     std::uint32_t(k),  std::uint32_t(pl.split_rows), std::uint32_t(b0)};
      cmds.dispatch(kernel, {qbuf, xbuf, qn, xn, vbuf, ibuf}, push,
                    static_cast<std::uint32_t>(ceil_div(mb, Policy::block_queries)), static_cast<std::uint32_t>(splits));
      // Merge the splits' heaps on the device, kKnnMergeGroup at a time, into split 0's.
      for (std::uint64_t stride = 1; stride < splits; stride *= kKnnMergeGroup) {
        cmds.barrier();
        const std::uint32_t mpush[5] = {std::uint32_t(mb), std::uint32_t(k), std::uint32_t(splits), std::uint32_t(stride),
                                        kKnnMergeGroup};
        cmds.dispatch(merge, {vbuf, ibuf}, mpush, static_cast<std::uint32_t>(ceil_div(mb, kKnnMergeThreads)),
                      static_cast<std::uint32_t>(ceil_div(splits, stride * kKnnMergeGroup)));
      }
      cmds.submit_and_wait();
      const std::uint64_t entries = mb * k;
      vulkan::download(device, vbuf, 0, vals.data(), entries * s);
      vulkan::download(device, ibuf, 0, idx.data(), entries * sizeof(std::uint32_t));

      // Merge: the query's running list plus the merged heap (sentinels skipped), cut to the k best.
      parallel_chunks(static_cast<std::int64_t>(mb), 64, [&](std::int64_t, std::int64_t qb, std::int64_t qe) {
        std::vector<Cand> cand;
        for (std::int64_t lq = qb; lq < qe; ++lq) {
          const std::size_t q = static_cast<std::size_t>(q0 + lq);
          cand.assign(best.begin() + q * k, best.begin() + q * k + best_count[q]);
          const std::size_t off = static_cast<std::size_t>(lq * k);
          for (int c = 0; c < k; ++c)
            if (idx[off + c] != UINT32_MAX) cand.emplace_back(vals[off + c], static_cast<Index>(idx[off + c]));
          const std::size_t keep = std::min<std::size_t>(cand.size(), static_cast<std::size_t>(k));
          std::partial_sort(cand.begin(), cand.begin() + keep, cand.end());
          std::copy_n(cand.begin(), keep, best.begin() + q * k);
          best_count[q] = static_cast<int>(keep);
        }
      });
    }
  }

  // Finish as the host engine does: exact values for the metrics it recomputes, sort, convert.
  const bool recompute = norms;
  for (int c : best_count)
    if (c != k) throw error("knn_search: the device returned fewer than k neighbours for a query");
  parallel_chunks(m, 64, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    std::vector<Cand> cand;
    for (Index i = b; i < e; ++i) {
      const std::size_t q = static_cast<std::size_t>(i);
      cand.assign(best.begin() + q * k, best.begin() + (q + 1) * k);
      if (recompute) {
        const T* qr = queries.row(i).data();
        const T qsq = metric == Metric::cosine ? host::knn_detail::dot_fixed(qr, qr, d) : T(0);
        for (auto& [v, j] : cand) {
          const T* x = database.row(j).data();
          v = metric == Metric::cosine ? host::knn_detail::cosine_exact(qr, x, d, qsq, host::knn_detail::dot_fixed(x, x, d))
                                       : host::knn_detail::sqdist_fixed(qr, x, d);
        }
        std::sort(cand.begin(), cand.end());
      }
      host::knn_detail::write_neighbours(result, i, cand, k, metric);
    }
  });
  return result;
}

}  // namespace gpuml::kernels
