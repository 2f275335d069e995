#version 450
#extension GL_GOOGLE_include_directive : require
// Fused brute-force k-NN: distances of a block of queries to a range (a "split") of database rows, with the k
// best kept per query as the database tiles stream by. No query x database matrix is ever stored.
//
// Grid: x = query tile (WY*TM queries), y = database split (split_rows rows, a multiple of WX*TN).
// Per database tile of WX*TN rows the workgroup computes the (WY*TM) x (WX*TN) block of selection values
// GEMM-style in registers (features staged through shared memory BK at a time, as pairwise_sq_distances), then
// flags the queries for which some value reaches the query's threshold (the value of its current k-th best).
// Once the heaps are warm almost no tile flags anything, so nearly every value is rejected by one compare.
// Otherwise the values are staged through shared memory SR queries at a time (over the staging tiles) and each
// flagged query is scanned by one thread, which inserts into a bounded max-heap of (value, index) pairs kept in
// the output buffers (global memory, k entries per query and split, initialised to (+inf, 0xffffffff)).
//
// Order: (value, index) lexicographic, so equal values go to the lower database index and the kept set does not
// depend on the tiling or the number of splits. Every value is formed by the same instruction sequence (an FMA
// chain over the features in order), so identical database rows get bit-identical values.
//
// Selection values (smaller is better): 0 sqeuclidean/euclidean |q|^2 + |x|^2 - 2<q,x>; 1 manhattan; 2 chebyshev;
// 3 cosine clamp(1 - <q,x> qinv xinv, 0, 2) with inv = 0 for a zero row; 4 inner product -<q,x>.
#include "common.glsl"

layout(constant_id = 0) const uint WX = 16;
layout(constant_id = 1) const uint WY = 16;
layout(constant_id = 2) const uint TM = 4;
layout(constant_id = 3) const uint TN = 4;
layout(constant_id = 4) const uint BK = 16;
layout(constant_id = 5) const uint METRIC = 0;
layout(local_size_x_id = 0, local_size_y_id = 1) in;

const uint BM = WY * TM;  // queries per workgroup
const uint BN = WX * TN;  // database rows per tile
const uint NT = WX * WY;
// Shared memory: the feature staging tiles, reused between tiles for the values of SR queries at a time.
const uint A_SIZE = BK * (BM + 1);
const uint STAGE = A_SIZE + BK * (BN + 1);
const uint SR = (STAGE / (BN + 1) < BM) ? STAGE / (BN + 1) : BM;
const uint SQEUCLIDEAN = 0, MANHATTAN = 1, CHEBYSHEV = 2, COSINE = 3, INNER_PRODUCT = 4;
const uint NONE = 0xffffffffu;

layout(std430, binding = 0) readonly buffer QBuf { scalar Q[]; };
layout(std430, binding = 1) readonly buffer XBuf { scalar X[]; };
layout(std430, binding = 2) readonly buffer QNormBuf { scalar qn[]; };
layout(std430, binding = 3) readonly buffer XNormBuf { scalar xn[]; };
layout(std430, binding = 4) buffer ValBuf { scalar hv[]; };
layout(std430, binding = 5) buffer IdxBuf { uint hi[]; };
// m queries, n database rows in this block, d features, k kept, split_rows rows per split, base: global index of
// the block's first row.
layout(push_constant) uniform Push { uint m; uint n; uint d; uint k; uint split_rows; uint base; } p;

shared scalar smem[STAGE];
shared scalar qaux[BM];
shared scalar xaux[BN];
shared scalar thr[BM];
shared uint thr_idx[BM];
shared uint flag[BM];
shared uint any_flag;

bool before(scalar a, uint ia, scalar b, uint ib) { return a < b || (a == b && ia < ib); }

scalar row_aux(scalar sq) {
  if (METRIC == COSINE) return sq > scalar(0) ? scalar(1) / sqrt(sq) : scalar(0);
  return sq;
}

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint tid = ty * WX + tx;
  const uint row0 = gl_WorkGroupID.x * BM;
  const uint split = gl_WorkGroupID.y;
  const uint c_begin = split * p.split_rows;
  const uint c_end = min(p.n, c_begin + p.split_rows);
  const bool uses_norms = METRIC == SQEUCLIDEAN || METRIC == COSINE;
#if defined(GPUML_F64)
  const scalar inf = packDouble2x32(uvec2(0u, 0x7ff00000u));
#else
  const scalar inf = uintBitsToFloat(0x7f800000u);
#endif

  for (uint r = tid; r < BM; r += NT) {
    const uint q = row0 + r;
    if (q < p.m) {
      const uint h = (split * p.m + q) * p.k;
      for (uint e = 0; e < p.k; ++e) {
        hv[h + e] = inf;
        hi[h + e] = NONE;
      }
    }
    qaux[r] = (uses_norms && q < p.m) ? row_aux(qn[q]) : scalar(0);
    thr[r] = inf;
    thr_idx[r] = NONE;
    flag[r] = 0;
  }
  if (tid == 0) any_flag = 0;

  for (uint col0 = c_begin; col0 < c_end; col0 += BN) {
    for (uint c = tid; c < BN; c += NT) {
      const uint gc = col0 + c;
      xaux[c] = (uses_norms && gc < c_end) ? row_aux(xn[gc]) : scalar(0);
    }

    scalar acc[TM * TN];
    for (uint e = 0; e < TM * TN; ++e) acc[e] = scalar(0);
    for (uint k0 = 0; k0 < p.d; k0 += BK) {
      for (uint e = tid; e < BM * BK; e += NT) {
        const uint r = e / BK, kk = e % BK, gr = row0 + r, gk = k0 + kk;
        smem[kk * (BM + 1) + r] = (gr < p.m && gk < p.d) ? Q[gr * p.d + gk] : scalar(0);
      }
      for (uint e = tid; e < BN * BK; e += NT) {
        const uint c = e / BK, kk = e % BK, gc = col0 + c, gk = k0 + kk;
        smem[A_SIZE + kk * (BN + 1) + c] = (gc < c_end && gk < p.d) ? X[gc * p.d + gk] : scalar(0);
      }
      barrier();
      for (uint kk = 0; kk < BK; ++kk) {
        scalar a[TM], b[TN];
        for (uint i = 0; i < TM; ++i) a[i] = smem[kk * (BM + 1) + i * WY + ty];
        for (uint j = 0; j < TN; ++j) b[j] = smem[A_SIZE + kk * (BN + 1) + j * WX + tx];
        for (uint i = 0; i < TM; ++i)
          for (uint j = 0; j < TN; ++j) {
            if (METRIC == MANHATTAN) {
              acc[i * TN + j] += abs(a[i] - b[j]);
            } else if (METRIC == CHEBYSHEV) {
              acc[i * TN + j] = max(acc[i * TN + j], abs(a[i] - b[j]));
            } else {
              acc[i * TN + j] = fma(a[i], b[j], acc[i * TN + j]);
            }
          }
      }
      barrier();
    }

    // Selection values (in place in the accumulators); flag the queries some value may enter. Once the
    // thresholds are warm almost no tile flags anything and the workgroup moves straight on.
    for (uint i = 0; i < TM; ++i) {
      const uint r = i * WY + ty;
      const scalar t = thr[r];
      for (uint j = 0; j < TN; ++j) {
        const uint c = j * WX + tx;
        const scalar s = acc[i * TN + j];
        scalar v;
        if (METRIC == SQEUCLIDEAN) v = (qaux[r] + xaux[c]) - scalar(2) * s;
        else if (METRIC == COSINE) v = clamp(scalar(1) - s * (qaux[r] * xaux[c]), scalar(0), scalar(2));
        else if (METRIC == INNER_PRODUCT) v = -s;
        else v = s;
        acc[i * TN + j] = v;
        if (col0 + c < c_end && v <= t) {
          flag[r] = 1;
          any_flag = 1;
        }
      }
    }
    barrier();
    if (any_flag == 0) continue;  // uniform: read by every thread after the barrier, reset only below

    // SR queries at a time: values to shared memory (over the staging tiles), flagged queries scanned by one
    // thread each into their heaps.
    for (uint r0 = 0; r0 < BM; r0 += SR) {
      for (uint i = 0; i < TM; ++i) {
        const uint r = i * WY + ty;
        if (r < r0 || r >= r0 + SR) continue;
        for (uint j = 0; j < TN; ++j) smem[(r - r0) * (BN + 1) + j * WX + tx] = acc[i * TN + j];
      }
      barrier();
      for (uint r = r0 + tid; r < min(r0 + SR, BM); r += NT) {
        const uint q = row0 + r;
        if (flag[r] == 0) continue;
        flag[r] = 0;
        if (q >= p.m) continue;
        const uint h = (split * p.m + q) * p.k;
        scalar t = thr[r];
        uint ti = thr_idx[r];
        const uint cn = min(BN, c_end - col0);
        for (uint c = 0; c < cn; ++c) {
          const scalar v = smem[(r - r0) * (BN + 1) + c];
          const uint vi = p.base + col0 + c;
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
    if (tid == 0) any_flag = 0;
  }
}
