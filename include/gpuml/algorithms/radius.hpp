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
  auto largest = [feature](MatrixView<T> M) {
    const std::int64_t n = M.rows(), chunks = (n + (1 << 16) - 1) >> 16;
    std::vector<double> part(std::size_t(std::max<std::int64_t>(chunks, 0)), 0.0);
    parallel_chunks(n, 1 << 16, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
      double s = 0;
      for (std::int64_t j = b; j < e; ++j) s = std::max(s, std::abs(double(M(j, feature))));
      part[std::size_t(c)] = s;
    });
    double s = 0;
    for (double v : part) s = std::max(s, v);
    return s;
  };
  return std::max(largest(database), largest(queries));
}

/// For rows sorted by `feature` (ascending) and queries sorted the same way: per query, the database rows
/// [first, last) whose value of the feature is within `reach` of the query's, by one merge-like sweep (both sides
/// sorted). Throws invalid_input where either side is not sorted.
template <class T>
std::vector<std::int64_t> sorted_windows(MatrixView<T> database, MatrixView<T> queries, Eigen::Index feature, double reach) {
  const std::int64_t m = queries.rows();
  constexpr std::int64_t kChunk = 1 << 15;
  // The feature's values in double, each side checked sorted (the first unsorted position, whatever the threads).
  auto column = [&](MatrixView<T> M, const char* side) {
    const std::int64_t rows = M.rows(), chunks = (rows + kChunk - 1) / kChunk;
    std::vector<double> v(static_cast<std::size_t>(rows));
    std::vector<std::uint8_t> unsorted(std::size_t(std::max<std::int64_t>(chunks, 0)), 0);
    parallel_chunks(rows, kChunk, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
      for (std::int64_t j = b; j < e; ++j) v[std::size_t(j)] = double(M(j, feature));
      for (std::int64_t j = std::max<std::int64_t>(b, 1); j < e; ++j)
        if (!(double(M(j - 1, feature)) <= v[std::size_t(j)])) unsorted[std::size_t(c)] = 1;
    });
    for (std::uint8_t u : unsorted)
      if (u)
        throw invalid_input(std::string("radius search over sorted rows: the ") + side + " is not sorted by feature " +
                            std::to_string(feature));
    return v;
  };
  const std::vector<double> rows = column(database, "database");
  const std::vector<double> q = column(queries, "queries");
  // Query i's window: the first row at or above q - reach, and the first beyond q + reach.
  std::vector<std::int64_t> windows(std::size_t(2 * m));
  parallel_chunks(m, kChunk, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const double x = q[std::size_t(i)];
      windows[std::size_t(2 * i)] = std::lower_bound(rows.begin(), rows.end(), x - reach) - rows.begin();
      windows[std::size_t(2 * i + 1)] = std::upper_bound(rows.begin(), rows.end(), x + reach) - rows.begin();
    }
  });
  return windows;
}

/// The feature along which X spreads widest (largest max - min; the first of equals): the one whose sorted order
/// lets a radius search skip the most pairs.
template <class T>
Eigen::Index widest_feature(MatrixView<T> X) {
  const std::int64_t n = X.rows(), d = X.cols(), chunks = (n + (1 << 15) - 1) >> 15;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> lo(std::size_t(std::max<std::int64_t>(chunks, 0) * d), kInf), hi(lo.size(), -kInf);
  parallel_chunks(n, 1 << 15, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    double* l = lo.data() + c * d;
    double* h = hi.data() + c * d;
    for (std::int64_t i = b; i < e; ++i)
      for (std::int64_t f = 0; f < d; ++f) {
        l[f] = std::min(l[f], double(X(i, f)));
        h[f] = std::max(h[f], double(X(i, f)));
      }
  });
  Eigen::Index best = 0;
  double best_span = -1;
  for (Eigen::Index f = 0; f < d; ++f) {
    double l = kInf, h = -kInf;
    for (std::int64_t c = 0; c < chunks; ++c) {
      l = std::min(l, lo[std::size_t(c * d + f)]);
      h = std::max(h, hi[std::size_t(c * d + f)]);
    }
    if (h - l > best_span) {
      best_span = h - l;
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
  constexpr std::int64_t kChunk = 1 << 16;
  const std::int64_t n = X.rows(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<Bits> key(static_cast<std::size_t>(n)), key2(static_cast<std::size_t>(n));
  std::vector<std::int64_t> order(static_cast<std::size_t>(n)), order2(static_cast<std::size_t>(n));
  std::vector<Bits> varying(std::size_t(std::max<std::int64_t>(chunks, 0)), 0);
  parallel_chunks(n, kChunk, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    Bits first = 0, differ = 0;
    for (std::int64_t i = b; i < e; ++i) {
      T v = X(i, feature);
      if (v == T(0)) v = T(0);  // -0 sorts with +0
      Bits bits;
      std::memcpy(&bits, &v, sizeof bits);
      const Bits k = (bits & kSign) ? Bits(~bits) : Bits(bits | kSign);
      if (i == b) first = k;
      differ |= k ^ first;
      key[std::size_t(i)] = k;
      order[std::size_t(i)] = i;
    }
    varying[std::size_t(c)] = differ;
  });
  // Bits that differ anywhere (within a chunk, or between chunks' first keys); bytes without any are skipped.
  Bits differ = 0;
  for (std::int64_t c = 0; c < chunks; ++c) differ |= varying[std::size_t(c)] | (key[std::size_t(c * kChunk)] ^ key[0]);
  // Per pass: each chunk's byte histogram, the chunks' start per byte in (byte, chunk) order, then each chunk
  // scatters its keys in order: a stable pass whatever the thread count.
  std::vector<std::size_t> count(std::size_t(std::max<std::int64_t>(chunks, 0)) * 256);
  for (unsigned shift = 0; shift < 8 * sizeof(T); shift += 8) {
    if (((differ >> shift) & 0xFF) == 0) continue;
    std::fill(count.begin(), count.end(), 0);
    parallel_chunks(n, kChunk, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
      std::size_t* h = count.data() + c * 256;
      for (std::int64_t i = b; i < e; ++i) ++h[(key[std::size_t(i)] >> shift) & 0xFF];
    });
    std::size_t at = 0;
    for (int byte = 0; byte < 256; ++byte)
      for (std::int64_t c = 0; c < chunks; ++c) {
        const std::size_t here = count[std::size_t(c * 256 + byte)];
        count[std::size_t(c * 256 + byte)] = at;
        at += here;
      }
    parallel_chunks(n, kChunk, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
      std::size_t* next = count.data() + c * 256;
      for (std::int64_t i = b; i < e; ++i) {
        const std::size_t to = next[(key[std::size_t(i)] >> shift) & 0xFF]++;
        key2[to] = key[std::size_t(i)];
        order2[to] = order[std::size_t(i)];
      }
    });
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
