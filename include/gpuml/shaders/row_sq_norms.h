// Interface of shaders/row_sq_norms.comp (see interface.h).
#ifndef GPUML_SHADERS_ROW_SQ_NORMS_H
#define GPUML_SHADERS_ROW_SQ_NORMS_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(row_sq_norms)
GPUML_CONSTANT(kBindingRows, 0)   // row-major rows
GPUML_CONSTANT(kBindingNorms, 1)  // one squared norm per row
GPUML_CONSTANT(kBindingCount, 2)

GPUML_CONSTANT(kSpecThreads, 0)
GPUML_CONSTANT(kSpecCount, 1)

GPUML_PUSH_CONSTANTS(Push) {
  uint rows;
  uint cols;
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 2)
GPUML_SHADER_INTERFACE_END

#endif
