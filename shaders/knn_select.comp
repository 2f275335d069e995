#version 450
#extension GL_GOOGLE_include_directive : require
// Fused brute-force k-NN: distances of a block of queries to a range (a "split") of database rows, with the k
// best kept per query as the database tiles stream by. No query x database matrix is ever stored.
//
// Grid: x = query tile (BM = WY*TM queries), y = database split (split_rows rows, a multiple of BN = WX*TN).
// Per database tile of BN rows the workgroup computes the BM x BN block of selection values with the
// register-blocked tile product (tile_product.glsl). Every thread then tests its values against each query's
// threshold (the query's current k-th best pair). For each column j (of the TN per thread) where some value
// passes, a round follows: every thread appends its passing values of column j to their queries' queues in shared
// memory (at most WX values per query and round, so a queue never overflows), and one thread per query inserts
// its queue into the query's
// bounded max-heap of (value, index) pairs, kept in the output buffers (global memory, k entries per query and
// split, initialised to (+inf, 0xffffffff)). Once the heaps are warm almost no value passes, and a tile costs
// little more than its product.
//
// Bounds: with p.bounded, query q's heaps start full of (b, none) pairs instead of (+inf, none), where b is the
// root of q's merged heap from a pass over a sample of the block (binding 6: the k-th best value of the sample,
// widened by 2^-20 of its size). Every pair among the block's k best is at most b, so only pairs at most b are
// ever queued and the warm-up of about k insertions per query and split disappears. The sample's own pairs are
// formed by this same pipeline, so at least k real pairs pass and no sentinel reaches the result.
//
// Lists (MODE = kModeLists, always with bounds): no heaps. Every pair at most its query's bound is appended to the
// query's candidate list (binding 4/5: p.cap slots per query, binding 7: the number appended, which may exceed p.cap:
// the host then searches the batch again with heaps). knn_gather.comp picks the k best of each list. About fraction x k
// pairs pass per query (the bound is about the fraction x k-th best of the block), so a tile costs its product, a
// compare per value and, rarely, an atomic; no barrier and no round.
//
// Dense (MODE = kModeDense, for a bound: knn_gather.comp's DENSE mode picks each query's k-th value): every value of
// the splits is written at its place, query q's at q x cap + split x split_rows + its row's offset in the split
// (+inf past the block), so a bound costs its product and no heap: the k-th value of the same values is the merged
// heaps' root.
//
// Order: (value, index) lexicographic, so equal values go to the lower database index; the kept set (though not
// the heap's layout) is independent of the tiling, the splits and the order of the queue, because a pair that
// fails the threshold can never enter the k best. Every value is formed by the same instruction sequence (one
// chain over the features in order), so identical database rows get bit-identical values.
//
// Selection values (smaller is better): 0 sqeuclidean/euclidean |q|^2 + |x|^2 - 2<q,x>; 1 manhattan; 2 chebyshev;
// 3 cosine clamp(1 - <q,x> qinv xinv, 0, 2) with inv = 0 for a zero row; 4 inner product -<q,x>.
#include "common.glsl"
#include "knn_select.h"

layout(constant_id = kSpecWX) const uint WX = 16;
layout(constant_id = kSpecWY) const uint WY = 16;
layout(constant_id = kSpecTM) const uint TM = 8;
layout(constant_id = kSpecTN) const uint TN = 8;
layout(constant_id = kSpecBK) const uint BK = 16;
layout(constant_id = kSpecMetric) const uint METRIC = kMetricSqeuclidean;
layout(constant_id = kSpecMode) const uint MODE = kModeHeaps;
layout(constant_id = kSpecLoopGuard) const uint LOOP_GUARD = 0;
layout(local_size_x_id = kSpecWX, local_size_y_id = kSpecWY) in;

const uint NONE = 0xffffffffu;

layout(std430, binding = kBindingQueries) readonly buffer QBuf { scalar Q[]; };
layout(std430, binding = kBindingRows) readonly buffer XBuf { scalar X[]; };
layout(std430, binding = kBindingQueryNorms) readonly buffer QNormBuf { scalar qn[]; };
layout(std430, binding = kBindingRowNorms) readonly buffer XNormBuf { scalar xn[]; };
layout(std430, binding = kBindingValues) buffer ValBuf { scalar hv[]; };
layout(std430, binding = kBindingIndices) buffer IdxBuf { uint hi[]; };
layout(std430, binding = kBindingBound) readonly buffer BoundBuf { scalar bound_v[]; };
layout(std430, binding = kBindingListed) buffer ListedBuf { uint listed[]; };
layout(std430, binding = kBindingStatus) buffer StatusBuf { uint status[]; };

scalar combine(scalar acc, scalar a, scalar b) {
  if (METRIC == kMetricManhattan) return acc + abs(a - b);
  if (METRIC == kMetricChebyshev) return max(acc, abs(a - b));
  return fma(a, b, acc);
}
scalar load_a(uint row, uint f);
scalar load_b(uint row, uint f);
#include "tile_product.glsl"

uint tile_col0, tile_end;  // the database tile being multiplied: [tile_col0, min(tile_col0 + BN, tile_end))

scalar load_a(uint row, uint f) {
  const uint q = gl_WorkGroupID.x * BM + row;
  return (q < p.m && f < p.d) ? Q[q * p.d + f] : scalar(0);
}
scalar load_b(uint row, uint f) {
  const uint c = tile_col0 + row;
  return (c < tile_end && f < p.d) ? X[c * p.d + f] : scalar(0);
}

shared scalar qaux[BM];
shared scalar xaux[2 * BN];  // per tile parity: lists have no barrier between a tile's reads and the next's writes
shared scalar thr[BM];
shared uint thr_idx[BM];
shared uint queued[BM];
shared scalar queue_v[BM * WX];
shared uint queue_i[BM * WX];
shared uint passed[2];  // per tile parity: bit j set when a value of column j passed its query's threshold

bool before(scalar a, uint ia, scalar b, uint ib) { return a < b || (a == b && ia < ib); }

// The selection value of product (or combine) s of the tile's query r and the staged row at xaux[x].
scalar value_of(scalar s, uint r, uint x) {
  if (METRIC == kMetricSqeuclidean) return (qaux[r] + xaux[x]) - scalar(2) * s;
  if (METRIC == kMetricCosine) return clamp(scalar(1) - s * (qaux[r] * xaux[x]), scalar(0), scalar(2));
  if (METRIC == kMetricInnerProduct) return -s;
  return s;
}

scalar row_aux(scalar sq) {
  if (METRIC == kMetricCosine) return sq > scalar(0) ? scalar(1) / sqrt(sq) : scalar(0);
  return sq;
}

void main() {
  const uint tid = gl_LocalInvocationID.y * WX + gl_LocalInvocationID.x;
  const uint row0 = gl_WorkGroupID.x * BM;
  const uint split = gl_WorkGroupID.y;
  const uint c_begin = split * p.split_stride;
  const uint c_end = min(p.n, c_begin + p.split_rows);
  const bool uses_norms = METRIC == kMetricSqeuclidean || METRIC == kMetricCosine;

  for (uint r = tid; r < BM; r += NT) {
    const uint q = row0 + r;
    scalar start = scalar_inf();
    if (p.bounded != 0 && q < p.m) {
      start = bound_v[q * p.k];  // split 0's root: the sample's k-th best
      start += abs(start) * scalar(1.0 / 1048576.0);
    }
    if (q < p.m && MODE == kModeHeaps) {
      const uint h = (split * p.m + q) * p.k;
      for (uint e = 0; e < p.k; ++e) {
        hv[h + e] = start;
        hi[h + e] = NONE;
      }
    }
    qaux[r] = (uses_norms && q < p.m) ? row_aux(qn[q]) : scalar(0);
    thr[r] = start;
    thr_idx[r] = NONE;
    queued[r] = 0;
  }
  if (tid < 2) passed[tid] = 0;
  tile_end = c_end;

  uint parity = 0;
  for (uint col0 = c_begin; col0 < c_end; col0 += BN, parity ^= 1u) {
    tile_col0 = col0;
    const uint xa = parity * BN;
    for (uint c = tid; c < BN; c += NT) {
      const uint gc = col0 + c;
      xaux[xa + c] = (uses_norms && gc < c_end) ? row_aux(xn[gc]) : scalar(0);
    }
    scalar acc[ACC];
    tile_product(acc, p.d, col0 != c_begin);  // its barriers also publish xaux; one query tile per workgroup

    if (MODE == kModeDense) {
      for (uint i = 0; i < TM; ++i) {
        const uint r = tile_row_a(i), q = row0 + r;
        if (q >= p.m) continue;
        for (uint j = 0; j < TN; ++j) {
          const uint c = tile_row_b(j), at = col0 + c - c_begin;
          if (at < p.split_rows)
            hv[q * p.cap + split * p.split_rows + at] =
                col0 + c < c_end ? value_of(acc[i * TN + j], r, xa + c) : scalar_inf();
        }
      }
      continue;
    }
    if (MODE == kModeLists) {
      for (uint i = 0; i < TM; ++i) {
        const uint r = tile_row_a(i), q = row0 + r;
        if (q >= p.m) continue;
        const scalar t = thr[r];
        for (uint j = 0; j < TN; ++j) {
          const uint c = tile_row_b(j);
          const scalar v = value_of(acc[i * TN + j], r, xa + c);
          if (v <= t && col0 + c < c_end) {  // before(v, index, bound, NONE)
            const uint slot = atomicAdd(listed[q], 1u);
            if (slot < p.cap) {
              hv[q * p.cap + slot] = v;
              hi[q * p.cap + slot] = p.base + col0 + c;
            }
          }
        }
      }
      continue;
    }

    uint columns = 0;  // bit j: one of this thread's values in column j passes
    for (uint i = 0; i < TM; ++i) {
      const uint r = tile_row_a(i);
      for (uint j = 0; j < TN; ++j) {
        const uint c = tile_row_b(j);
        const scalar v = value_of(acc[i * TN + j], r, xa + c);
        acc[i * TN + j] = v;
        if (col0 + c < c_end && row0 + r < p.m && before(v, p.base + col0 + c, thr[r], thr_idx[r])) columns |= 1u << j;
      }
    }
    if (columns != 0u) atomicOr(passed[parity], columns);
    if (tid == 0) passed[parity ^ 1u] = 0u;  // last read in the previous tile, before this tile's product
    barrier();
    const uint rounds = passed[parity];  // uniform
    if (rounds == 0u) continue;

    for (uint j = 0; j < TN; ++j) {
      if ((rounds & (1u << j)) == 0u) continue;  // uniform
      const uint c = tile_row_b(j), gc = col0 + c;
      for (uint i = 0; i < TM; ++i) {
        const uint r = tile_row_a(i);
        if (gc >= c_end || row0 + r >= p.m || !before(acc[i * TN + j], p.base + gc, thr[r], thr_idx[r])) continue;
        const uint slot = atomicAdd(queued[r], 1u);  // < WX: one value per thread of the row's WX threads
        queue_v[r * WX + slot] = acc[i * TN + j];
        queue_i[r * WX + slot] = p.base + gc;
      }
      barrier();
      for (uint r = tid; r < BM; r += NT) {
        const uint count = queued[r];
        if (count == 0) continue;
        queued[r] = 0;
        const uint h = (split * p.m + row0 + r) * p.k;
        scalar t = thr[r];
        uint ti = thr_idx[r];
        for (uint s = 0; s < count; ++s) {
          const scalar v = queue_v[r * WX + s];
          const uint vi = queue_i[r * WX + s];
          if (!before(v, vi, t, ti)) continue;
          // Replace the root (the worst kept pair) and sift down.
          uint pos = 0;
          for (;;) {
            uint ch = 2 * pos + 1;
            if (ch >= p.k) break;
            if (ch + 1 < p.k && before(hv[h + ch], hi[h + ch], hv[h + ch + 1], hi[h + ch + 1])) ++ch;
            if (!before(v, vi, hv[h + ch], hi[h + ch])) break;
            hv[h + pos] = hv[h + ch];
            hi[h + pos] = hi[h + ch];
            pos = ch;
          }
          hv[h + pos] = v;
          hi[h + pos] = vi;
          t = hv[h];
          ti = hi[h];
        }
        thr[r] = t;
        thr_idx[r] = ti;
      }
      barrier();
    }
  }
  if (LOOP_GUARD != 0u && loop_limit_reached(p.m)) atomicOr(status[0], 1u);
}
