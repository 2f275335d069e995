#version 450
#extension GL_GOOGLE_include_directive : require
// D[i, j] = max(|x_i|^2 + |y_j|^2 - 2 <x_i, y_j>, 0) for a block of X rows and a block of Y rows: one
// (WY*TM) x (WX*TN) block of D per workgroup from the register-blocked tile product (tile_product.glsl).
#include "common.glsl"

layout(constant_id = 0) const uint WX = 16;
layout(constant_id = 1) const uint WY = 16;
layout(constant_id = 2) const uint TM = 8;
layout(constant_id = 3) const uint TN = 8;
layout(constant_id = 4) const uint BK = 16;
layout(local_size_x_id = 0, local_size_y_id = 1) in;

layout(std430, binding = 0) readonly buffer XBuf { scalar X[]; };
layout(std430, binding = 1) readonly buffer YBuf { scalar Y[]; };
layout(std430, binding = 2) readonly buffer XNormBuf { scalar xn[]; };
layout(std430, binding = 3) readonly buffer YNormBuf { scalar yn[]; };
layout(std430, binding = 4) writeonly buffer DBuf { scalar D[]; };
layout(push_constant) uniform Push { uint n; uint m; uint d; uint ldd; } p;

scalar combine(scalar acc, scalar a, scalar b) { return fma(a, b, acc); }
scalar load_a(uint row, uint f);
scalar load_b(uint row, uint f);
#include "tile_product.glsl"

scalar load_a(uint row, uint f) {
  const uint r = gl_WorkGroupID.y * BM + row;
  return (r < p.n && f < p.d) ? X[r * p.d + f] : scalar(0);
}
scalar load_b(uint row, uint f) {
  const uint c = gl_WorkGroupID.x * BN + row;
  return (c < p.m && f < p.d) ? Y[c * p.d + f] : scalar(0);
}

void main() {
  const uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  scalar acc[ACC];
  tile_product(acc, p.d, false);
  for (uint i = 0; i < TM; ++i) {
    const uint r = row0 + tile_row_a(i);
    if (r >= p.n) continue;
    for (uint j = 0; j < TN; ++j) {
      const uint c = col0 + tile_row_b(j);
      if (c < p.m) D[r * p.ldd + c] = max(xn[r] + yn[c] - scalar(2) * acc[i * TN + j], scalar(0));
    }
  }
}
