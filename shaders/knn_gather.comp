#version 450
#extension GL_GOOGLE_include_directive : require
// The k best pairs of every query's candidate list (knn_select.comp, APPEND): one workgroup per query loads its
// list into shared memory, padded with (+inf, none) to a power of two, sorts it by (value, index) with a bitonic
// network and writes its first k pairs to the query's k output slots, the k-th best first and the best last: a
// descending array is a max-heap, so the output bounds a later search (knn_select.comp reads its first value) just
// as merged heaps do. A list that overflowed its p.cap slots gets (-inf, none) pairs, which no value passes as a
// bound (the host searches that batch again with heaps).
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

void main() {
  const uint q = linear_group_id(), tid = gl_LocalInvocationID.x;
  if (q >= p.m) return;  // uniform over the workgroup
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
  for (uint e = tid; e < size; e += THREADS) {
    const bool real = e < count;
    const uint index = real ? li[q * p.cap + e] : NONE;
    sv[e] = real ? (EXACT != 0 ? exact_value(q, index) : lv[q * p.cap + e]) : scalar_inf();
    si[e] = index;
  }
  barrier();
  for (uint run = 2; run <= size; run <<= 1) {
    for (uint stride = run >> 1; stride > 0; stride >>= 1) {
      for (uint t = tid; t < size / 2; t += THREADS) {
        const uint lo = 2 * stride * (t / stride) + t % stride, hi = lo + stride;
        const bool ascending = (lo & run) == 0;
        const scalar a = sv[lo], b = sv[hi];
        const uint ia = si[lo], ib = si[hi];
        if (before(b, ib, a, ia) == ascending) {
          sv[lo] = b;
          si[lo] = ib;
          sv[hi] = a;
          si[hi] = ia;
        }
      }
      barrier();
    }
  }
  for (uint e = tid; e < p.k; e += THREADS) {
    const uint from = p.k - 1 - e;
    ov[q * p.k + e] = from < size ? sv[from] : scalar_inf();
    oi[q * p.k + e] = from < size ? si[from] : NONE;
  }
  if (LOOP_GUARD != 0u && loop_limit_reached(p.m)) atomicOr(status[0], 1u);
}
