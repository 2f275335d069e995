// Interface of shaders/knn_exact_keys.comp (see interface.h). Built for float32 rows only (its sums are float64).
// Two arithmetics by kSpecFloat64Distances: the host finish's float32 squared distances (0) or host/float64_distances.hpp's
// float64 squared distances (1).
#ifndef GPUML_SHADERS_KNN_EXACT_KEYS_H
#define GPUML_SHADERS_KNN_EXACT_KEYS_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(knn_exact_keys)
GPUML_CONSTANT(kBindingQueries, 0)  // the query batch
GPUML_CONSTANT(kBindingRows, 1)     // the database block
GPUML_CONSTANT(kBindingIndices, 2)  // per query its k selected database indices (none: 0xffffffff)
GPUML_CONSTANT(kBindingSquared, 3)  // out: per pair its squared distance (float, or double), NaN where left to the host
GPUML_CONSTANT(kBindingStatus, 4)   // LOOP_GUARD: set when the loop limit was hit
GPUML_CONSTANT(kBindingCount, 5)

GPUML_CONSTANT(kSpecLoopGuard, 0)  // 1 on CPU devices: report llvmpipe's loop limit (common.glsl)
GPUML_CONSTANT(kSpecFloat64Distances, 1)  // 1: host/float64_distances.hpp's sums, written as double
GPUML_CONSTANT(kSpecCount, 2)
GPUML_CONSTANT(kThreads, 64)  // pairs per workgroup

// m queries, k pairs per query (pair e: query row first_query + e / k), d features, base: the block's first
// database index. paired = 1: kBindingIndices holds (query row, database index) per pair, m pairs, k = 1.
GPUML_PUSH_CONSTANTS(Push) { uint m; uint k; uint d; uint base; uint first_query; uint paired; } GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 6)
GPUML_SHADER_INTERFACE_END

#endif
