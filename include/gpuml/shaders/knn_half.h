// Interface of shaders/knn_half.comp (see interface.h). Built for float32 only.
#ifndef GPUML_SHADERS_KNN_HALF_H
#define GPUML_SHADERS_KNN_HALF_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(knn_half)
GPUML_CONSTANT(kBindingRows, 0)
GPUML_CONSTANT(kBindingNorms, 1)   // the rows' squared norms
GPUML_CONSTANT(kBindingHalf, 2)    // float16 pairs
GPUML_CONSTANT(kBindingTerms, 3)   // with terms: per row, half_row_term (knn_half_bound.glsl)
GPUML_CONSTANT(kBindingCount, 4)

GPUML_CONSTANT(kSpecCount, 0)

GPUML_CONSTANT(kPairsPerGroup, 256)  // the workgroup size: one float16 pair per invocation

// n rows of d features in, rows_out rows of dpad features (a multiple of 16) out, each element times scale;
// terms: 1 to write the rows' terms too.
GPUML_PUSH_CONSTANTS(Push) {
  uint n; uint d; uint dpad; uint rows_out; float scale; uint terms;
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 6)
GPUML_SHADER_INTERFACE_END

#endif
