#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
// knn_select.comp's candidate lists (APPEND) for float32 squared euclidean distances, with the products on
// cooperative matrices (tensor cores): the same lists, found faster.
//
// Every row is scaled by a power of two (|x_i| * 2^s < 2^14) and rounded to float16; the subgroups multiply
// 16 x 16 x 16 float16 blocks with float32 sums, so a workgroup gets the 64 x 64 block of approximate scaled dot
// products of a tile. A pair is a candidate when its approximate value minus a rigorous bound on the error is at
// most its query's bound (knn_select.comp, "Bounds"); only then is its value formed exactly as knn_select.comp
// forms it (|q|^2 + |x|^2 - 2 <q, x>, the dot product one float32 FMA chain over the features in order) and the
// pair appended if that value is at most the bound. So the lists hold the pairs knn_select.comp's lists hold.
//
// The error bound, per pair, with n = |row|, u = 2^-10 (one float16 ulp: the conversion's rounding mode is not
// specified), a = u n + e (the norm of a row's rounding error; e = 2^-24 sqrt(d) 2^-s covers subnormals),
// P = n + a, c = d 2^-23 (float32 sums of d products, of any order and rounding): |<q, x> - approx| <= (1 + c)
// Pq Px - nq nx; the exact chain is within c nq nx / 2 of <q, x>; the two values' own roundings are within 2^-20
// (|q|^2 + |x|^2 + 2 nq nx). With 2 nq nx <= |q|^2 + |x|^2 and e n <= e^2 / (2u) + u n^2 / 2 this is at most
// K (|q|^2 + |x|^2) + T(q) + T(x), K = 3u + 3u^2 + 1.5 c (1 + u)^2 + 2^-19, T = (1 + u) e^2 / u + e^2 / 2, here with
// 12.5% on top. It splits into a term per query and one per database row, so the test per pair is one product
// and two additions: ((1 - K)|q|^2 - T(q) - bound) + ((1 - K)|x|^2 - T(x)) - 2 <q, x>~ <= 0.
//
// Grid: x = query tile (64 queries, resident in shared memory as float16, d <= 128), y = split (as knn_select).
// Workgroup: 4 subgroups of 32 invocations (the host pins 32), each a 32 x 32 quarter of the tile.
#include "common.glsl"

layout(local_size_x = 128) in;
layout(constant_id = 0) const uint VEC4 = 0;  // 1: d is a multiple of 4, rows are read as 4-vectors

const uint BM = 64, BN = 64, KC = 64, DMAX = 128, NT = 128;
// Shared rows of float16 pairs (uints), padded against bank conflicts (strides are multiples of 16 bytes).
const uint AS = (DMAX + 8) / 2, BS = (KC + 8) / 2, CS = BN + 4;
const float U = 1.0 / 1024.0;

layout(std430, binding = 0) readonly buffer QBuf { float Q[]; };
layout(std430, binding = 1) readonly buffer XBuf { float X[]; };
layout(std430, binding = 1) readonly buffer XBuf4 { vec4 X4[]; };
layout(std430, binding = 2) readonly buffer QNormBuf { float qn[]; };
layout(std430, binding = 3) readonly buffer XNormBuf { float xn[]; };
layout(std430, binding = 4) buffer ValBuf { float hv[]; };
layout(std430, binding = 5) buffer IdxBuf { uint hi[]; };
layout(std430, binding = 6) readonly buffer BoundBuf { float bound_v[]; };
layout(std430, binding = 7) buffer ListedBuf { uint listed[]; };
layout(push_constant) uniform Push {
  uint m; uint n; uint d; uint k; uint split_rows; uint base; uint split_stride; uint bounded; uint cap;
} p;

shared uint As[BM * AS];
shared uint Bs[BN * BS];
shared float Cs[BM * CS];
shared float q_rest[BM], q_w[BM], q_t[BM];  // per query: its part of the test, 2 / scale, the bound
shared float x_scale[BN];

// The power of two that scales a row of squared norm sq below 2^14 in every element.
float row_scale(float sq) {
  int e;
  frexp(sqrt(sq), e);  // sqrt(sq) < 2^e
  return exp2(float(14 - e));
}
// A row's part of the test, (1 - K) sq - T.
float row_term(float sq, float scale) {
  const float c = float(p.d) * (1.0 / 8388608.0);
  const float K = 1.125 * (3.0 * U + 3.0 * U * U + 1.5 * c * (1.0 + U) * (1.0 + U) + 1.0 / 524288.0);
  const float e = sqrt(float(p.d)) * (1.0 / 16777216.0) / scale;
  return (1.0 - K) * sq - 1.125 * ((1.0 + U) * e * e / U + 0.5 * e * e);
}

// knn_select.comp's value of a pair.
float exact_value(uint q, uint c) {
  float s = 0.0;
  for (uint f = 0; f < p.d; ++f) s = fma(Q[q * p.d + f], X[c * p.d + f], s);
  return (qn[q] + xn[c]) - 2.0 * s;
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint row0 = gl_WorkGroupID.x * BM;
  const uint c_begin = gl_WorkGroupID.y * p.split_stride;
  const uint c_end = min(p.n, c_begin + p.split_rows);
  const uint dpad = (p.d + 15) / 16 * 16;

  // The query tile, scaled and rounded, and its rows' terms.
  for (uint r = tid; r < BM; r += NT) {
    const uint q = row0 + r;
    const bool live = q < p.m;
    const float sq = live ? qn[q] : 0.0, scale = row_scale(sq);
    float t = -uintBitsToFloat(0x7F800000u);  // a query past the batch takes nothing
    if (live) {
      t = bound_v[q * p.k];
      t += abs(t) * (1.0 / 1048576.0);
    }
    q_t[r] = t;
    q_rest[r] = row_term(sq, scale) - t;
    q_w[r] = 2.0 / scale;
    for (uint f = 0; f < DMAX; f += 2) {
      const float a = live && f < p.d ? Q[q * p.d + f] * scale : 0.0;
      const float b = live && f + 1 < p.d ? Q[q * p.d + f + 1] * scale : 0.0;
      As[r * AS + f / 2] = packHalf2x16(vec2(a, b));
    }
  }

  const uint sg = gl_SubgroupID, sy = sg / 2, sx = sg % 2;
  const uint my_col = tid % BN, my_rows = (tid / BN) * (BM / 2);
  for (uint col0 = c_begin; col0 < c_end; col0 += BN) {
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[2][2];
    for (uint i = 0; i < 2; ++i)
      for (uint j = 0; j < 2; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    for (uint k0 = 0; k0 < dpad; k0 += KC) {
      {  // Two invocations per database row, 32 features each.
        const uint r = tid / 2, f0 = k0 + (tid % 2) * 32, c = col0 + r;
        const bool live = c < c_end;
        float scale = 0.0;
        if (k0 == 0) {
          scale = live ? row_scale(xn[c]) : 0.0;
          if (tid % 2 == 0) x_scale[r] = scale;
        } else {
          scale = x_scale[r];  // published by the previous step's barriers
        }
        if (VEC4 != 0) {
          for (uint f4 = 0; f4 < 8; ++f4) {
            const uint f = f0 + 4 * f4;
            const vec4 v = (live && f < p.d) ? X4[(c * p.d + f) / 4] * scale : vec4(0.0);
            Bs[r * BS + (f - k0) / 2] = packHalf2x16(v.xy);
            Bs[r * BS + (f - k0) / 2 + 1] = packHalf2x16(v.zw);
          }
        } else {
          for (uint f = f0; f < f0 + 32; f += 2) {
            const float a = live && f < p.d ? X[c * p.d + f] * scale : 0.0;
            const float b = live && f + 1 < p.d ? X[c * p.d + f + 1] * scale : 0.0;
            Bs[r * BS + (f - k0) / 2] = packHalf2x16(vec2(a, b));
          }
        }
      }
      barrier();
      for (uint kk = 0; kk < KC && k0 + kk < dpad; kk += 16) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[2], b[2];
        for (uint i = 0; i < 2; ++i) coopMatLoadNV(a[i], As, (32 * sy + 16 * i) * AS + (k0 + kk) / 2, AS, false);
        for (uint j = 0; j < 2; ++j) coopMatLoadNV(b[j], Bs, (32 * sx + 16 * j) * BS + kk / 2, BS, true);
        for (uint i = 0; i < 2; ++i)
          for (uint j = 0; j < 2; ++j) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
      }
      barrier();
    }
    for (uint i = 0; i < 2; ++i)
      for (uint j = 0; j < 2; ++j) coopMatStoreNV(acc[i][j], Cs, (32 * sy + 16 * i) * CS + 32 * sx + 16 * j, CS, false);
    barrier();

    // Column my_col per invocation, half of the rows each.
    const uint gc = col0 + my_col;
    if (gc < c_end) {
      const float x_sq = xn[gc], x_inv = 1.0 / x_scale[my_col];
      const float x_rest = row_term(x_sq, x_scale[my_col]);
      for (uint r = my_rows; r < my_rows + BM / 2; ++r) {
        const float test = fma(-Cs[r * CS + my_col] * q_w[r], x_inv, q_rest[r] + x_rest);
        if (!(test > 0.0)) {  // a candidate (NaN included): the exact value decides
          const uint q = row0 + r;
          const float v = exact_value(q, gc);
          if (v <= q_t[r]) {
            const uint slot = atomicAdd(listed[q], 1u);
            if (slot < p.cap) {
              hv[q * p.cap + slot] = v;
              hi[q * p.cap + slot] = p.base + gc;
            }
          }
        }
      }
    }
    barrier();
  }
}
