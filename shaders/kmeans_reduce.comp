#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
// sums[e] = sum over q of partials[q * elements + e], exact (the k-means sums' int64 fixed point): a workgroup takes 32
// consecutive elements; its LANES rows of threads each sum a fixed stride of q, then combine in lane order.
#include "common.glsl"
#include "kmeans_reduce.h"

layout(constant_id = kSpecLanes) const uint LANES = 8;
layout(local_size_x = kElementsPerGroup, local_size_y_id = kSpecLanes) in;

layout(std430, binding = kBindingPartials) readonly buffer PartialBuf { int64_t partials[]; };
layout(std430, binding = kBindingSums) writeonly buffer SumBuf { int64_t sums[]; };

shared int64_t lane_sums[LANES * 32];

void main() {
  const uint x = gl_LocalInvocationID.x, y = gl_LocalInvocationID.y;
  const uint e = linear_group_id() * 32u + x;
  int64_t s = 0l;
  if (e < p.elements)
    for (uint q = y; q < p.parts; q += LANES) s += partials[q * p.elements + e];
  lane_sums[y * 32u + x] = s;
  barrier();
  if (y == 0u && e < p.elements) {
    int64_t total = lane_sums[x];
    for (uint l = 1; l < LANES; ++l) total += lane_sums[l * 32u + x];
    sums[e] = total;
  }
}
