// Interface of shaders/shift_rows.comp (see interface.h).
#ifndef GPUML_SHADERS_SHIFT_ROWS_H
#define GPUML_SHADERS_SHIFT_ROWS_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(shift_rows)
GPUML_CONSTANT(kBindingRows, 0)   // row-major rows, shifted in place
GPUML_CONSTANT(kBindingShift, 1)  // one value per column
GPUML_CONSTANT(kBindingCount, 2)

GPUML_CONSTANT(kSpecThreads, 0)
GPUML_CONSTANT(kSpecCount, 1)

GPUML_PUSH_CONSTANTS(Push) {
  uint elements;  // rows * cols
  uint cols;
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 2)
GPUML_SHADER_INTERFACE_END

#endif
