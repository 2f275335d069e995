// Interface of shaders/pairwise_sq_distances.comp (see interface.h).
#ifndef GPUML_SHADERS_PAIRWISE_SQ_DISTANCES_H
#define GPUML_SHADERS_PAIRWISE_SQ_DISTANCES_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(pairwise_sq_distances)
GPUML_CONSTANT(kBindingX, 0)
GPUML_CONSTANT(kBindingY, 1)
GPUML_CONSTANT(kBindingXNorms, 2)
GPUML_CONSTANT(kBindingYNorms, 3)
GPUML_CONSTANT(kBindingDistances, 4)
GPUML_CONSTANT(kBindingCount, 5)

// The tile (tile_product.glsl): WX x WY threads, TM x TN distances each, BK features per shared-memory step.
GPUML_CONSTANT(kSpecWX, 0)
GPUML_CONSTANT(kSpecWY, 1)
GPUML_CONSTANT(kSpecTM, 2)
GPUML_CONSTANT(kSpecTN, 3)
GPUML_CONSTANT(kSpecBK, 4)
GPUML_CONSTANT(kSpecCount, 5)

GPUML_PUSH_CONSTANTS(Push) {
  uint n;    // X rows in this block
  uint m;    // Y rows in this block
  uint d;    // features
  uint ldd;  // the distance block's row stride
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 4)
GPUML_SHADER_INTERFACE_END

#endif
