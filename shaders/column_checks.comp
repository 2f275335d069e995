#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
// The k-means fit's column passes over float32 rows already on the device, formed as the host's are
// (algorithms::column_range, algorithms::exact_column_sums), from the values' bits: the device's float arithmetic
// may flush subnormals, its integers do not. A workgroup takes a block of rows; where cols <= THREADS its threads
// read LANES = (THREADS / cols) * cols consecutive values at a time (thread t always column t % cols) and combine
// per column at the end; wider rows take THREADS columns per workgroup (gl_WorkGroupID.y), a row at a time.
// kModeRange: order keys for the extremes (equal values have equal keys; -0 orders below +0, which changes no
// bound: the host takes magnitudes of both), the smallest nonzero magnitude's bits, finiteness.
// kModeSums: each term v * 2^e (e the column's exponent) as round(y) and round((y - round(y)) * 2^32), ties to
// even, in integers: the host's double arithmetic gives the same integers (y is exact in double for float32 v).
// kModeSquares (the float64 build, which exists for it: the rows are float32 in both): the same of (v - c)^2, c the
// column's center, each operation rounded in float64 as the host's (precise: no fused multiply-add); v is formed
// from its bits, and no float64 value here is subnormal.
#include "common.glsl"
#include "column_checks.h"

layout(constant_id = kSpecThreads) const uint THREADS = 256;
layout(constant_id = kSpecMode) const uint MODE = kModeRange;
layout(local_size_x_id = kSpecThreads) in;

layout(std430, binding = kBindingRows) readonly buffer XBuf { uint x[]; };
layout(std430, binding = kBindingExponents) readonly buffer ExpBuf { int exponents[]; };
layout(std430, binding = kBindingPartials) writeonly buffer PartialBuf { uint words[]; };
#if defined(GPUML_F64)
layout(std430, binding = kBindingCenter) readonly buffer CenterBuf { double centers[]; };
#endif

shared uint s_low[THREADS], s_high[THREADS], s_small[THREADS], s_finite[THREADS];
shared int64_t s_whole[THREADS], s_fraction[THREADS];

// Partial o's words: kModeRange's four, or kModeSums' two int64 (low word first).
void write_range(uint o, uint low, uint high, uint small, uint finite) {
  words[o * kRangeWords + 0u] = low;
  words[o * kRangeWords + 1u] = high;
  words[o * kRangeWords + 2u] = small;
  words[o * kRangeWords + 3u] = finite;
}
void write_sums(uint o, int64_t whole, int64_t fraction) {
  const uvec2 w = unpackUint2x32(uint64_t(whole)), f = unpackUint2x32(uint64_t(fraction));
  words[o * 2u * kSumWords + 0u] = w.x;
  words[o * 2u * kSumWords + 1u] = w.y;
  words[o * 2u * kSumWords + 2u] = f.x;
  words[o * 2u * kSumWords + 3u] = f.y;
}

// Float bits to a key whose unsigned order is the values' order.
uint range_key(uint bits) { return (bits & 0x80000000u) != 0u ? ~bits : bits | 0x80000000u; }

// m * 2^-s rounded to an integer, ties to even (m >= 0, s >= 1).
int64_t round_shift(int64_t m, int s) {
  if (s >= 63) return 0l;  // m < 2^53 <= 2^(s - 1): below one half
  const int64_t q = m >> s, rest = m - (q << s), midpoint = 1l << (s - 1);
  return q + ((rest > midpoint || (rest == midpoint && (q & 1l) != 0l)) ? 1l : 0l);
}

// The term of value `bits` at exponent e: whole = round(y), fraction = round((y - whole) * 2^32), y = v * 2^e.
void exact_term(uint bits, int e, out int64_t whole, out int64_t fraction) {
  const uint magnitude = bits & 0x7FFFFFFFu, biased = magnitude >> 23;
  int64_t m = int64_t(magnitude & 0x7FFFFFu);
  int shift = -149 + e;  // v = m * 2^(shift - e)
  if (biased != 0u) {
    m |= 0x800000l;
    shift = int(biased) - 150 + e;
  }
  if (magnitude == 0u) {
    whole = 0l;
    fraction = 0l;
  } else if (shift >= 0) {
    whole = m << shift;  // |y| <= 2^37 by the choice of e
    fraction = 0l;
  } else {
    const int s = -shift;
    whole = round_shift(m, s);
    const int64_t rest = s >= 63 ? m : m - (whole << s);  // (y - whole) * 2^s, |rest| <= 2^(s - 1)
    fraction = s <= 32 ? rest << (32 - s) : (rest >= 0l ? round_shift(rest, s - 32) : -round_shift(-rest, s - 32));
  }
  if ((bits & 0x80000000u) != 0u) {
    whole = -whole;
    fraction = -fraction;
  }
}

#if defined(GPUML_F64)
// The term of (v - c)^2 at exponent e, v the float32 value of `bits` (finite), as the host's double arithmetic forms it.
void square_term(uint bits, double c, int e, out int64_t whole, out int64_t fraction) {
  const uint magnitude = bits & 0x7FFFFFFFu, biased = magnitude >> 23;
  const double m = double((magnitude & 0x7FFFFFu) | (biased != 0u ? 0x800000u : 0u));
  const double v_abs = ldexp(m, biased != 0u ? int(biased) - 150 : -149);
  precise const double deviation = ((bits & 0x80000000u) != 0u ? -v_abs : v_abs) - c;
  precise const double square = deviation * deviation;
  precise const double y = square * ldexp(1.0lf, e);
  const double r = roundEven(y);
  precise const double part = (y - r) * 4294967296.0lf;
  whole = int64_t(r);
  fraction = int64_t(roundEven(part));
}
#endif

void main() {
  const uint t = gl_LocalInvocationID.x, cols = p.cols;
  const bool narrow = cols <= THREADS;
  const uint lanes = narrow ? (THREADS / cols) * cols : THREADS;
  const uint column = narrow ? t % cols : gl_WorkGroupID.y * THREADS + t;
  const bool reads = narrow ? t < lanes : column < cols;
  const uint block = p.first_group + gl_WorkGroupID.x;
  const uint row0 = block * p.rows_per_group, row_end = min(p.rows, row0 + p.rows_per_group);
  const uint stride = narrow ? lanes : cols;
  const int e = MODE != kModeRange && reads ? exponents[column] : 0;
#if defined(GPUML_F64)
  const double c = MODE == kModeSquares && reads ? centers[column] : 0.0lf;
#endif

  uint low = 0xFFFFFFFFu, high = 0u, small = 0x7F800000u, finite = 1u;
  int64_t whole = 0l, fraction = 0l;
  if (reads) {
    for (uint i = row0 * cols + (narrow ? t : column); i < row_end * cols; i += stride) {
      const uint bits = x[i];
      if (MODE == kModeRange) {
        const uint key = range_key(bits), magnitude = bits & 0x7FFFFFFFu;
        low = min(low, key);
        high = max(high, key);
        if (magnitude != 0u) small = min(small, magnitude);
        if (magnitude >= 0x7F800000u) finite = 0u;
      } else {
        int64_t w, f;
#if defined(GPUML_F64)
        if (MODE == kModeSquares) square_term(bits, c, e, w, f);
        else exact_term(bits, e, w, f);
#else
        exact_term(bits, e, w, f);
#endif
        whole += w;
        fraction += f;
      }
    }
  }
  if (!narrow) {
    if (!reads) return;
    const uint o = block * cols + column;
    if (MODE == kModeRange) write_range(o, low, high, small, finite);
    else write_sums(o, whole, fraction);
    return;
  }
  if (MODE == kModeRange) {
    s_low[t] = low;
    s_high[t] = high;
    s_small[t] = small;
    s_finite[t] = finite;
  } else {
    s_whole[t] = whole;
    s_fraction[t] = fraction;
  }
  barrier();
  if (t >= cols) return;
  const uint o = block * cols + t;
  if (MODE == kModeRange) {
    for (uint l = t + cols; l < lanes; l += cols) {
      low = min(low, s_low[l]);
      high = max(high, s_high[l]);
      small = min(small, s_small[l]);
      finite &= s_finite[l];
    }
    write_range(o, low, high, small, finite);
  } else {
    for (uint l = t + cols; l < lanes; l += cols) {
      whole += s_whole[l];
      fraction += s_fraction[l];
    }
    write_sums(o, whole, fraction);
  }
}
