#version 450
#extension GL_GOOGLE_include_directive : require
// Greedy k-means++ over one chunk of samples, in two variants (MODE):
//   0, potentials: for every trial candidate t, the workgroup's partial potential
//        sum_i w_i min(closest_i, ||x_i - cand_t||^2)                 -> out[(out_base + group) * TRIALS + t]
//   1, commit:     closest_i = min(closest_i, ||x_i - cand_c||^2) (the distance alone for the first center), and per
//        tile of TILE samples the sampling mass sum_i w_i closest_i    -> out[out_base + tile]
// Distances come from differences (exact 0 when x == c), accumulated in feature order with fma in both variants, so
// the committed distances are the ones the potentials used. Persistent workgroups take tiles g, g + groups, ...;
// every sum runs in a fixed order (per thread over its samples, then a tree in shared memory): results are
// bitwise reproducible without float atomics.
#include "common.glsl"
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
layout(std430, binding = kBindingOut) writeonly buffer OutBuf { scalar out_[]; };

shared scalar red[THREADS];

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

// Stages rows [base, base + THREADS) of the chunk (zeros past its end). Every invocation of the workgroup calls it.
void stage_rows(uint base) {
  if (STAGED) {
    barrier();  // the previous round's reads are done
    const uint first = base * D, end = p.rows * D;
    for (uint e = gl_LocalInvocationID.x; e < THREADS * D; e += THREADS)
      xs[e] = first + e < end ? X[first + e] : scalar(0);
    barrier();
  }
}

// Feature f of row i, this invocation's row of the round stage_rows staged.
scalar x_at(uint i, uint f) { return STAGED ? xs[gl_LocalInvocationID.x * D + f] : X[i * D + f]; }

// The group's sum of v, in a fixed tree order.
scalar group_sum(scalar v) {
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

void potentials(uint g, uint ntiles) {
  scalar pot[TRIALS];
  for (uint c = 0; c < TRIALS; ++c) pot[c] = scalar(0);
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
      for (uint c = 0; c < TRIALS; ++c) pot[c] = fma(wi, min(ci, d2[c]), pot[c]);
    }
  for (uint c = 0; c < TRIALS; ++c) {
    const scalar total = group_sum(pot[c]);
    if (gl_LocalInvocationID.x == 0) out_[(p.out_base + g) * TRIALS + c] = total;
  }
}

void commit(uint g, uint ntiles) {
  for (uint tile = g; tile < ntiles; tile += p.groups) {
    scalar mass = scalar(0);
    for (uint s = 0; s < SPT; ++s) {
      stage_rows(tile * TILE + s * THREADS);
      const uint i = tile * TILE + s * THREADS + gl_LocalInvocationID.x;
      if (i >= p.rows) continue;
      scalar d2 = scalar(0);
      for (uint f = 0; f < D; ++f) {
        const scalar diff = x_at(i, f) - cand[p.candidate * D + f];
        d2 = fma(diff, diff, d2);
      }
      const scalar c = p.first != 0 ? d2 : min(closest[i], d2);
      closest[i] = c;
      mass = fma(W[i], c, mass);
    }
    const scalar total = group_sum(mass);
    if (gl_LocalInvocationID.x == 0) out_[p.out_base + tile] = total;
  }
}

void main() {
  const uint g = linear_group_id();
  const uint ntiles = (p.rows + TILE - 1) / TILE;
  if (MODE == kModePotentials) potentials(g, ntiles);
  else commit(g, ntiles);
}
