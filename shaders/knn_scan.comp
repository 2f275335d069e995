#version 450
#extension GL_GOOGLE_include_directive : require
// Candidate lists for few features (d <= DMAX <= 32): knn_select.comp's APPEND mode without tiles. Every thread
// keeps TQ queries in registers; the workgroup walks a chunk of database rows, each row read once by all of its
// threads (one address, a broadcast) and combined with every query of every thread. There is no shared memory and
// no barrier, which at small d cost more than the products themselves.
//
// Grid: x = query group (THREADS * TQ queries; query base + i * THREADS + thread), y = split * chunks + chunk:
// split s covers rows [s * split_stride, s * split_stride + split_rows) of the block, cut into `chunks` chunks.
// Values are formed as knn_select.comp forms them (one chain over the features in order, then the same
// epilogue), so both kernels agree on every pair; a pair at most its query's bound (binding 6's first value per
// query, widened by 2^-20 of its size) is appended to the query's list (binding 4/5, cap slots) and counted
// (binding 7), as there.
#include "common.glsl"

layout(constant_id = 0) const uint THREADS = 64;
layout(constant_id = 1) const uint TQ = 4;     // queries per thread
layout(constant_id = 2) const uint DMAX = 16;  // features held per query, a multiple of 4, at least d
layout(constant_id = 3) const uint METRIC = 0;
layout(constant_id = 4) const uint VEC4 = 0;   // 1: d is a multiple of 4, rows are read as 4-vectors
layout(local_size_x_id = 0) in;

const uint SQEUCLIDEAN = 0, MANHATTAN = 1, CHEBYSHEV = 2, COSINE = 3, INNER_PRODUCT = 4;

layout(std430, binding = 0) readonly buffer QBuf { scalar Q[]; };
layout(std430, binding = 1) readonly buffer XBuf { scalar X[]; };
layout(std430, binding = 1) readonly buffer XBuf4 { scalar4 X4[]; };
layout(std430, binding = 2) readonly buffer QNormBuf { scalar qn[]; };
layout(std430, binding = 3) readonly buffer XNormBuf { scalar xn[]; };
layout(std430, binding = 4) buffer ValBuf { scalar lv[]; };
layout(std430, binding = 5) buffer IdxBuf { uint li[]; };
layout(std430, binding = 6) readonly buffer BoundBuf { scalar bound_v[]; };
layout(std430, binding = 7) buffer ListedBuf { uint listed[]; };
layout(push_constant) uniform Push {
  uint m; uint n; uint d; uint k; uint split_rows; uint base; uint split_stride; uint chunks; uint cap;
} p;

scalar combine(scalar acc, scalar a, scalar b) {
  if (METRIC == MANHATTAN) return acc + abs(a - b);
  if (METRIC == CHEBYSHEV) return max(acc, abs(a - b));
  return fma(a, b, acc);
}

scalar row_aux(scalar sq) {
  if (METRIC == COSINE) return sq > scalar(0) ? scalar(1) / sqrt(sq) : scalar(0);
  return sq;
}

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint split = gl_WorkGroupID.y / p.chunks, chunk = gl_WorkGroupID.y % p.chunks;
  const uint s_begin = split * p.split_stride, s_end = min(p.n, s_begin + p.split_rows);
  const uint chunk_rows = (p.split_rows + p.chunks - 1) / p.chunks;
  const uint c_begin = s_begin + chunk * chunk_rows, c_end = min(s_end, c_begin + chunk_rows);
  const bool uses_norms = METRIC == SQEUCLIDEAN || METRIC == COSINE;

  scalar qv[TQ * DMAX];
  scalar qa[TQ], t[TQ];
  uint qi[TQ];
  for (uint i = 0; i < TQ; ++i) {
    const uint q = gl_WorkGroupID.x * THREADS * TQ + i * THREADS + lid;
    const bool live = q < p.m;
    qi[i] = q;
    for (uint f = 0; f < DMAX; ++f) qv[i * DMAX + f] = (live && f < p.d) ? Q[q * p.d + f] : scalar(0);
    qa[i] = (uses_norms && live) ? row_aux(qn[q]) : scalar(0);
    scalar b = -scalar_inf();  // a query past the batch takes nothing
    if (live) {
      b = bound_v[q * p.k];
      b += abs(b) * scalar(1.0 / 1048576.0);
    }
    t[i] = b;
  }

  for (uint c = c_begin; c < c_end; ++c) {
    scalar x[DMAX];
    if (VEC4 != 0) {
      for (uint f4 = 0; f4 < DMAX / 4; ++f4) {
        const scalar4 v4 = 4 * f4 < p.d ? X4[c * (p.d / 4) + f4] : scalar4(0);
        for (uint e = 0; e < 4; ++e) x[4 * f4 + e] = v4[e];
      }
    } else {
      for (uint f = 0; f < DMAX; ++f) x[f] = f < p.d ? X[c * p.d + f] : scalar(0);
    }
    const scalar xa = uses_norms ? row_aux(xn[c]) : scalar(0);
    for (uint i = 0; i < TQ; ++i) {
      scalar s = scalar(0);
      for (uint f = 0; f < DMAX; ++f)
        if (f < p.d) s = combine(s, qv[i * DMAX + f], x[f]);
      scalar v;
      if (METRIC == SQEUCLIDEAN) v = (qa[i] + xa) - scalar(2) * s;
      else if (METRIC == COSINE) v = clamp(scalar(1) - s * (qa[i] * xa), scalar(0), scalar(2));
      else if (METRIC == INNER_PRODUCT) v = -s;
      else v = s;
      if (v <= t[i]) {  // before(v, index, bound, none)
        const uint slot = atomicAdd(listed[qi[i]], 1u);
        if (slot < p.cap) {
          lv[qi[i] * p.cap + slot] = v;
          li[qi[i] * p.cap + slot] = p.base + c;
        }
      }
    }
  }
}
