#version 450
#extension GL_GOOGLE_include_directive : require
// Two arithmetics (FLOAT64_DISTANCES). 0: the squared distances a search returns for its selected pairs, formed as
// the host engine forms them
// (algorithms::sqdist_fixed for float32 rows), so the host need not read the pairs' rows again: each difference
// rounded to float32, its square (exact in float64) added in float64 to one of four sums (feature f to sum f % 4
// for the first 4 floor(d / 4) features, the rest to the first), ((s0 + s1) + (s2 + s3)) rounded to float32.
// Float64 products of float32 values are exact, so fused or not the sums are the host's bit for bit. A device may
// flush float32 subnormals, so a pair with a subnormal input or difference, or a result outside float32's normal
// range (zero included: equal rows), gets NaN, and the host forms its value. (This assumes IEEE float64 addition
// and multiplication and a correctly rounded float64 to float32 conversion, as NVIDIA's, AMD's and llvmpipe's are;
// Vulkan itself asks less of float64.)
// 1: the float64 squared distances of host/float64_distances.hpp (what the Python estimators return for float32
// data): each float32 value widened to float64, the differences and their squares rounded to float64 (precise: no
// fused multiply-add), eight sums (feature f to sum f % 8 below d - d % 8) combined in the host's tree, plus the
// remaining features' squares in feature order; written as double. No such value leaves float64's normal range, so
// only pairs with a subnormal input (which a device may flush as it widens it) get NaN and are left to the host.
#include "common.glsl"
#include "knn_exact_keys.h"

layout(constant_id = kSpecLoopGuard) const uint LOOP_GUARD = 0;
layout(constant_id = kSpecFloat64Distances) const uint FLOAT64_DISTANCES = 0;
layout(local_size_x = kThreads) in;

layout(std430, binding = kBindingQueries) readonly restrict buffer QBuf { float Q[]; };
layout(std430, binding = kBindingQueries) readonly restrict buffer QBuf4 { vec4 Q4[]; };
layout(std430, binding = kBindingRows) readonly restrict buffer XBuf { float X[]; };
layout(std430, binding = kBindingRows) readonly restrict buffer XBuf4 { vec4 X4[]; };
layout(std430, binding = kBindingStatus) buffer StatusBuf { uint status[]; };
layout(std430, binding = kBindingIndices) readonly restrict buffer IdxBuf { uint idx[]; };
layout(std430, binding = kBindingSquared) writeonly restrict buffer SqBuf { float squared[]; };
layout(std430, binding = kBindingSquared) writeonly restrict buffer SqBuf64 { double squared64[]; };

// Subnormal by its bits (a comparison could see it flushed).
bool subnormal(uint bits) { return (bits & 0x7F800000u) == 0u && (bits & 0x007FFFFFu) != 0u; }

// Feature (a from the query, b from the row) into sum `lane` (a constant where the loop knows it).
#define ADD_FEATURE(a, b, lane)                                                                                   \
  {                                                                                                               \
    const float fa = (a), fb = (b);                                                                               \
    precise const float diff = fa - fb;                                                                           \
    const uint da = floatBitsToUint(fa), db = floatBitsToUint(fb), dd = floatBitsToUint(diff);                   \
    /* A difference of zero from different bits: flushed (or +0 against -0, where the host agrees anyway). */    \
    doubtful = doubtful || subnormal(da) || subnormal(db) || subnormal(dd) || ((dd & 0x7FFFFFFFu) == 0u && da != db); \
    precise const double sq = double(diff) * double(diff);                                                        \
    if ((lane) == 0u) s0 += sq;                                                                                   \
    else if ((lane) == 1u) s1 += sq;                                                                              \
    else if ((lane) == 2u) s2 += sq;                                                                              \
    else s3 += sq;                                                                                                \
  }

// FLOAT64_DISTANCES: feature (a from the query, b from the row) into sum s[lane] (a constant after unrolling), or
// (lane 8) into the tail.
#define ADD_DIFFERENCE(a, b, lane)                                                                                \
  {                                                                                                               \
    const float fa = (a), fb = (b);                                                                               \
    doubtful = doubtful || subnormal(floatBitsToUint(fa)) || subnormal(floatBitsToUint(fb));                      \
    precise const double e = double(fb) - double(fa);                                                             \
    precise const double sq = e * e;                                                                              \
    if ((lane) == 8u) tail += sq;                                                                                 \
    else s[min(lane, 7u)] += sq;                                                                                 \
  }

// host/float64_distances.hpp's squared distance of query q to row c (FLOAT64_DISTANCES), NaN where left to the host.
double float64_squared(uint q, uint c) {
  precise double s[8] = double[8](0.0LF, 0.0LF, 0.0LF, 0.0LF, 0.0LF, 0.0LF, 0.0LF, 0.0LF);
  precise double tail = 0.0LF;
  bool doubtful = false;
  const uint body = p.d - p.d % 8u;
  if (p.d % 4u == 0u) {  // 16-byte loads, the same order
    const uint w = p.d / 4u;
    for (uint g = 0; g < body / 4u; g += 2u) {
      const vec4 a = Q4[q * w + g], b = X4[c * w + g], a2 = Q4[q * w + g + 1u], b2 = X4[c * w + g + 1u];
      ADD_DIFFERENCE(a.x, b.x, 0u)
      ADD_DIFFERENCE(a.y, b.y, 1u)
      ADD_DIFFERENCE(a.z, b.z, 2u)
      ADD_DIFFERENCE(a.w, b.w, 3u)
      ADD_DIFFERENCE(a2.x, b2.x, 4u)
      ADD_DIFFERENCE(a2.y, b2.y, 5u)
      ADD_DIFFERENCE(a2.z, b2.z, 6u)
      ADD_DIFFERENCE(a2.w, b2.w, 7u)
    }
    if (body < p.d) {
      const vec4 a = Q4[q * w + body / 4u], b = X4[c * w + body / 4u];
      ADD_DIFFERENCE(a.x, b.x, 8u)
      ADD_DIFFERENCE(a.y, b.y, 8u)
      ADD_DIFFERENCE(a.z, b.z, 8u)
      ADD_DIFFERENCE(a.w, b.w, 8u)
    }
  } else {
    for (uint f = 0; f < body; f += 8u) {
      const uint a = q * p.d + f, b = c * p.d + f;
      ADD_DIFFERENCE(Q[a], X[b], 0u)
      ADD_DIFFERENCE(Q[a + 1u], X[b + 1u], 1u)
      ADD_DIFFERENCE(Q[a + 2u], X[b + 2u], 2u)
      ADD_DIFFERENCE(Q[a + 3u], X[b + 3u], 3u)
      ADD_DIFFERENCE(Q[a + 4u], X[b + 4u], 4u)
      ADD_DIFFERENCE(Q[a + 5u], X[b + 5u], 5u)
      ADD_DIFFERENCE(Q[a + 6u], X[b + 6u], 6u)
      ADD_DIFFERENCE(Q[a + 7u], X[b + 7u], 7u)
    }
    for (uint f = body; f < p.d; ++f) ADD_DIFFERENCE(Q[q * p.d + f], X[c * p.d + f], 8u)
  }
  precise const double sum = (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) + tail;
  return doubtful ? packDouble2x32(uvec2(0u, 0x7FF80000u)) : sum;
}

void main() {
  const uint e = linear_group_id() * kThreads + gl_LocalInvocationID.x;
  if (e >= p.m * p.k) return;
  const float nan = uintBitsToFloat(0x7FC00000u);
  const uint index = p.paired != 0u ? idx[2u * e + 1u] : idx[e];
  if (index == 0xFFFFFFFFu) {
    if (FLOAT64_DISTANCES != 0u) squared64[e] = packDouble2x32(uvec2(0u, 0x7FF80000u));
    else squared[e] = nan;
    return;
  }
  const uint q = p.paired != 0u ? idx[2u * e] : p.first_query + e / p.k, c = index - p.base, full = p.d / 4;
  if (FLOAT64_DISTANCES != 0u) {
    squared64[e] = float64_squared(q, c);
    if (LOOP_GUARD != 0u && loop_limit_reached(p.m)) atomicOr(status[0], 1u);
    return;
  }
  precise double s0 = 0.0LF, s1 = 0.0LF, s2 = 0.0LF, s3 = 0.0LF;
  bool doubtful = false;
  if (p.d % 4 == 0) {  // 16-byte loads, the same order
    for (uint g = 0; g < full; ++g) {
      const vec4 a = Q4[q * full + g], b = X4[c * full + g];
      ADD_FEATURE(a.x, b.x, 0u)
      ADD_FEATURE(a.y, b.y, 1u)
      ADD_FEATURE(a.z, b.z, 2u)
      ADD_FEATURE(a.w, b.w, 3u)
    }
  } else {
    for (uint f = 0; f < p.d; ++f) ADD_FEATURE(Q[q * p.d + f], X[c * p.d + f], f < 4 * full ? f % 4 : 0u)
  }
  precise const double sum = (s0 + s1) + (s2 + s3);
  // float32's smallest normal and largest finite values.
  const bool normal = sum >= 1.1754943508222875e-38LF && sum <= 3.4028234663852886e38LF;
  squared[e] = doubtful || !normal ? nan : float(sum);
  if (LOOP_GUARD != 0u && loop_limit_reached(p.m)) atomicOr(status[0], 1u);
}
