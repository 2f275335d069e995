// Interface of shaders/radius.comp (see interface.h).
#ifndef GPUML_SHADERS_RADIUS_H
#define GPUML_SHADERS_RADIUS_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(radius)
GPUML_CONSTANT(kBindingQueries, 0)    // the query batch, d features per row
GPUML_CONSTANT(kBindingRows, 1)       // the database block
GPUML_CONSTANT(kBindingQueryNorms, 2) // squared norms (cosine only)
GPUML_CONSTANT(kBindingRowNorms, 3)
GPUML_CONSTANT(kBindingBand, 4)       // two scalars: below band[0] a pair is in, above band[1] out, else uncertain
GPUML_CONSTANT(kBindingCounts, 5)     // COUNT: per (query, split) pairs in and uncertain; FILL: per (query, split) offsets
GPUML_CONSTANT(kBindingFound, 6)      // FILL: global row indices, kUncertain set on uncertain pairs
GPUML_CONSTANT(kBindingStatus, 7)     // LOOP_GUARD: set when the loop limit was hit
GPUML_CONSTANT(kBindingWindows, 8)    // WINDOWED: per query of the batch, its rows [first, last) (global indices)
GPUML_CONSTANT(kBindingCount, 9)

// The tile (tile_product.glsl), the metric, the mode and the loop-limit report.
GPUML_CONSTANT(kSpecWX, 0)
GPUML_CONSTANT(kSpecWY, 1)
GPUML_CONSTANT(kSpecTM, 2)
GPUML_CONSTANT(kSpecTN, 3)
GPUML_CONSTANT(kSpecBK, 4)
GPUML_CONSTANT(kSpecMetric, 5)
GPUML_CONSTANT(kSpecMode, 6)
GPUML_CONSTANT(kSpecLoopGuard, 7)  // 1 on CPU devices: report llvmpipe's loop limit (common.glsl)
GPUML_CONSTANT(kSpecWindowed, 8)   // 1: rows and queries sorted by one feature; a query tile scans its window only
GPUML_CONSTANT(kSpecCount, 9)

// Values of kSpecMetric: the value compared with the band. Squared differences serve euclidean and sqeuclidean
// (euclidean's band is on the squared scale).
GPUML_CONSTANT(kMetricSquared, 0)
GPUML_CONSTANT(kMetricManhattan, 1)
GPUML_CONSTANT(kMetricChebyshev, 2)
GPUML_CONSTANT(kMetricCosine, 3)

// Values of kSpecMode.
GPUML_CONSTANT(kModeCount, 0)
GPUML_CONSTANT(kModeFill, 1)

// The flag of an uncertain pair in kBindingFound (so at most 2^31 - 1 database rows).
GPUML_CONSTANT(kUncertain, 0x80000000)

// Queries [q0, q0 + m) of the loaded batch, n rows in this block of d features, base: the block's first global
// row; split s covers split_rows rows from s * split_rows; splits: per block (the stride of kBindingCounts).
GPUML_PUSH_CONSTANTS(Push) {
  uint q0; uint m; uint n; uint d; uint base; uint split_rows; uint splits;
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 7)
GPUML_SHADER_INTERFACE_END

#endif
