// Interface of shaders/column_checks.comp (see interface.h).
#ifndef GPUML_SHADERS_COLUMN_CHECKS_H
#define GPUML_SHADERS_COLUMN_CHECKS_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(column_checks)
GPUML_CONSTANT(kBindingRows, 0)       // row-major float32 rows, as the host holds them
GPUML_CONSTANT(kBindingExponents, 1)  // kModeSums: one exponent per column (algorithms::ExactColumnSums)
GPUML_CONSTANT(kBindingPartials, 2)   // per row block and column: kRangeWords uints, or kSumWords int64 (as uint pairs)
GPUML_CONSTANT(kBindingCenter, 3)     // kModeSquares: one float64 center per column
GPUML_CONSTANT(kBindingCount, 4)

GPUML_CONSTANT(kSpecThreads, 0)
GPUML_CONSTANT(kSpecMode, 1)
GPUML_CONSTANT(kSpecCount, 2)

GPUML_CONSTANT(kModeRange, 0)  // each column's lowest and highest value, smallest nonzero magnitude, finiteness
GPUML_CONSTANT(kModeSums, 1)   // each column's exact sum: the integers round(y) and round((y - round(y)) 2^32)
GPUML_CONSTANT(kModeSquares, 2)  // the same of (v - center)^2 in float64 (the variances): the float64 build only

// kModeRange's words: the lowest and highest values as order keys (range_key), the smallest nonzero magnitude's
// bits (0x7F800000, infinity's, where none) and 1 where every value was finite.
GPUML_CONSTANT(kRangeWords, 4)
GPUML_CONSTANT(kSumWords, 2)

GPUML_PUSH_CONSTANTS(Push) {
  uint rows;            // rows of this block of X
  uint cols;
  uint rows_per_group;  // rows of one row block (a workgroup's, or a column block's where cols > threads)
  uint first_group;     // the row block of the dispatch's first workgroup
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 4)
GPUML_SHADER_INTERFACE_END

#endif
