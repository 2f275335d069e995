#version 450
#extension GL_GOOGLE_include_directive : require
// norms[i] = sum_j x[i, j]^2 for a row-major block of rows.
#include "common.glsl"

layout(constant_id = 0) const uint THREADS = 128;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer XBuf { scalar x[]; };
layout(std430, binding = 1) writeonly buffer NormBuf { scalar norms[]; };
layout(push_constant) uniform Push { uint rows; uint cols; } p;

void main() {
  const uint row = linear_group_id() * THREADS + gl_LocalInvocationID.x;
  if (row >= p.rows) return;
  const uint base = row * p.cols;
  scalar s = scalar(0);
  for (uint j = 0; j < p.cols; ++j) s += x[base + j] * x[base + j];
  norms[row] = s;
}
