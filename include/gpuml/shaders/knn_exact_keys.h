// Interface of shaders/knn_exact_keys.comp (see interface.h). Built for float32 rows only (its sums are float64).
#ifndef GPUML_SHADERS_KNN_EXACT_KEYS_H
#define GPUML_SHADERS_KNN_EXACT_KEYS_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(knn_exact_keys)
GPUML_CONSTANT(kBindingQueries, 0)  // the query batch
GPUML_CONSTANT(kBindingRows, 1)     // the database block
GPUML_CONSTANT(kBindingIndices, 2)  // per query its k selected database indices (none: 0xffffffff)
GPUML_CONSTANT(kBindingSquared, 3)  // out: per selected pair its squared distance, NaN where left to the host
GPUML_CONSTANT(kBindingStatus, 4)   // LOOP_GUARD: set when the loop limit was hit
GPUML_CONSTANT(kBindingCount, 5)

GPUML_CONSTANT(kSpecLoopGuard, 0)  // 1 on CPU devices: report llvmpipe's loop limit (common.glsl)
GPUML_CONSTANT(kSpecCount, 1)
GPUML_CONSTANT(kThreads, 64)  // pairs per workgroup

// m queries, k pairs per query, d features, base: the block's first database index.
GPUML_PUSH_CONSTANTS(Push) { uint m; uint k; uint d; uint base; } GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 4)
GPUML_SHADER_INTERFACE_END

#endif
