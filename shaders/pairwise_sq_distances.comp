#version 450
#extension GL_GOOGLE_include_directive : require
// D[i, j] = max(|x_i|^2 + |y_j|^2 - 2 <x_i, y_j>, 0) for a block of X rows and a block of Y rows: one
// (WY*TM) x (WX*TN) block of D per workgroup from the register-blocked tile product (tile_product.glsl).
#include "common.glsl"
#include "pairwise_sq_distances.h"

layout(constant_id = kSpecWX) const uint WX = 16;
layout(constant_id = kSpecWY) const uint WY = 16;
layout(constant_id = kSpecTM) const uint TM = 8;
layout(constant_id = kSpecTN) const uint TN = 8;
layout(constant_id = kSpecBK) const uint BK = 16;
layout(local_size_x_id = kSpecWX, local_size_y_id = kSpecWY) in;

layout(std430, binding = kBindingX) readonly buffer XBuf { scalar X[]; };
layout(std430, binding = kBindingY) readonly buffer YBuf { scalar Y[]; };
layout(std430, binding = kBindingXNorms) readonly buffer XNormBuf { scalar xn[]; };
layout(std430, binding = kBindingYNorms) readonly buffer YNormBuf { scalar yn[]; };
layout(std430, binding = kBindingDistances) writeonly buffer DBuf { scalar D[]; };

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
