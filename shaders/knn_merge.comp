#version 450
#extension GL_GOOGLE_include_directive : require
// Merges the per-split k-NN heaps of knn_select in place, G at a time: thread (query q, group g) inserts the pairs
// of the heaps of splits t + j * stride (j = 1 .. G-1, t = g * G * stride) into the heap of split t, rejecting
// most of them with one compare against the root. Passes with stride 1, G, G^2, ... leave every query's k best
// of all splits in the heap of split 0. Same (value, index) order as knn_select.
#include "common.glsl"
#include "knn_merge.h"

layout(constant_id = kSpecThreads) const uint THREADS = 64;
layout(local_size_x_id = kSpecThreads) in;

layout(std430, binding = kBindingValues) buffer ValBuf { scalar hv[]; };
layout(std430, binding = kBindingIndices) buffer IdxBuf { uint hi[]; };

bool before(scalar a, uint ia, scalar b, uint ib) { return a < b || (a == b && ia < ib); }

void main() {
  const uint q = gl_WorkGroupID.x * THREADS + gl_LocalInvocationID.x;
  const uint t = gl_WorkGroupID.y * p.group * p.stride;
  if (q >= p.m || t >= p.splits) return;
  const uint h = (t * p.m + q) * p.k;
  scalar tv = hv[h];
  uint ti = hi[h];
  for (uint j = 1; j < p.group; ++j) {
    const uint src = t + j * p.stride;
    if (src >= p.splits) break;
    const uint o = (src * p.m + q) * p.k;
    for (uint c = 0; c < p.k; ++c) {
      const scalar v = hv[o + c];
      const uint vi = hi[o + c];
      if (!before(v, vi, tv, ti)) continue;
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
      tv = hv[h];
      ti = hi[h];
    }
  }
}
