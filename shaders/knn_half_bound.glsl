// The error bound of knn_filter_coop.comp's float16 products, split into a term per query and one per database row.
//
// Rows are scaled by a power of two per matrix (scale: every |x_i| * scale < 2^14) and rounded to float16. With
// n = |row|, u = 2^-10 (one float16 ulp: the conversion's rounding mode is not specified), a = u n + e (the norm of
// a row's rounding error; e = 2^-24 sqrt(d) / scale covers subnormals), P = n + a, c = d 2^-23 (float32 sums of d
// products, of any order and rounding): |<q, x> - approx| <= (1 + c) Pq Px - nq nx; the exact chain
// (knn_select.comp) is within c nq nx / 2 of <q, x>; the two values' own roundings are within 2^-20
// (|q|^2 + |x|^2 + 2 nq nx). With 2 nq nx <= |q|^2 + |x|^2 and e n <= e^2 / (2u) + u n^2 / 2 this is at most
// K (|q|^2 + |x|^2) + T(q) + T(x), K = 3u + 3u^2 + 1.5 c (1 + u)^2 + 2^-19, T = (1 + u) e^2 / u + e^2 / 2, here with
// 12.5% on top. A pair can be at most its query's bound t only if
//     (half_row_term(|q|^2) - t) + half_row_term(|x|^2) - 2 <q, x>~ <= 0.
#ifndef GPUML_KNN_HALF_BOUND_GLSL
#define GPUML_KNN_HALF_BOUND_GLSL

// A row's part of the test, (1 - K) sq - T, for a row of squared norm sq in a matrix scaled by `scale`.
float half_row_term(float sq, float scale, uint d) {
  const float U = 1.0 / 1024.0;
  const float c = float(d) * (1.0 / 8388608.0);
  const float K = 1.125 * (3.0 * U + 3.0 * U * U + 1.5 * c * (1.0 + U) * (1.0 + U) + 1.0 / 524288.0);
  const float e = sqrt(float(d)) * (1.0 / 16777216.0) / scale;
  return (1.0 - K) * sq - 1.125 * ((1.0 + U) * e * e / U + 0.5 * e * e);
}

#endif
