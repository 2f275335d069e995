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
// SM, too few to hide that wait: loading the matrices straight from the buffers spent most of the pass there).
// Where the workgroup's queries fit in shared memory whole (RESIDENT_PAIRS, set by the host from the device's
// shared memory: d up to 128 with 48 KiB), they are loaded once and only the rows are staged: fetching the same
// queries again for every tile of rows cost more than the rows themselves. A
// pair is a candidate when its approximate value, less a rigorous
// bound on the error (knn_half_bound.glsl), is at most its query's bound; the candidate's database index is
// appended to the query's list. Candidates are a superset of the pairs knn_select.comp would append;
// knn_gather.comp (EXACT) forms their values exactly as knn_select.comp does before it sorts them, so the lists
// pick the same pairs.
//
// The test runs on the products in place. With m2w = -2 / (query scale x row scale), a pair fails the test above
// when m2w product + (query term + row term) > 0. The terms are separable (a query's plus a row's), so each is
// brought to the products' scale once (times fold = 1 / m2w, a power of two: exact) and loaded as a matrix of the
// products' layout whose columns (or rows) all read the same 16 values (stride 0); each lane adds them to its
// elements (one at a time: spirv-opt 2023.1 crashes on additions of matrices), and a pair is a candidate unless
// product + (query term + row term) < 0: the same decision, so the same candidates. Which pair an element holds is the driver's layout: a matrix of element
// numbers loaded once at the start tells each lane the (row, column) of each of its elements (kept in registers, a
// byte each). Only candidates take the atomic append; no products go through shared memory.
//
// Grid: x = query tile (BM queries), y = split (split_rows rows from y * split_stride, as knn_select.comp).
// Workgroup: 4 subgroups of 32 invocations (the host pins 32), 2 x 2 blocks of 64 x 64.
#include "common.glsl"
#include "knn_half_bound.glsl"
#include "knn_filter_coop.h"

layout(local_size_x = 128) in;
// Float16 pairs (uints) of the queries' rows kept in shared memory for the whole pass, or 0: staged every step.
layout(constant_id = kSpecResidentPairs) const uint RESIDENT_PAIRS = 0;
// With resident queries whose pairs are a multiple of 16: rows staged 32 features a step (see below).
layout(constant_id = kSpecWideSteps) const bool WIDE = false;

const uint BM = kBlockQueries, BN = kBlockRows, WM = 64, WN = 64, FM = WM / 16, FN = WN / 16;
#define F16_16X16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32_16X16 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

layout(std430, binding = kBindingQueryNorms) readonly restrict buffer QNormBuf { float qn[]; };
layout(std430, binding = kBindingRowTerms) readonly restrict buffer XTermBuf { float xterm[]; };
layout(std430, binding = kBindingIndices) writeonly restrict buffer IdxBuf { uint li[]; };
layout(std430, binding = kBindingListed) buffer ListedBuf { uint listed[]; };
layout(std430, binding = kBindingBound) readonly restrict buffer BoundBuf { float bound_v[]; };

// Float16 pairs (uints) per step: 16 features. The staged rows are SK = KP + 4 uints apart, so that the 8 rows of
// 16 bytes that a fragment load reads at once fall on different banks (KP apart, rows 4 apart share them); resident
// queries are SQ = RESIDENT_PAIRS + 4 apart, for the same reason (4 times an odd number, modulo 32 banks).
// With resident queries whose pairs are a multiple of 16 (WIDE, set by the host), rows are staged 32 features a
// step in one buffer (RS = 20 uints apart, as large as the two of 16): half the steps, each with a barrier before
// the staging and one after, instead of one.
const uint KP = kStepPairs, SK = kStagedStride, SQ = RESIDENT_PAIRS + kPadPairs;
const bool RESIDENT = RESIDENT_PAIRS != 0;
const uint RSTEP = WIDE ? 2 * KP : KP, RS = RSTEP + kPadPairs, PARTS = RSTEP / 4;  // a row's uvec4s per step
layout(std430, binding = kBindingQueryHalf) readonly restrict buffer QHalf4 { uvec4 qh4[]; };
layout(std430, binding = kBindingRowHalf) readonly restrict buffer XHalf4 { uvec4 xh4[]; };
shared uint qs[RESIDENT ? BM * SQ : 2 * BM * SK];  // the queries whole, or the step's double buffered
shared uint xs[2 * BN * SK];                       // the step's database rows

// Thread t's share of a step's operands: uvec4 v = t + 128 h of the queries' (row v / 2, half v % 2 of the step)
// and of the rows' (row v / PARTS, part v % PARTS). Rows are padded (queries to the tile, the block by a tile), so no
// load is out of range.
void fetch(uint row0, uint col0, uint k0, bool queries, inout uvec4 q[2], out uvec4 x[4]) {
  [[unroll]] for (uint h = 0; h < 2; ++h) {
    const uint v = gl_LocalInvocationID.x + 128 * h;
    if (queries) q[h] = qh4[((row0 + v / 2) * p.pairs + k0 + 4 * (v % 2)) / 4];
  }
  [[unroll]] for (uint h = 0; h < 4; ++h) {
    const uint v = gl_LocalInvocationID.x + 128 * h;
    if (h < 2 * RSTEP / KP) x[h] = xh4[((col0 + v / PARTS) * p.pairs + k0 + 4 * (v % PARTS)) / 4];
  }
}
void stage(uint buf, bool queries, uvec4 q[2], uvec4 x[4]) {
  [[unroll]] for (uint h = 0; h < 2; ++h) {
    const uint v = gl_LocalInvocationID.x + 128 * h, at = (v / 2) * SK + 4 * (v % 2);
    [[unroll]] for (uint c = 0; c < 4; ++c)
      if (queries) qs[buf * BM * SK + at + c] = q[h][c];
  }
  [[unroll]] for (uint h = 0; h < 4; ++h) {
    const uint v = gl_LocalInvocationID.x + 128 * h;
    const uint at = (WIDE ? 0 : buf * BN * RS) + (v / PARTS) * RS + 4 * (v % PARTS);
    [[unroll]] for (uint c = 0; c < 4; ++c)
      if (h < 2 * RSTEP / KP) xs[at + c] = x[h][c];
  }
}

// Per query: (half_row_term(|q|^2) - its bound) x fold (-inf past the batch); per subgroup: its columns'
// half_row_term x fold.
shared float q_fold[BM];
shared float x_fold[4 * WN];
// The lane's element e of a 16 x 16 float32 matrix is at row c / 16, column c % 16, c = byte e of coord.
const uint kElements = 8;  // 256 elements over 32 invocations
uint element_at(const uvec2 coord, uint e) { return (coord[e / 4] >> (8 * (e % 4))) & 255u; }

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, sy = sg / 2, sx = sg % 2, lane = gl_SubgroupInvocationID;
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
    q_fold[r] = rest * p.fold;
  }
  // The element numbers 0 .. 255 as float32 bits, in the rows' staging area (not yet in use).
  for (uint e = tid; e < 256; e += 128) xs[e] = floatBitsToUint(float(e));
  barrier();
  uvec2 coord = uvec2(0);
  {
    F32_16X16 numbered;
    coopMatLoadNV(numbered, xs, 0, 16, false);
    if (numbered.length() != kElements) {
      // A layout this kernel does not read: every list of the tile overflows, so the search takes the heaps.
      for (uint r = tid; r < BM; r += 128)
        if (row0 + r < p.m) atomicAdd(listed[row0 + r], p.cap + 1);
      return;
    }
    [[unroll]] for (uint e = 0; e < kElements; ++e) coord[e / 4] |= uint(numbered[e]) << (8 * (e % 4));
  }
  if (RESIDENT) {  // the queries whole, once (RESIDENT_PAIRS = p.pairs: rows padded to the tile)
    for (uint v = tid; v < BM * (RESIDENT_PAIRS / 4); v += 128) {
      const uint r = v / (RESIDENT_PAIRS / 4), part = 4 * (v % (RESIDENT_PAIRS / 4));
      const uvec4 w = qh4[((row0 + r) * RESIDENT_PAIRS + part) / 4];
      [[unroll]] for (uint c = 0; c < 4; ++c) qs[r * SQ + part + c] = w[c];
    }
  }
  barrier();  // the numbers are read before the rows are staged over them

  // Tiles start on a multiple of 16 rows (aligned loads); rows before c_begin are skipped as candidates.
  uint col0 = c_begin & ~15u;
  // With one step per tile (d <= 16) the queries' operands are the same in every step: staged in both buffers
  // once, then only the rows'.
  const bool one_step = !RESIDENT && p.pairs == KP, step_queries = !RESIDENT && !one_step;
  uvec4 next_q[2], next_x[4];
  fetch(row0, col0, 0, !RESIDENT, next_q, next_x);
  // The lane's two row terms of the tile, read with the tile's first operands (the next tile's during its last step).
  vec2 row_terms = vec2(xterm[col0 + WN * sx + lane], xterm[col0 + WN * sx + 32 + lane]), next_row_terms = row_terms;
  stage(0, !RESIDENT, next_q, next_x);
  if (one_step) stage(1, true, next_q, next_x);
  memoryBarrierShared();
  barrier();
  uint buf = 0;
  for (; col0 < c_end; col0 += BN) {
    const uint bcol = col0 + WN * sx;
    F32_16X16 acc[FM][FN];
    [[unroll]] for (uint i = 0; i < FM; ++i)
      [[unroll]] for (uint j = 0; j < FN; ++j) acc[i][j] = F32_16X16(0.0);
    for (uint k0 = 0; k0 < p.pairs; k0 += RSTEP) {
      const bool last = k0 + RSTEP == p.pairs;
      const uint next_k = last ? 0 : k0 + RSTEP, next_col = last ? col0 + BN : col0;
      const bool ahead = next_col < c_end;  // uniform over the workgroup
      if (ahead) fetch(row0, next_col, next_k, step_queries, next_q, next_x);
      if (last && ahead) next_row_terms = vec2(xterm[next_col + WN * sx + lane], xterm[next_col + WN * sx + 32 + lane]);
      [[unroll]] for (uint ks = 0; ks < RSTEP / KP; ++ks) {
        F16_16X16 a[FM], b[FN];
        [[unroll]] for (uint i = 0; i < FM; ++i) {
          if (RESIDENT) coopMatLoadNV(a[i], qs, (WM * sy + 16 * i) * SQ + k0 + KP * ks, SQ, false);
          else coopMatLoadNV(a[i], qs, buf * BM * SK + (WM * sy + 16 * i) * SK, SK, false);
        }
        [[unroll]] for (uint j = 0; j < FN; ++j)
          coopMatLoadNV(b[j], xs, (WIDE ? 0 : buf * BN * RS) + (WN * sx + 16 * j) * RS + KP * ks, RS, true);
        [[unroll]] for (uint i = 0; i < FM; ++i)
          [[unroll]] for (uint j = 0; j < FN; ++j) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
      }
      if (WIDE) barrier();  // one buffer: every subgroup's reads of it are done before it is staged again
      if (ahead) stage(buf ^ 1u, step_queries, next_q, next_x);
      memoryBarrierShared();
      barrier();
      buf ^= 1u;
    }
    // The test. x_fold's last readers (this subgroup, the tile before) are past the workgroup barrier above.
    x_fold[sg * WN + lane] = row_terms[0] * p.fold;
    x_fold[sg * WN + 32 + lane] = row_terms[1] * p.fold;
    row_terms = next_row_terms;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    // Bit 8 (f % 4) + e of hits[f / 4]: element e of block f = FN i + j is a candidate (NaN included). Every block
    // is tested before any append, so that a lane's appends follow one another and the lanes' run side by side.
    uvec4 hits = uvec4(0);
    [[unroll]] for (uint j = 0; j < FN; ++j) {
      F32_16X16 xt;
      coopMatLoadNV(xt, x_fold, sg * WN + 16 * j, 0, false);  // every row: the 16 columns' terms
      [[unroll]] for (uint i = 0; i < FM; ++i) {
        F32_16X16 qt;
        coopMatLoadNV(qt, q_fold, WM * sy + 16 * i, 0, true);  // every column: the 16 queries' terms
        const uint f = FN * i + j;
        [[unroll]] for (uint e = 0; e < kElements; ++e)
          if (!(acc[i][j][e] + (qt[e] + xt[e]) < 0.0)) hits[f / 4] |= 1u << (8 * (f % 4) + e);
      }
    }
    for (;;) {
      const uint w = hits.x != 0 ? 0 : hits.y != 0 ? 1 : hits.z != 0 ? 2 : hits.w != 0 ? 3 : 4;
      if (w == 4) break;
      const uint bit = uint(findLSB(hits[w])), f = 4 * w + bit / 8, at = element_at(coord, bit % 8);
      hits[w] &= hits[w] - 1;
      const uint q = row0 + WM * sy + 16 * (f / FN) + at / 16, gc = bcol + 16 * (f % FN) + at % 16;
      if (q >= p.m || gc < c_begin || gc >= c_end) continue;
      const uint slot = atomicAdd(listed[q], 1u);
      if (slot < p.cap) li[q * p.cap + slot] = p.base + gc;
    }
  }
}
