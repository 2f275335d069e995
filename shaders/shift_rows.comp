#version 450
#extension GL_GOOGLE_include_directive : require
// x[i, j] -= shift[j], in place, for a row-major block of rows: k-means' centring (X - mean) done where the rows
// already are. One correctly rounded subtraction per value, as the host's; the driver only sends data in which no
// value, shift or difference is subnormal (a device may flush those).
#include "common.glsl"
#include "shift_rows.h"

layout(constant_id = kSpecThreads) const uint THREADS = 256;
layout(local_size_x_id = kSpecThreads) in;

layout(std430, binding = kBindingRows) buffer XBuf { scalar x[]; };
layout(std430, binding = kBindingShift) readonly buffer ShiftBuf { scalar shift[]; };

void main() {
  const uint i = linear_group_id() * THREADS + gl_LocalInvocationID.x;
  if (i >= p.elements) return;
  precise const scalar v = x[i] - shift[i % p.cols];
  x[i] = v;
}
