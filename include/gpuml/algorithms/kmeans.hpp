// scikit-learn's k-means algorithm (sklearn/cluster/_kmeans.py), once for every engine: the Lloyd loop with its
// M-step (empty-cluster relocation, averaging), convergence and verbose output; greedy k-means++ and random
// initialisation. No Vulkan and no SIMD here: the engines (host/kmeans.hpp, kernels/kmeans.hpp,
// kernels/kmeans_plus_plus.hpp) provide the E-step and the k-means++ distance work, as the concepts below say.
#pragma once

#include <gpuml/core/checks.hpp>
#include <gpuml/core/cpu.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/core/warnings.hpp>
#include <gpuml/algorithms/kmeans_params.hpp>
#include <gpuml/algorithms/numpy_random.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpuml::algorithms {

/// scikit-learn's parameter checks (KMeans._check_params_vs_input), whoever holds the rows.
inline void check_kmeans_params(const KMeansParams& p) {
  if (p.n_clusters < 1) throw invalid_input("n_clusters must be >= 1, got " + std::to_string(p.n_clusters));
  if (p.max_iter < 1) throw invalid_input("max_iter must be >= 1, got " + std::to_string(p.max_iter));
  if (p.algorithm != "lloyd" && p.algorithm != "elkan")
    throw invalid_input("The 'algorithm' parameter of KMeans must be a str among {'lloyd', 'elkan'}. Got '" + p.algorithm +
                        "' instead.");
  if (!(p.tol >= 0) || !std::isfinite(p.tol))
    throw invalid_input("tol must be a finite number >= 0, got " + std::to_string(p.tol));
  if (p.n_init < 0) throw invalid_input("n_init must be >= 1 (or 0 for \"auto\"), got " + std::to_string(p.n_init));
  if (!p.init_centers && p.init != "k-means++" && p.init != "random")
    throw invalid_input("init must be \"k-means++\", \"random\" or an array of initial centers, got \"" + p.init +
                        "\"");
}

/// An array init against the problem: k x d, finite, and (for float32 data) within float32's range.
template <class T>
void check_init_centers(const Matrix<double>& c, Eigen::Index k, Eigen::Index d) {
  if (c.rows() != k || c.cols() != d)
    throw invalid_input("The shape of the initial centers (" + std::to_string(c.rows()) + ", " + std::to_string(c.cols()) +
                        ") does not match the number of clusters " + std::to_string(k) + " and the number of features " +
                        std::to_string(d) + " (expected (" + std::to_string(k) + ", " + std::to_string(d) + "))");
  checks::finite(c, "init_centers");
  if constexpr (std::is_same_v<T, float>)
    if (!c.template cast<float>().allFinite())  // finite in float64, but beyond float32's range
      throw invalid_input("init_centers: Input contains infinity or a value too large for dtype('float32')");
}

/// Sample weights: finite and non-negative. Returns their sum (float64), how many are positive and the largest.
struct WeightSummary {
  double sum = 0;
  Eigen::Index positive = 0;
  double largest = 0;
};
/// Checked in blocks on the host threads; the message names the first bad weight, the sum adds the blocks in order.
template <class T>
WeightSummary check_sample_weight(VectorView<T> w) {
  constexpr std::int64_t kBlock = std::int64_t(1) << 16;
  const std::int64_t n = w.size(), blocks = (n + kBlock - 1) / kBlock;
  std::vector<WeightSummary> part(static_cast<std::size_t>(blocks));
  std::vector<std::int64_t> first_bad(static_cast<std::size_t>(blocks), -1);
  parallel_chunks(n, kBlock, [&](std::int64_t c, std::int64_t begin, std::int64_t end) {
    WeightSummary& s = part[static_cast<std::size_t>(c)];
    for (std::int64_t i = begin; i < end; ++i) {
      const T v = w[i];
      if (!std::isfinite(v) || v < 0) {
        first_bad[static_cast<std::size_t>(c)] = i;
        return;
      }
      s.sum += static_cast<double>(v);
      s.positive += v > 0;
      s.largest = std::max(s.largest, static_cast<double>(v));
    }
  });
  WeightSummary total;
  for (std::int64_t c = 0; c < blocks; ++c) {
    if (const std::int64_t i = first_bad[static_cast<std::size_t>(c)]; i >= 0) {
      if (!std::isfinite(w[i])) throw invalid_input("sample_weight contains NaN or infinity (at " + std::to_string(i) + ")");
      throw invalid_input("sample_weight must be non-negative (negative at " + std::to_string(i) + ")");
    }
    total.sum += part[static_cast<std::size_t>(c)].sum;
    total.positive += part[static_cast<std::size_t>(c)].positive;
    total.largest = std::max(total.largest, part[static_cast<std::size_t>(c)].largest);
  }
  return total;
}

/// Rows per task of the fit's passes over X on the host.
inline constexpr std::int64_t kRowChunk = 1 << 15;

/// Each column's smallest and largest value (over every rank's rows, in a distributed fit).
struct ColumnRange {
  Eigen::RowVectorXd lowest, highest;
  /// The smallest nonzero magnitude of each column (infinity: only zeros, or no rows), where column_range was asked
  /// for it; else 0 (unknown, as if subnormal).
  Eigen::RowVectorXd smallest;

  /// The range of no rows of d columns, which merge widens.
  static ColumnRange empty(Eigen::Index d) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    return {Eigen::RowVectorXd::Constant(d, inf), Eigen::RowVectorXd::Constant(d, -inf), Eigen::RowVectorXd::Constant(d, inf)};
  }
  /// Widens this range by `other`'s (the range of both sets of rows).
  void merge(const ColumnRange& other) {
    lowest = lowest.cwiseMin(other.lowest);
    highest = highest.cwiseMax(other.highest);
    smallest = smallest.cwiseMin(other.smallest);
  }
};

/// Whether no value of X (whose columns `range` describes), of `shift` or of X - shift is subnormal in T: every
/// nonzero magnitude is at least t = (smallest normal) * 2^(digits + 1). Distinct values of that size differ by a
/// multiple of ulp(t) = 4 * (smallest normal), so their difference is normal too.
template <class T>
bool subnormal_free(const ColumnRange& range, const Eigen::Matrix<T, 1, Eigen::Dynamic>& shift) {
  const double t = std::ldexp(static_cast<double>(std::numeric_limits<T>::min()), std::numeric_limits<T>::digits + 1);
  for (Eigen::Index f = 0; f < shift.size(); ++f) {
    const double m = std::abs(static_cast<double>(shift[f]));
    if (range.smallest.size() != shift.size() || range.smallest[f] < t || (m != 0 && m < t)) return false;
  }
  return true;
}

/// Lanes per row block of the column passes below: where X's rows are contiguous, a chunk is read as runs of
/// kLaneRows whole rows, one accumulator per value of the run (lane j holds column j % d), so the inner loop is a flat
/// loop the compiler vectorises whatever d is. Wider rows are read row by row (lane j is column j).
inline constexpr std::int64_t kLaneRows = 8;
inline constexpr std::int64_t kLaneRowsUpTo = 256;  // columns; beyond, a row alone is long enough to vectorise

/// The accumulators a column pass keeps per chunk of X: kLaneRows * d or d.
template <class M>
std::int64_t column_lanes(const M& X) {
  static_assert(M::IsRowMajor, "the column passes read rows of a row-major view");
  if (X.innerStride() != 1) throw error("the column passes read rows whose values are contiguous");
  const std::int64_t d = X.cols();
  return (X.outerStride() == d && d <= kLaneRowsUpTo) ? kLaneRows * d : d;
}

/// Calls run(values, count) over rows [begin, end) of X in the lanes of column_lanes(X): values[j] belongs to lane j
/// (count: a whole number of rows, at most column_lanes(X) values).
template <class M, class Run>
GPUML_ALWAYS_INLINE inline void for_each_lane_run(const M& X, std::int64_t begin, std::int64_t end, Run&& run) {
  const std::int64_t d = X.cols(), lanes = column_lanes(X), rows_per_run = lanes / std::max<std::int64_t>(d, 1);
  std::int64_t i = begin;
  for (; rows_per_run > 1 && i + rows_per_run <= end; i += rows_per_run) run(X.data() + i * X.outerStride(), lanes);
  for (; i < end; ++i) run(X.data() + i * X.outerStride(), d);
}

/// Each column's extremes (of X; +inf and -inf where X has no rows) and, with `smallest`, each column's smallest
/// nonzero magnitude (subnormal_free; else 0, unknown), into `range`, by chunks of rows on the host threads and within
/// a chunk by lanes (column_lanes), in T: minima and maxima are exact in any order, so neither cut changes them.
/// Returns false where X may hold a value that is not finite (a lane's sum in T is not finite: it also is where
/// finite values overflow, so the caller looks for the value before saying so). A distributed fit takes every rank's
/// extremes and ands the flags.
template <class M>
bool column_range(const M& X, ColumnRange& range, bool smallest = false) {
  using T = std::remove_cv_t<typename M::Scalar>;
  const std::int64_t n = X.rows(), d = X.cols(), chunks = (n + kRowChunk - 1) / kRowChunk, lanes = column_lanes(X);
  constexpr T inf = std::numeric_limits<T>::infinity();
  // Per chunk: d lowest, d highest values, d smallest nonzero magnitudes and whether its sums were finite.
  std::vector<T> part(static_cast<std::size_t>(chunks * 3 * d));
  std::vector<char> finite(static_cast<std::size_t>(chunks));
  auto pass = [&](auto with_smallest) {
    parallel_chunks(n, kRowChunk, [&](std::int64_t c, std::int64_t begin, std::int64_t end) {
      std::vector<T> acc(static_cast<std::size_t>(4 * lanes));
      T *s = acc.data(), *lo = s + lanes, *hi = lo + lanes, *small = hi + lanes;
      std::fill(lo, lo + lanes, inf);
      std::fill(hi, hi + lanes, -inf);
      std::fill(small, small + lanes, with_smallest ? inf : T(0));
      with_best_isa([&]() GPUML_ALWAYS_INLINE {
        for_each_lane_run(X, begin, end, [&](const T* v, std::int64_t count) GPUML_ALWAYS_INLINE {
          for (std::int64_t j = 0; j < count; ++j) {
            const T x = v[j];
            s[j] += x;
            lo[j] = x < lo[j] ? x : lo[j];
            hi[j] = x > hi[j] ? x : hi[j];
            if constexpr (decltype(with_smallest)::value) {
              const T a = std::abs(x), m = a == 0 ? inf : a;
              small[j] = m < small[j] ? m : small[j];
            }
          }
        });
      });
      T* out = part.data() + c * 3 * d;
      T *olo = out, *ohi = out + d, *osmall = out + 2 * d;
      std::fill(olo, olo + d, inf);
      std::fill(ohi, ohi + d, -inf);
      std::fill(osmall, osmall + d, with_smallest ? inf : T(0));
      bool ok = true;
      for (std::int64_t j = 0; j < lanes; ++j) {
        ok = ok && std::isfinite(s[j]);
        olo[j % d] = std::min(olo[j % d], lo[j]);
        ohi[j % d] = std::max(ohi[j % d], hi[j]);
        osmall[j % d] = std::min(osmall[j % d], small[j]);
      }
      finite[static_cast<std::size_t>(c)] = ok;
    });
  };
  if (smallest) pass(std::true_type{});
  else pass(std::false_type{});
  range = ColumnRange::empty(d);
  if (!smallest) range.smallest.setZero();
  bool all_finite = true;
  for (std::int64_t c = 0; c < chunks; ++c) {
    const T* p = part.data() + c * 3 * d;
    all_finite = all_finite && finite[static_cast<std::size_t>(c)];
    for (std::int64_t f = 0; f < d; ++f) {
      range.lowest[f] = std::min(range.lowest[f], static_cast<double>(p[f]));
      range.highest[f] = std::max(range.highest[f], static_cast<double>(p[d + f]));
      range.smallest[f] = std::min(range.smallest[f], static_cast<double>(p[2 * d + f]));
    }
  }
  return all_finite;
}

/// y rounded to an integer, ties to even (as std::nearbyint in the default rounding mode), in plain double arithmetic
/// the compiler can vectorise: below 2^52 adding and removing 2^52 with y's sign rounds y; from 2^52 on y is an
/// integer.
inline double round_to_even(double y) {
  constexpr double kTwo52 = 4503599627370496.0;  // 2^52
  if (!(std::abs(y) < kTwo52)) return y;
  const double shift = std::copysign(kTwo52, y);
  return (y + shift) - shift;
}

/// t with rows * bound < 2^t (bound > 0 and finite), also where the product overflows double: the bits a sum of
/// `rows` terms of magnitude at most `bound` needs above the binary point.
inline int sum_bits(double bound, std::int64_t rows) {
  const double n = static_cast<double>(std::max<std::int64_t>(rows, 1));
  int t = 0;
  if (std::isfinite(bound * n)) {
    std::frexp(bound * n, &t);
  } else {
    int b = 0, r = 0;
    std::frexp(bound, &b);
    std::frexp(n, &r);
    t = b + r;
  }
  return t;
}

/// Per-column sums of X, or of (X - center)^2, that do not depend on how the rows are cut (threads, devices, ranks):
/// each term v becomes y = v * 2^e_f, e_f one exponent per column for the whole sum, held as two integers,
/// round(y) and round((y - round(y)) * 2^32), added in int64. e_f keeps |round(y)| <= 2^37 (a chunk of 2^15 rows
/// adds its terms exactly in double) and the sum over all rows within 2^62: at least 69 bits of each term relative
/// to the column's bound, more than double's 53. A distributed fit adds each rank's integers.
struct ExactColumnSums {
  Eigen::Matrix<std::int64_t, 1, Eigen::Dynamic> whole, fraction;  ///< sums of round(y) and of the 2^-32 parts
  Eigen::RowVectorXi exponents;

  /// Sums of no terms, at `e`.
  static ExactColumnSums zero(const Eigen::RowVectorXi& e) {
    ExactColumnSums sums;
    sums.whole.setZero(e.size());
    sums.fraction.setZero(e.size());
    sums.exponents = e;
    return sums;
  }
  /// Adds `other`'s integers (sums at the same exponents over other rows).
  void add(const ExactColumnSums& other) {
    whole += other.whole;
    fraction += other.fraction;
  }

  /// The exponents for sums of `rows` terms per column, each at most `bound[f]` in magnitude.
  static Eigen::RowVectorXi exponents_for(const Eigen::RowVectorXd& bound, std::int64_t rows) {
    Eigen::RowVectorXi e(bound.size());
    for (Eigen::Index f = 0; f < bound.size(); ++f) {
      int chunk = 0;
      const double b = bound[f] * (1 + 1e-12);
      if (!(b > 0) || !std::isfinite(b)) {
        e[f] = 0;
        continue;
      }
      std::frexp(b, &chunk);  // b < 2^chunk
      e[f] = std::min({37 - chunk, 62 - sum_bits(b, rows), 1000});
    }
    return e;
  }
  Eigen::RowVectorXd to_double() const {
    Eigen::RowVectorXd out(whole.size());
    for (Eigen::Index f = 0; f < whole.size(); ++f)
      out[f] = std::ldexp(static_cast<double>(whole[f]) + std::ldexp(static_cast<double>(fraction[f]), -32), -exponents[f]);
    return out;
  }
};

/// Each column's bound on |x_f| (no center) or on (x_f - center_f)^2, from its extremes.
inline Eigen::RowVectorXd column_bounds(const ColumnRange& range, const Eigen::RowVectorXd* center) {
  const Eigen::Index d = range.lowest.size();
  Eigen::RowVectorXd bound = Eigen::RowVectorXd::Zero(d);
  for (Eigen::Index f = 0; f < d; ++f) {
    if (!(range.lowest[f] <= range.highest[f])) continue;  // no rows
    const double c = center ? (*center)[f] : 0.0;
    const double m = std::max(std::abs(range.highest[f] - c), std::abs(range.lowest[f] - c));
    bound[f] = center ? m * m : m;
  }
  return bound;
}

/// ExactColumnSums of X's rows (or of (X - center)^2) with the given exponents, by chunks of rows on the host threads
/// and within a chunk by lanes (column_lanes): integer sums, so neither cut changes them.
template <class M>
ExactColumnSums exact_column_sums(const M& X, const Eigen::RowVectorXd* center, const Eigen::RowVectorXi& exponents) {
  const std::int64_t n = X.rows(), d = X.cols(), chunks = (n + kRowChunk - 1) / kRowChunk, lanes = column_lanes(X);
  std::vector<double> lane_scale(static_cast<std::size_t>(lanes)), lane_center(static_cast<std::size_t>(lanes), 0.0);
  for (std::int64_t j = 0; j < lanes; ++j) {
    lane_scale[j] = std::ldexp(1.0, exponents[j % d]);
    if (center) lane_center[j] = (*center)[j % d];
  }
  constexpr double kFraction = 4294967296.0, kShift = 6755399441055744.0;  // 2^32, 1.5 * 2^52
  std::vector<Eigen::Matrix<std::int64_t, 2, Eigen::Dynamic>> part(static_cast<std::size_t>(chunks));
  auto pass = [&](auto with_center) {
    parallel_chunks(n, kRowChunk, [&](std::int64_t c, std::int64_t begin, std::int64_t end) {
      // Integers below 2^52 in double: this chunk's sums, and so each lane's, are exact.
      std::vector<double> acc(static_cast<std::size_t>(2 * lanes), 0.0);
      double *whole = acc.data(), *fraction = whole + lanes;
      const double *scale = lane_scale.data(), *ctr = lane_center.data();
      // Every product here is by a power of two, or a square not followed by an addition: fusing multiplies into
      // adds (the AVX2+FMA build) cannot change a term.
      with_best_isa([&]() GPUML_ALWAYS_INLINE {
        for_each_lane_run(X, begin, end, [&](const auto* values, std::int64_t count) GPUML_ALWAYS_INLINE {
          for (std::int64_t j = 0; j < count; ++j) {
            double v = static_cast<double>(values[j]);
            if constexpr (decltype(with_center)::value) {
              v -= ctr[j];
              v *= v;
            }
            // |y| <= 2^37 and its fraction times 2^32 below 2^31: both round by the shift of round_to_even.
            const double y = v * scale[j], r = (y + kShift) - kShift;
            whole[j] += r;
            fraction[j] += ((y - r) * kFraction + kShift) - kShift;
          }
        });
      });
      auto& out = part[static_cast<std::size_t>(c)];
      out.setZero(2, d);
      for (std::int64_t j = 0; j < lanes; ++j) {
        out(0, j % d) += static_cast<std::int64_t>(whole[j]);
        out(1, j % d) += static_cast<std::int64_t>(fraction[j]);
      }
    });
  };
  if (center) pass(std::true_type{});
  else pass(std::false_type{});
  ExactColumnSums sums = ExactColumnSums::zero(exponents);
  for (const auto& p : part) {
    sums.whole += p.row(0);
    sums.fraction += p.row(1);
  }
  return sums;
}

// The exact sums of a fit. The per-cluster sums of the M-step and the inertia are added in fixed point: each term
// (w_i x_if, w_i, w_i ||x_i - c||^2, as T computes it) becomes round(term * 2^e) in int64, with one exponent e per
// kind of term for the whole fit. Integer sums do not depend on the order of their terms, so a fit cut over several
// devices, ranks, workgroups or threads returns the same sums, bit for bit, as one engine over all rows. e is the
// largest exponent with rows * bound * 2^e <= 2^62, bound being a bound on every term's magnitude over the whole fit
// (SumFrame): no sum can overflow, and every term keeps at least 62 - log2(rows) bits relative to the bound, more
// than float32's 24 over sums of up to 2^38 rows.

/// Bounds over every row of a fit (all devices, all ranks) that fix the exponents of its exact sums.
struct SumFrame {
  std::int64_t rows = 0;      ///< samples, over all shards
  double max_value = 0;       ///< bound on |x_if| (the centred values the engines read)
  double max_row_norm = 0;    ///< bound on ||x_i||
  double max_weight = 0;      ///< bound on w_i

  /// The exponent of sums of `rows` terms of T of magnitude at most `bound` (0 for an empty or zero bound).
  template <class T>
  static int exponent(double bound, std::int64_t rows) {
    // No term of T exceeds T's largest value: a float32 bound beyond it would only push 2^e below float32's range.
    bound = std::min(bound, static_cast<double>(std::numeric_limits<T>::max()));
    if (!(bound > 0)) return 0;
    // At most 100: tiny data keeps 100 fractional bits (every float32 scale factor stays finite on the device).
    return std::min(62 - sum_bits(bound, rows), 100);
  }
  /// Of the weighted values' sums, sum_i w_i x_if.
  template <class T>
  int value_exponent() const {
    return exponent<T>(max_value * max_weight * kTermSlack, rows);
  }
  /// Of the weights' sums, sum_i w_i.
  template <class T>
  int weight_exponent() const {
    return exponent<T>(max_weight * kTermSlack, rows);
  }
  /// Of the inertia with centers C, sum_i w_i ||x_i - c_{l_i}||^2.
  template <class T>
  int inertia_exponent(const Matrix<T>& C) const {
    double max_center = 0;
    for (Eigen::Index j = 0; j < C.rows(); ++j) max_center = std::max(max_center, C.row(j).template cast<double>().norm());
    const double reach = max_row_norm + max_center;
    // A distance summed in T over d features rounds up by at most about d units of T's roundoff.
    const double rounding = 1 + 4.0 * static_cast<double>(C.cols() + 2) * std::numeric_limits<T>::epsilon();
    return exponent<T>(max_weight * reach * reach * rounding * kTermSlack, rows);
  }
  /// Of k-means++'s sampling masses and potentials, sums of w_i min(closest_i, ||x_i - c||^2) over d features, the
  /// centers c being rows of the data (so ||x_i - c|| <= 2 max_row_norm).
  template <class T>
  int plus_plus_exponent(Eigen::Index d) const {
    const double reach = 2 * max_row_norm;
    const double rounding = 1 + 4.0 * static_cast<double>(d + 2) * std::numeric_limits<T>::epsilon();
    return exponent<T>(max_weight * reach * reach * rounding * kTermSlack, rows);
  }
  /// Of the first draw's probabilities w_i / sum(w) rounded to T (each at most 1, within rounding of the total).
  template <class T>
  int probability_exponent() const {
    return exponent<T>(2.0, rows);
  }

  /// The frame of a fit over exactly these rows (one pass over them on the host threads).
  template <class T>
  static SumFrame of(const ShiftedView<T>& X, VectorView<T> w) {
    const std::int64_t n = X.rows(), d = X.cols(), chunks = (n + kRowChunk - 1) / kRowChunk;
    std::vector<Eigen::RowVectorXd> part(static_cast<std::size_t>(chunks), Eigen::RowVectorXd::Zero(d));
    std::vector<double> weight(static_cast<std::size_t>(chunks), 0.0);
    parallel_chunks(n, kRowChunk, [&](std::int64_t c, std::int64_t begin, std::int64_t end) {
      Eigen::RowVectorXd& m = part[static_cast<std::size_t>(c)];
      for (std::int64_t i = begin; i < end; ++i) {
        for (std::int64_t f = 0; f < d; ++f) m[f] = std::max(m[f], std::abs(static_cast<double>(X(i, f))));
        weight[static_cast<std::size_t>(c)] = std::max(weight[static_cast<std::size_t>(c)], static_cast<double>(w[i]));
      }
    });
    Eigen::RowVectorXd largest = Eigen::RowVectorXd::Zero(d);
    SumFrame frame;
    for (std::size_t c = 0; c < part.size(); ++c) {
      largest = largest.cwiseMax(part[c]);
      frame.max_weight = std::max(frame.max_weight, weight[c]);
    }
    frame.rows = n;
    frame.max_value = d > 0 ? largest.maxCoeff() : 0.0;
    frame.max_row_norm = largest.norm() * (1 + 1e-12);
    return frame;
  }
  /// The frame of a fit over `rows` samples whose columns span `range` and are centred by `mean` in T, with weights
  /// up to `max_weight`: from the column extremes, without a pass over the rows.
  template <class T>
  static SumFrame of(const ColumnRange& range, const Eigen::Matrix<T, 1, Eigen::Dynamic>& mean, double max_weight,
                     std::int64_t rows) {
    // x - mean rounded to T: within one unit of T's roundoff of the exact difference.
    const double rounding = 1 + 2.0 * std::numeric_limits<T>::epsilon();
    Eigen::RowVectorXd largest = Eigen::RowVectorXd::Zero(mean.size());
    for (Eigen::Index f = 0; f < mean.size(); ++f) {
      const double m = static_cast<double>(mean[f]);
      if (range.lowest.size() == mean.size() && range.lowest[f] <= range.highest[f])
        largest[f] = std::max(std::abs(range.highest[f] - m), std::abs(range.lowest[f] - m)) * rounding;
    }
    SumFrame frame;
    frame.rows = rows;
    frame.max_value = mean.size() > 0 ? largest.maxCoeff() : 0.0;
    frame.max_row_norm = largest.norm() * (1 + 1e-12);
    frame.max_weight = max_weight;
    return frame;
  }

 private:
  /// A term rounded in T may exceed the exact product of the bounds by a few units of roundoff.
  static constexpr double kTermSlack = 1 + 1e-6;
};

/// A term of an exact sum: round(v * 2^e), ties to even (the device kernels' roundEven); `scale` is 2^e (the product
/// is exact in double).
template <class T>
inline std::int64_t fixed_point(T v, double scale) {
  return static_cast<std::int64_t>(round_to_even(static_cast<double>(v) * scale));
}

/// An exact sum and its exponent.
struct ExactSum {
  std::int64_t value = 0;
  int exponent = 0;
  double to_double() const { return std::ldexp(static_cast<double>(value), -exponent); }
  ExactSum& operator+=(const ExactSum& o) {
    value += o.value;
    return *this;
  }
};

/// The M-step's per-cluster sums of one E-step, exact: sum_i w_i x_if (k x d) and sum_i w_i (k) in fixed point.
struct ClusterSums {
  Eigen::Matrix<std::int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> values;
  Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1> weights;
  int value_exponent = 0, weight_exponent = 0;

  template <class T>
  void reset(Eigen::Index k, Eigen::Index d, const SumFrame& frame) {
    values.setZero(k, d);
    weights.setZero(k);
    value_exponent = frame.value_exponent<T>();
    weight_exponent = frame.weight_exponent<T>();
  }
  /// Adds another part's sums (the same frame): exact, in any order.
  ClusterSums& operator+=(const ClusterSums& o) {
    values += o.values;
    weights += o.weights;
    return *this;
  }
  /// The sums rounded to T, as the M-step averages them.
  template <class T>
  void round_to(Matrix<T>& sums, Vector<T>& weight_sums) const {
    sums.resize(values.rows(), values.cols());
    weight_sums.resize(weights.size());
    for (Eigen::Index j = 0; j < values.rows(); ++j) {
      for (Eigen::Index f = 0; f < values.cols(); ++f)
        sums(j, f) = static_cast<T>(std::ldexp(static_cast<double>(values(j, f)), -value_exponent));
      weight_sums[j] = static_cast<T>(std::ldexp(static_cast<double>(weights[j]), -weight_exponent));
    }
  }
};

/// How many of the k clusters hold at least one label (scikit-learn warns when fewer than k do): blocks of labels on
/// the host threads.
inline int distinct_labels(const Labels& labels, int k) {
  constexpr std::int64_t kBlock = std::int64_t(1) << 20;
  const std::int64_t n = labels.size(), blocks = (n + kBlock - 1) / kBlock;
  std::vector<std::vector<unsigned char>> seen(static_cast<std::size_t>(blocks));
  parallel_chunks(n, kBlock, [&](std::int64_t c, std::int64_t begin, std::int64_t end) {
    auto& s = seen[static_cast<std::size_t>(c)];
    s.assign(static_cast<std::size_t>(k), 0);
    for (std::int64_t i = begin; i < end; ++i) s[static_cast<std::size_t>(labels[i])] = 1;
  });
  int distinct = 0;
  for (int j = 0; j < k; ++j)
    for (const auto& s : seen)
      if (s[static_cast<std::size_t>(j)]) {
        ++distinct;
        break;
      }
  return distinct;
}

/// scikit-learn's absolute tolerance: tol times the mean over features of the population variance of X (unweighted,
/// before centring), from the per-column sums of squared deviations from the mean over n rows.
inline double absolute_tolerance(const Eigen::RowVectorXd& squared_deviation_sums, double n, double tol) {
  if (tol == 0) return 0;
  return (squared_deviation_sums / n).mean() * tol;
}

template <class T>
struct LloydResult {
  Matrix<T> centers;
  Labels labels;
  double inertia = 0.0;
  int n_iter = 0;
  bool strict_convergence = false;
  double iteration_seconds = 0.0;  ///< wall time of the E+M iterations alone (no data transfer, final E-step, inertia)
  double setup_seconds = 0.0;      ///< wall time of the engine's set-up before them (a device engine's upload)
  double finish_seconds = 0.0;     ///< wall time after them: the final E-step, the inertia, the labels' download
  StepTimes step_times;            ///< the engine's own timing of its steps, where it keeps one
};

/// The engine operations of lloyd_loop (see there).
template <class E, class T>
concept LloydEngine = requires(E& e, const Matrix<T>& c, ClusterSums& sums) {
  { e.e_step(c, sums) } -> std::convertible_to<bool>;
  { e.labels() } -> std::convertible_to<const Labels&>;
  e.assign(c);
  { e.inertia(c) } -> std::convertible_to<ExactSum>;
};

/// Sums of k-means++ sampling masses per sampling block, exact: one fixed-point int64 per block (all with one
/// exponent for the whole seeding), and each as double, rounded once from its integer.
struct BlockSums {
  std::vector<std::int64_t> exact;
  std::vector<double> values;
  int exponent = 0;

  /// values from exact.
  void round() {
    values.resize(exact.size());
    // Every round of a seeding rounds every block: a product with 2^-exponent (a normal double) is ldexp's correctly
    // rounded result at a fraction of its cost.
    if (exponent >= -1022 && exponent <= 1022) {
      const double scale = std::ldexp(1.0, -exponent);
      for (std::size_t b = 0; b < exact.size(); ++b) values[b] = static_cast<double>(exact[b]) * scale;
    } else {
      for (std::size_t b = 0; b < exact.size(); ++b) values[b] = std::ldexp(static_cast<double>(exact[b]), -exponent);
    }
  }
  /// The sum of every block's masses, exact.
  ExactSum total() const {
    ExactSum s{0, exponent};
    for (const std::int64_t v : exact) s.value += v;
    return s;
  }
};

/// The sampling blocks of one shard of rows: global blocks of kPlusPlusBlock rows (declared below) start at every
/// multiple of it over all shards, so a shard whose first row is `offset` rows into its block has a first local
/// block of kPlusPlusBlock - offset rows (one process: offset 0).
struct SamplingBlocks {
  std::int64_t rows = 0, offset = 0;
  std::int64_t count() const;
  /// Local block b's first row and its end, in this shard's rows.
  std::int64_t begin(std::int64_t b) const;
  std::int64_t end(std::int64_t b) const;
};

/// The engine operations of plus_plus_loop (see there), besides the sampling masses draw() reads.
template <class E, class T>
concept PlusPlusEngine = requires(E& e, const Matrix<T>& c, int t, const std::vector<std::int64_t>& ids, std::int64_t b) {
  e.start(c);
  { e.potentials(c) } -> std::convertible_to<std::vector<ExactSum>>;
  e.keep(t);
  { e.block_rows() } -> std::convertible_to<std::int64_t>;
  { e.block_sums() } -> std::convertible_to<const std::vector<double>&>;
  { e.exact_block_sums() } -> std::convertible_to<const BlockSums&>;
  e.prefetch(ids);
  { e.block(b) } -> std::convertible_to<std::vector<double>>;
};


/// Python's repr() of a float (shortest round trip; exponent form below 1e-4 and from 1e16), for verbose output.
inline std::string py_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  const bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  const auto epos = s.find('e');
  const int exp = std::atoi(s.c_str() + epos + 1);
  std::string digits;
  for (std::size_t i = 0; i < epos; ++i)
    if (s[i] != '.') digits += s[i];
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<std::size_t>(exp + 1 - static_cast<int>(digits.size())), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<std::size_t>(exp + 1)) + "." + digits.substr(static_cast<std::size_t>(exp + 1));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += e;
  }
  return neg ? "-" + out : out;
}

/// Squared distance of one row to one center, accumulated in T from differences (exact 0 when x == c).
template <class T>
inline T sq_dist(const T* x, const T* c, std::int64_t d) {
  T s = 0;
  for (std::int64_t f = 0; f < d; ++f) {
    const T diff = x[f] - c[f];
    s += diff * diff;
  }
  return s;
}

/// Each sample's squared distance to its labelled center, from its centred row as T forms it, on the host threads:
/// what relocation ranks samples by (in one process and on each MPI rank).
template <class T>
std::vector<T> distances_to_own_centers(const ShiftedView<T>& X, const Matrix<T>& centers, const Labels& labels) {
  const std::int64_t n = X.rows(), d = X.cols();
  std::vector<T> dist(static_cast<std::size_t>(n));
  parallel_chunks(n, std::int64_t{1} << 14, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    std::vector<T> row(static_cast<std::size_t>(d));
    for (std::int64_t i = b; i < e; ++i) {
      for (std::int64_t f = 0; f < d; ++f) row[f] = X(i, f);
      dist[i] = sq_dist(row.data(), centers.data() + std::int64_t{labels[i]} * d, d);
    }
  });
  return dist;
}

/// scikit-learn's _relocate_empty_clusters_dense: the samples farthest from their old center move to the empty
/// clusters, in increasing cluster order; sums/weights are the un-averaged accumulators.
template <class T>
void relocate_empty_clusters(const ShiftedView<T>& X, const VectorView<T>& w, const Matrix<T>& centers_old,
                             const Labels& labels, Matrix<T>& sums, Vector<T>& weights) {
  const std::int64_t n = X.rows(), d = X.cols(), k = centers_old.rows();
  std::vector<std::int64_t> empty;
  for (std::int64_t j = 0; j < k; ++j)
    if (weights[j] == T(0)) empty.push_back(j);
  if (empty.empty()) return;
  const std::vector<T> dist = distances_to_own_centers(X, centers_old, labels);
  if (*std::max_element(dist.begin(), dist.end()) == T(0)) return;  // more clusters than distinct points
  const std::int64_t n_empty = std::min<std::int64_t>(static_cast<std::int64_t>(empty.size()), n);
  // The n_empty largest distances, largest first; equal distances: the higher index first (numpy's argpartition
  // gives no order for ties; this matches it on scikit-learn's relocation test).
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), std::int64_t{0});
  auto farther = [&](std::int64_t a, std::int64_t b) { return dist[a] > dist[b] || (dist[a] == dist[b] && a > b); };
  std::partial_sort(idx.begin(), idx.begin() + n_empty, idx.end(), farther);
  for (std::int64_t t = 0; t < n_empty; ++t) {
    const std::int64_t new_id = empty[t], far = idx[t];
    const std::int64_t old_id = labels[far];
    const T wi = w[far];
    for (std::int64_t f = 0; f < d; ++f) {
      const T x = X(far, f);
      sums(old_id, f) -= x * wi;
      sums(new_id, f) = x * wi;
    }
    weights[new_id] = wi;
    weights[old_id] -= wi;
  }
}

/// scikit-learn's _average_centers, in place and in cluster order: a cluster still empty copies row argmax(weights)
/// as it stands at that moment (the heaviest cluster's mean if its index is lower, else its weighted sum, exactly as
/// scikit-learn does).
template <class T>
void average_centers(Matrix<T>& centers, const Vector<T>& weights) {
  const Eigen::Index k = centers.rows();
  Eigen::Index heaviest = 0;
  for (Eigen::Index j = 1; j < k; ++j)
    if (weights[j] > weights[heaviest]) heaviest = j;
  for (Eigen::Index j = 0; j < k; ++j) {
    if (weights[j] > T(0)) {
      const T alpha = T(1) / weights[j];
      centers.row(j) *= alpha;
    } else {
      centers.row(j) = centers.row(heaviest).eval();
    }
  }
}

/// Several engines, each over its own contiguous range of rows (on its own device), as one LloydEngine: they run
/// their E-steps at once, one thread each (kept for the fit: ShardThreads), and add their exact sums (each engine built with the whole fit's
/// SumFrame): the same sums, inertia and so labels, bit for bit, as one engine over all rows.
template <class Engine, class T>
class ShardedLloydEngine {
 public:
  /// `shards`: the engines, in row order; `first_rows[s]`: the first row of shard s.
  ShardedLloydEngine(std::vector<std::unique_ptr<Engine>> shards, std::vector<std::int64_t> first_rows, std::int64_t n)
      : shards_(std::move(shards)), first_(std::move(first_rows)), n_(n) {}

  /// Cancellation across the shards: `keep_going` is asked on the calling thread (where Python's signal check must
  /// run) as each step starts and every `slice_ms` while the shards work on their threads. Its false reaches each
  /// shard's own poll between the parts of its step (a shard's step runs in parts as one device's does), and the
  /// step throws gpuml::cancelled once every shard has stopped.
  void set_keep_going(KeepGoing keep_going, double slice_ms = kKeepGoingSliceMs) {
    keep_going_ = std::move(keep_going);
    slice_ms_ = slice_ms;
    stop_->store(false);
    for (auto& shard : shards_)
      if constexpr (requires { shard->set_keep_going(KeepGoing{}, slice_ms); })
        shard->set_keep_going(keep_going_ ? KeepGoing([stop = stop_] { return !stop->load(); }) : KeepGoing{}, slice_ms);
  }

  bool e_step(const Matrix<T>& C, ClusterSums& sums) {
    const std::size_t count = shards_.size();
    std::vector<ClusterSums> parts(count);
    std::vector<char> changed(count, 0);
    each([&](std::size_t s) { changed[s] = shards_[s]->e_step(C, parts[s]) ? 1 : 0; });
    sums = std::move(parts[0]);
    for (std::size_t s = 1; s < count; ++s) sums += parts[s];
    return std::any_of(changed.begin(), changed.end(), [](char c) { return c != 0; });
  }

  const Labels& labels() {
    labels_ = take_labels();
    return labels_;
  }
  /// The labels of every shard, each downloaded into its range at once where the engines can (copy_labels), the
  /// end of a fit.
  Labels take_labels() {
    Labels out(n_);
    if constexpr (requires(const Engine& e, std::int32_t* p) { e.copy_labels(p); }) {
      each([&](std::size_t s) { shards_[s]->copy_labels(out.data() + first_[s]); });
    } else {
      for (std::size_t s = 0; s < shards_.size(); ++s) {
        const Labels& part = shards_[s]->labels();
        out.segment(first_[s], part.size()) = part;
      }
    }
    return out;
  }

  void assign(const Matrix<T>& C) {
    each([&](std::size_t s) { shards_[s]->assign(C); });
  }

  /// The shards' device timing as one engine's, where the engines keep one: per step the slowest shard's E-step
  /// (the devices' critical path; the step's wall time less it is the host's part), every shard's searched samples
  /// added, and each shard's total in shard_e_step_ms. Negative times: a device without timestamps.
  StepTimes step_times() const
    requires requires(const Engine& e) { { e.step_times() } -> std::convertible_to<StepTimes>; }
  {
    StepTimes out;
    const StepTimes& lead = shards_.front()->step_times();
    out.e_steps = lead.e_steps;
    out.label_steps = lead.label_steps;
    out.e_step_each_ms.assign(lead.e_step_each_ms.size(), 0.0);
    bool timed = true;
    for (const auto& shard : shards_) {
      const StepTimes& t = shard->step_times();
      out.shard_e_step_ms.push_back(t.e_step_ms);
      timed = timed && t.e_step_ms >= 0 && t.e_step_each_ms.size() == out.e_step_each_ms.size();
      for (std::size_t i = 0; i < std::min(t.e_step_each_ms.size(), out.e_step_each_ms.size()); ++i) {
        timed = timed && t.e_step_each_ms[i] >= 0;
        out.e_step_each_ms[i] = std::max(out.e_step_each_ms[i], t.e_step_each_ms[i]);
      }
      if (out.e_step_searched.size() < t.e_step_searched.size()) out.e_step_searched.resize(t.e_step_searched.size(), 0);
      for (std::size_t i = 0; i < t.e_step_searched.size(); ++i) out.e_step_searched[i] += t.e_step_searched[i];
      out.reduce_ms = std::max(out.reduce_ms, t.reduce_ms);
      out.labels_ms = std::max(out.labels_ms, t.labels_ms);
      out.moved_steps = std::max(out.moved_steps, t.moved_steps);
    }
    out.e_step_ms = 0;
    for (const double ms : out.e_step_each_ms) out.e_step_ms += ms;
    if (!timed) {
      out.e_step_ms = -1;
      out.e_step_each_ms.assign(out.e_step_each_ms.size(), -1.0);
    }
    return out;
  }

  ExactSum inertia(const Matrix<T>& C) {
    std::vector<ExactSum> parts(shards_.size());
    each([&](std::size_t s) { parts[s] = shards_[s]->inertia(C); });
    ExactSum total = parts[0];
    for (std::size_t s = 1; s < parts.size(); ++s) total += parts[s];
    return total;
  }

 private:
  /// Runs work(s) for every shard at once (one thread each), rethrowing the first failure by shard order; with a
  /// keep_going, on threads of their own while this thread polls (set_keep_going).
  template <class Work>
  void each(Work&& work) {
    if (!keep_going_) return threads_.run(work);
    ask_keep_going();
    if (stop_->load()) throw cancelled(kCancelled);
    std::mutex mutex;
    std::condition_variable ended;
    bool done = false;
    std::exception_ptr failure, poll_failure;
    auto body = [&] {
      try {
        threads_.run(work);
      } catch (...) {
        failure = std::current_exception();
      }
      std::lock_guard lock(mutex);
      done = true;
      ended.notify_one();
    };
    std::thread runner;
    try {
      runner = std::thread(body);
    } catch (const std::system_error&) {
      body();  // no thread could be started: the shards run here, polled by their own steps only
    }
    {
      std::unique_lock lock(mutex);
      const std::chrono::duration<double, std::milli> slice(std::max(slice_ms_, 1.0));
      while (!ended.wait_for(lock, slice, [&] { return done; })) {
        if (stop_->load()) continue;
        lock.unlock();
        try {
          ask_keep_going();
        } catch (...) {
          poll_failure = std::current_exception();
          stop_->store(true);
        }
        lock.lock();
      }
    }
    if (runner.joinable()) runner.join();
    if (poll_failure) std::rethrow_exception(poll_failure);
    if (failure) std::rethrow_exception(failure);
    if (stop_->load()) throw cancelled(kCancelled);  // asked to stop after every shard had finished its step
  }
  void ask_keep_going() {
    if (!keep_going_()) stop_->store(true);
  }

  static constexpr const char* kCancelled = "KMeans.fit was cancelled during an E-step; the estimator is unchanged";
  std::vector<std::unique_ptr<Engine>> shards_;
  std::vector<std::int64_t> first_;
  std::int64_t n_;
  Labels labels_;
  KeepGoing keep_going_;
  double slice_ms_ = kKeepGoingSliceMs;
  std::shared_ptr<std::atomic<bool>> stop_ = std::make_shared<std::atomic<bool>>(false);  // read by every shard's poll
  ShardThreads threads_{shards_.size()};  // the shards' threads, started once for every step
};

/// scikit-learn's _kmeans_single_lloyd on centred data, for any engine that provides the E-step:
///   bool e_step(C, sums)           labels by nearest center, the exact per-cluster weighted sums and weights
///                                  (ClusterSums); true when a label changed (always on the first call)
///   const Labels& labels()         the current labels
///   void assign(C)                 an E-step without sums (the final one)
///   ExactSum inertia(C)            sum_i w_i ||x_i - c_{l_i}||^2 with the current labels, from differences
/// The M-step (relocation, averaging), convergence and verbose output live here, once for every backend.
template <class T, class Engine>
  requires LloydEngine<Engine, T>
LloydResult<T> lloyd_loop(Engine& engine, ShiftedView<T> X, VectorView<T> w, const Matrix<T>& init_centers,
                          int max_iter, double tol_absolute, bool verbose, const IterationCallback& on_iteration = {}) {
  const Eigen::Index k = init_centers.rows();
  LloydResult<T> r;
  Matrix<T> centers = init_centers, centers_new(k, X.cols());
  Vector<T> weights(k);
  ClusterSums sums;
  const auto loop_start = std::chrono::steady_clock::now();
  int i = 0;
  for (; i < max_iter; ++i) {
    const bool changed = engine.e_step(centers, sums);
    sums.round_to(centers_new, weights);
    if ((weights.array() == T(0)).any()) {
      // An engine whose rows are not all here (MPI ranks) relocates across its shards itself.
      if constexpr (requires { engine.relocate_empty_clusters(centers, centers_new, weights); })
        engine.relocate_empty_clusters(centers, centers_new, weights);
      else
        relocate_empty_clusters<T>(X, w, centers, engine.labels(), centers_new, weights);
    }
    average_centers<T>(centers_new, weights);
    if (verbose) {
      const double in = static_cast<double>(static_cast<T>(engine.inertia(centers).to_double()));
      verbose_line("Iteration " + std::to_string(i) + ", inertia " + py_repr(in) + ".");
    }
    T shift_tot = 0;
    for (Eigen::Index j = 0; j < k; ++j) {
      const T s = std::sqrt((centers_new.row(j) - centers.row(j)).squaredNorm());
      shift_tot += s * s;
    }
    std::swap(centers, centers_new);
    if (on_iteration && !on_iteration(LloydIteration{i, max_iter, static_cast<double>(shift_tot)}))
      throw cancelled("KMeans.fit was cancelled at iteration " + std::to_string(i) + "; the estimator is unchanged");
    if (!changed) {
      if (verbose) verbose_line("Converged at iteration " + std::to_string(i) + ": strict convergence.");
      r.strict_convergence = true;
      break;
    }
    if (static_cast<double>(shift_tot) <= tol_absolute) {
      if (verbose)
        verbose_line("Converged at iteration " + std::to_string(i) + ": center shift " +
                     py_repr(static_cast<double>(shift_tot)) + " within tolerance " + py_repr(tol_absolute) + ".");
      break;
    }
  }
  r.n_iter = std::min(i + 1, max_iter);
  const auto loop_end = std::chrono::steady_clock::now();
  r.iteration_seconds = std::chrono::duration<double>(loop_end - loop_start).count();
  if (!r.strict_convergence) engine.assign(centers);  // so that labels_ == predict(X)
  r.inertia = engine.inertia(centers).to_double();
  r.centers = std::move(centers);
  if constexpr (requires { { engine.take_labels() } -> std::same_as<Labels>; }) r.labels = engine.take_labels();
  else r.labels = engine.labels();
  r.finish_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_end).count();
  if constexpr (requires { { engine.step_times() } -> std::convertible_to<StepTimes>; }) r.step_times = engine.step_times();
  return r;
}

/// Candidates per round of greedy k-means++, as scikit-learn: 2 + int(log k).
inline int plus_plus_trials(int k) { return 2 + static_cast<int>(std::log(static_cast<double>(k))); }

/// Samples per k-means++ sampling block: engines keep one mass sum per block, and a draw reads only the blocks it
/// lands in (on a device, n / kPlusPlusBlock numbers move per round instead of n).
inline constexpr std::int64_t kPlusPlusBlock = 1024;

inline std::int64_t SamplingBlocks::count() const {
  return rows > 0 ? (offset + rows + kPlusPlusBlock - 1) / kPlusPlusBlock : 0;
}
inline std::int64_t SamplingBlocks::begin(std::int64_t b) const {
  return std::max<std::int64_t>(0, b * kPlusPlusBlock - offset);
}
inline std::int64_t SamplingBlocks::end(std::int64_t b) const {
  return std::min<std::int64_t>(rows, (b + 1) * kPlusPlusBlock - offset);
}

/// A k-means++ sum's term: the mass or potential term w * c as numpy forms it in T, in fixed point (`scale` 2^e).
template <class T>
inline std::int64_t plus_plus_term(T w, T c, double scale) {
  return fixed_point<T>(static_cast<T>(w * c), scale);
}

/// The exact sum of the weights, in `exponent`'s fixed point (a distributed fit adds every rank's integers).
template <class T>
ExactSum exact_weight_sum(VectorView<T> w, int exponent) {
  const double scale = std::ldexp(1.0, exponent);
  const std::int64_t n = w.size();
  std::vector<std::int64_t> part(static_cast<std::size_t>((n + kRowChunk - 1) / kRowChunk), 0);
  parallel_chunks(n, kRowChunk, [&](std::int64_t c, std::int64_t begin, std::int64_t end) {
    std::int64_t s = 0;
    for (std::int64_t i = begin; i < end; ++i) s += fixed_point<T>(w[i], scale);
    part[static_cast<std::size_t>(c)] = s;
  });
  ExactSum total{0, exponent};
  for (const std::int64_t v : part) total.value += v;
  return total;
}

/// Up to this many samples, float32 draws follow numpy's float32 cumulative sum exactly: np.cumsum of float32
/// masses adds them one by one in float32, and its rounding (up to 1e-5 of the total at a million samples) moves a
/// draw by many samples, so the sum is replayed in that order from every sample's mass each round (a download of
/// every distance and a serial pass on the host). Beyond it the draws use sums in double from the engines' block
/// sums: there scikit-learn's own draws already hang on its BLAS's float32 rounding of the potential (a few units in
/// the last place move u * current_pot by u * n * 1e-7 samples), so the replay would buy no agreement for its cost.
inline constexpr std::int64_t kNumpyFloatCumsumSamples = std::int64_t(1) << 19;

/// Sampling masses in double for `count` samples, each the product numpy forms in T (w_i * closest_i rounded to
/// T), or the weights alone (closest null).
template <class T>
std::vector<double> sampling_masses(const T* w, const T* closest, std::int64_t count) {
  std::vector<double> m(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    const T product = closest ? static_cast<T>(w[i] * closest[i]) : w[i];
    m[static_cast<std::size_t>(i)] = static_cast<double>(product);
  }
  return m;
}

/// The first row of sampling block b: b * block_rows(), or the Masses' own block_begin(b) where blocks differ in
/// size (the blocks of several shards, each with its own last block).
template <class Masses>
std::int64_t block_begin(const Masses& m, std::int64_t b) {
  if constexpr (requires { { m.block_begin(b) } -> std::convertible_to<std::int64_t>; })
    return m.block_begin(b);
  else
    return b * m.block_rows();
}

/// The cumulative sum of masses in blocks, as numpy's np.cumsum forms it: Acc = float adds every sample's mass in
/// float32 in order (numpy's float32 cumsum, replayed from all masses); Acc = double adds the block sums, which
/// differs from numpy's sequential double sum only in the last bits. The masses come in blocks of m.block_rows()
/// samples:
///   const std::vector<double>& block_sums()   the sum of each block's masses
///   std::vector<double> block(b)              the masses of block b's samples, in double
///   void prefetch(blocks)                     a hint: these blocks will be read next
///   std::int64_t block_begin(b)               optional: block b's first sample, where blocks differ in size
///   void prefetch_all()                       optional: every block will be read next
template <class Acc, class Masses>
class Cumsum {
 public:
  explicit Cumsum(Masses& m) : m_(m) {
    const std::vector<double>& sums = m.block_sums();
    ends_.resize(sums.size());
    if constexpr (std::is_same_v<Acc, double>) {
      double total = 0;
      for (std::size_t b = 0; b < sums.size(); ++b) ends_[b] = (total += sums[b]);
    } else {
      if constexpr (requires { m.prefetch_all(); }) m.prefetch_all();
      Acc c = 0;
      for (std::size_t b = 0; b < sums.size(); ++b) {
        for (const double v : m.block(static_cast<std::int64_t>(b))) c = static_cast<Acc>(c + static_cast<Acc>(v));
        ends_[b] = static_cast<double>(c);
      }
    }
  }
  /// The sum of all masses (numpy's cdf[-1]).
  double total() const { return ends_.empty() ? 0.0 : ends_.back(); }

  /// For each target, the first sample whose cumulative sum reaches it (reached(cum, target) true), -1 where none
  /// does. The sum is non-decreasing, so blocks are found by binary search and only those blocks are read.
  template <class Reached>
  std::vector<std::int64_t> first_reaching(const std::vector<double>& targets, Reached reached) {
    std::vector<std::int64_t> blocks(targets.size(), -1), out(targets.size(), -1);
    for (std::size_t q = 0; q < targets.size(); ++q) {
      const auto it = std::partition_point(ends_.begin(), ends_.end(), [&](double e) { return !reached(e, targets[q]); });
      if (it != ends_.end()) blocks[q] = it - ends_.begin();
    }
    std::vector<std::int64_t> wanted;
    for (std::int64_t b : blocks)
      if (b >= 0) wanted.push_back(b);
    m_.prefetch(wanted);
    for (std::size_t q = 0; q < targets.size(); ++q) {
      const std::int64_t b = blocks[q];
      if (b < 0) continue;
      const std::vector<double> mass = m_.block(b);
      Acc c = static_cast<Acc>(b > 0 ? ends_[static_cast<std::size_t>(b - 1)] : 0.0);
      std::int64_t i = 0;
      // The block's end reaches the target, so one of its samples does (the replay adds as the ends were formed;
      // with block sums, rounding can leave the block's own samples just short: then its last sample).
      for (; i + 1 < static_cast<std::int64_t>(mass.size()); ++i) {
        c = static_cast<Acc>(c + static_cast<Acc>(mass[static_cast<std::size_t>(i)]));
        if (reached(static_cast<double>(c), targets[q])) break;
      }
      out[q] = block_begin(m_, b) + i;
    }
    return out;
  }

 private:
  Masses& m_;
  std::vector<double> ends_;
};

/// numpy's RandomState.choice(n, p=masses / total) for one draw (k-means++'s first center): the cumulative sum of
/// p in double divided by its last value, searched on the right for one random_sample().
template <class Masses>
std::int64_t choice(Masses& m, std::int64_t n, NumpyRandomState& random) {
  Cumsum<double, Masses> cdf(m);
  const double total = cdf.total(), u = random.random_sample();
  const std::int64_t i = cdf.first_reaching({u}, [&](double cum, double x) { return cum / total > x; })[0];
  return i >= 0 ? i : n - 1;
}

/// scikit-learn's k-means++ candidates: np.searchsorted(np.cumsum(masses), u * current_pot) with u drawn by
/// random_state.uniform, clipped to the last of the n samples. Acc is the cumulative sum's type (see Cumsum).
template <class Acc, class Masses>
std::vector<std::int64_t> plus_plus_candidates(Masses& m, std::int64_t n, const std::vector<double>& targets) {
  Cumsum<Acc, Masses> cumsum(m);
  std::vector<std::int64_t> ids = cumsum.first_reaching(targets, [](double cum, double r) { return cum >= r; });
  for (auto& i : ids)
    if (i < 0) i = n - 1;
  return ids;
}

/// The masses of the first draw: numpy's p = sample_weight / sample_weight.sum() in T (the sum exact, rounded to T),
/// as double, in the sampling blocks of a shard whose first row is `offset` rows into its block. `total`: the
/// weights' exact sum over all shards (exact_weight_sum); `exponent`: the block sums' (SumFrame::probability_exponent).
template <class T>
class WeightMasses {
 public:
  WeightMasses(VectorView<T> w, const ExactSum& total, int exponent, std::int64_t offset = 0)
      : w_(w), total_(static_cast<T>(total.to_double())), blocks_{w.size(), offset} {
    const double scale = std::ldexp(1.0, exponent);
    sums_.exponent = exponent;
    sums_.exact.assign(static_cast<std::size_t>(blocks_.count()), 0);
    parallel_chunks(blocks_.count(), 1, [&](std::int64_t, std::int64_t b, std::int64_t) {
      std::int64_t s = 0;
      for (std::int64_t i = blocks_.begin(b); i < blocks_.end(b); ++i) s += fixed_point<T>(static_cast<T>(w_[i] / total_), scale);
      sums_.exact[static_cast<std::size_t>(b)] = s;
    });
    sums_.round();
  }
  std::int64_t block_rows() const { return kPlusPlusBlock; }
  const std::vector<double>& block_sums() const { return sums_.values; }
  const BlockSums& exact_block_sums() const { return sums_; }
  void prefetch(const std::vector<std::int64_t>&) {}
  std::vector<double> block(std::int64_t b) const {
    const std::int64_t begin = blocks_.begin(b), end = blocks_.end(b);
    std::vector<double> out(static_cast<std::size_t>(end - begin));
    for (std::int64_t i = begin; i < end; ++i) out[static_cast<std::size_t>(i - begin)] = p(i);
    return out;
  }
  /// Sample i's probability.
  double p(std::int64_t i) const { return static_cast<double>(static_cast<T>(w_[i] / total_)); }

 private:
  VectorView<T> w_;
  T total_ = 0;
  SamplingBlocks blocks_;
  BlockSums sums_;
};

/// scikit-learn's _kmeans_plusplus (greedy) on centred data, drawing from numpy's stream as scikit-learn does, for
/// any engine that keeps closest_i, each sample's squared distance to its nearest center so far, and provides:
///   void start(c)                        closest = ||x - c||^2 for the first center (a 1 x d matrix)
///   std::vector<double> potentials(cand) per candidate row: sum_i w_i min(closest_i, ||x_i - cand||^2)
///   void keep(t)                         closest = min(closest, ||x - cand_t||^2) for the last potentials' candidates
///   the sampling masses w_i * closest_i in blocks, as Cumsum reads them
/// The first center is random_state.choice(n, p=w / sum(w)); then each round draws 2 + int(log k) candidates at
/// uniform() * current_pot in the cumulative masses and keeps the one of lowest potential (the first on ties, as
/// np.argmin). Potentials are rounded to T, as scikit-learn's are T. scikit-learn sums the potentials with BLAS in T;
/// the engines sum every term (w_i min(...) in T) exactly in the fixed point of SumFrame::plus_plus_exponent, as they
/// sum the block masses, and round once: the same on any cut of the rows (devices, ranks, threads). A draw differs
/// from scikit-learn's only where its target falls within BLAS's rounding of a boundary.
///
/// `first_masses` are the masses of the first draw (the weights, as WeightMasses) of n samples and rows(ids) returns
/// the drawn samples as rows; the overload below takes them from X and w. `chosen`, where given, receives the
/// indices of the samples kept as centers (scikit-learn's kmeans_plusplus returns them). Shards of one data set (one per MPI rank) pass
/// masses and rows that span every shard.
template <class T, class Engine, class FirstMasses, class Rows>
  requires PlusPlusEngine<Engine, T>
Matrix<T> plus_plus_loop(Engine& engine, FirstMasses& first_masses, Rows&& rows, std::int64_t n, int k,
                         NumpyRandomState& random, std::vector<std::int64_t>* chosen = nullptr) {
  const int n_trials = plus_plus_trials(k);
  const std::int64_t first_id = choice(first_masses, n, random);
  if (chosen) chosen->assign(1, first_id);
  const Matrix<T> first = rows({first_id});
  Matrix<T> centers(k, first.cols());
  centers.row(0) = first.row(0);
  engine.start(first);
  T current_pot = static_cast<T>(engine.exact_block_sums().total().to_double());
  std::vector<double> targets(static_cast<std::size_t>(n_trials));
  for (int c = 1; c < k; ++c) {
    for (double& r : targets) r = random.random_sample() * static_cast<double>(current_pot);
    const std::vector<std::int64_t> ids = std::is_same_v<T, float> && n <= kNumpyFloatCumsumSamples
                                              ? plus_plus_candidates<float>(engine, n, targets)
                                              : plus_plus_candidates<double>(engine, n, targets);
    const Matrix<T> cand = rows(ids);
    std::vector<T> pot_each;
    for (const ExactSum& pot : engine.potentials(cand)) pot_each.push_back(static_cast<T>(pot.to_double()));
    int best = 0;
    for (int t = 1; t < n_trials; ++t)
      if (pot_each[static_cast<std::size_t>(t)] < pot_each[static_cast<std::size_t>(best)]) best = t;
    current_pot = pot_each[static_cast<std::size_t>(best)];
    engine.keep(best);
    centers.row(c) = cand.row(best);
    if (chosen) chosen->push_back(ids[static_cast<std::size_t>(best)]);
  }
  return centers;
}

/// Several k-means++ engines, each over its own contiguous range of rows (on its own device, built with the fit's
/// frame and its first row's place in its sampling block), as one engine: each global block's exact sum adds the
/// integers of the shards holding part of it, the potentials add the shards' exact sums, and a block's masses are
/// its parts in row order. So the draws, and the seeds, are one engine's over all rows, bit for bit.
template <class Engine, class T>
class ShardedPlusPlusEngine {
 public:
  /// `shards`: the engines, in row order, none empty; `first_rows[s]`: the first row of shard s; n: all rows.
  ShardedPlusPlusEngine(std::vector<std::unique_ptr<Engine>> shards, std::vector<std::int64_t> first_rows, std::int64_t n)
      : shards_(std::move(shards)), first_(std::move(first_rows)), blocks_((n + kPlusPlusBlock - 1) / kPlusPlusBlock) {}

  void start(const Matrix<T>& c) {
    each([&](std::size_t s) { shards_[s]->start(c); });
    refresh();
  }
  std::vector<ExactSum> potentials(const Matrix<T>& cand) {
    std::vector<std::vector<ExactSum>> parts(shards_.size());
    each([&](std::size_t s) { parts[s] = shards_[s]->potentials(cand); });
    std::vector<ExactSum> total = parts[0];
    for (std::size_t s = 1; s < parts.size(); ++s)
      for (std::size_t t = 0; t < total.size(); ++t) total[t].value += parts[s][t].value;
    return total;
  }
  void keep(int t) {
    each([&](std::size_t s) { shards_[s]->keep(t); });
    refresh();
  }

  std::int64_t block_rows() const { return kPlusPlusBlock; }
  const std::vector<double>& block_sums() const { return sums_.values; }
  const BlockSums& exact_block_sums() const { return sums_; }
  void prefetch(const std::vector<std::int64_t>& ids) {
    std::vector<std::vector<std::int64_t>> local(shards_.size());
    for (const std::int64_t b : ids)
      for (std::size_t s = 0; s < shards_.size(); ++s)
        if (holds(s, b)) local[s].push_back(b - first_block(s));
    each([&](std::size_t s) {
      if (!local[s].empty()) shards_[s]->prefetch(local[s]);
    });
  }
  void prefetch_all() {
    each([&](std::size_t s) {
      if constexpr (requires { shards_[s]->prefetch_all(); }) shards_[s]->prefetch_all();
    });
  }
  /// Block b's masses: the parts of the shards holding it, in row order.
  std::vector<double> block(std::int64_t b) {
    std::vector<double> mass;
    for (std::size_t s = 0; s < shards_.size(); ++s)
      if (holds(s, b)) {
        const std::vector<double> part = shards_[s]->block(b - first_block(s));
        mass.insert(mass.end(), part.begin(), part.end());
      }
    return mass;
  }

 private:
  std::int64_t first_block(std::size_t s) const { return first_[s] / kPlusPlusBlock; }
  /// Whether shard s holds rows of global block b.
  bool holds(std::size_t s, std::int64_t b) const {
    const std::int64_t end = s + 1 < first_.size() ? first_[s + 1] : blocks_ * kPlusPlusBlock;
    return b >= first_block(s) && b * kPlusPlusBlock < end;
  }
  /// The global blocks' exact sums from the shards' (after their masses changed).
  void refresh() {
    sums_.exact.assign(static_cast<std::size_t>(blocks_), 0);
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      const BlockSums& mine = shards_[s]->exact_block_sums();
      sums_.exponent = mine.exponent;  // the same in every shard: from the fit's frame
      for (std::size_t lb = 0; lb < mine.exact.size(); ++lb)
        sums_.exact[static_cast<std::size_t>(first_block(s)) + lb] += mine.exact[lb];
    }
    sums_.round();
  }
  /// Runs work(s) for every shard at once, on the shards' threads (kept for the seeding: two calls per center).
  template <class Work>
  void each(Work&& work) {
    threads_.run(work);
  }

  std::vector<std::unique_ptr<Engine>> shards_;
  std::vector<std::int64_t> first_;
  std::int64_t blocks_;
  BlockSums sums_;
  ShardThreads threads_{shards_.size()};  // declared after shards_: its size is theirs
};

/// plus_plus_loop over X and w alone (one process), `frame` the fit's bounds (the engine's).
template <class T, class Engine>
  requires PlusPlusEngine<Engine, T>
Matrix<T> plus_plus_loop(Engine& engine, ShiftedView<T> X, VectorView<T> w, const SumFrame& frame, int k,
                         NumpyRandomState& random, std::vector<std::int64_t>* chosen = nullptr) {
  WeightMasses<T> weights(w, exact_weight_sum(w, frame.weight_exponent<T>()), frame.probability_exponent<T>());
  auto rows = [&](const std::vector<std::int64_t>& ids) {
    Matrix<T> out(static_cast<Eigen::Index>(ids.size()), X.cols());
    for (std::size_t t = 0; t < ids.size(); ++t) out.row(static_cast<Eigen::Index>(t)) = X.row(ids[t]);
    return out;
  };
  return plus_plus_loop<T>(engine, weights, rows, X.rows(), k, random, chosen);
}

/// init="random": numpy's RandomState.choice(n, size=k, replace=False, p=w / sum(w)), as scikit-learn draws it:
/// rounds of random_sample() draws searched on the right in the cumulative p (in double, divided by its last
/// value), the samples already found given p = 0, repeats within a round dropped. Needs k samples with positive
/// weight. `chosen`, where given, receives the drawn samples' indices.
template <class T>
Matrix<T> random_init(ShiftedView<T> X, VectorView<T> w, int k, NumpyRandomState& random,
                      std::vector<std::int64_t>* chosen = nullptr) {
  const std::int64_t n = X.rows();
  // numpy's p = w / w.sum(): the sum in double by blocks in order, rounded to T.
  double weight_sum = 0;
  {
    std::vector<double> parts(static_cast<std::size_t>((n + kPlusPlusBlock - 1) / kPlusPlusBlock), 0.0);
    parallel_chunks(n, kPlusPlusBlock, [&](std::int64_t b, std::int64_t begin, std::int64_t end) {
      double s = 0;
      for (std::int64_t i = begin; i < end; ++i) s += static_cast<double>(w[i]);
      parts[static_cast<std::size_t>(b)] = s;
    });
    for (const double s : parts) weight_sum += s;
  }
  const T total = static_cast<T>(weight_sum);
  struct {
    VectorView<T> w;
    T total;
    double p(std::int64_t i) const { return static_cast<double>(static_cast<T>(w[i] / total)); }
  } masses{w, total};
  // The cumulative p, numpy's cumsum: one sequential sum in double, found samples adding zero. Pages are first
  // touched on the host threads; every entry is written before it is read.
  std::unique_ptr<double[]> cdf(new double[static_cast<std::size_t>(n)]);
  parallel_chunks(n, kRowChunk, [&](std::int64_t, std::int64_t b, std::int64_t e) { std::fill(&cdf[b], &cdf[e], 0.0); });
  std::vector<std::int64_t> found, zeroed;  // zeroed: found, sorted
  found.reserve(static_cast<std::size_t>(k));
  while (static_cast<int>(found.size()) < k) {
    const int need = k - static_cast<int>(found.size());
    std::vector<double> u(static_cast<std::size_t>(need));
    for (auto& x : u) x = random.random_sample();
    zeroed = found;
    std::sort(zeroed.begin(), zeroed.end());
    double s = 0;
    std::int64_t i = 0;
    for (const std::int64_t z : zeroed) {  // the runs between found samples, then the found one's zero
      for (; i < z; ++i) cdf[i] = (s += masses.p(i));
      cdf[i++] = (s += 0.0);
    }
    for (; i < n; ++i) cdf[i] = (s += masses.p(i));
    if (!(s > 0)) break;
    std::vector<std::int64_t> drawn;
    for (double x : u) {
      // The first i with cdf[i] / s > x (cdf /= cdf[-1]; searchsorted side right); the quotient never decreases.
      std::int64_t lo = 0, hi = n;
      while (lo < hi) {
        const std::int64_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] / s > x) hi = mid;
        else lo = mid + 1;
      }
      const std::int64_t idx = std::min(lo, n - 1);
      if (std::find(drawn.begin(), drawn.end(), idx) == drawn.end()) drawn.push_back(idx);
    }
    for (std::int64_t idx : drawn) found.push_back(idx);
  }
  Matrix<T> centers(k, X.cols());
  for (int j = 0; j < k; ++j) centers.row(j) = X.row(found[j < static_cast<int>(found.size()) ? j : 0]);
  if (chosen) *chosen = found;
  return centers;
}


}  // namespace gpuml::algorithms
