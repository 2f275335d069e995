#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
// Greedy k-means++ over one chunk of samples, in two variants (MODE):
//   0, potentials: for every trial candidate t, the workgroup's partial potential
//        sum_i w_i min(closest_i, ||x_i - cand_t||^2)                 -> out[(out_base + group) * TRIALS + t]
//   1, commit:     closest_i = min(closest_i, ||x_i - cand_c||^2) (the distance alone for the first center), and per
//        sampling block (TILE samples, the first starting `offset` rows before the chunk) the sampling mass
//        sum_i w_i closest_i                                           -> out[out_base + tile]
// Distances come from differences (exact 0 when x == c), accumulated in feature order with fma in both variants, so
// the committed distances are the ones the potentials used. Every term w_i * (distance), rounded in T, is added in
// the seeding's fixed point (exact_sum.glsl): the sums are the same integers for any cut of the rows.
#include "common.glsl"
#include "exact_sum.glsl"
#include "kmeans_plus_plus.h"

layout(constant_id = kSpecThreads) const uint THREADS = 128;        // a power of two
layout(constant_id = kSpecSamplesPerThread) const uint SPT = 8;     // samples per thread per tile
layout(constant_id = kSpecFeatures) const uint D = 2;               // features
layout(constant_id = kSpecTrials) const uint TRIALS = 2;            // candidates per round
layout(constant_id = kSpecMode) const uint MODE = kModePotentials;
layout(local_size_x_id = kSpecThreads) in;

const uint TILE = THREADS * SPT;

layout(std430, binding = kBindingX) readonly buffer XBuf { scalar X[]; };
layout(std430, binding = kBindingWeights) readonly buffer WBuf { scalar W[]; };
layout(std430, binding = kBindingClosest) buffer ClosestBuf { scalar closest[]; };
layout(std430, binding = kBindingCandidates) readonly buffer CandBuf { scalar cand[]; };
layout(std430, binding = kBindingOut) writeonly buffer OutBuf { int64_t out_[]; };

shared int64_t red[THREADS];

// The commit's rows are staged in shared memory, a round at a time, with coalesced loads where they fit 12 KiB: a
// thread reading its own row straight from X strides by D across the subgroup, so each load touches D cache lines.
// Only the loads change; the arithmetic and its order are the same either way. (The potentials do TRIALS times more
// arithmetic per value loaded; staging made them slower, the barriers costing more than the loads saved.)
#ifdef GPUML_F64
const uint kStagedLimit = 1536u;
#else
const uint kStagedLimit = 3072u;
#endif
const uint kStagedElements = MODE == kModeCommit ? THREADS * D : 0u;
const bool STAGED = kStagedElements - 1u < kStagedLimit;  // 1 to kStagedLimit elements (0 wraps past the limit)
shared scalar xs[STAGED ? THREADS * D : 1u];

// Stages the rows at places [base, base + THREADS) counted from the first block's start, chunk row = place - offset
// (zeros outside the chunk). Every invocation of the workgroup calls it.
void stage_rows(uint base) {
  if (STAGED) {
    barrier();  // the previous round's reads are done
    // The staged rows are one contiguous range of X: element e is X[first + e], inside the chunk where
    // 0 <= first + e < rows * D (no division by D per element). A chunk holds at most 2^30 elements: int is wide
    // enough, and first is negative only in the first tile of a chunk that starts inside a block.
    const int first = (int(base) - int(p.offset)) * int(D), end = int(p.rows * D);
    for (uint e = gl_LocalInvocationID.x; e < THREADS * D; e += THREADS) {
      const int at = first + int(e);
      xs[e] = at >= 0 && at < end ? X[at] : scalar(0);
    }
    barrier();
  }
}

// Feature f of row i, this invocation's row of the round stage_rows staged.
scalar x_at(uint i, uint f) { return STAGED ? xs[gl_LocalInvocationID.x * D + f] : X[i * D + f]; }

// The group's sum of v (exact: any order gives the same integer).
int64_t group_sum(int64_t v) {
  const uint t = gl_LocalInvocationID.x;
  barrier();  // red[0] of the previous call has been read
  red[t] = v;
  for (uint half_ = THREADS / 2; half_ > 0; half_ /= 2) {
    barrier();
    if (t < half_) red[t] += red[t + half_];
  }
  barrier();
  return red[0];
}

void potentials(uint g, uint ntiles, scalar scale) {
  int64_t pot[TRIALS];
  for (uint c = 0; c < TRIALS; ++c) pot[c] = 0l;
  for (uint tile = g; tile < ntiles; tile += p.groups)
    for (uint s = 0; s < SPT; ++s) {
      const uint i = tile * TILE + s * THREADS + gl_LocalInvocationID.x;
      if (i >= p.rows) continue;
      scalar d2[TRIALS];
      for (uint c = 0; c < TRIALS; ++c) d2[c] = scalar(0);
      for (uint f = 0; f < D; ++f) {
        const scalar x = X[i * D + f];
        for (uint c = 0; c < TRIALS; ++c) {
          const scalar diff = x - cand[c * D + f];
          d2[c] = fma(diff, diff, d2[c]);
        }
      }
      const scalar ci = closest[i], wi = W[i];
      for (uint c = 0; c < TRIALS; ++c) {
        precise scalar term = wi * min(ci, d2[c]);
        pot[c] += fixed_point(term, scale);
      }
    }
  for (uint c = 0; c < TRIALS; ++c) {
    const int64_t total = group_sum(pot[c]);
    if (gl_LocalInvocationID.x == 0) out_[(p.out_base + g) * TRIALS + c] = total;
  }
}

void commit(uint g, uint ntiles, scalar scale) {
  for (uint tile = g; tile < ntiles; tile += p.groups) {
    int64_t mass = 0l;
    for (uint s = 0; s < SPT; ++s) {
      stage_rows(tile * TILE + s * THREADS);
      const uint place = tile * TILE + s * THREADS + gl_LocalInvocationID.x;
      if (place < p.offset || place - p.offset >= p.rows) continue;
      const uint i = place - p.offset;
      scalar d2 = scalar(0);
      for (uint f = 0; f < D; ++f) {
        const scalar diff = x_at(i, f) - cand[p.candidate * D + f];
        d2 = fma(diff, diff, d2);
      }
      const scalar c = p.first != 0 ? d2 : min(closest[i], d2);
      closest[i] = c;
      precise scalar term = W[i] * c;
      mass += fixed_point(term, scale);
    }
    const int64_t total = group_sum(mass);
    if (gl_LocalInvocationID.x == 0) out_[p.out_base + tile] = total;
  }
}

void main() {
  const uint g = linear_group_id();
  const scalar scale = exact_scale(p.exponent);
  if (MODE == kModePotentials) potentials(g, (p.rows + TILE - 1) / TILE, scale);
  else commit(g, (p.offset + p.rows + TILE - 1) / TILE, scale);
}
