// Interface of shaders/knn_filter_coop.comp (see interface.h). Built for float32 only.
#ifndef GPUML_SHADERS_KNN_FILTER_COOP_H
#define GPUML_SHADERS_KNN_FILTER_COOP_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(knn_filter_coop)
GPUML_CONSTANT(kBindingQueryHalf, 0)   // query rows as float16 pairs, padded to kBlockQueries rows
GPUML_CONSTANT(kBindingRowHalf, 1)     // the block's rows as float16 pairs, padded by kBlockRows
GPUML_CONSTANT(kBindingQueryNorms, 2)
GPUML_CONSTANT(kBindingRowTerms, 3)    // per row: half_row_term (knn_half_bound.glsl)
GPUML_CONSTANT(kBindingIndices, 4)     // candidate lists: database indices
GPUML_CONSTANT(kBindingListed, 5)      // pairs appended per query
GPUML_CONSTANT(kBindingBound, 6)       // the queries' bounds, k apart
GPUML_CONSTANT(kBindingCount, 7)

GPUML_CONSTANT(kSpecResidentPairs, 0)  // the queries' uints kept in shared memory whole, or 0 (staged per step)
GPUML_CONSTANT(kSpecWideSteps, 1)      // 1: resident queries whose pairs are a multiple of 16 (rows 32 features a step)
GPUML_CONSTANT(kSpecCount, 2)

// Queries and database rows per workgroup tile.
GPUML_CONSTANT(kBlockQueries, 128)
GPUML_CONSTANT(kBlockRows, 128)
// Staging: 8 uints (16 features) per step, rows kPadPairs uints longer in shared memory (kStagedStride apart).
GPUML_CONSTANT(kStepPairs, 8)
GPUML_CONSTANT(kPadPairs, 4)
GPUML_CONSTANT(kStagedStride, 12)
// Shared memory besides the queries: the staged rows (double buffered) and the test's terms (kBlockQueries + 256
// floats). Resident queries take kBlockQueries x (pairs + kPadPairs) uints more.
GPUML_CONSTANT(kFixedSharedBytes, 2 * 128 * 12 * 4 + (128 + 256) * 4)

// m queries, k (the bound's stride), pairs: uints per float16 row, splits as knn_select.comp, base: global index
// of the block's first row, cap: list slots per query, nb: rows in the block, qscale: the queries' scale, d:
// features, fold: -(query scale x row scale) / 2, the products' scale against the test's terms (a power of two).
GPUML_PUSH_CONSTANTS(Push) {
  uint m; uint k; uint pairs; uint split_rows; uint split_stride; uint base; uint cap; uint nb; float qscale; uint d;
  float fold;
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 11)
GPUML_SHADER_INTERFACE_END

#endif
