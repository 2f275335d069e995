#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
// Per-workgroup partial inertia sum_i w_i ||x_i - c_{l_i}||^2, from differences (exact 0 when x == c), each term in
// the fit's fixed point (exact_sum.glsl): the host adds the groups' integers, the same for any cut of the rows.
// As kModeDistances, the distance of every row to every center (KMeans.transform), from differences too.
#include "common.glsl"
#include "exact_sum.glsl"
#include "kmeans_inertia.h"

layout(constant_id = kSpecThreads) const uint THREADS = 128;  // a power of two
layout(constant_id = kSpecFeatures) const uint D = 2;
layout(constant_id = kSpecMode) const uint MODE = kModeInertia;
layout(local_size_x_id = kSpecThreads) in;

layout(std430, binding = kBindingX) readonly buffer XBuf { scalar X[]; };
layout(std430, binding = kBindingWeights) readonly buffer WBuf { scalar W[]; };
layout(std430, binding = kBindingLabels) readonly buffer LabelBuf { uint labels[]; };
layout(std430, binding = kBindingCenters) readonly buffer CBuf { scalar C[]; };
layout(std430, binding = kBindingDistances) writeonly buffer OutBuf { scalar distances[]; };
layout(std430, binding = kBindingPartials) writeonly buffer PartialBuf { int64_t partial[]; };

shared int64_t red[THREADS];

void main() {
  const uint t = gl_LocalInvocationID.x, g = linear_group_id();
  if (MODE == kModeDistances) {
    const uint pairs = p.rows * p.centers;
    for (uint q = g * THREADS + t; q < pairs; q += p.groups * THREADS) {
      const uint i = q / p.centers, j = q - i * p.centers;
      scalar d2 = scalar(0);
      for (uint f = 0; f < D; ++f) {
        const scalar diff = X[i * D + f] - C[j * D + f];
        d2 += diff * diff;
      }
      distances[p.partial_base + q] = sqrt(d2);
    }
    return;
  }
  const scalar scale = exact_scale(p.exponent);
  int64_t s = 0l;
  for (uint i = g * THREADS + t; i < p.rows; i += p.groups * THREADS) {
    const uint c = labels[i];
    // As the host's sq_dist: each difference squared and added, rounded in T (no fused multiply-add).
    precise scalar d2 = scalar(0);
    for (uint f = 0; f < D; ++f) {
      precise scalar diff = X[i * D + f] - C[c * D + f];
      precise scalar sq = diff * diff;
      d2 += sq;
    }
    precise scalar term = d2 * W[i];
    s += fixed_point(term, scale);
  }
  red[t] = s;
  for (uint half_ = THREADS / 2; half_ > 0; half_ /= 2) {
    barrier();
    if (t < half_) red[t] += red[t + half_];
  }
  if (t == 0) partial[p.partial_base + g] = red[0];
}
