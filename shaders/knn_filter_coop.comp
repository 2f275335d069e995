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
// specified), a = u n + 2^-24 sqrt(d) 2^-s (the norm of a row's rounding error, subnormals included), P = n + a, c = d 2^-23 (float32 sums of d products, of
// any order and rounding): |<q, x> - approx| <= (1 + c) Pq Px - nq nx; the exact chain is within d 2^-24 nq nx
// of <q, x>; and the two values' own roundings are within 2^-22 (|q|^2 + |x|^2 + 2 nq nx). eps below takes 12.5%
// on top of twice the first two and four times the last.
//
// Grid: x = query tile (64 queries, resident in shared memory as float16, d <= 128), y = split (as knn_select).
// Workgroup: 4 subgroups of 32 invocations (the host pins 32), each a 32 x 32 quarter of the tile.
#include "common.glsl"

layout(local_size_x = 128) in;
layout(constant_id = 0) const uint VEC4 = 0;  // 1: d is a multiple of 4, rows are read as 4-vectors

const uint BM = 64, BN = 64, KC = 64, DMAX = 128, NT = 128;
const uint AS = DMAX + 8, BS = KC + 8, CS = BN + 4;  // shared strides, padded against bank conflicts
const uint NONE = 0xffffffffu;

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

shared float16_t As[BM * AS];
shared float16_t Bs[BN * BS];
shared float Cs[BM * CS];
shared float q_sq[BM], q_n[BM], q_p[BM], q_inv[BM], q_t[BM];
shared float x_sq[BN], x_n[BN], x_p[BN], x_inv[BN];

// The power of two that scales a row of squared norm sq below 2^14 in every element, and the norm of its float16
// rounding error (unscaled), from the row's norm.
float row_scale(float sq) {
  int e;
  frexp(sqrt(sq), e);  // sqrt(sq) < 2^e
  return exp2(float(14 - e));
}
float row_error(float norm, float scale) { return norm * (1.0 / 1024.0) + sqrt(float(p.d)) * (1.0 / 16777216.0) / scale; }

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
    const float sq = live ? qn[q] : 0.0, scale = row_scale(sq), norm = sqrt(sq);
    q_sq[r] = sq;
    q_n[r] = norm;
    q_p[r] = norm + row_error(norm, scale);
    q_inv[r] = 1.0 / scale;
    float t = -uintBitsToFloat(0x7F800000u);  // a query past the batch takes nothing
    if (live) {
      t = bound_v[q * p.k];
      t += abs(t) * (1.0 / 1048576.0);
    }
    q_t[r] = t;
    for (uint f = 0; f < DMAX; ++f) As[r * AS + f] = float16_t(live && f < p.d ? Q[q * p.d + f] * scale : 0.0);
  }

  const uint sg = gl_SubgroupID, sy = sg / 2, sx = sg % 2;
  const float c_sum = float(p.d) * (1.0 / 8388608.0);
  for (uint col0 = c_begin; col0 < c_end; col0 += BN) {
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[2][2];
    for (uint i = 0; i < 2; ++i)
      for (uint j = 0; j < 2; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    for (uint k0 = 0; k0 < dpad; k0 += KC) {
      // Two invocations per database row, 32 features each.
      {
        const uint r = tid / 2, f0 = k0 + (tid % 2) * 32, c = col0 + r;
        const bool live = c < c_end;
        const float scale = live ? row_scale(xn[c]) : 0.0;
        if (VEC4 != 0) {
          for (uint f4 = 0; f4 < 8; ++f4) {
            const uint f = f0 + 4 * f4;
            const vec4 v = (live && f < p.d) ? X4[(c * p.d + f) / 4] * scale : vec4(0.0);
            for (uint e = 0; e < 4; ++e) Bs[r * BS + (f - k0) + e] = float16_t(v[e]);
          }
        } else {
          for (uint e = 0; e < 32; ++e) {
            const uint f = f0 + e;
            Bs[r * BS + (f - k0)] = float16_t(live && f < p.d ? X[c * p.d + f] * scale : 0.0);
          }
        }
        if (k0 == 0 && tid % 2 == 0) {
          const float sq = live ? xn[c] : 0.0, norm = sqrt(sq), s = row_scale(sq);
          x_sq[r] = sq;
          x_n[r] = norm;
          x_p[r] = norm + row_error(norm, s);
          x_inv[r] = 1.0 / s;
        }
      }
      barrier();
      for (uint kk = 0; kk < KC && k0 + kk < dpad; kk += 16) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[2], b[2];
        for (uint i = 0; i < 2; ++i) coopMatLoadNV(a[i], As, (32 * sy + 16 * i) * AS + k0 + kk, AS, false);
        for (uint j = 0; j < 2; ++j) coopMatLoadNV(b[j], Bs, (32 * sx + 16 * j) * BS + kk, BS, true);
        for (uint i = 0; i < 2; ++i)
          for (uint j = 0; j < 2; ++j) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
      }
      barrier();
    }
    for (uint i = 0; i < 2; ++i)
      for (uint j = 0; j < 2; ++j) coopMatStoreNV(acc[i][j], Cs, (32 * sy + 16 * i) * CS + 32 * sx + 16 * j, CS, false);
    barrier();

    // Column c per invocation, half of the rows each.
    {
      const uint c = tid % BN, gc = col0 + c;
      if (gc < c_end) {
        const float xs = x_sq[c], xnn = x_n[c], xp = x_p[c], xi = x_inv[c];
        for (uint r = (tid / BN) * (BM / 2); r < (tid / BN + 1) * (BM / 2); ++r) {
          const float t = q_t[r];
          const float dot = Cs[r * CS + c] * q_inv[r] * xi;
          const float approx = (q_sq[r] + xs) - 2.0 * dot;
          const float nn = q_n[r] * xnn;
          const float eps = 1.125 * (2.0 * (1.0 + c_sum) * (q_p[r] * xp) - (2.0 - 2.0 * c_sum) * nn) +
                            (1.0 / 1048576.0) * (q_sq[r] + xs + 2.0 * nn);
          if (!(approx - eps > t)) {  // a candidate (NaN bounds included): the exact value decides
            const uint q = row0 + r;
            const float v = exact_value(q, gc);
            if (v <= t) {
              const uint slot = atomicAdd(listed[q], 1u);
              if (slot < p.cap) {
                hv[q * p.cap + slot] = v;
                hi[q * p.cap + slot] = p.base + gc;
              }
            }
          }
        }
      }
    }
    barrier();
  }
}
