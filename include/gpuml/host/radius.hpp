// Host engine for radius-neighbour search (scikit-learn's radius_neighbors with algorithm="brute"): every
// database row within the radius of each query, its value computed directly in a fixed order (the same functions
// as the k-NN engines' exact recompute, so a k-NN neighbour and a radius neighbour have the same distance).
#pragma once

#include <gpuml/algorithms/knn.hpp>
#include <gpuml/algorithms/radius.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/core/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace gpuml::host {

/// Distance of two rows for a radius search (algorithms/radius.hpp; the device engine re-checks with it too).
using algorithms::radius_distance;

/// Every database row at distance <= radius from each query, in increasing index order, or sorted by (distance,
/// index) when `sort`. `exclude_self`: queries are the database itself and row i is not its own neighbour.
/// `sorted_feature` >= 0: the database and the queries are both sorted by that feature, and each query scans only
/// the rows within the radius's reach in it (algorithms::sorted_windows; the same result, fewer pairs).
template <class T>
algorithms::RadiusResult<T> radius_search(MatrixView<T> database, MatrixView<T> queries, double radius, Metric metric, bool sort,
                              bool exclude_self = false, Eigen::Index sorted_feature = -1) {
  static_assert(is_supported_scalar<T>, "gpuml supports float and double");
  const std::int64_t n = database.rows(), d = database.cols(), m = queries.rows();
  if (n == 0 || d == 0) throw invalid_input("radius search: the database is empty");
  if (queries.cols() != d)
    throw invalid_input("radius search: queries have " + std::to_string(queries.cols()) +
                        " features, but the database has " + std::to_string(d));
  if (!(radius >= 0) || std::isnan(radius))
    throw invalid_input("radius must be a number >= 0, got " + std::to_string(radius));
  if (exclude_self && m != n) throw invalid_input("radius search: exclude_self needs the database as the queries");
  if (metric == Metric::inner_product)
    throw invalid_input("radius search: metric inner_product has no radius (it is a similarity)");
  const T r = algorithms::radius_in<T>(radius);
  if (sorted_feature >= d) throw invalid_input("radius search: sorted_feature " + std::to_string(sorted_feature) + " of " + std::to_string(d) + " features");
  std::vector<std::int64_t> windows;
  if (sorted_feature >= 0) {
    const double reach = algorithms::radius_reach<T>(radius, metric, d, algorithms::feature_scale(database, queries, sorted_feature));
    if (!std::isinf(reach)) windows = algorithms::sorted_windows(database, queries, sorted_feature, reach);
  }

  std::vector<T> dn, qn;
  if (metric == Metric::cosine) {
    dn.resize(std::size_t(n));
    qn.resize(std::size_t(m));
    for (std::int64_t j = 0; j < n; ++j) dn[std::size_t(j)] = algorithms::dot_fixed(database.row(j).data(), database.row(j).data(), d);
    for (std::int64_t i = 0; i < m; ++i) qn[std::size_t(i)] = algorithms::dot_fixed(queries.row(i).data(), queries.row(i).data(), d);
  }

  // Per chunk of queries, its own lists; concatenated in query order afterwards.
  constexpr std::int64_t kChunk = 16;
  const std::int64_t n_chunks = (m + kChunk - 1) / kChunk;
  std::vector<std::vector<std::pair<T, std::int64_t>>> found(static_cast<std::size_t>(n_chunks));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(m), 0);
  parallel_chunks(n_chunks, 1, [&](std::int64_t, std::int64_t cb, std::int64_t ce) {
    std::vector<std::pair<T, std::int64_t>> row;
    for (std::int64_t c = cb; c < ce; ++c) {
      auto& out = found[std::size_t(c)];
      for (std::int64_t i = c * kChunk; i < std::min(m, (c + 1) * kChunk); ++i) {
        row.clear();
        const T* q = queries.row(i).data();
        const T qni = metric == Metric::cosine ? qn[std::size_t(i)] : T(0);
        const std::int64_t j0 = windows.empty() ? 0 : windows[std::size_t(2 * i)];
        const std::int64_t j1 = windows.empty() ? n : windows[std::size_t(2 * i + 1)];
        for (std::int64_t j = j0; j < j1; ++j) {
          if (exclude_self && j == i) continue;
          const T v = radius_distance(q, database.row(j).data(), d, metric, qni,
                                      metric == Metric::cosine ? dn[std::size_t(j)] : T(0));
          if (v <= r) row.emplace_back(v, j);
        }
        if (sort) std::sort(row.begin(), row.end());
        counts[std::size_t(i)] = std::int64_t(row.size());
        out.insert(out.end(), row.begin(), row.end());
      }
    }
  });

  algorithms::RadiusResult<T> result;
  result.offsets.resize(std::size_t(m) + 1, 0);
  for (std::int64_t i = 0; i < m; ++i) result.offsets[std::size_t(i) + 1] = result.offsets[std::size_t(i)] + counts[std::size_t(i)];
  const std::size_t total = std::size_t(result.offsets.back());
  result.indices.reserve(total);
  result.distances.reserve(total);
  for (const auto& chunk : found)
    for (const auto& [v, j] : chunk) {
      result.distances.push_back(v);
      result.indices.push_back(j);
    }
  return result;
}

}  // namespace gpuml::host
