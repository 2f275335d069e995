#version 450
#extension GL_GOOGLE_include_directive : require
// A matrix's rows as float16 for knn_filter_coop.comp: each element times `scale` (a power of two) rounded to
// float16, two per uint, every row padded with zeros to dpad features (a multiple of 16) and the matrix to
// rows_out rows. With terms != 0, also each row's part of the filter's test (knn_half_bound.glsl) from its
// squared norm, and +inf past row n, so that padded rows never pass.
#include "common.glsl"
#include "knn_half_bound.glsl"
#include "knn_half.h"

layout(local_size_x = kPairsPerGroup) in;

layout(std430, binding = kBindingRows) readonly buffer XBuf { scalar X[]; };
layout(std430, binding = kBindingNorms) readonly buffer NormBuf { scalar xn[]; };
layout(std430, binding = kBindingHalf) writeonly buffer HalfBuf { uint xh[]; };
layout(std430, binding = kBindingTerms) writeonly buffer TermBuf { float term[]; };

void main() {
  const uint pairs = p.dpad / 2, e = linear_group_id() * kPairsPerGroup + gl_LocalInvocationID.x;
  if (e >= p.rows_out * pairs) return;
  const uint r = e / pairs, f = 2 * (e % pairs);
  const float a = r < p.n && f < p.d ? float(X[r * p.d + f]) * p.scale : 0.0;
  const float b = r < p.n && f + 1 < p.d ? float(X[r * p.d + f + 1]) * p.scale : 0.0;
  xh[e] = packHalf2x16(vec2(a, b));
  if (p.terms != 0 && f == 0) term[r] = r < p.n ? half_row_term(float(xn[r]), p.scale, p.d) : uintBitsToFloat(0x7F800000u);
}
