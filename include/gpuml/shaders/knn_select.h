// Interface of shaders/knn_select.comp (see interface.h).
#ifndef GPUML_SHADERS_KNN_SELECT_H
#define GPUML_SHADERS_KNN_SELECT_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(knn_select)
GPUML_CONSTANT(kBindingQueries, 0)
GPUML_CONSTANT(kBindingRows, 1)          // the database block
GPUML_CONSTANT(kBindingQueryNorms, 2)    // squared norms
GPUML_CONSTANT(kBindingRowNorms, 3)
GPUML_CONSTANT(kBindingValues, 4)        // heaps, candidate lists' values (kModeLists) or the sample (kModeDense)
GPUML_CONSTANT(kBindingIndices, 5)       // and database indices
GPUML_CONSTANT(kBindingBound, 6)         // the sample pass's merged heaps (bounded)
GPUML_CONSTANT(kBindingListed, 7)        // kModeLists: pairs appended per query
GPUML_CONSTANT(kBindingStatus, 8)        // LOOP_GUARD: set when the loop limit was hit
GPUML_CONSTANT(kBindingCount, 9)

// The tile (tile_product.glsl), the metric, the mode (below) and the loop-limit report.
GPUML_CONSTANT(kSpecWX, 0)
GPUML_CONSTANT(kSpecWY, 1)
GPUML_CONSTANT(kSpecTM, 2)
GPUML_CONSTANT(kSpecTN, 3)
GPUML_CONSTANT(kSpecBK, 4)
GPUML_CONSTANT(kSpecMetric, 5)
GPUML_CONSTANT(kSpecMode, 6)
GPUML_CONSTANT(kSpecLoopGuard, 7)  // 1 on CPU devices: report llvmpipe's loop limit (common.glsl)
GPUML_CONSTANT(kSpecCount, 8)

// Values of kSpecMode: heaps of the k best per split, candidate lists, or every value of the splits (a bound's
// sample: query q's at q x cap + split x split_rows + the row's offset in its split).
GPUML_CONSTANT(kModeHeaps, 0)
GPUML_CONSTANT(kModeLists, 1)
GPUML_CONSTANT(kModeDense, 2)

// Values of kSpecMetric: what the kernel selects on (smaller is better); euclidean selects on squared distances.
GPUML_CONSTANT(kMetricSqeuclidean, 0)
GPUML_CONSTANT(kMetricManhattan, 1)
GPUML_CONSTANT(kMetricChebyshev, 2)
GPUML_CONSTANT(kMetricCosine, 3)
GPUML_CONSTANT(kMetricInnerProduct, 4)

// m queries, n database rows in this block, d features, k kept, split s covers split_rows rows from
// s * split_stride, base: global index of the block's first row, bounded: 1 to start from the sample's bounds,
// cap: kModeLists' list slots per query, kModeDense's values per query (splits x split_rows).
GPUML_PUSH_CONSTANTS(Push) {
  uint m; uint n; uint d; uint k; uint split_rows; uint base; uint split_stride; uint bounded; uint cap;
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 9)
GPUML_SHADER_INTERFACE_END

#endif
