// The k-NN result contract every engine keeps (host/knn.hpp, kernels/knn.hpp): the arguments a search takes, the
// selected neighbours' values recomputed exactly in a fixed order (so duplicates are at distance exactly 0 and the
// engines agree bit for bit), and the finish that turns selected values into scikit-learn's distances. No Vulkan,
// no SIMD.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpuml::algorithms {

/// The result of a k-NN search: what NearestNeighbors::kneighbors returns.
template <class T>
struct KnnResult {
  Matrix<T> distances;  ///< n_queries x k
  IndexMatrix indices;  ///< n_queries x k, rows of the database
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

}  // namespace gpuml::algorithms
