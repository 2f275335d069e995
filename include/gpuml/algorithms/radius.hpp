// Radius-neighbour numerics shared by the engines: the exact distance of a pair (the host engine's values, and the
// device engine's re-check of pairs near the radius) and the rounding band around the radius within which a
// device's float value cannot decide a pair.
#pragma once

#include <gpuml/algorithms/knn.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/core/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace gpuml::algorithms {

/// Distance of two rows for a radius search, in a fixed order (inner product is a similarity: not a radius metric).
/// `na`, `nb`: the rows' squared norms (dot_fixed), read by cosine only.
template <class T>
T radius_distance(const T* a, const T* b, std::int64_t d, Metric metric, T na, T nb) {
  switch (metric) {
    case Metric::euclidean: return std::sqrt(sqdist_fixed(a, b, d));
    case Metric::sqeuclidean: return sqdist_fixed(a, b, d);
    case Metric::cosine: return cosine_exact(a, b, d, na, nb);
    case Metric::manhattan: {
      T s = 0;
      for (std::int64_t f = 0; f < d; ++f) s += std::abs(a[f] - b[f]);
      return s;
    }
    case Metric::chebyshev: {
      T s = 0;
      for (std::int64_t f = 0; f < d; ++f) s = std::max(s, std::abs(a[f] - b[f]));
      return s;
    }
    case Metric::inner_product: break;
  }
  throw invalid_input("radius search: metric inner_product has no radius (it is a similarity)");
}

/// The radius as the engines compare with it: T(radius), or +inf beyond T's range.
template <class T>
T radius_in(double radius) {
  return radius > double(std::numeric_limits<T>::max()) ? std::numeric_limits<T>::infinity() : T(radius);
}

/// The band of a device's values around the radius: a pair whose value v (formed in T in any order of d
/// rounded operations: squared differences for euclidean and sqeuclidean, the sum or maximum of absolute
/// differences, for cosine 1 - <q, x> / (|q| |x|) from a dot product and inverse norms) is below `lo` has
/// radius_distance <= radius, above `hi` has radius_distance > radius; a pair in [lo, hi] is uncertain and is
/// decided by radius_distance itself. Euclidean's band is on the squared scale.
///
/// The bound: any evaluation of a sum of d terms, each from one or two rounded operations, is within
/// gamma = (d + 4) u of the exact value relative to it (u the unit roundoff), plus an absolute (d + 4) x the
/// smallest normal for flushed or gradual underflow; both the device's value and radius_distance are, so they
/// differ by at most twice that. The band takes four times it (and eight u more for euclidean's square root and
/// the rounding of the band itself). Cosine's error is relative to 1 (|<q, x>| <= |q| |x|), so its band is absolute.
template <class T>
struct RadiusBand {
  T lo, hi;
};

template <class T>
RadiusBand<T> radius_band(double radius, Metric metric, std::int64_t d) {
  const double r = double(radius_in<T>(radius));
  const double u = std::ldexp(1.0, -std::numeric_limits<T>::digits);
  const double tiny = double(std::numeric_limits<T>::min());
  const double terms = double(d) + 4;
  const double rel = 4 * terms * u + 8 * u, abs_err = 4 * terms * tiny;
  double lo = 0, hi = 0;
  switch (metric) {
    case Metric::euclidean: {
      const double r2 = r * r;
      lo = r2 * (1 - rel) - abs_err;
      hi = r2 * (1 + rel) + abs_err;
      break;
    }
    case Metric::sqeuclidean:
    case Metric::manhattan:
    case Metric::chebyshev:
      lo = r * (1 - rel) - abs_err;
      hi = r * (1 + rel) + abs_err;
      break;
    case Metric::cosine: {
      const double band = 8 * terms * u + 8 * u;
      lo = r - band;
      hi = r + band;
      break;
    }
    case Metric::inner_product: throw invalid_input("radius search: metric inner_product has no radius (it is a similarity)");
  }
  // Rounded outwards into T (a band beyond T's range is infinite: every finite value is below it).
  auto down = [](double x) {
    if (x > double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::infinity();
    T t = T(x);
    return double(t) > x ? std::nextafter(t, -std::numeric_limits<T>::infinity()) : t;
  };
  auto up = [](double x) {
    if (x > double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::infinity();
    T t = T(x);
    return double(t) < x ? std::nextafter(t, std::numeric_limits<T>::infinity()) : t;
  };
  return {down(lo), up(hi)};
}

/// How far apart in any one feature two rows can be and still be within the radius: a pair whose difference in
/// one feature exceeds the reach has radius_distance > radius (each metric's value is at least that feature's
/// contribution, and the reach allows for every rounding of radius_distance, for underflow, and for the rounding of
/// `feature_scale` (the largest magnitude in the feature) when windows are formed in double). Infinite for cosine,
/// which no single feature bounds. Searches over rows sorted by one feature scan only the rows within the reach.
template <class T>
double radius_reach(double radius, Metric metric, std::int64_t d, double feature_scale) {
  const double r = double(radius_in<T>(radius));
  if (std::isinf(r) || metric == Metric::cosine || metric == Metric::inner_product) return std::numeric_limits<double>::infinity();
  const double u = std::ldexp(1.0, -std::numeric_limits<T>::digits);
  const double tiny = double(std::numeric_limits<T>::min());
  const double rel = 8 * (double(d) + 4) * u + 16 * u;
  const double scale_err = 8 * std::ldexp(1.0, -53) * feature_scale;
  switch (metric) {
    case Metric::euclidean: return r * (1 + rel) + 4 * std::sqrt((double(d) + 4) * tiny) + scale_err;
    case Metric::sqeuclidean: return std::sqrt(r * (1 + rel)) + 4 * std::sqrt((double(d) + 4) * tiny) + scale_err;
    default: return r * (1 + rel) + 4 * (double(d) + 4) * tiny + scale_err;
  }
}

/// The largest magnitude of `feature` in the database and the queries (radius_reach's feature_scale).
template <class T>
double feature_scale(MatrixView<T> database, MatrixView<T> queries, Eigen::Index feature) {
  double s = 0;
  for (Eigen::Index j = 0; j < database.rows(); ++j) s = std::max(s, std::abs(double(database(j, feature))));
  for (Eigen::Index i = 0; i < queries.rows(); ++i) s = std::max(s, std::abs(double(queries(i, feature))));
  return s;
}

/// For rows sorted by `feature` (ascending) and queries sorted the same way: per query, the database rows
/// [first, last) whose value of the feature is within `reach` of the query's, by one merge-like sweep (both sides
/// sorted). Throws invalid_input where either side is not sorted.
template <class T>
std::vector<std::int64_t> sorted_windows(MatrixView<T> database, MatrixView<T> queries, Eigen::Index feature, double reach) {
  const std::int64_t n = database.rows(), m = queries.rows();
  auto value = [&](MatrixView<T> M, std::int64_t i) { return double(M(i, feature)); };
  for (std::int64_t j = 1; j < n; ++j)
    if (!(value(database, j - 1) <= value(database, j)))
      throw invalid_input("radius search over sorted rows: the database is not sorted by feature " + std::to_string(feature));
  for (std::int64_t i = 1; i < m; ++i)
    if (!(value(queries, i - 1) <= value(queries, i)))
      throw invalid_input("radius search over sorted rows: the queries are not sorted by feature " + std::to_string(feature));
  std::vector<std::int64_t> windows(std::size_t(2 * m));
  std::int64_t lo = 0, hi = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    const double q = value(queries, i);
    while (lo < n && value(database, lo) < q - reach) ++lo;
    if (hi < lo) hi = lo;
    while (hi < n && value(database, hi) <= q + reach) ++hi;
    windows[std::size_t(2 * i)] = lo;
    windows[std::size_t(2 * i + 1)] = hi;
  }
  return windows;
}

/// The feature along which X spreads widest (largest max - min; the first of equals): the one whose sorted order
/// lets a radius search skip the most pairs.
template <class T>
Eigen::Index widest_feature(MatrixView<T> X) {
  Eigen::Index best = 0;
  double best_span = -1;
  for (Eigen::Index f = 0; f < X.cols(); ++f) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (Eigen::Index i = 0; i < X.rows(); ++i) {
      lo = std::min(lo, double(X(i, f)));
      hi = std::max(hi, double(X(i, f)));
    }
    if (hi - lo > best_span) {
      best_span = hi - lo;
      best = f;
    }
  }
  return best;
}

/// The rows of X in increasing order of `feature`, equal values in index order (a stable radix sort of the values'
/// order-preserving bit patterns): order[s] is the row at sorted position s.
template <class T>
std::vector<std::int64_t> rows_sorted_by(MatrixView<T> X, Eigen::Index feature) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  constexpr Bits kSign = Bits(1) << (8 * sizeof(T) - 1);
  const std::size_t n = std::size_t(X.rows());
  std::vector<Bits> key(n), key2(n);
  std::vector<std::int64_t> order(n), order2(n);
  for (std::size_t i = 0; i < n; ++i) {
    T v = X(Eigen::Index(i), feature);
    if (v == T(0)) v = T(0);  // -0 sorts with +0
    Bits b;
    std::memcpy(&b, &v, sizeof b);
    key[i] = (b & kSign) ? Bits(~b) : Bits(b | kSign);
    order[i] = std::int64_t(i);
  }
  for (unsigned shift = 0; shift < 8 * sizeof(T); shift += 8) {
    std::size_t count[257] = {};
    for (std::size_t i = 0; i < n; ++i) ++count[((key[i] >> shift) & 0xFF) + 1];
    for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t at = count[(key[i] >> shift) & 0xFF]++;
      key2[at] = key[i];
      order2[at] = order[i];
    }
    key.swap(key2);
    order.swap(order2);
  }
  return order;
}

/// A graph over sorted rows (row s is original row order[s]) as the graph over the original rows: row i's list is
/// its sorted row's list mapped through `order`, in increasing index order. Distances are dropped.
template <class T>
RadiusResult<T> unsort_graph(const RadiusResult<T>& sorted, const std::vector<std::int64_t>& order) {
  const std::int64_t n = std::int64_t(order.size());
  std::vector<std::int64_t> position(static_cast<std::size_t>(n));
  parallel_chunks(n, 4096, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (std::int64_t s = b; s < e; ++s) position[std::size_t(order[std::size_t(s)])] = s;
  });
  RadiusResult<T> out;
  out.offsets.assign(std::size_t(n) + 1, 0);
  parallel_chunks(n, 4096, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (std::int64_t s = b; s < e; ++s)
      out.offsets[std::size_t(order[std::size_t(s)]) + 1] = sorted.offsets[std::size_t(s) + 1] - sorted.offsets[std::size_t(s)];
  });
  for (std::int64_t i = 0; i < n; ++i) out.offsets[std::size_t(i) + 1] += out.offsets[std::size_t(i)];
  out.indices.resize(std::size_t(out.offsets.back()));
  parallel_chunks(n, 4096, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const std::int64_t s = position[std::size_t(i)];
      auto at = out.indices.begin() + std::ptrdiff_t(out.offsets[std::size_t(i)]);
      auto first = at;
      for (std::int64_t p = sorted.offsets[std::size_t(s)]; p < sorted.offsets[std::size_t(s) + 1]; ++p)
        *at++ = order[std::size_t(sorted.indices[std::size_t(p)])];
      std::sort(first, at);
    }
  });
  return out;
}

/// X's rows sorted by their widest feature, for a radius graph that scans windows (no sort for cosine, which no
/// feature bounds: feature -1, rows empty, order empty).
template <class T>
struct SortedRows {
  Eigen::Index feature = -1;
  std::vector<std::int64_t> order;  ///< order[s]: the original row at sorted position s
  Matrix<T> rows;

  SortedRows(MatrixView<T> X, Metric metric) {
    if (metric == Metric::cosine || metric == Metric::inner_product || X.rows() < 2) return;
    feature = widest_feature<T>(X);
    order = rows_sorted_by<T>(X, feature);
    rows.resize(X.rows(), X.cols());
    parallel_chunks(X.rows(), 4096, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (std::int64_t s = b; s < e; ++s) rows.row(s) = X.row(order[std::size_t(s)]);
    });
  }
  bool sorted() const { return feature >= 0; }
};

}  // namespace gpuml::algorithms
