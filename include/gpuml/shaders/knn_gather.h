// Interface of shaders/knn_gather.comp (see interface.h).
#ifndef GPUML_SHADERS_KNN_GATHER_H
#define GPUML_SHADERS_KNN_GATHER_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(knn_gather)
GPUML_CONSTANT(kBindingListValues, 0)
GPUML_CONSTANT(kBindingListIndices, 1)
GPUML_CONSTANT(kBindingListed, 2)       // pairs appended per query
GPUML_CONSTANT(kBindingOutValues, 3)
GPUML_CONSTANT(kBindingOutIndices, 4)
// EXACT: the query batch, the database block, their squared norms.
GPUML_CONSTANT(kBindingQueries, 5)
GPUML_CONSTANT(kBindingRows, 6)
GPUML_CONSTANT(kBindingQueryNorms, 7)
GPUML_CONSTANT(kBindingRowNorms, 8)
GPUML_CONSTANT(kBindingStatus, 9)       // LOOP_GUARD: set when the loop limit was hit
GPUML_CONSTANT(kBindingCount, 10)

GPUML_CONSTANT(kSpecThreads, 0)
GPUML_CONSTANT(kSpecCapacity, 1)   // list slots that fit in shared memory (a power of two)
GPUML_CONSTANT(kSpecExact, 2)      // 1: lists of indices only (knn_filter_coop.comp); values formed here
GPUML_CONSTANT(kSpecLoopGuard, 3)  // 1 on CPU devices: report llvmpipe's loop limit (common.glsl)
GPUML_CONSTANT(kSpecDense, 4)      // 1: each query's p.cap values (knn_select.comp's kModeDense), only the k-th kept
GPUML_CONSTANT(kSpecCount, 5)

// m queries, k kept, cap: list slots per query (at most CAP; DENSE: values per query); EXACT: d features, base: the
// block's first index.
GPUML_PUSH_CONSTANTS(Push) { uint m; uint k; uint cap; uint d; uint base; } GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 5)
GPUML_SHADER_INTERFACE_END

#endif
