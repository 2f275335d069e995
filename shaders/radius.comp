#version 450
#extension GL_GOOGLE_include_directive : require
// Radius neighbours, two modes of one kernel over a grid of query tiles (x) and database splits (y): COUNT gives
// per (query, split) the pairs surely within the radius and the uncertain ones; FILL writes both into the ragged
// output at the offsets the host made from those counts (a prefix sum over (query, split) in that order, so a
// query's pairs are contiguous and its splits in index order).
//
// Per database tile of BN rows the workgroup forms the BM x BN block of values with the register-blocked tile
// product (tile_product.glsl): squared differences (euclidean, sqeuclidean: the direct form, whose rounding error
// is relative to the distance itself, where the norm expansion's is relative to the norms and would leave wide
// bands of uncertain pairs), sums or maxima of absolute differences, or cosine from the dot product and inverse
// norms. Each value is compared with the band (algorithms::radius_band): below band[0] the pair is in, above
// band[1] out, between uncertain (decided on the host by the exact function). Almost every value is above band[1],
// so a tile costs its product and one compare per value; counts live in registers, one shared add per thread and
// query at the end. FILL appends a pair with one shared atomic per pair found (not per pair formed).
//
// WINDOWED: rows and queries are sorted by one feature, and each query tile scans only the rows its queries can
// reach in it (algorithms::sorted_windows; the host computes the windows), so low-dimensional searches form a small
// fraction of the pairs.
//
// Cosine: a row whose squared norm is below kTinyNorm (or zero) has no reliable inverse norm in this precision:
// every pair with it is uncertain (the exact function gives 1 for a zero row).
#include "common.glsl"
#include "radius.h"

layout(constant_id = kSpecWX) const uint WX = 16;
layout(constant_id = kSpecWY) const uint WY = 16;
layout(constant_id = kSpecTM) const uint TM = 8;
layout(constant_id = kSpecTN) const uint TN = 8;
layout(constant_id = kSpecBK) const uint BK = 16;
layout(constant_id = kSpecMetric) const uint METRIC = kMetricSquared;
layout(constant_id = kSpecMode) const uint MODE = kModeCount;
layout(constant_id = kSpecLoopGuard) const uint LOOP_GUARD = 0;
layout(constant_id = kSpecWindowed) const uint WINDOWED = 0;
layout(local_size_x_id = kSpecWX, local_size_y_id = kSpecWY) in;

layout(std430, binding = kBindingQueries) readonly buffer QBuf { scalar Q[]; };
layout(std430, binding = kBindingRows) readonly buffer XBuf { scalar X[]; };
layout(std430, binding = kBindingQueryNorms) readonly buffer QNormBuf { scalar qn[]; };
layout(std430, binding = kBindingRowNorms) readonly buffer XNormBuf { scalar xn[]; };
layout(std430, binding = kBindingBand) readonly buffer BandBuf { scalar band[]; };
layout(std430, binding = kBindingCounts) buffer CountBuf { uint counts[]; };
layout(std430, binding = kBindingFound) writeonly buffer FoundBuf { uint found[]; };
layout(std430, binding = kBindingStatus) buffer StatusBuf { uint status[]; };
layout(std430, binding = kBindingWindows) readonly buffer WindowBuf { uint windows[]; };

#if defined(GPUML_F64)
const scalar kTinyNorm = 1.0e-200LF;
#else
const scalar kTinyNorm = 1.0e-30;
#endif

scalar combine(scalar acc, scalar a, scalar b) {
  if (METRIC == kMetricCosine) return fma(a, b, acc);
  const scalar e = a - b;
  if (METRIC == kMetricManhattan) return acc + abs(e);
  if (METRIC == kMetricChebyshev) return max(acc, abs(e));
  return fma(e, e, acc);
}
scalar load_a(uint row, uint f);
scalar load_b(uint row, uint f);
#include "tile_product.glsl"

uint tile_col0, tile_end;  // the database tile being formed: [tile_col0, min(tile_col0 + BN, tile_end))

scalar load_a(uint row, uint f) {
  const uint q = gl_WorkGroupID.x * BM + row;
  return (q < p.m && f < p.d) ? Q[(p.q0 + q) * p.d + f] : scalar(0);
}
scalar load_b(uint row, uint f) {
  const uint c = tile_col0 + row;
  return (c < tile_end && f < p.d) ? X[c * p.d + f] : scalar(0);
}

shared scalar qaux[BM];
shared scalar xaux[2 * BN];  // per tile parity: no barrier between a tile's reads and the next tile's writes
shared uint found_in[BM];    // COUNT: pairs in per query; FILL: pairs written per query
shared uint found_uncertain[BM];

// Cosine's inverse norm, or -1 for a row too small to trust.
scalar inverse_norm(scalar sq) { return sq >= kTinyNorm ? scalar(1) / sqrt(sq) : scalar(-1); }

void main() {
  const uint tid = gl_LocalInvocationID.y * WX + gl_LocalInvocationID.x;
  const uint row0 = gl_WorkGroupID.x * BM;
  const uint split = gl_WorkGroupID.y;
  uint c_begin = split * p.split_rows;
  uint c_end = min(p.n, c_begin + p.split_rows);
  if (WINDOWED != 0u && row0 < p.m) {
    // Sorted rows and queries: the tile's rows lie between its first query's window start and its last query's
    // window end (global rows; this block holds [p.base, p.base + p.n)).
    const uint first = windows[2u * (p.q0 + row0)], last = windows[2u * (p.q0 + min(row0 + BM, p.m) - 1u) + 1u];
    c_begin = max(c_begin, first > p.base ? first - p.base : 0u);
    c_end = min(c_end, last > p.base ? last - p.base : 0u);
  }
  const scalar lo = band[0], hi = band[1];

  for (uint r = tid; r < BM; r += NT) {
    const uint q = row0 + r;
    qaux[r] = (METRIC == kMetricCosine && q < p.m) ? inverse_norm(qn[p.q0 + q]) : scalar(0);
    found_in[r] = 0u;
    found_uncertain[r] = 0u;
  }
  tile_end = c_end;

  uint in_count[TM], uncertain_count[TM];
  for (uint i = 0; i < TM; ++i) {
    in_count[i] = 0u;
    uncertain_count[i] = 0u;
  }

  uint parity = 0;
  for (uint col0 = c_begin; col0 < c_end; col0 += BN, parity ^= 1u) {
    tile_col0 = col0;
    const uint xa = parity * BN;
    if (METRIC == kMetricCosine)
      for (uint c = tid; c < BN; c += NT) xaux[xa + c] = col0 + c < c_end ? inverse_norm(xn[col0 + c]) : scalar(0);
    scalar acc[ACC];
    tile_product(acc, p.d, col0 != c_begin);  // its barriers also publish qaux and xaux

    for (uint i = 0; i < TM; ++i) {
      const uint r = tile_row_a(i);
      for (uint j = 0; j < TN; ++j) {
        const uint c = tile_row_b(j);
        scalar v = acc[i * TN + j];
        bool trusted = true;
        if (METRIC == kMetricCosine) {
          const scalar qa = qaux[r], xv = xaux[xa + c];
          trusted = qa >= scalar(0) && xv >= scalar(0);
          v = trusted ? clamp(scalar(1) - v * (qa * xv), scalar(0), scalar(2)) : lo;
        }
        if (v > hi || row0 + r >= p.m || col0 + c >= c_end) continue;
        const bool sure = trusted && v < lo;
        if (MODE == kModeCount) {
          if (sure) in_count[i] += 1u;
          else uncertain_count[i] += 1u;
        } else {
          const uint slot = atomicAdd(found_in[r], 1u);
          found[counts[(row0 + r) * p.splits + split] + slot] = (p.base + col0 + c) | (sure ? 0u : kUncertain);
        }
      }
    }
  }

  if (MODE == kModeCount) {
    for (uint i = 0; i < TM; ++i) {
      const uint r = tile_row_a(i);
      if (in_count[i] != 0u) atomicAdd(found_in[r], in_count[i]);
      if (uncertain_count[i] != 0u) atomicAdd(found_uncertain[r], uncertain_count[i]);
    }
    barrier();
    for (uint r = tid; r < BM; r += NT) {
      const uint q = row0 + r;
      if (q >= p.m) continue;
      counts[2 * (q * p.splits + split)] = found_in[r];
      counts[2 * (q * p.splits + split) + 1] = found_uncertain[r];
    }
  }
  if (LOOP_GUARD != 0u && loop_limit_reached(p.m)) atomicOr(status[0], 1u);
}
