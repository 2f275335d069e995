#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_control_flow_attributes : require
// The candidate lists of knn_select.comp (APPEND) for float32 (squared) euclidean searches, with the products on
// cooperative matrices (tensor cores).
//
// Queries and database rows come as float16 (knn_half.comp: one power-of-two scale per matrix, rows padded to a
// multiple of 16 features). Every subgroup multiplies a 64 x 64 block of (query, row) pairs, 16 x 16 x 16 at a
// time with float32 sums. The workgroup stages its operands in shared memory 16 features at a time, double
// buffered: the next step's (or the next tile's first) are loaded from the buffers into registers while this
// step's products run, so no subgroup waits on a global load (the accumulators leave room for few subgroups per
// SM, too few to hide that wait: loading the matrices straight from the buffers spent most of the pass there). A
// pair is a candidate when its approximate value, less a rigorous
// bound on the error (knn_half_bound.glsl), is at most its query's bound; the candidate's database index is
// appended to the query's list. Candidates are a superset of the pairs knn_select.comp would append;
// knn_gather.comp (EXACT) forms their values exactly as knn_select.comp does before it sorts them, so the lists
// pick the same pairs.
//
// The test goes through a per-subgroup scratch in shared memory, a 16 x 64 strip at a time (the products' element
// layout is the driver's): each lane tests 32 values of one row without a branch, and only the rare candidates
// take the atomic append. (Reading the matrices' elements in place, with the rows' terms and numbers loaded as
// matrices of the same layout, measured about 10 times slower on the H200.)
//
// Grid: x = query tile (BM queries), y = split (split_rows rows from y * split_stride, as knn_select.comp).
// Workgroup: 4 subgroups of 32 invocations (the host pins 32), 2 x 2 blocks of 64 x 64.
#include "common.glsl"
#include "knn_half_bound.glsl"
#include "knn_filter_coop.h"

layout(local_size_x = 128) in;

const uint BM = kBlockQueries, BN = kBlockRows, WM = 64, WN = 64, FM = WM / 16, FN = WN / 16;
#define F16_16X16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32_16X16 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

layout(std430, binding = kBindingQueryNorms) readonly restrict buffer QNormBuf { float qn[]; };
layout(std430, binding = kBindingRowTerms) readonly restrict buffer XTermBuf { float xterm[]; };
layout(std430, binding = kBindingIndices) writeonly restrict buffer IdxBuf { uint li[]; };
layout(std430, binding = kBindingListed) buffer ListedBuf { uint listed[]; };
layout(std430, binding = kBindingBound) readonly restrict buffer BoundBuf { float bound_v[]; };

// Float16 pairs (uints) per step: 16 features. The staged rows are SK = KP + 4 uints apart, so that the 8 rows of
// 16 bytes that a fragment load reads at once fall on different banks (KP apart, rows 4 apart share them).
const uint KP = 8, SK = KP + 4;
layout(std430, binding = kBindingQueryHalf) readonly restrict buffer QHalf4 { uvec4 qh4[]; };
layout(std430, binding = kBindingRowHalf) readonly restrict buffer XHalf4 { uvec4 xh4[]; };
shared uint qs[2 * BM * SK];  // the step's queries, double buffered
shared uint xs[2 * BN * SK];  // the step's database rows

// Thread t's share of a step's operands: uvec4 v = t + 128 h of the queries' (row v / 2, half v % 2 of the step)
// and of the rows'. Rows are padded (queries to the tile, the block by a tile), so no load is out of range.
void fetch(uint row0, uint col0, uint k0, out uvec4 q[2], out uvec4 x[2]) {
  [[unroll]] for (uint h = 0; h < 2; ++h) {
    const uint v = gl_LocalInvocationID.x + 128 * h, r = v / 2, part = 4 * (v % 2);
    q[h] = qh4[((row0 + r) * p.pairs + k0 + part) / 4];
    x[h] = xh4[((col0 + r) * p.pairs + k0 + part) / 4];
  }
}
void stage(uint buf, uvec4 q[2], uvec4 x[2]) {
  [[unroll]] for (uint h = 0; h < 2; ++h) {
    const uint v = gl_LocalInvocationID.x + 128 * h, at = (v / 2) * SK + 4 * (v % 2);
    [[unroll]] for (uint c = 0; c < 4; ++c) {
      qs[buf * BM * SK + at + c] = q[h][c];
      xs[buf * BN * SK + at + c] = x[h][c];
    }
  }
}

shared float q_rest[BM];  // per query: half_row_term(|q|^2) - its bound (+inf past the batch)
const uint SROW = WN + 4, SCRATCH = 16 * SROW;
shared float scratch[4 * SCRATCH];  // per subgroup: a 16 x 64 strip of its block
shared float x_rest[4 * WN];  // per subgroup: its columns' half_row_term

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, sy = sg / 2, sx = sg % 2;
  const uint row0 = gl_WorkGroupID.x * BM;
  const uint c_begin = gl_WorkGroupID.y * p.split_stride;
  const uint c_end = min(p.nb, c_begin + p.split_rows);
  for (uint r = tid; r < BM; r += 128) {
    const uint q = row0 + r;
    float rest = uintBitsToFloat(0x7F800000u);
    if (q < p.m) {
      float t = bound_v[q * p.k];
      t += abs(t) * (1.0 / 1048576.0);  // as knn_select.comp widens it
      rest = half_row_term(qn[q], p.qscale, p.d) - t;
    }
    q_rest[r] = rest;
  }
  barrier();

  // Tiles start on a multiple of 16 rows (aligned loads); rows before c_begin are skipped as candidates.
  uint col0 = c_begin & ~15u;
  uvec4 next_q[2], next_x[2];
  fetch(row0, col0, 0, next_q, next_x);
  stage(0, next_q, next_x);
  memoryBarrierShared();
  barrier();
  uint buf = 0;
  for (; col0 < c_end; col0 += BN) {
    const uint bcol = col0 + WN * sx;
    F32_16X16 acc[FM][FN];
    [[unroll]] for (uint i = 0; i < FM; ++i)
      [[unroll]] for (uint j = 0; j < FN; ++j) acc[i][j] = F32_16X16(0.0);
    for (uint k0 = 0; k0 < p.pairs; k0 += KP) {
      const bool last = k0 + KP == p.pairs;
      const uint next_k = last ? 0 : k0 + KP, next_col = last ? col0 + BN : col0;
      const bool ahead = next_col < c_end;  // uniform over the workgroup
      if (ahead) fetch(row0, next_col, next_k, next_q, next_x);
      F16_16X16 a[FM], b[FN];
      [[unroll]] for (uint i = 0; i < FM; ++i) coopMatLoadNV(a[i], qs, buf * BM * SK + (WM * sy + 16 * i) * SK, SK, false);
      [[unroll]] for (uint j = 0; j < FN; ++j) coopMatLoadNV(b[j], xs, buf * BN * SK + (WN * sx + 16 * j) * SK, SK, true);
      [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < FN; ++j) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
      if (ahead) stage(buf ^ 1u, next_q, next_x);
      memoryBarrierShared();
      barrier();
      buf ^= 1u;
    }
    // The test, one 16 x 64 strip of the subgroup's block at a time through its scratch in shared memory: lane l
    // takes row l / 2 of the strip and every other column from l % 2, rows 8 to 15 a column pair later than rows 0
    // to 7 (column(h)), so that the 32 lanes read 32 different banks. The rows' terms of the lane's 32 columns are
    // read once per tile, into registers.
    const uint lane = gl_SubgroupInvocationID, srow = lane / 2, scol = lane % 2, skew = srow / 8;
    x_rest[sg * WN + lane] = xterm[bcol + lane];
    x_rest[sg * WN + 32 + lane] = xterm[bcol + 32 + lane];
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    float xr[WN / 2];
    [[unroll]] for (uint h = 0; h < WN / 2; ++h) xr[h] = x_rest[sg * WN + scol + 2 * ((h + skew) % (WN / 2))];
    [[unroll]] for (uint i = 0; i < FM; ++i) {
      [[unroll]] for (uint j = 0; j < FN; ++j) coopMatStoreNV(acc[i][j], scratch, sg * SCRATCH + 16 * j, SROW, false);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      {
        const uint r = WM * sy + 16 * i + srow, q = row0 + r;
        const float qr = q_rest[r];
        uint hits = 0;  // bit h: column scol + 2 ((h + skew) mod 32) is a candidate (NaN included); branch-free
        [[unroll]] for (uint h = 0; h < WN / 2; ++h) {
          const uint c = scol + 2 * ((h + skew) % (WN / 2));
          if (!(fma(scratch[sg * SCRATCH + srow * SROW + c], p.m2w, qr + xr[h]) > 0.0)) hits |= 1u << h;
        }
        while (hits != 0) {
          const uint gc = bcol + scol + 2 * ((uint(findLSB(hits)) + skew) % (WN / 2));
          hits &= hits - 1;
          if (q >= p.m || gc < c_begin || gc >= c_end) continue;
          const uint slot = atomicAdd(listed[q], 1u);
          if (slot < p.cap) li[q * p.cap + slot] = p.base + gc;
        }
      }
      subgroupBarrier();
    }
  }
}
