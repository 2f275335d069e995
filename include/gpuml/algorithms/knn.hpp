// The k-NN result contract every engine keeps (host/knn.hpp, kernels/knn.hpp): the arguments a search takes, the
// selected neighbours' values recomputed exactly in a fixed order (so duplicates are at distance exactly 0 and the
// engines agree bit for bit), and the finish that turns selected values into scikit-learn's distances. No Vulkan,
// no SIMD.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/core/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpuml::algorithms {

/// What a search did on a device, returned with its result (kernels::knn_search fills it; a host search leaves it
/// as constructed: no device time, no passes).
struct KnnSearchStats {
  double device_ms = -1;  // GPU time of its kernels (timestamps; negative where the queue has none)
  std::uint64_t sample_rows = 0;  // database rows read by the bounding sample passes (0: none ran)
  // (block, query batch) pairs finished from candidate lists, and those whose lists overflowed and were searched
  // again with heaps.
  std::uint64_t list_batches = 0, list_overflows = 0;
  std::uint64_t coop_passes = 0;  // list passes run on cooperative matrices (knn_filter_coop.comp)
  std::uint64_t database_blocks = 0;  // database blocks searched (more than one: streamed through, or split)
  bool streamed = false;              // the database was uploaded for this search, block by block, not resident

  /// Adds another part's search (a shard's, searched at the same time): device times add where both have them.
  void add(const KnnSearchStats& other) {
    add_device_ms(device_ms, other.device_ms);
    sample_rows += other.sample_rows;
    list_batches += other.list_batches;
    list_overflows += other.list_overflows;
    coop_passes += other.coop_passes;
    database_blocks += other.database_blocks;
    streamed = streamed || other.streamed;
  }
};

/// The result of a k-NN search: what NearestNeighbors::kneighbors returns.
template <class T>
struct KnnResult {
  Matrix<T> distances;  ///< n_queries x k
  IndexMatrix indices;  ///< n_queries x k, rows of the database
  KnnSearchStats stats{};  ///< what the search did on a device (summed over the parts of a sharded search)
};

/// The result of a radius search: ragged neighbour lists as compressed rows. The neighbours of query i are entries
/// offsets[i] to offsets[i + 1] of indices and distances (scikit-learn returns them as arrays of arrays).
template <class T>
struct RadiusResult {
  std::vector<std::int64_t> offsets;  ///< n_queries + 1 entries, offsets[0] = 0
  std::vector<std::int64_t> indices;
  std::vector<T> distances;
};

using Index = std::int64_t;

/// Dot product in a fixed summation order (independent of alignment), accumulated in T.
template <class T>
inline T dot_fixed(const T* a, const T* b, Index d) {
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  Index f = 0;
  for (; f + 4 <= d; f += 4) {
    s0 += a[f] * b[f];
    s1 += a[f + 1] * b[f + 1];
    s2 += a[f + 2] * b[f + 2];
    s3 += a[f + 3] * b[f + 3];
  }
  for (; f < d; ++f) s0 += a[f] * b[f];
  return (s0 + s1) + (s2 + s3);
}

/// Squared euclidean distance from differences, fixed order; exactly 0 for identical rows.
template <class T>
inline T sqdist_fixed(const T* a, const T* b, Index d) {
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  Index f = 0;
  for (; f + 4 <= d; f += 4) {
    const T e0 = a[f] - b[f], e1 = a[f + 1] - b[f + 1], e2 = a[f + 2] - b[f + 2], e3 = a[f + 3] - b[f + 3];
    s0 += e0 * e0;
    s1 += e1 * e1;
    s2 += e2 * e2;
    s3 += e3 * e3;
  }
  for (; f < d; ++f) {
    const T e = a[f] - b[f];
    s0 += e * e;
  }
  return (s0 + s1) + (s2 + s3);
}

/// Cosine distance of two rows with squared norms na, nb: 1 - cos, clipped to [0, 2]; 0 for identical rows.
template <class T>
inline T cosine_exact(const T* a, const T* b, Index d, T na, T nb) {
  if (!(na > 0) || !(nb > 0)) return T(1);
  const double c = static_cast<double>(dot_fixed(a, b, d)) / std::sqrt(static_cast<double>(na) * static_cast<double>(nb));
  return static_cast<T>(std::clamp(1.0 - c, 0.0, 2.0));
}

/// The arguments every knn_search engine takes: a non-empty database, queries of its width, 1 <= k <= n.
inline void check_search(Index n, Index d, Index query_features, int k) {
  if (n == 0 || d == 0) throw invalid_input("knn_search: the database is empty");
  if (query_features != d)
    throw invalid_input("knn_search: queries have " + std::to_string(query_features) + " features, but the database has " +
                        std::to_string(d));
  if (k < 1) throw invalid_input("knn_search: k must be at least 1, got " + std::to_string(k));
  if (k > n)
    throw invalid_input("knn_search: k = " + std::to_string(k) + " exceeds the number of database rows (" +
                        std::to_string(n) + ")");
}

/// Row i of a result from candidates sorted by (value, index): euclidean values become sqrt(max(d2, 0)) and
/// inner-product values (selected negated) become similarities again. Shared by the host and Vulkan engines.
template <class T, class Result>
void write_neighbours(Result& result, Eigen::Index i, const std::vector<std::pair<T, Index>>& cand, int k, Metric metric) {
  for (int c = 0; c < k; ++c) {
    T v = cand[c].first;
    if (metric == Metric::euclidean) v = std::sqrt(std::max(v, T(0)));
    else if (metric == Metric::inner_product) v = -v;
    result.distances(i, c) = v;
    result.indices(i, c) = cand[c].second;
  }
}

/// The metric parts of a sharded search are searched with: euclidean as squared distances, so merge_parts orders
/// by the values the engines sort by (two squared distances can share a square root) and the root comes last.
inline Metric part_metric(Metric metric) { return metric == Metric::euclidean ? Metric::sqeuclidean : metric; }

/// The k best for each query of several parts' lists (part s holds the database rows from first[s] on, searched
/// with part_metric(metric); its lists may be shorter than k where the part is smaller), in the order one search
/// over the whole database gives: by (value, global index), similarities largest first.
template <class T>
KnnResult<T> merge_parts(const std::vector<KnnResult<T>>& parts, const std::vector<Index>& first, Index n_queries,
                         int k, Metric metric) {
  const bool negate = metric_is_similarity(metric);  // selected negated, as the engines do
  Index available = 0;
  for (const auto& p : parts) available += p.indices.cols();
  if (n_queries > 0 && available < k)
    throw invalid_input("merge_parts: the parts hold " + std::to_string(available) + " neighbours per query, fewer than k = " +
                        std::to_string(k));
  KnnResult<T> out{Matrix<T>(n_queries, k), IndexMatrix(n_queries, k)};
  if (!parts.empty()) {
    out.stats = parts.front().stats;
    for (std::size_t s = 1; s < parts.size(); ++s) out.stats.add(parts[s].stats);
  }
  parallel_chunks(n_queries, 256, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    std::vector<std::pair<T, Index>> cand;
    for (Index i = b; i < e; ++i) {
      cand.clear();
      for (std::size_t s = 0; s < parts.size(); ++s)
        for (Eigen::Index c = 0; c < parts[s].indices.cols(); ++c)
          cand.emplace_back(negate ? -parts[s].distances(i, c) : parts[s].distances(i, c),
                            parts[s].indices(i, c) + first[s]);
      std::partial_sort(cand.begin(), cand.begin() + k, cand.end());
      write_neighbours(out, i, cand, k, metric);
    }
  });
  return out;
}

}  // namespace gpuml::algorithms
