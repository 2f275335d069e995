// The k-NN result contract every engine keeps (host/knn.hpp, kernels/knn.hpp): the arguments a search takes, and
// the finish that turns an engine's selection into its result. The result of a search is the first k of every
// database row in (returned value, index) order (similarities largest first), whatever k: the first j columns of a
// k-search are the j-search. Returned values are recomputed exactly in a fixed order where the engines select by norm
// expansions (euclidean, sqeuclidean, cosine: duplicates at distance exactly 0, the engines agree bit for bit);
// search_exactly makes sure no row whose returned value ties or beats the k-th is left out by the selection's
// rounding. No Vulkan, no SIMD.
#pragma once

#include <gpuml/algorithms/knn_result.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/core/parallel.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpuml::algorithms {

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

/// Squared euclidean distance from differences, fixed order; exactly 0 for identical rows. For float rows every
/// difference is rounded to float and its square, exact in double, summed in double: the value then does not
/// depend on whether a compiler fuses the products into the sums, so a device forms it bit for bit
/// (shaders/knn_exact_keys.comp).
template <class T>
inline T sqdist_fixed(const T* a, const T* b, Index d) {
  using Sum = std::conditional_t<std::is_same_v<T, float>, double, T>;
  Sum s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  Index f = 0;
  for (; f + 4 <= d; f += 4) {
    const Sum e0 = a[f] - b[f], e1 = a[f + 1] - b[f + 1], e2 = a[f + 2] - b[f + 2], e3 = a[f + 3] - b[f + 3];
    s0 += e0 * e0;
    s1 += e1 * e1;
    s2 += e2 * e2;
    s3 += e3 * e3;
  }
  for (; f < d; ++f) {
    const Sum e = a[f] - b[f];
    s0 += e * e;
  }
  return static_cast<T>((s0 + s1) + (s2 + s3));
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

/// Whether the engines recompute the values of the pairs they select (euclidean, sqeuclidean, cosine): they select
/// by norm expansions, which can order pairs differently from the returned values. The other metrics return the
/// values they select by.
inline bool recomputes_values(Metric metric) {
  return metric == Metric::euclidean || metric == Metric::sqeuclidean || metric == Metric::cosine;
}

/// A (squared) euclidean pair's sort key from its squared distance `squared` (sqdist_fixed's value, by whichever
/// engine formed it): the distance a search returns.
template <class T>
T key_from_squared(T squared, Metric metric) {
  return metric == Metric::euclidean ? std::sqrt(squared) : squared;
}

/// A pair's sort key from its exactly recomputed value (recomputes_values metrics): the distance a search returns
/// (euclidean: the square root, so that squared distances sharing a root tie and go to the lower index). Only equal
/// rows are at (squared) euclidean distance 0: differences too small to square in T count as the smallest one.
template <class T>
T exact_key(const T* q, const T* x, Index d, Metric metric, T q_squared_norm) {
  if (metric == Metric::cosine) return cosine_exact(q, x, d, q_squared_norm, dot_fixed(x, x, d));
  T sq = sqdist_fixed(q, x, d);
  if (sq == T(0) && !std::equal(q, q + d, x)) sq = std::numeric_limits<T>::denorm_min();
  return key_from_squared(sq, metric);
}

/// Row i of a result from its first k (key, index) pairs, sorted: keys are the returned values, negated for
/// similarities (negation is exact, so ties stay ties).
template <class T, class Result>
void write_neighbours(Result& result, Eigen::Index i, const std::pair<T, Index>* keyed, int k, Metric metric) {
  const bool negate = metric_is_similarity(metric);
  for (int c = 0; c < k; ++c) {
    result.distances(i, c) = negate ? -keyed[c].first : keyed[c].first;
    result.indices(i, c) = keyed[c].second;
  }
}

/// An engine's selection: for each query, the best `width` (selection value, database index) pairs of the whole
/// database by (value, index), in any order, one query after another.
template <class T>
using Candidates = std::vector<std::pair<T, Index>>;

namespace knn_boundary {

/// Whether a query's selection certainly holds every row that comes before its k-th neighbour in (returned value,
/// index) order. The selection kept the best pairs by the engine's values, so every other row has a selection
/// value of at least `last` (the largest kept; equal only with an index above `last_index`). `kth`: the k-th
/// neighbour's key (recomputed), `kth_index` its row. `exact`: every selection value of this query equals the
/// recomputed squared distance (integer data with small norms, (squared) euclidean only).
///
/// Otherwise a selection value and the recomputed value of one pair differ by at most the rounding of their sums
/// over d features (u: T's unit roundoff; sums in any order, fused or not). For (squared) euclidean,
/// |q|^2 + |x|^2 - 2 <q, x> is within (d + 2) u (|q| + |x|)^2 of the exact value, the sum of squared differences
/// within (d + 3) u of it relative, and |q| + |x| <= 2 |q| + |q - x|: g = (d + 8) u bounds both. For cosine, with
/// the norms' square roots and divisions (a device's within a few ulps), both are within (2 d + 18) u of 1 - cos.
template <class T>
bool settled(Metric metric, bool exact, T last, Index last_index, T kth, Index kth_index, const T* query, Index d) {
  const bool squared = metric == Metric::sqeuclidean;
  if (metric != Metric::cosine && kth == T(0)) {
    // Rows at distance exactly 0 equal the query (exact_key): they have one selection value, so the selection cut
    // them by index.
    return true;
  }
  if (exact) {
    if (squared) return true;  // the selection's own order
    // Distinct squared distances can share a square root: rows past `last` must round to a larger one, and those
    // tied with `last` come after it by index.
    if (std::sqrt(last) > kth) return true;
    return std::sqrt(std::nextafter(last, std::numeric_limits<T>::infinity())) > kth && last_index >= kth_index;
  }
  using Wide = long double;
  const Wide u = Wide(std::numeric_limits<T>::epsilon()) / 2, g = Wide(d + 8) * u;
  if (!(g < Wide(0.25))) return false;
  const Wide tiny = 4 * Wide(d + 8) * Wide(std::numeric_limits<T>::min());  // devices may flush subnormal results
  Wide most;  // the largest selection value a row whose key ties or beats kth can have
  if (metric == Metric::cosine) {
    most = Wide(kth) + 4 * Wide(d + 12) * u + tiny;
  } else {
    Wide q_squared = 0;
    for (Index f = 0; f < d; ++f) q_squared += Wide(query[f]) * Wide(query[f]);
    // A row whose returned distance is at most kth has a recomputed squared distance of at most bound (a correctly
    // rounded square root is within u), and an exact one of at most bound / (1 - g).
    const Wide bound = squared ? Wide(kth) : Wide(kth) * Wide(kth) * (1 + 4 * u);
    const Wide exact_most = bound / (1 - g) + tiny;
    const Wide span = 2 * std::sqrt(q_squared) + std::sqrt(exact_most);
    most = exact_most + g * span * span + tiny;
  }
  return Wide(last) > most;
}

/// Where every value of X is an integer: the largest squared row norm (in double, rounded up), else nothing. Stops at
/// the first value that is not an integer.
template <class T>
std::optional<double> integer_rows_norm(MatrixView<T> X) {
  const Index rows = X.rows(), d = X.cols();
  std::atomic<bool> integers{true};
  std::vector<double> most(static_cast<std::size_t>(std::max<Index>(1, (rows + 4095) / 4096)), 0.0);
  parallel_chunks(rows, 4096, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    double chunk_most = 0;
    for (Index r = b; r < e && integers.load(std::memory_order_relaxed); ++r) {
      const T* x = X.row(r).data();
      double sq = 0;
      for (Index f = 0; f < d; ++f) {
        if (x[f] != std::trunc(x[f])) {
          integers.store(false, std::memory_order_relaxed);
          break;
        }
        sq += double(x[f]) * double(x[f]);
      }
      chunk_most = std::max(chunk_most, sq);
    }
    most[static_cast<std::size_t>(c)] = chunk_most;
  });
  if (!integers.load()) return std::nullopt;
  return *std::max_element(most.begin(), most.end()) * (1 + 1e-12);
}

/// Whether (squared) euclidean values between a query of squared norm q_sq and rows of squared norms up to x_sq,
/// all integers, are exact in T: every sum the engines form is an integer below (|q| + |x|)^2 <= 2^digits.
template <class T>
bool exact_integer_sums(double q_sq, double x_sq) {
  const double span = std::sqrt(q_sq) + std::sqrt(x_sq);
  return span * span * (1 + 1e-9) < std::ldexp(1.0, std::numeric_limits<T>::digits);
}

/// Finishes one query from its `width` candidates: recomputed keys where the metric has them, sorted by (key,
/// index), the first k written to row `row` of `result`. Returns whether the k are settled (see settled()).
/// `squared`, where given, holds the candidates' sqdist_fixed values as the engine formed them (a device's), NaN
/// where it left them to the host ((squared) euclidean only).
template <class T>
bool finish_query(MatrixView<T> database, const T* query, const std::pair<T, Index>* cand, const T* squared,
                  Index width, int k, Metric metric, bool exact, std::vector<std::pair<T, Index>>& keyed,
                  KnnResult<T>& result, Index row) {
  const Index d = database.cols();
  keyed.assign(cand, cand + width);
  const bool recompute = recomputes_values(metric);
  auto last = keyed.front();  // the selection's worst pair: every other row comes after it in (value, index) order
  if (recompute) {
    for (const auto& p : keyed) last = std::max(last, p);
    const T q_squared = metric == Metric::cosine ? dot_fixed(query, query, d) : T(0);
    for (Index c = 0; c < width; ++c) {
      auto& [v, j] = keyed[static_cast<std::size_t>(c)];
      v = squared && squared[c] > T(0) ? key_from_squared(squared[c], metric)
                                       : exact_key(query, database.row(j).data(), d, metric, q_squared);
    }
  }
  // Sorted whole: the width is at most about 2 k, where a sort costs less than a partial sort's heap (the same
  // first k: (key, index) orders the candidates totally).
  std::sort(keyed.begin(), keyed.end());
  write_neighbours(result, row, keyed.data(), k, metric);
  if (!recompute || width == database.rows()) return true;
  return settled(metric, exact, last.first, last.second, keyed[k - 1].first, keyed[k - 1].second, query, d);
}

/// Query `row`'s k best by a scan of every database row (no selection to doubt).
template <class T>
void scan_query(MatrixView<T> database, const T* query, int k, Metric metric, std::vector<std::pair<T, Index>>& keyed,
                KnnResult<T>& result, Index row) {
  const Index n = database.rows(), d = database.cols();
  const T q_squared = metric == Metric::cosine ? dot_fixed(query, query, d) : T(0);
  keyed.resize(static_cast<std::size_t>(n));
  for (Index j = 0; j < n; ++j) keyed[j] = {exact_key(query, database.row(j).data(), d, metric, q_squared), j};
  std::partial_sort(keyed.begin(), keyed.begin() + k, keyed.end());
  write_neighbours(result, row, keyed.data(), k, metric);
}

}  // namespace knn_boundary

/// The width of a search's first selection of d-feature rows (at most the database's n rows): k, or where the
/// metric's values are recomputed k + 8 + k d / 4096 (at most 2 k + 8). The last pair's selection value bounds every
/// row left out; the margin keeps the rows whose order rounding could change (a share of the k nearest that grows
/// as d^2 u, more for data far from the origin) inside the selection, so that a wider search is rare: on a GPU even
/// one query's costs a pass over the whole database. It stays small: a device's candidate lists hold about 16 pairs
/// per pair kept, sorted in shared memory.
inline Index first_selection_width(Index n, Index d, int k, Metric metric) {
  if (!recomputes_values(metric)) return k;
  return std::min<Index>(n, Index(k) + 8 + std::min<Index>(k, Index(k) * d / 4096));
}

/// A search's result from an engine's selection. select(queries, width, out, squared) fills `out` with the
/// Candidates of `queries` (a view of the search's queries or a copy of some of them) and, for (squared) euclidean
/// searches where the engine forms them, `squared` with each candidate's sqdist_fixed value (NaN: left to the host;
/// empty: none); `candidates` and `squared` are the storage it fills (an engine may keep them between searches). The first selection is first_selection_width() wide. A query whose k-th
/// neighbour it cannot settle (knn_boundary::settled) is searched again with half as many pairs more (usually a few
/// rows were missing, and a device's search of that width costs about as little as the first), then with four
/// times as many each time (ties), at most `widest` (or the first width), and past that scanned on the host; `database_integer_norm()` tells, only when
/// such a query comes up, whether the database holds integers and its largest squared row norm (exact arithmetic
/// settles ties). The extra work is on the returned columns and the margin, bar those rare queries, which the
/// result's stats count (boundary_queries).
template <class T, class Select, class DatabaseIntegerNorm>
KnnResult<T> search_exactly(MatrixView<T> database, MatrixView<T> queries, int k, Metric metric, Index widest,
                            Candidates<T>& candidates, std::vector<T>& squared, Select&& select,
                            DatabaseIntegerNorm&& database_integer_norm) {
  const Index n = database.rows(), m = queries.rows(), d = database.cols();
  KnnResult<T> result{Matrix<T>(m, k), IndexMatrix(m, k)};
  if (m == 0) return result;
  Index width = first_selection_width(n, d, k, metric);
  widest = std::max(widest, width);
  select(queries, width, candidates, squared);

  // Rows `rows` of the search's queries (or all of them) finished from `batch`'s candidates; those not settled are
  // returned.
  std::vector<Index> pending;
  std::vector<char> exact;  // per search query: its (squared) euclidean values are exact
  auto finish = [&](MatrixView<T> batch, const std::vector<Index>* rows) {
    std::vector<char> settled(static_cast<std::size_t>(batch.rows()), 1);
    const bool formed = squared.size() == candidates.size() && (metric == Metric::euclidean || metric == Metric::sqeuclidean);
    parallel_chunks(batch.rows(), 64, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      std::vector<std::pair<T, Index>> keyed;
      for (Index r = b; r < e; ++r) {
        const Index row = rows ? (*rows)[static_cast<std::size_t>(r)] : r;
        settled[static_cast<std::size_t>(r)] = knn_boundary::finish_query(
            database, batch.row(r).data(), candidates.data() + r * width, formed ? squared.data() + r * width : nullptr,
            width, k, metric, !exact.empty() && exact[static_cast<std::size_t>(row)], keyed, result, row);
      }
    });
    std::vector<Index> left;
    for (Index r = 0; r < batch.rows(); ++r)
      if (!settled[static_cast<std::size_t>(r)]) left.push_back(rows ? (*rows)[static_cast<std::size_t>(r)] : r);
    return left;
  };
  pending = finish(queries, nullptr);
  if (pending.empty()) return result;

  // Integer data: exact values settle ties at the boundary without a wider search.
  if (metric == Metric::euclidean || metric == Metric::sqeuclidean) {
    if (const std::optional<double> x_sq = database_integer_norm()) {
      exact.assign(static_cast<std::size_t>(m), 0);
      bool any = false;
      for (Index i : pending) {
        const auto q_sq = knn_boundary::integer_rows_norm<T>(queries.middleRows(i, 1));
        const bool sums_exact = q_sq && knn_boundary::exact_integer_sums<T>(*q_sq, *x_sq);
        exact[static_cast<std::size_t>(i)] = sums_exact;
        any = any || sums_exact;
      }
      if (any) {  // the first selection again, now with exact values
        squared.clear();  // (recomputed by the host for these few queries)
        Matrix<T> batch(static_cast<Index>(pending.size()), d);
        Candidates<T> kept(pending.size() * static_cast<std::size_t>(width));
        for (std::size_t r = 0; r < pending.size(); ++r) {
          batch.row(static_cast<Index>(r)) = queries.row(pending[r]);
          std::copy_n(candidates.begin() + pending[r] * width, width, kept.begin() + static_cast<Index>(r) * width);
        }
        candidates.swap(kept);
        pending = finish(batch, &pending);
        candidates.swap(kept);
      }
    }
  }

  for (int retry = 0; !pending.empty(); ++retry) {
    result.stats.boundary_queries += pending.size();
    Matrix<T> batch(static_cast<Index>(pending.size()), d);
    for (std::size_t r = 0; r < pending.size(); ++r) batch.row(static_cast<Index>(r)) = queries.row(pending[r]);
    if (width >= widest) {
      parallel_chunks(batch.rows(), 1, [&](std::int64_t, std::int64_t b, std::int64_t e) {
        std::vector<std::pair<T, Index>> keyed;
        for (Index r = b; r < e; ++r)
          knn_boundary::scan_query(database, batch.row(r).data(), k, metric, keyed, result, pending[static_cast<std::size_t>(r)]);
      });
      break;
    }
    width = std::min({n, retry == 0 ? width + std::max<Index>(16, width / 2) : std::max(4 * width, width + 64), widest});
    select(MatrixView<T>(batch), width, candidates, squared);
    pending = finish(batch, &pending);
  }
  return result;
}

/// The metric each part of a sharded search is searched with: the search's own, since the merge orders the parts'
/// returned values (a euclidean part searched on squared distances would cut its list in another order).
inline Metric part_metric(Metric metric) { return metric; }

/// The k best for each query of several parts' lists (part s holds the database rows from first[s] on, each list
/// a search's result with part_metric(metric), shorter than k where the part is smaller), in the order one search
/// over the whole database gives: by (returned value, global index), similarities largest first. Each part's list
/// is the first of its rows in that order, so the merge is too.
template <class T>
KnnResult<T> merge_parts(const std::vector<KnnResult<T>>& parts, const std::vector<Index>& first, Index n_queries,
                         int k, Metric metric) {
  const bool negate = metric_is_similarity(metric);
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
    std::vector<std::pair<T, Index>> keyed;
    for (Index i = b; i < e; ++i) {
      keyed.clear();
      for (std::size_t s = 0; s < parts.size(); ++s)
        for (Eigen::Index c = 0; c < parts[s].indices.cols(); ++c)
          keyed.emplace_back(negate ? -parts[s].distances(i, c) : parts[s].distances(i, c),
                             parts[s].indices(i, c) + first[s]);
      std::partial_sort(keyed.begin(), keyed.begin() + k, keyed.end());
      write_neighbours(out, i, keyed.data(), k, metric);
    }
  });
  return out;
}

}  // namespace gpuml::algorithms
