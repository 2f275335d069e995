#version 450
#extension GL_GOOGLE_include_directive : require
// DBSCAN's connected components of core samples, three modes of one kernel over the neighbourhood graph held as
// pieces of compressed rows (offsets local to the piece, so a row may span pieces):
//
// HOOK, one invocation per edge (i, j) of two distinct core samples: with li = label[i], lj = label[j] unequal, the
// end holding the larger one and the sample that larger label names both take the smaller (atomicMin). Labels only
// fall and always name a core sample of the same component no larger than the sample itself.
// JUMP, one invocation per core sample: its label becomes the label its label's chain ends at (at most kJumpSteps
// steps), which shortens the chains HOOK builds.
// The host repeats HOOK and JUMP until a round changes nothing: then both ends of every edge carry one label whose
// own label is itself, so each component carries one label, and the smallest core index of the component (whose
// label can fall no lower) is it. Every order of the atomics reaches that one result.
// BORDER, one invocation per edge (i, j) from a core sample to a non-core one, after that: j keeps the smallest
// label of the cores whose neighbourhood holds it, flagged kNotCore so it never reads as core.
//
// Each invocation finds its edge's row by a binary search in the piece's offsets; every loop is bounded (32 steps),
// far within llvmpipe's loop limit. An edge flagged kSkippedEdge is no edge (the radius FILL's uncertain pairs,
// whose rows the host resolves and hands over as a piece of their own).
//
// PERMUTED: samples sit at positions of a sorted order while labels name original indices (the smallest original
// index of a component is scikit-learn's cluster order): a label is read at position[label]. The same algorithm on
// relabelled vertices, so the same argument holds.
#include "common.glsl"
#include "dbscan.h"

layout(constant_id = kSpecThreads) const uint THREADS = 256;
layout(constant_id = kSpecMode) const uint MODE = kModeHook;
layout(constant_id = kSpecPermuted) const uint PERMUTED = 0;
layout(local_size_x_id = kSpecThreads) in;

layout(std430, binding = kBindingLabels) coherent buffer LabelBuf { uint label[]; };
layout(std430, binding = kBindingOffsets) readonly buffer OffsetBuf { uint offsets[]; };
layout(std430, binding = kBindingIndices) readonly buffer IndexBuf { uint indices[]; };
layout(std430, binding = kBindingChanged) coherent buffer ChangedBuf { uint changed[]; };
layout(std430, binding = kBindingPosition) readonly buffer PositionBuf { uint position[]; };

// Where the sample a label names sits.
uint at(uint l) { return PERMUTED != 0u ? position[l] : l; }

shared uint group_changed;

/// The piece-local row holding edge e: the last r with offsets[r] <= e (rows may be empty).
uint row_of(uint e) {
  uint lo = 0u, hi = p.rows;  // offsets[lo] <= e < offsets[hi]
  while (hi - lo > 1u) {
    const uint mid = (lo + hi) >> 1;
    if (offsets[mid] <= e) lo = mid;
    else hi = mid;
  }
  return lo;
}

void main() {
  if (gl_LocalInvocationID.x == 0u) group_changed = 0u;
  barrier();
  const uint id = linear_group_id() * THREADS + gl_LocalInvocationID.x;
  bool moved = false;
  if (MODE == kModeJump) {
    if (id < p.n) {
      const uint start = label[id];
      if (start < kNotCore) {
        uint l = start;
        for (uint s = 0u; s < kJumpSteps; ++s) {
          const uint next = label[at(l)];
          if (next == l) break;
          l = next;
        }
        if (l < start) {
          atomicMin(label[id], l);
          moved = true;
        }
      }
    }
  } else if (id < p.edges) {
    const uint i = p.row0 + row_of(id);
    const uint j = indices[id];
    const uint li = label[i];
    if (i != j && (j & kSkippedEdge) == 0u && li < kNotCore) {
      const uint lj = label[j];
      if (MODE == kModeHook) {
        if (lj < kNotCore && li != lj) {
          const uint lo = min(li, lj), hi = max(li, lj);
          const uint end = li > lj ? i : j;
          moved = atomicMin(label[end], lo) > lo;
          moved = atomicMin(label[at(hi)], lo) > lo || moved;
        }
      } else if (lj >= kNotCore) {
        atomicMin(label[j], kNotCore | li);
      }
    }
  }
  if (moved) atomicOr(group_changed, 1u);
  barrier();
  if (gl_LocalInvocationID.x == 0u && group_changed != 0u) changed[0] = 1u;
}
