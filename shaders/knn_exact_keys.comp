#version 450
#extension GL_GOOGLE_include_directive : require
// The squared distances a search returns for its selected pairs, formed as the host engine forms them
// (algorithms::sqdist_fixed for float32 rows), so the host need not read the pairs' rows again: each difference
// rounded to float32, its square (exact in float64) added in float64 to one of four sums (feature f to sum f % 4
// for the first 4 floor(d / 4) features, the rest to the first), ((s0 + s1) + (s2 + s3)) rounded to float32.
// Float64 products of float32 values are exact, so fused or not the sums are the host's bit for bit. A device may
// flush float32 subnormals, so a pair with a subnormal input or difference, or a result outside float32's normal
// range (zero included: equal rows), gets NaN, and the host forms its value.
#include "common.glsl"
#include "knn_exact_keys.h"

layout(local_size_x = kThreads) in;

layout(std430, binding = kBindingQueries) readonly restrict buffer QBuf { float Q[]; };
layout(std430, binding = kBindingRows) readonly restrict buffer XBuf { float X[]; };
layout(std430, binding = kBindingIndices) readonly restrict buffer IdxBuf { uint idx[]; };
layout(std430, binding = kBindingSquared) writeonly restrict buffer SqBuf { float squared[]; };

// Subnormal by its bits (a comparison could see it flushed).
bool subnormal(uint bits) { return (bits & 0x7F800000u) == 0u && (bits & 0x007FFFFFu) != 0u; }

void main() {
  const uint e = linear_group_id() * kThreads + gl_LocalInvocationID.x;
  if (e >= p.m * p.k) return;
  const float nan = uintBitsToFloat(0x7FC00000u);
  const uint index = idx[e];
  if (index == 0xFFFFFFFFu) {
    squared[e] = nan;
    return;
  }
  const uint q = e / p.k, c = index - p.base, full = p.d & ~3u;
  precise double s0 = 0.0LF, s1 = 0.0LF, s2 = 0.0LF, s3 = 0.0LF;
  bool doubtful = false;
  for (uint f = 0; f < p.d; ++f) {
    const float a = Q[q * p.d + f], b = X[c * p.d + f];
    precise const float diff = a - b;
    const uint da = floatBitsToUint(a), db = floatBitsToUint(b), dd = floatBitsToUint(diff);
    // A difference of zero from different bits: flushed (or +0 against -0, where the host agrees anyway).
    doubtful = doubtful || subnormal(da) || subnormal(db) || subnormal(dd) || ((dd & 0x7FFFFFFFu) == 0u && da != db);
    precise const double sq = double(diff) * double(diff);
    const uint lane = f < full ? f & 3u : 0u;
    if (lane == 0u) s0 += sq;
    else if (lane == 1u) s1 += sq;
    else if (lane == 2u) s2 += sq;
    else s3 += sq;
  }
  precise const double sum = (s0 + s1) + (s2 + s3);
  // float32's smallest normal and largest finite values.
  const bool normal = sum >= 1.1754943508222875e-38LF && sum <= 3.4028234663852886e38LF;
  squared[e] = doubtful || !normal ? nan : float(sum);
}
