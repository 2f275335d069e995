#version 450
#extension GL_GOOGLE_include_directive : require
// D[i, j] = max(|x_i|^2 + |y_j|^2 - 2 <x_i, y_j>, 0) for a block of X rows and a block of Y rows.
// Register-blocked tiles: a workgroup of WX x WY threads owns a (WY*TM) x (WX*TN) block of D; the features
// stream through shared memory BK at a time. Thread (tx, ty) owns rows ty + i*WY and columns tx + j*WX, so
// shared-memory reads are broadcast or consecutive and the stores to D are coalesced.
#include "common.glsl"

layout(constant_id = 0) const uint WX = 16;
layout(constant_id = 1) const uint WY = 16;
layout(constant_id = 2) const uint TM = 8;
layout(constant_id = 3) const uint TN = 8;
layout(constant_id = 4) const uint BK = 16;
layout(local_size_x_id = 0, local_size_y_id = 1) in;

const uint BM = WY * TM;
const uint BN = WX * TN;
const uint NT = WX * WY;

layout(std430, binding = 0) readonly buffer XBuf { scalar X[]; };
layout(std430, binding = 1) readonly buffer YBuf { scalar Y[]; };
layout(std430, binding = 2) readonly buffer XNormBuf { scalar xn[]; };
layout(std430, binding = 3) readonly buffer YNormBuf { scalar yn[]; };
layout(std430, binding = 4) writeonly buffer DBuf { scalar D[]; };
layout(push_constant) uniform Push { uint n; uint m; uint d; uint ldd; } p;

// One padding element per k-row keeps the transposing tile stores free of bank conflicts.
shared scalar As[BK * (BM + 1)];
shared scalar Bs[BK * (BN + 1)];

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint tid = ty * WX + tx;
  const uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;

  scalar acc[TM * TN];
  for (uint e = 0; e < TM * TN; ++e) acc[e] = scalar(0);

  for (uint k0 = 0; k0 < p.d; k0 += BK) {
    for (uint e = tid; e < BM * BK; e += NT) {
      const uint r = e / BK, kk = e % BK, gr = row0 + r, gk = k0 + kk;
      As[kk * (BM + 1) + r] = (gr < p.n && gk < p.d) ? X[gr * p.d + gk] : scalar(0);
    }
    for (uint e = tid; e < BN * BK; e += NT) {
      const uint c = e / BK, kk = e % BK, gc = col0 + c, gk = k0 + kk;
      Bs[kk * (BN + 1) + c] = (gc < p.m && gk < p.d) ? Y[gc * p.d + gk] : scalar(0);
    }
    barrier();
    for (uint kk = 0; kk < BK; ++kk) {
      scalar a[TM], b[TN];
      for (uint i = 0; i < TM; ++i) a[i] = As[kk * (BM + 1) + i * WY + ty];
      for (uint j = 0; j < TN; ++j) b[j] = Bs[kk * (BN + 1) + j * WX + tx];
      for (uint i = 0; i < TM; ++i)
        for (uint j = 0; j < TN; ++j) acc[i * TN + j] = fma(a[i], b[j], acc[i * TN + j]);
    }
    barrier();
  }

  for (uint i = 0; i < TM; ++i) {
    const uint r = row0 + i * WY + ty;
    if (r >= p.n) continue;
    for (uint j = 0; j < TN; ++j) {
      const uint c = col0 + j * WX + tx;
      if (c < p.m) D[r * p.ldd + c] = max(xn[r] + yn[c] - scalar(2) * acc[i * TN + j], scalar(0));
    }
  }
}
