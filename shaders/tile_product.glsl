// The register-blocked tile product shared by the distance-type kernels. A workgroup of WX x WY threads computes
// a BM x BN block (BM = WY * TM rows of A, BN = WX * TN rows of B) of
//     acc[i * TN + j] = combine(... combine(0, a_0, b_0) ..., a_{d-1}, b_{d-1})
// over the features in order (one chain per pair: identical rows give bit-identical results). Features stream
// through shared memory BK at a time, stored in 4-vectors: each shared read is one 16-byte load, consecutive across
// a warp or a broadcast, and feeds 4 * TN or 4 * TM combines. Thread (tx, ty) owns A rows tile_row_a(i) and B rows
// tile_row_b(j).
//
// The includer defines, before including: constants WX, WY, TM, TN (multiples of 4), BK, and the functions
//   scalar combine(scalar acc, scalar a, scalar b);
//   scalar load_a(uint row, uint feature);   // 0 outside the data
//   scalar load_b(uint row, uint feature);
#ifndef GPUML_TILE_PRODUCT_GLSL
#define GPUML_TILE_PRODUCT_GLSL

const uint BM = WY * TM;
const uint BN = WX * TN;
const uint NT = WX * WY;
const uint ACC = TM * TN;  // accumulators per thread: declare them as `scalar acc[ACC]` (one array type)
const uint BM4 = BM / 4 + 1;  // one k-row of a tile in 4-vectors, plus one of padding against bank conflicts
const uint BN4 = BN / 4 + 1;

shared scalar4 As[BK * BM4];
shared scalar4 Bs[BK * BN4];

uint tile_row_a(uint i) { return 4 * ((i / 4) * WY + gl_LocalInvocationID.y) + i % 4; }
uint tile_row_b(uint j) { return 4 * ((j / 4) * WX + gl_LocalInvocationID.x) + j % 4; }

// keep_a: the A tile of the previous call is still staged and still wanted (only possible when d <= BK, where one
// step holds every feature); its loads are skipped. The next step's global loads are issued into registers before
// this step's products, so their latency hides behind them.
const uint LOADS_A = (BM * BK + NT - 1) / NT, LOADS_B = (BN * BK + NT - 1) / NT;

void tile_product(inout scalar acc[ACC], uint d, bool keep_a) {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * WX + tx;
  const bool load_a_tile = !keep_a || d > BK;
  for (uint e = 0; e < TM * TN; ++e) acc[e] = scalar(0);
  // Element l of a thread's loads: consecutive threads read consecutive features of a row (coalesced loads).
  scalar ra[LOADS_A], rb[LOADS_B];
  for (uint l = 0; l < LOADS_A; ++l) {
    const uint e = tid + l * NT;
    if (load_a_tile && e < BM * BK) ra[l] = load_a(e / BK, e % BK);
  }
  for (uint l = 0; l < LOADS_B; ++l) {
    const uint e = tid + l * NT;
    if (e < BN * BK) rb[l] = load_b(e / BK, e % BK);
  }
  for (uint k0 = 0; k0 < d; k0 += BK) {
    for (uint l = 0; l < LOADS_A; ++l) {
      const uint e = tid + l * NT, r = e / BK, kk = e % BK;
      if (load_a_tile && e < BM * BK) As[kk * BM4 + r / 4][r % 4] = ra[l];
    }
    for (uint l = 0; l < LOADS_B; ++l) {
      const uint e = tid + l * NT, c = e / BK, kk = e % BK;
      if (e < BN * BK) Bs[kk * BN4 + c / 4][c % 4] = rb[l];
    }
    barrier();
    const uint k1 = k0 + BK;
    if (k1 < d) {
      for (uint l = 0; l < LOADS_A; ++l) {
        const uint e = tid + l * NT;
        if (e < BM * BK) ra[l] = load_a(e / BK, k1 + e % BK);
      }
      for (uint l = 0; l < LOADS_B; ++l) {
        const uint e = tid + l * NT;
        if (e < BN * BK) rb[l] = load_b(e / BK, k1 + e % BK);
      }
    }
    for (uint kk = 0; kk < BK; ++kk) {
      scalar4 a[TM / 4], b[TN / 4];
      for (uint i = 0; i < TM / 4; ++i) a[i] = As[kk * BM4 + i * WY + ty];
      for (uint j = 0; j < TN / 4; ++j) b[j] = Bs[kk * BN4 + j * WX + tx];
      for (uint i = 0; i < TM; ++i)
        for (uint j = 0; j < TN; ++j) acc[i * TN + j] = combine(acc[i * TN + j], a[i / 4][i % 4], b[j / 4][j % 4]);
    }
    barrier();
  }
}

#endif
