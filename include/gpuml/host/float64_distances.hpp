// Host engine for the float64 distances of chosen pairs of float32 rows (NearestNeighbors::float64_distances):
// what scikit-learn returns for float32 data, formed from the features' differences in float64 in a fixed order.
// Each pair's value is
//   euclidean, sqeuclidean: eight partial sums, sum j taking (x_f - q_f)^2 for the features f = j (mod 8) below
//     d - d % 8, combined as ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), plus the remaining features' squares
//     summed in feature order; each difference and square rounded to float64, no fused multiply-add (euclidean:
//     its square root);
//   manhattan: the same with |x_f - q_f|; chebyshev: the largest |x_f - q_f|;
//   cosine: 1 - <q, x> / (|q| |x|) with the same sums of products (1 where a norm is zero).
// kernels::knn_float64_squared forms the (squared) euclidean sums bit for bit as these loops do. Builds that fuse
// multiplies into adds by default (GCC on AArch64) must pass -ffp-contract=off for the values to be these.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/host/simd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gpuml::host {
namespace float64_detail {

using Index = std::int64_t;
// The hot loops use raw pointers (no Eigen accessors), explicit vectors and forced inlining: their speed does not
// hang on what the compiler inlines or vectorises by itself (little, where a build optimises for size).

#if defined(__GNUC__) || defined(__clang__)
#define GPUML_FLOAT64_INLINE __attribute__((always_inline)) inline
#else
#define GPUML_FLOAT64_INLINE inline
#endif

/// A row-major float32 matrix as the loops read it.
struct Rows {
  const float* data;
  Index stride;  // elements from one row to the next
  const float* row(Index i) const { return data + i * stride; }
};

inline Rows rows_of(const MatrixView<float>& m) { return {m.data(), Index(m.outerStride())}; }

/// Eight partial sums, lane j taking the features f = j (mod 8), combined in a fixed tree: the order does not
/// depend on the instruction set or on the vectors used.
constexpr int kLanes = 8;

GPUML_FLOAT64_INLINE double lane_sum(const double (&s)[kLanes]) {
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

#if GPUML_HOST_VECTORS
// Two lanes per 16-byte vector, which every vector instruction set has (wider generic vectors are split by the
// compiler through memory where the target lacks them).
using Double2 = simd::Vec<double, 16>::V;
using Bits2 = simd::Vec<double, 16>::I;

/// x[0..3] widened to double, as lanes (0, 1) and (2, 3). On x86 through cvtps2pd: compilers otherwise convert
/// value by value (cvtss2sd), whose merge into the old register chains the loop's iterations.
GPUML_FLOAT64_INLINE void widen4(const float* x, Double2& low, Double2& high) {
#if defined(__SSE2__)
  const __m128 v = _mm_loadu_ps(x);
  low = Double2(_mm_cvtps_pd(v));
  high = Double2(_mm_cvtps_pd(_mm_movehl_ps(v, v)));
#else
  typedef float Float2 __attribute__((vector_size(8)));
  Float2 a, b;
  simd::load(a, x);
  simd::load(b, x + 2);
  low = __builtin_convertvector(a, Double2);
  high = __builtin_convertvector(b, Double2);
#endif
}
#endif

/// Brings a database row into cache before it is read: the neighbours' rows are scattered over a database that
/// is usually far larger than the caches.
GPUML_FLOAT64_INLINE void prefetch_row(const float* row, Index d) {
#if defined(__GNUC__) || defined(__clang__)
  for (Index f = 0; f < d; f += 64 / Index(sizeof(float))) __builtin_prefetch(row + f);
#else
  (void)row;
  (void)d;
#endif
}

/// The lanes' sums over the body (d rounded down to a multiple of kLanes) for the metrics that add up per
/// feature: squared differences x - q (euclidean, sqeuclidean), absolute differences (manhattan), or for cosine
/// the products q * x in `s` and x * x in `t`.
template <Metric metric>
GPUML_FLOAT64_INLINE void lane_sums(const double* q, const float* x, Index body, double (&s)[kLanes],
                                    double (&t)[kLanes]) {
#if GPUML_HOST_VECTORS
  Double2 a[4] = {}, b[4] = {};  // b: cosine only
  for (Index f = 0; f < body; f += kLanes) {
    Double2 wide[4];
    widen4(x + f, wide[0], wide[1]);
    widen4(x + f + 4, wide[2], wide[3]);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      Double2 query;
      simd::load(query, q + f + 2 * v);
      if constexpr (metric == Metric::cosine) {
        a[v] += query * wide[v];
        b[v] += wide[v] * wide[v];
      } else if constexpr (metric == Metric::manhattan) {
        a[v] += Double2(Bits2(wide[v] - query) & std::numeric_limits<std::int64_t>::max());  // |x - q|
      } else {
        const Double2 e = wide[v] - query;
        a[v] += e * e;
      }
    }
  }
  std::memcpy(s, a, sizeof s);
  if constexpr (metric == Metric::cosine) std::memcpy(t, b, sizeof t);
#else
  for (int j = 0; j < kLanes; ++j) s[j] = t[j] = 0;
  for (Index f = 0; f < body; f += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const double v = x[f + j], e = v - q[f + j];
      if constexpr (metric == Metric::cosine) {
        s[j] += q[f + j] * v;
        t[j] += v * v;
      } else if constexpr (metric == Metric::manhattan) {
        s[j] += std::fabs(e);
      } else {
        s[j] += e * e;
      }
    }
#endif
}

/// The float64 distance between a query q (float32 values widened to double) and database row x, from
/// differences: what scikit-learn returns for float32 data. `q_squared_norm` is used by cosine only.
template <Metric metric>
GPUML_FLOAT64_INLINE double exact_distance(const double* q, const float* x, Index d, Index body, double q_squared_norm) {
  double s[kLanes], t[kLanes], tail = 0, tail_t = 0;
  if constexpr (metric == Metric::chebyshev) {
    double m = 0;
    for (Index f = 0; f < d; ++f) m = std::max(m, std::fabs(double(x[f]) - q[f]));
    return m;
  } else if constexpr (metric == Metric::manhattan) {
    lane_sums<metric>(q, x, body, s, t);
    for (Index f = body; f < d; ++f) tail += std::fabs(double(x[f]) - q[f]);
    return lane_sum(s) + tail;
  } else if constexpr (metric == Metric::cosine) {
    lane_sums<metric>(q, x, body, s, t);
    for (Index f = body; f < d; ++f) {
      const double v = x[f];
      tail += q[f] * v;
      tail_t += v * v;
    }
    // scikit-learn: 1 - <q, x> / (|q| |x|), and a zero vector at distance 1 from everything.
    const double norms = std::sqrt(q_squared_norm) * std::sqrt(lane_sum(t) + tail_t);
    return norms == 0 ? 1.0 : 1.0 - (lane_sum(s) + tail) / norms;
  } else {
    lane_sums<Metric::sqeuclidean>(q, x, body, s, t);
    for (Index f = body; f < d; ++f) {
      const double e = double(x[f]) - q[f];
      tail += e * e;
    }
    const double squared = lane_sum(s) + tail;
    return metric == Metric::euclidean ? std::sqrt(squared) : squared;
  }
}

/// out[p] for the database rows indices[p], p in [offsets(i), offsets(i + 1)), the neighbours of query i (the
/// queries' rows are d wide, as the database's).
template <Metric metric, class Out, class Offsets>
void distances_of(Rows queries, Index n_queries, Rows database, Index d, const std::int64_t* indices,
                  const Offsets& offsets, Out* out) {
  const Index body = d - d % kLanes;
  parallel_chunks(n_queries, 64, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
    std::vector<double> wide(static_cast<std::size_t>(d));
    double* q = wide.data();
    // Rows are fetched a few pairs ahead, across queries: a pair's arithmetic takes less time than a fetch.
    constexpr Index kAhead = 8;
    const Index chunk_first = offsets(begin), chunk_last = offsets(end);
    for (Index p = chunk_first; p < std::min(chunk_last, chunk_first + kAhead); ++p)
      prefetch_row(database.row(indices[p]), d);
    for (Index i = begin; i < end; ++i) {
      const float* query = queries.row(i);
      for (Index f = 0; f < d; ++f) q[f] = query[f];
      double q_squared_norm = 0;
      if constexpr (metric == Metric::cosine) {
        double s[kLanes], t[kLanes], tail = 0;
        lane_sums<metric>(q, query, body, s, t);
        for (Index f = body; f < d; ++f) tail += q[f] * q[f];
        q_squared_norm = lane_sum(t) + tail;
      }
      for (Index p = offsets(i), last = offsets(i + 1); p < last; ++p) {
        if (p + kAhead < chunk_last) prefetch_row(database.row(indices[p + kAhead]), d);
        out[p] = static_cast<Out>(exact_distance<metric>(q, database.row(indices[p]), d, body, q_squared_norm));
      }
    }
  });
}

}  // namespace float64_detail

/// The distances (this header's) from each query to its chosen database rows: out[p] for the rows indices[p], p in
/// [offsets(i), offsets(i + 1)), the pairs of query i, rounded to Out (float: cosine's float32 values, as
/// scikit-learn computes cosine distances of float32 data in float32). Each value depends on its pair alone, so
/// the thread count changes nothing.
template <class Out, class Offsets>
void float64_distances(MatrixView<float> queries, MatrixView<float> database, const std::int64_t* indices,
                       const Offsets& offsets, Metric metric, Out* out) {
  using float64_detail::Index;
  const float64_detail::Rows q = float64_detail::rows_of(queries), x = float64_detail::rows_of(database);
  const Index n = queries.rows(), d = database.cols();
  switch (metric) {
    case Metric::euclidean:
      return float64_detail::distances_of<Metric::euclidean>(q, n, x, d, indices, offsets, out);
    case Metric::sqeuclidean:
      return float64_detail::distances_of<Metric::sqeuclidean>(q, n, x, d, indices, offsets, out);
    case Metric::manhattan:
      return float64_detail::distances_of<Metric::manhattan>(q, n, x, d, indices, offsets, out);
    case Metric::chebyshev:
      return float64_detail::distances_of<Metric::chebyshev>(q, n, x, d, indices, offsets, out);
    case Metric::cosine:
      return float64_detail::distances_of<Metric::cosine>(q, n, x, d, indices, offsets, out);
    case Metric::inner_product: break;
  }
  throw invalid_input("float64 distances: none for metric " + std::string(metric_name(metric)));
}

/// One pair's distance, as float64_distances forms it: query and row hold d features.
inline double float64_distance(const float* query, const float* row, std::int64_t d, Metric metric) {
  double out = 0;
  const std::int64_t index = 0;
  float64_distances<double>(MatrixView<float>(Eigen::Map<const Matrix<float>>(query, 1, d)),
                            MatrixView<float>(Eigen::Map<const Matrix<float>>(row, 1, d)), &index,
                            [](std::int64_t i) { return i; }, metric, &out);
  return out;
}

}  // namespace gpuml::host

#undef GPUML_FLOAT64_INLINE
