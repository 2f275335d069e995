#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
// One Lloyd E-step over a chunk of samples, fused with the partial M-step:
//   labels[i] = argmin_c ||c||^2 - 2 <x_i, c>   (strict <, so the lowest index wins ties),
//   a flag when any label changed, and per-workgroup partial sums  sum_i w_i x_i  and  sum_i w_i  per cluster,
//   exact: each term in the fit's fixed point (exact_sum.glsl), so any cut of the rows gives the same sums.
// Persistent workgroups: group g takes sample tiles g, g + groups, ... in order. Distances come from register
// tiles (SPT samples x KT centers per thread); the centers sit in shared memory when they all fit (KS x DS),
// else they are read from global memory, the same address for every thread. Rows of several feature tiles are
// searched by split_search instead (SPLIT: the threads split each center tile; one sample per thread).
// Each workgroup adds its samples to its own sums in index order (an order that no longer matters, the sums being
// integers, but that keeps every walk simple), a batch of ROUNDS rounds of THREADS samples at a time, every sample setting one bit in its cluster's mask.
// Where each cluster has few members in the batch, the thread owning a cluster walks its bits, reading each
// member's row whole. Otherwise (a crowded batch: few clusters, or a poor init; more clusters than threads; wide
// rows) the batch is sorted by cluster in shared memory (a sample's rank is the count of its cluster's bits before
// it) and one thread per (cluster, feature) pair walks the cluster's members, so that no owner serialises the
// workgroup and the lanes of one cluster read its members' rows together. Both walks add in the same order.
//
// The bounded E-step returns exactly what the plain one returns, with far fewer distances once the centers move
// little (Hamerly's bounds, kept conservative in floating point). Each sample keeps an upper bound u on its distance
// to its center and a lower bound l on its distance to every other center; when centers move, u grows by its
// center's move and l shrinks by the largest move of the others. Where u^2 + S < l^2, with S a bound on the rounding
// of the kernel's values ||c||^2 - 2 <x, c> (an FMA chain of D terms, the norm, one subtraction: each within
// gamma (||c||^2 + 2 ||x|| ||c||) of the exact value), the kernel's own argmin is certainly the old label, ties
// included, and no distance is computed. A step that uses the bounds runs in three dispatches (STAGE): one thread
// per sample checks its bounds, recomputes the value to its old center with the kernel's own FMA chain to tighten u
// where they fail, and lists the samples still uncertain; the register tiles below search the listed samples only
// (the lowest index among equal values, as always), keeping each one's second-best value for its new lower bound;
// the partial sums are then added from the labels exactly as the plain step adds them, by the workgroups where a
// label changed (dirty[]). The step that sets the bounds (kBoundsSet) lists every sample.
#include "common.glsl"
#include "exact_sum.glsl"
#include "kmeans_lloyd.h"

layout(constant_id = kSpecThreads) const uint THREADS = 128;     // a multiple of 32
layout(constant_id = kSpecSamplesPerThread) const uint SPT = 4;  // samples per thread per tile
layout(constant_id = kSpecCentersPerThread) const uint KT = 8;   // centers per register tile
layout(constant_id = kSpecCenterTile) const uint KS = 128;       // centers per shared tile (a multiple of KT)
layout(constant_id = kSpecFeatureTile) const uint DS = 16;       // features per shared tile
layout(constant_id = kSpecClusters) const uint K = 8;            // clusters
layout(constant_id = kSpecFeatures) const uint D = 2;            // features
layout(constant_id = kSpecAccShared) const uint ACC_SHARED = 1;
layout(constant_id = kSpecLoopGuard) const uint LOOP_GUARD = 0;
layout(constant_id = kSpecStage) const uint STAGE = kStageFull;
layout(constant_id = kSpecSumRounds) const uint ROUNDS = 1;     // rounds of THREADS samples per batch of sums; divides SPT
layout(constant_id = kSpecSplitCenters) const uint SPLIT = 0;   // 1: split_search (one sample per thread, SPT = 1)
layout(local_size_x_id = kSpecThreads) in;

const uint NKS = (K + KS - 1) / KS;
const uint NDS = (D + DS - 1) / DS;
const uint KT_PER_KS = KS / KT;
const uint BATCH = THREADS * ROUNDS;
const uint BW = BATCH / 32;  // mask words per cluster
const uint DW = D + 1;  // a partial row: D weighted sums, then the weight
const uint TILE = THREADS * SPT;
const uint MAX_PRESENT = K < BATCH ? K : BATCH;  // clusters with members in one batch, at most
// A batch's sums walked by one owner per cluster (each reads its members' rows whole) unless some cluster has
// more than CROWDED members there; many clusters or features are always walked by (cluster, feature) pairs.
const uint OWNERS = K <= THREADS ? (DW <= 32u ? 1u : 0u) : 0u;
const uint CROWDED = 256u / DW > 1u ? 256u / DW : 1u;
const uint DS4 = (DS + 3) / 4;  // a shared center row in 4-vectors: one broadcast load feeds 4 * SPT FMAs
// split_search's geometry: CG center groups x SG sample groups of threads, each thread a register tile of RS samples
// (kSplitSamples) x KT centers of a center tile of KS = CG * KT (the plan sets KS so, and SPT = 1: TILE = THREADS).
const uint RS = kSplitSamples;
const uint CG = SPLIT != 0u ? RS : 1u;
const uint SG = THREADS / CG;

layout(std430, binding = kBindingX) readonly buffer XBuf { scalar X[]; };
layout(std430, binding = kBindingWeights) readonly buffer WBuf { scalar W[]; };
layout(std430, binding = kBindingLabels) buffer LabelBuf { uint labels[]; };
layout(std430, binding = kBindingCenters) readonly buffer CBuf { scalar C[]; };
layout(std430, binding = kBindingCenterNorms) readonly buffer CNormBuf { scalar cnorm[]; };
// coherent: with ACC_SHARED = 0 the threads of a workgroup hand partial sums to each other through this buffer.
layout(std430, binding = kBindingPartials) coherent buffer PartialBuf { int64_t partials[]; };
layout(std430, binding = kBindingStatus) buffer StatusBuf { uint status[]; };
// Sample i: (u, l, ||x_i||^2 as the kernel computes it, unused).
layout(std430, binding = kBindingBounds) buffer BoundsBuf { scalar4 bounds[]; };
// drift[c]: how far center c moved since the last step; drift[K + c]: the largest move of any other center;
// drift[2K]: an upper bound on every center's norm (all rounded up); then the centers transposed, feature j of
// center c at kDriftCenters + j K (the values of C: lanes taking consecutive centers read consecutive words).
layout(std430, binding = kBindingDrift) readonly buffer DriftBuf { scalar drift[]; };
const uint kDriftCenters = 2u * K + 1u;
// The bounded step's uncertain samples, listed for the search: listed[0] counts them, their chunk rows follow. Each
// workgroup gathers its own in shared memory and appends them in runs (one global atomic per run).
layout(std430, binding = kBindingList) buffer ListBuf { uint listed[]; };
// dirty[g]: a label of workgroup g's samples changed since g last added its partial sums (set by the search, cleared
// by the sums). The partial sums are a function of the labels alone, so a clean workgroup's are still the sums of
// its samples, bit for bit, and the bounded step does not add them again.
layout(std430, binding = kBindingDirty) buffer DirtyBuf { uint dirty[]; };
// The exact sums of the current labels (the reduction's output, int64 in two words, the low one first). With
// p.move_totals the search moves each sample whose label changes: its terms leave the old cluster's sums and join
// the new one's. The sums are integers, so moving terms gives exactly the sums of the new labels, and a step where
// few labels change needs no sums stage at all.
layout(std430, binding = kBindingTotals) buffer TotalsBuf { uint totals[]; };
// The rows one workgroup checks: a chunk row of every THREADS * groups, THREADS at a time.
const uint APPEND_EVERY = kCheckAppendRounds;  // rounds of the check between looks at the gathered rows
const uint GATHERED = STAGE == kStageCheck ? 2u * APPEND_EVERY * THREADS : 1u;
shared uint gathered[GATHERED];
shared uint gathered_count;
shared uint appended_at;


// The check and the sums stages declare only the shared memory they use (more of their workgroups fit): the center
// tile for the searches, the partial sums' arrays for the steps that add them. The search keeps the plain step's
// footprint: with more of its workgroups beside each other, its gathers of listed rows of many features were slower.
const uint SEARCHES = STAGE == kStageFull ? 1u : (STAGE == kStageSearch ? 1u : 0u);
const uint ADDS = STAGE == kStageCheck ? 0u : 1u;
const uint RESIDENT_TILES = SPLIT != 0u ? 0u : SEARCHES;
const uint SPLIT_TILES = SPLIT != 0u ? SEARCHES : 0u;
shared scalar4 Cs[KS * DS4 * RESIDENT_TILES + 1];
shared scalar Cn[KS * RESIDENT_TILES + 1];
// split_search: one feature tile of the sample tile and of the center tile, feature-major in 4-vectors (a thread
// reads its samples' and its centers' values of one feature in RS / 4 and KT / 4 loads), each feature's row one
// 4-vector longer than its values (the tiles are written a row per feature at once: without the pad, every value
// written by a warp would fall in one bank); then each thread's best and second-best values and best centers for
// the owners to merge; the tile's chunk rows.
const uint SPLIT_X_ROW = TILE / 4u + 1u, SPLIT_C_ROW = KS / 4u + 1u;
shared scalar4 split_x[DS * SPLIT_X_ROW * SPLIT_TILES + 1];
shared scalar4 split_c[DS * SPLIT_C_ROW * SPLIT_TILES + 1];
shared scalar split_best[TILE * CG * SPLIT_TILES + 1];
shared scalar split_second[TILE * CG * SPLIT_TILES + 1];
shared uint split_index[TILE * CG * SPLIT_TILES + 1];
shared uint split_rows[TILE * SPLIT_TILES + 1];
// The partial sums of one batch of ROUNDS rounds: a bit per sample in its cluster's mask, then the batch's positions
// sorted by cluster (index order within each), every cluster's range of them, and the clusters with members.
shared uint masks[K * BW * ADDS + 1];
shared uint sorted_positions[BATCH * ADDS + 1];
shared uint cluster_range[K * ADDS + 1];  // first sorted position | members << 16
shared uint present[MAX_PRESENT * ADDS + 1];
shared uint present_count;
shared uint batch_members;
shared uint batch_crowded;
shared int64_t Acc[K * DW * ACC_SHARED * ADDS + 1];
shared uint group_changed;

// Members of cluster c in the batch's masks.
uint cluster_members(uint c) {
  uint members = 0u;
  [[unroll]] for (uint w = 0; w < BW; ++w) members += uint(bitCount(masks[c * BW + w]));
  return members;
}

scalar xr[SPT * DS];  // this thread's samples of the tile (all features when NDS == 1)
uint rows[SPT];       // their chunk rows (p.rows or more where a tile has fewer)

#if defined(GPUML_F64)
const scalar kUnitRoundoff = 1.1102230246251565404e-16LF;  // 2^-53
#else
const scalar kUnitRoundoff = 5.9604644775390625e-8;  // 2^-24
#endif
// Directed slack for the bounds' own arithmetic (a few roundings each).
scalar round_up(scalar v) { return v * (scalar(1) + scalar(8) * kUnitRoundoff); }
scalar round_down(scalar v) { return v * (scalar(1) - scalar(8) * kUnitRoundoff); }

// The kernel's value for chunk row i and center c, ||c||^2 - 2 <x, c>, bit for bit as the register tiles compute
// it: one FMA per feature in feature order (the tiles' zero padding adds exact zeros), then the norm.
// The centers come from the drift buffer's transposed copy.
scalar center_value(uint i, uint c) {
  precise scalar acc = scalar(0);
  for (uint j = 0; j < D; ++j) acc = fma(X[(i - p.x_row0) * D + j], drift[kDriftCenters + j * K + c], acc);
  precise scalar value = cnorm[c] - scalar(2) * acc;
  return value;
}

scalar row_sq_norm(uint i) {
  scalar xx = scalar(0);
  for (uint j = 0; j < D; ++j) xx = fma(X[(i - p.x_row0) * D + j], X[(i - p.x_row0) * D + j], xx);
  return xx;
}

// S: bounds the kernel's rounding of two values (the label's and another's) and of ||x||^2, so that
// u^2 + S < l^2 makes the label's value strictly the smallest. 8 (D + 4) u (R + ||x||)^2 is at least twice that.
scalar rounding_slack(scalar xx) {
  const scalar r = drift[2u * K] + round_up(sqrt(xx));
  return scalar(8u * (D + 4u)) * kUnitRoundoff * r * r;
}
bool label_certain(scalar u, scalar l, scalar slack) { return round_up(u * u + slack) < round_down(l * l); }
// Bounds on distances from the kernel's value v and the computed ||x||^2: ||x - c||^2 is within S of v + ||x||^2.
scalar upper_from(scalar v, scalar xx, scalar slack) { return round_up(sqrt(max(v + xx + scalar(2) * slack, scalar(0)))); }
scalar lower_from(scalar v, scalar xx, scalar slack) { return round_down(sqrt(max(v + xx - scalar(2) * slack, scalar(0)))); }


// totals[e] += v as two 32-bit atomics: the low word's carry, read from its old value, goes to the high word, so
// every total is exact once all adds are done (only the host reads them, after the step).
void total_add(uint e, int64_t v) {
  const uint64_t bits = uint64_t(v);
  const uint low = uint(bits & 0xFFFFFFFFul), high = uint(bits >> 32);
  const uint old = atomicAdd(totals[2u * e], low);
  atomicAdd(totals[2u * e + 1u], high + (old + low < old ? 1u : 0u));
}

// Chunk row i's terms leave cluster a's sums and join cluster b's.
void move_terms(uint i, uint a, uint b) {
  const scalar value_scale = exact_scale(p.value_exponent), weight_scale = exact_scale(p.weight_exponent);
  const scalar wi = W[i - p.x_row0];
  for (uint f = 0; f < D; ++f) {
    precise scalar term = X[(i - p.x_row0) * D + f] * wi;
    const int64_t v = fixed_point(term, value_scale);
    total_add(a * DW + f, -v);
    total_add(b * DW + f, v);
  }
  const int64_t v = fixed_point(wi, weight_scale);
  total_add(a * DW + D, -v);
  total_add(b * DW + D, v);
}

void load_centers(uint cs, uint fs) {
  barrier();
  for (uint e = gl_LocalInvocationID.x; e < KS * DS4 * 4; e += THREADS) {
    const uint c = cs * KS + e / (DS4 * 4), f = e % (DS4 * 4), j = fs * DS + f;
    Cs[e / 4][e % 4] = (c < K && f < DS && j < D) ? C[c * D + j] : scalar(0);
  }
  for (uint e = gl_LocalInvocationID.x; e < KS; e += THREADS) {
    const uint c = cs * KS + e;
    Cn[e] = c < K ? cnorm[c] : scalar_inf();  // padding centers never win
  }
  barrier();
}

void acc_add(uint region, uint index, int64_t v) {
  if (ACC_SHARED != 0) Acc[index] += v;
  else partials[region + index] += v;
}

// A workgroup barrier that also orders the partial sums when they live in global memory (a cluster's sums move
// between threads from one round to the next).
void acc_barrier() {
  if (ACC_SHARED == 0) memoryBarrierBuffer();
  barrier();
}

// Registers hold the thread's samples (rows[]) for the register tiles.
void load_rows() {
  if (NDS == 1)
    for (uint s = 0; s < SPT; ++s) {
      const uint i = rows[s];
      for (uint f = 0; f < DS; ++f) xr[s * DS + f] = (i < p.rows && f < D) ? X[(i - p.x_row0) * D + f] : scalar(0);
    }
}

// A thread's share of one step's feature tiles (center tile step / NDS, feature tile step % NDS), fetched from
// global memory into registers while the last step's tiles are still being read from shared memory.
const uint SPLIT_C_PER_THREAD = (KS * DS + THREADS - 1u) / THREADS;  // and DS of the sample tile (TILE = THREADS)
scalar split_px[DS];
scalar split_pc[SPLIT_C_PER_THREAD];

void split_fetch(uint step) {
  const uint t = gl_LocalInvocationID.x, cs = step / NDS, fs = step % NDS;
  for (uint m = 0; m < DS; ++m) {
    const uint e = t + m * THREADS, q = e / DS, f = e % DS, j = fs * DS + f, i = split_rows[q];
    split_px[m] = (i < p.rows && j < D) ? X[(i - p.x_row0) * D + j] : scalar(0);
  }
  for (uint m = 0; m < SPLIT_C_PER_THREAD; ++m) {
    const uint e = t + m * THREADS, c = e / DS, f = e % DS, j = fs * DS + f, center = cs * KS + c;
    split_pc[m] = (e < KS * DS && center < K && j < D) ? C[center * D + j] : scalar(0);
  }
}

void split_store() {
  const uint t = gl_LocalInvocationID.x;
  for (uint m = 0; m < DS; ++m) {
    const uint e = t + m * THREADS, q = e / DS, f = e % DS;
    split_x[f * SPLIT_X_ROW + q / 4][q % 4] = split_px[m];
  }
  for (uint m = 0; m < SPLIT_C_PER_THREAD; ++m) {
    const uint e = t + m * THREADS, c = e / DS, f = e % DS;
    if (e < KS * DS) split_c[f * SPLIT_C_ROW + c / 4][c % 4] = split_pc[m];
  }
}

// The search of one sample tile where the rows span several feature tiles (SPLIT): threads split the tile as a
// matrix product does, thread (sg, cg) holding the values of RS samples x KT centers of each center tile in
// registers while the feature tiles of both pass through shared memory. Every value is still one FMA chain in
// feature order, then the norm, bit for bit as the other path forms it; each thread keeps the best (lowest index
// among equal values) and second-best values of its centers in index order, and the owner of each sample merges the
// CG threads' results by (value, index), which is the lowest index among equal values over all centers, as a walk in
// index order finds it.
void split_search(inout scalar best, inout scalar second, inout uint best_c) {
  const uint t = gl_LocalInvocationID.x, cg = t % CG, sg = t / CG;
  split_rows[t] = rows[0];
  scalar sbest[RS], ssecond[RS];
  uint sindex[RS];
  for (uint r = 0; r < RS; ++r) {
    sbest[r] = scalar_inf();
    ssecond[r] = scalar_inf();
    sindex[r] = 0u;
  }
  precise scalar acc[RS * KT];
  const uint steps = NKS * NDS;
  barrier();  // split_rows written
  split_fetch(0u);
  for (uint step = 0; step < steps; ++step) {
    const uint cs = step / NDS, fs = step % NDS;
    if (fs == 0u)
      for (uint e = 0; e < RS * KT; ++e) acc[e] = scalar(0);
    split_store();
    barrier();
    if (step + 1u < steps) split_fetch(step + 1u);
    for (uint f = 0; f < DS; ++f) {
      scalar4 xv[RS / 4], cv[(KT + 3) / 4];  // KT is a multiple of 4 here, but not in every specialisation
      for (uint h = 0; h < RS / 4; ++h) xv[h] = split_x[f * SPLIT_X_ROW + h * SG + sg];
      for (uint h = 0; h < KT / 4; ++h) cv[h] = split_c[f * SPLIT_C_ROW + h * CG + cg];
      for (uint r = 0; r < RS; ++r)
        for (uint kk = 0; kk < KT; ++kk) acc[r * KT + kk] = fma(xv[r / 4][r % 4], cv[kk / 4][kk % 4], acc[r * KT + kk]);
    }
    barrier();  // the tiles' reads are done before the next step stores
    if (fs + 1u < NDS) continue;
    // Thread (sg, cg)'s centers in index order: positions cg * 4 + h * 4 CG + q of the tile, h = kk / 4, q = kk % 4.
    for (uint kk = 0; kk < KT; ++kk) {
      const uint c = cs * KS + (kk / 4u) * 4u * CG + cg * 4u + kk % 4u;
      const scalar cn = c < K ? cnorm[c] : scalar_inf();  // padding centers never win
      for (uint r = 0; r < RS; ++r) {
        precise scalar dist = cn - scalar(2) * acc[r * KT + kk];
        ssecond[r] = min(ssecond[r], max(sbest[r], dist));
        if (dist < sbest[r]) {
          sbest[r] = dist;
          sindex[r] = c;
        }
      }
    }
  }
  // Sample position h * 4 SG + sg * 4 + q holds r = 4 h + q.
  for (uint r = 0; r < RS; ++r) {
    const uint q = (r / 4u) * 4u * SG + sg * 4u + r % 4u;
    split_best[q * CG + cg] = sbest[r];
    split_second[q * CG + cg] = ssecond[r];
    split_index[q * CG + cg] = sindex[r];
  }
  barrier();
  // Merged in (value, index) order; the second-best of two (best, second) pairs is min(max(best's), seconds).
  for (uint g = 0; g < CG; ++g) {
    const scalar v = split_best[t * CG + g];
    const uint c = split_index[t * CG + g];
    second = min(second, min(max(best, v), split_second[t * CG + g]));
    if (v < best || (v == best && c < best_c)) {
      best = v;
      best_c = c;
    }
  }
  barrier();  // the merge's reads are done before the next tile writes split_rows and the arrays
}

// kStageCheck: one thread per sample. Bounds that settle the label are moved on and kept; the others' samples are
// listed for kStageSearch (the list's order varies, each sample's result does not). kBoundsSet lists every sample
// without reading its label or bounds, which hold nothing yet.
// Appends the gathered rows to the list once more than `keep` are waiting (uniform in the workgroup).
void append_gathered(uint keep) {
  const uint t = gl_LocalInvocationID.x;
  barrier();
  const uint count = gathered_count;
  // Every invocation reads the count before any adds to it again: a subgroup that returned here would go on to the
  // next round's atomicAdd while a slower one had yet to read, which then saw another count and went into the
  // branch below alone (its barriers met by the others' next ones: rows lost from the list or listed twice).
  barrier();
  if (count <= keep) return;
  if (t == 0u) {
    appended_at = 1u + atomicAdd(listed[0], count);
    atomicAdd(status[kStatusSearched], count);
  }
  barrier();
  for (uint e = t; e < count; e += THREADS) listed[appended_at + e] = gathered[e];
  barrier();
  if (t == 0u) gathered_count = 0u;
  barrier();
}

void check_bounds(uint g) {
  const uint t = gl_LocalInvocationID.x;
  if (t == 0u) gathered_count = 0u;
  uint round = 0u;
  for (uint i0 = g * THREADS; i0 < p.rows; i0 += p.groups * THREADS) {  // uniform in the workgroup
    if (round++ % APPEND_EVERY == 0u) append_gathered(APPEND_EVERY * THREADS);  // room for the next rounds
    const uint i = i0 + t;
    bool certain = i >= p.rows;
    if (!certain && p.bounds_mode == kBoundsUse) {
      const uint a = labels[i];
      const scalar4 b = bounds[i];
      const scalar slack = rounding_slack(b.z);
      scalar upper = round_up(b.x + drift[a]);
      const scalar lower = max(round_down(b.y - drift[K + a]), scalar(0));
      certain = label_certain(upper, lower, slack);
      if (!certain) {
        upper = upper_from(center_value(i, a), b.z, slack);
        certain = label_certain(upper, lower, slack);
      }
      if (certain) bounds[i] = scalar4(upper, lower, b.z, scalar(0));
    }
    const uvec4 ballot = subgroupBallot(!certain);
    const uint count = subgroupBallotBitCount(ballot);
    uint first = 0u;
    if (count != 0u && subgroupElect()) first = atomicAdd(gathered_count, count);
    const uint start = subgroupBroadcastFirst(first);  // in uniform control flow: the elected lane's value
    if (!certain) gathered[start + subgroupBallotExclusiveBitCount(ballot)] = i;
  }
  append_gathered(0u);
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint g = p.group_base + linear_group_id();
  const uint region = (p.partial_base + g) * (K * DW);
  const bool resident = SPLIT == 0u && NKS == 1 && NDS == 1;
  if (STAGE == kStageCheck) {
    check_bounds(g);
    return;
  }
  const bool sums_only = STAGE == kStageSums;
  if (sums_only && p.bounds_mode == kBoundsUse && dirty[g] == 0u) return;  // uniform in the workgroup
  const bool update = p.update != 0 && STAGE != kStageSearch;
  const scalar value_scale = exact_scale(p.value_exponent), weight_scale = exact_scale(p.weight_exponent);

  // Zeroed here, summed by the cluster's owner or the thread of a (cluster, feature) pair, written out at the end.
  // A step streamed in slices of tiles (p.tile_begin > 0) goes on from the sums its earlier slices wrote: each
  // workgroup adds its tiles in the same order as in one dispatch, so the sums are the same bit for bit.
  if (update)
    for (uint c = t; c < K; c += THREADS)
      for (uint f = 0; f < DW; ++f) {
        if (p.tile_begin == 0) {
          if (ACC_SHARED != 0) Acc[c * DW + f] = 0l;
          else partials[region + c * DW + f] = 0l;
        } else if (ACC_SHARED != 0) {
          Acc[c * DW + f] = partials[region + c * DW + f];
        }
      }
  if (t == 0) group_changed = 0u;
  bool any_changed = false;  // this thread's labels, over all its tiles: one shared atomic per thread per dispatch

  // This group's tiles g, g + groups, ... within [tile_begin, tile_end): the slice of the chunk bound as X and W,
  // whose first row is x_row0 (the whole chunk unless the step is streamed). In kStageSearch, tiles of the list.
  const bool search = STAGE == kStageSearch;
  const uint listed_rows = search ? listed[0] : 0u;
  const uint tile_end = search ? (listed_rows + TILE - 1u) / TILE : p.tile_end;
  const uint first_tile = search || p.tile_begin <= g ? g : g + (p.tile_begin - g + p.groups - 1u) / p.groups * p.groups;
  if (search && first_tile >= tile_end) return;  // nothing listed for this group (uniform)
  if (resident && !sums_only) load_centers(0, 0);
  for (uint tile = first_tile; tile < tile_end; tile += p.groups) {
    const uint base = tile * TILE;
    scalar best[SPT], second[SPT];
    uint best_c[SPT];
    for (uint s = 0; s < SPT; ++s) {
      best[s] = scalar_inf();
      second[s] = scalar_inf();
      best_c[s] = 0u;
      const uint e = base + s * THREADS + t;
      if (search) rows[s] = e < listed_rows ? listed[1u + e] : ~0u;
      else rows[s] = e;
    }

    if (sums_only) {
      for (uint s = 0; s < SPT; ++s)
        if (rows[s] < p.rows) best_c[s] = labels[rows[s]];
    } else {
      if (SPLIT != 0u) {
        split_search(best[0], second[0], best_c[0]);
      } else {
      load_rows();
    for (uint cs = 0; cs < NKS; ++cs) {
      for (uint kt = 0; kt < KT_PER_KS; ++kt) {
        precise scalar acc[SPT * KT];
        for (uint e = 0; e < SPT * KT; ++e) acc[e] = scalar(0);
        for (uint fs = 0; fs < NDS; ++fs) {
          if (NDS > 1)
            for (uint s = 0; s < SPT; ++s) {
              const uint i = rows[s];
              for (uint f = 0; f < DS; ++f) {
                const uint j = fs * DS + f;
                xr[s * DS + f] = (i < p.rows && j < D) ? X[(i - p.x_row0) * D + j] : scalar(0);
              }
            }
          for (uint kk = 0; kk < KT; ++kk) {
            const uint c = cs * KS + kt * KT + kk;
            for (uint f4 = 0; f4 < DS4; ++f4) {
              // Resident centers come from shared memory; otherwise the same value for every thread straight
              // from global memory (cached), which needs no barriers inside these loops.
              scalar4 cv;
              if (resident) {
                cv = Cs[(kt * KT + kk) * DS4 + f4];
              } else {
                for (uint q = 0; q < 4; ++q) {
                  const uint f = f4 * 4 + q, j = fs * DS + f;
                  cv[q] = (c < K && f < DS && j < D) ? C[c * D + j] : scalar(0);
                }
              }
              for (uint q = 0; q < 4; ++q) {
                const uint f = f4 * 4 + q;
                if (f < DS)
                  for (uint s = 0; s < SPT; ++s) acc[s * KT + kk] = fma(xr[s * DS + f], cv[q], acc[s * KT + kk]);
              }
            }
          }
        }
        for (uint kk = 0; kk < KT; ++kk) {
          const uint c = cs * KS + kt * KT + kk;
          const scalar cn = resident ? Cn[kt * KT + kk] : (c < K ? cnorm[c] : scalar_inf());
          for (uint s = 0; s < SPT; ++s) {
            precise scalar dist = cn - scalar(2) * acc[s * KT + kk];
            if (STAGE == kStageSearch) second[s] = min(second[s], max(best[s], dist));
            if (dist < best[s]) {
              best[s] = dist;
              best_c[s] = c;
            }
          }
        }
      }
    }
      }
      for (uint s = 0; s < SPT; ++s) {
        const uint i = rows[s];
        if (i >= p.rows) continue;
        if (labels[i] != best_c[s]) {
          any_changed = true;
          if (STAGE == kStageSearch && p.move_totals != 0u && labels[i] < K) move_terms(i, labels[i], best_c[s]);
          labels[i] = best_c[s];
          if (STAGE == kStageSearch) dirty[(i / TILE) % p.groups] = 1u;
        }
      }
      if (STAGE == kStageSearch)
        for (uint s = 0; s < SPT; ++s) {
          const uint i = rows[s];
          if (i >= p.rows) continue;
          const scalar xx = p.bounds_mode == kBoundsSet ? row_sq_norm(i) : bounds[i].z;
          const scalar slack = rounding_slack(xx);
          bounds[i] = scalar4(upper_from(best[s], xx, slack), lower_from(second[s], xx, slack), xx, scalar(0));
        }
    }

    if (update)
      for (uint b = 0; b < SPT / ROUNDS; ++b) {
        // Batch b: rounds b * ROUNDS ... of this tile, positions q = (round - b * ROUNDS) * THREADS + t.
        acc_barrier();  // the last batch's walks are done (their sums, lists and counts)
        for (uint e = t; e < K * BW; e += THREADS) masks[e] = 0u;
        if (t == 0) {
          present_count = 0u;
          batch_members = 0u;
          batch_crowded = 0u;
        }
        barrier();
        for (uint rl = 0; rl < ROUNDS; ++rl) {
          const uint r = b * ROUNDS + rl, q = rl * THREADS + t;
          if (base + r * THREADS + t < p.rows) atomicOr(masks[best_c[r] * BW + (q >> 5)], 1u << (q & 31u));
        }
        const uint first = base + b * BATCH - p.x_row0;  // X and W row of the batch's position 0
        barrier();
        bool by_owner = OWNERS != 0u;
        if (by_owner) {
          for (uint c = t; c < K; c += THREADS) {
            if (cluster_members(c) > CROWDED) atomicOr(batch_crowded, 1u);
          }
          barrier();
          by_owner = batch_crowded == 0u;  // uniform
        }
        if (by_owner) {
          // The thread owning cluster c walks its bits in index order.
          for (uint c = t; c < K; c += THREADS)
            for (uint w = 0; w < BW; ++w) {
              uint m = masks[c * BW + w];
              while (m != 0u) {
                const uint i = first + w * 32u + uint(findLSB(m));
                m &= m - 1u;
                const scalar wi = W[i];
                for (uint f = 0; f < D; ++f) {
                  precise scalar term = X[i * D + f] * wi;
                  acc_add(region, c * DW + f, fixed_point(term, value_scale));
                }
                acc_add(region, c * DW + D, fixed_point(wi, weight_scale));
              }
            }
          continue;
        }
        // Otherwise the batch's positions are sorted by cluster: each cluster with members claims a range (the
        // ranges' order varies; each cluster's members within its range do not), and each sample's place in it is
        // the number of its cluster's members before it.
        for (uint c = t; c < K; c += THREADS) {
          const uint members = cluster_members(c);
          if (members != 0u) {
            cluster_range[c] = atomicAdd(batch_members, members) | members << 16u;
            present[atomicAdd(present_count, 1u)] = c;
          }
        }
        barrier();
        for (uint rl = 0; rl < ROUNDS; ++rl) {
          const uint r = b * ROUNDS + rl, q = rl * THREADS + t;
          if (base + r * THREADS + t >= p.rows) continue;
          const uint c = best_c[r], word = q >> 5;
          uint rank = uint(bitCount(masks[c * BW + word] & ((1u << (q & 31u)) - 1u)));
          for (uint w = 0; w < word; ++w) rank += uint(bitCount(masks[c * BW + w]));
          sorted_positions[(cluster_range[c] & 0xFFFFu) + rank] = q;
        }
        barrier();
        // One thread per (cluster, feature) pair adds the cluster's members in index order, so that one large
        // cluster spreads over the workgroup; lanes taking one cluster's consecutive features read one sample row
        // together. The running sum stays in a register.
        for (uint e = t; e < present_count * DW; e += THREADS) {
          const uint c = present[e / DW], f = e % DW, index = c * DW + f, range = cluster_range[c];
          const uint begin = range & 0xFFFFu, end = begin + (range >> 16u);
          int64_t sum = ACC_SHARED != 0 ? Acc[index] : partials[region + index];
          const scalar scale = f < D ? value_scale : weight_scale;
          for (uint m = begin; m < end; ++m) {
            const uint i = first + sorted_positions[m];
            precise scalar term = f < D ? X[i * D + f] * W[i] : W[i];
            sum += fixed_point(term, scale);
          }
          if (ACC_SHARED != 0) Acc[index] = sum;
          else partials[region + index] = sum;
        }
      }
  }

  barrier();  // the last round's sums; group_changed's zeroing
  if (update && ACC_SHARED != 0)
    for (uint c = t; c < K; c += THREADS)
      for (uint f = 0; f < DW; ++f) partials[region + c * DW + f] = Acc[c * DW + f];
  if (sums_only && t == 0) dirty[g] = 0u;
  if (any_changed) atomicOr(group_changed, 1u);
  barrier();
  if (t == 0 && group_changed != 0u) atomicOr(status[0], kStatusLabelChanged);
  if (LOOP_GUARD != 0u && loop_limit_reached(p.rows)) atomicOr(status[0], kStatusLoopLimit);
}
