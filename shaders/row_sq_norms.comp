#version 450
#extension GL_GOOGLE_include_directive : require
// norms[i] = sum_j x[i, j]^2 for a row-major block of rows.
#include "common.glsl"
#include "row_sq_norms.h"

layout(constant_id = kSpecThreads) const uint THREADS = 128;
layout(local_size_x_id = kSpecThreads) in;

layout(std430, binding = kBindingRows) readonly buffer XBuf { scalar x[]; };
layout(std430, binding = kBindingNorms) writeonly buffer NormBuf { scalar norms[]; };

void main() {
  const uint row = linear_group_id() * THREADS + gl_LocalInvocationID.x;
  if (row >= p.rows) return;
  const uint base = row * p.cols;
  scalar s = scalar(0);
  for (uint j = 0; j < p.cols; ++j) s += x[base + j] * x[base + j];
  norms[row] = s;
}
