// Interface of shaders/knn_merge.comp (see interface.h).
#ifndef GPUML_SHADERS_KNN_MERGE_H
#define GPUML_SHADERS_KNN_MERGE_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(knn_merge)
GPUML_CONSTANT(kBindingValues, 0)   // knn_select's heaps, merged in place
GPUML_CONSTANT(kBindingIndices, 1)
GPUML_CONSTANT(kBindingCount, 2)

GPUML_CONSTANT(kSpecThreads, 0)
GPUML_CONSTANT(kSpecCount, 1)

// m queries, k kept, splits: heaps per query, stride: splits between merged heaps, group: heaps merged per thread.
GPUML_PUSH_CONSTANTS(Push) { uint m; uint k; uint splits; uint stride; uint group; } GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 5)
GPUML_SHADER_INTERFACE_END

#endif
