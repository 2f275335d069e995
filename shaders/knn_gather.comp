#version 450
#extension GL_GOOGLE_include_directive : require
// The k best pairs of every query's candidate list (knn_select.comp, APPEND): one workgroup per query loads its
// list into shared memory and writes its k best pairs by (value, index) to the query's k output slots, the k-th best
// first and the best last: a descending array is a max-heap, so the output bounds a later search (knn_select.comp
// reads its first value) just as merged heaps do. A list that overflowed its p.cap slots gets (-inf, none) pairs,
// which no value passes as a bound (the host searches that batch again with heaps).
//
// A list of at most SEL pairs, or one with k beyond SEL / 2, is padded with (+inf, none) to a power of two and
// sorted whole (a bitonic network). A longer one is first cut to its k best: a radix select over the 64-bit keys
// (value's order bits, index), 8 bits a round, finds the k-th smallest key (the index rounds only where the k-th
// value is tied past k), the pairs up to it (exactly k: keys are distinct) are moved to a second array and only
// those are sorted. The same k pairs in the same order as the whole sort: the keys order pairs as before() does
// (-0 is read as +0).
//
// DENSE = 1 (a bound's sample, knn_select.comp's kModeDense: p.cap values per query, float32): the same radix
// rounds over the values, read from the buffer, give each query's k-th smallest value, written at the first of its
// k output slots, where a bound is read (knn_select.comp, knn_filter_coop.comp): the root the sample's merged heaps
// would have. Nothing else is written.
//
// EXACT = 1 (lists of knn_filter_coop.comp, squared euclidean): the lists hold database indices only, and each
// pair's value is formed here exactly as knn_select.comp forms it, (|q|^2 + |x|^2) - 2 <q, x> with the dot product
// one FMA chain over the features in order, so the sort sees the values knn_select.comp's lists would hold.
#include "common.glsl"
#include "knn_gather.h"

layout(constant_id = kSpecThreads) const uint THREADS = 256;
layout(constant_id = kSpecCapacity) const uint CAP = 4096;
layout(constant_id = kSpecExact) const uint EXACT = 0;
layout(constant_id = kSpecLoopGuard) const uint LOOP_GUARD = 0;
layout(constant_id = kSpecDense) const uint DENSE = 0;
layout(local_size_x_id = kSpecThreads) in;

const uint NONE = 0xffffffffu;

layout(std430, binding = kBindingListValues) readonly buffer ListVal { scalar lv[]; };
layout(std430, binding = kBindingListIndices) readonly buffer ListIdx { uint li[]; };
layout(std430, binding = kBindingListed) readonly buffer Listed { uint listed[]; };
layout(std430, binding = kBindingOutValues) writeonly buffer OutVal { scalar ov[]; };
layout(std430, binding = kBindingOutIndices) writeonly buffer OutIdx { uint oi[]; };
layout(std430, binding = kBindingQueries) readonly buffer QBuf { scalar Q[]; };
layout(std430, binding = kBindingQueries) readonly buffer QBuf4 { scalar4 Q4[]; };
layout(std430, binding = kBindingRows) readonly buffer XBuf { scalar X[]; };
layout(std430, binding = kBindingRows) readonly buffer XBuf4 { scalar4 X4[]; };
layout(std430, binding = kBindingQueryNorms) readonly buffer QNormBuf { scalar qn[]; };
layout(std430, binding = kBindingRowNorms) readonly buffer XNormBuf { scalar xn[]; };
layout(std430, binding = kBindingStatus) buffer StatusBuf { uint status[]; };

shared scalar sv[CAP];
shared uint si[CAP];
// The radix select's cut: at most SEL pairs (a power of two), sorted by the same network. Float32 values only (the
// keys are their bits); float64 lists are sorted whole.
#if defined(GPUML_F64)
const bool CUTS = false;
#else
const bool CUTS = true;
#endif
const uint SEL = !CUTS ? 2 : CAP < 1024 ? CAP : 1024;
shared scalar cv[SEL];
shared uint ci[SEL];
shared uint bins[256];
shared uint group_sums[16];
shared uint found[3];  // the digit, the rank still wanted within it, the pairs with that digit
shared uint cut_size;

bool before(scalar a, uint ia, scalar b, uint ib) { return a < b || (a == b && ia < ib); }

scalar exact_value(uint q, uint index) {
  const uint c = index - p.base;
  scalar s = scalar(0);
  if (p.d % 4 == 0) {  // 16-byte loads, the same chain
    for (uint f = 0; f < p.d / 4; ++f) {
      const scalar4 a = Q4[q * (p.d / 4) + f], b = X4[c * (p.d / 4) + f];
      s = fma(a.x, b.x, s);
      s = fma(a.y, b.y, s);
      s = fma(a.z, b.z, s);
      s = fma(a.w, b.w, s);
    }
  } else {
    for (uint f = 0; f < p.d; ++f) s = fma(Q[q * p.d + f], X[c * p.d + f], s);
  }
  return (qn[q] + xn[c]) - scalar(2) * s;
}

// Order bits of a value (unsigned order = numeric order, -0 as +0; NaNs last).
uint value_key(scalar v) {
  const uint b = floatBitsToUint(float(v) == 0.0 ? 0.0 : float(v));
  return (b & 0x80000000u) != 0 ? ~b : b | 0x80000000u;
}

// Sorts the first n (a power of two) pairs of (sv, si), or with cut those of (cv, ci), by (value, index).
void sort_pairs(uint n, bool cut) {
  for (uint run = 2; run <= n; run <<= 1) {
    for (uint stride = run >> 1; stride > 0; stride >>= 1) {
      for (uint t = gl_LocalInvocationID.x; t < n / 2; t += THREADS) {
        const uint lo = 2 * stride * (t / stride) + t % stride, hi = lo + stride;
        const bool ascending = (lo & run) == 0;
        const scalar a = cut ? cv[lo] : sv[lo], b = cut ? cv[hi] : sv[hi];
        const uint ia = cut ? ci[lo] : si[lo], ib = cut ? ci[hi] : si[hi];
        if (before(b, ib, a, ia) == ascending) {
          if (cut) {
            cv[lo] = b, ci[lo] = ib, cv[hi] = a, ci[hi] = ia;
          } else {
            sv[lo] = b, si[lo] = ib, sv[hi] = a, si[hi] = ia;
          }
        }
      }
      barrier();
    }
  }
}

// One radix round over the count pairs whose key digit (shift) is wanted where (key & mask) == prefix; key: the
// value's order bits (index_round: the index, among pairs whose value key is value_prefix). Leaves in found the
// digit of the rank-th smallest, its rank among that digit's pairs, and their number. The values: the shared
// list, or with DENSE those of the buffer from lv[list0].
void radix_round(uint count, bool index_round, uint value_prefix, uint prefix, uint mask, uint shift, uint rank,
                 uint list0) {
  const uint tid = gl_LocalInvocationID.x;
  for (uint b = tid; b < 256; b += THREADS) bins[b] = 0;
  barrier();
  for (uint e = tid; e < count; e += THREADS) {
    const uint vk = value_key(DENSE != 0 ? lv[list0 + e] : sv[e]);
    if (index_round && vk != value_prefix) continue;
    const uint key = index_round ? si[e] : vk;
    if ((key & mask) == prefix) atomicAdd(bins[(key >> shift) & 255u], 1u);
  }
  barrier();
  // Exclusive prefix sums: 16 groups of 16 bins.
  for (uint g = tid; g < 16; g += THREADS) {
    uint s = 0;
    for (uint b = 0; b < 16; ++b) s += bins[16 * g + b];
    group_sums[g] = s;
  }
  barrier();
  for (uint b = tid; b < 256; b += THREADS) {
    uint before_b = 0;
    for (uint g = 0; g < b / 16; ++g) before_b += group_sums[g];
    for (uint c = 16 * (b / 16); c < b; ++c) before_b += bins[c];
    const uint here = bins[b];
    if (before_b < rank && rank <= before_b + here) {
      found[0] = b;
      found[1] = rank - before_b;
      found[2] = here;
    }
  }
  barrier();
}

// The rank-th smallest 32-bit key (four radix rounds, high digit first) of the count pairs as radix_round reads
// them; rank becomes that key's rank among the pairs with its key, found[2] holds their number.
uint radix_select(uint count, bool index_round, uint value_prefix, inout uint rank, uint list0) {
  uint prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    radix_round(count, index_round, value_prefix, prefix, mask, uint(shift), rank, list0);
    prefix |= found[0] << shift;
    mask |= 255u << shift;
    rank = found[1];
  }
  return prefix;
}

// The value whose order bits (value_key) are `key`.
float key_value(uint key) { return uintBitsToFloat((key & 0x80000000u) != 0 ? key & 0x7FFFFFFFu : ~key); }

void main() {
  const uint q = linear_group_id(), tid = gl_LocalInvocationID.x;
  if (q >= p.m) return;  // uniform over the workgroup
  if (CUTS && DENSE != 0) {
    scalar kth = scalar_inf();
    if (p.k <= p.cap) {
      uint rank = p.k;
      kth = key_value(radix_select(p.cap, false, 0, rank, q * p.cap));
    }
    if (tid == 0) ov[q * p.k] = kth;
    return;
  }
  const uint count = listed[q];
  if (count > p.cap) {
    for (uint e = tid; e < p.k; e += THREADS) {
      ov[q * p.k + e] = -scalar_inf();
      oi[q * p.k + e] = NONE;
    }
    return;
  }
  uint size = 1;
  while (size < count) size <<= 1;
  uint want = 1;
  while (want < p.k) want <<= 1;
  const bool cut = CUTS && count > SEL && 2 * want <= SEL;
  const uint loaded = cut ? count : size;
  for (uint e = tid; e < loaded; e += THREADS) {
    const bool real = e < count;
    const uint index = real ? li[q * p.cap + e] : NONE;
    sv[e] = real ? (EXACT != 0 ? exact_value(q, index) : lv[q * p.cap + e]) : scalar_inf();
    si[e] = index;
  }
  barrier();
  if (cut) {
    // The k-th smallest key: value rounds, then index rounds where its value is tied past k.
    uint rank = p.k;
    const uint value_prefix = radix_select(count, false, 0, rank, 0);
    // Where some pairs of the k-th value are left out, the lowest indices go in.
    const uint index_prefix = rank < found[2] ? radix_select(count, true, value_prefix, rank, 0) : 0xffffffffu;
    if (tid == 0) cut_size = 0;
    barrier();
    for (uint e = tid; e < count; e += THREADS) {
      const uint vk = value_key(sv[e]);
      if (vk < value_prefix || (vk == value_prefix && si[e] <= index_prefix)) {
        const uint at = atomicAdd(cut_size, 1u);
        cv[at] = sv[e];
        ci[at] = si[e];
      }
    }
    for (uint e = p.k + tid; e < want; e += THREADS) {
      cv[e] = scalar_inf();
      ci[e] = NONE;
    }
    barrier();
    sort_pairs(want, true);
    for (uint e = tid; e < p.k; e += THREADS) {
      ov[q * p.k + e] = cv[p.k - 1 - e];
      oi[q * p.k + e] = ci[p.k - 1 - e];
    }
  } else {
    sort_pairs(size, false);
    for (uint e = tid; e < p.k; e += THREADS) {
      const uint from = p.k - 1 - e;
      ov[q * p.k + e] = from < size ? sv[from] : scalar_inf();
      oi[q * p.k + e] = from < size ? si[from] : NONE;
    }
  }
  if (LOOP_GUARD != 0u && loop_limit_reached(p.m)) atomicOr(status[0], 1u);
}
