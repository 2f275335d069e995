// Interface of shaders/kmeans_inertia.comp (see interface.h).
#ifndef GPUML_SHADERS_KMEANS_INERTIA_H
#define GPUML_SHADERS_KMEANS_INERTIA_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(kmeans_inertia)
GPUML_CONSTANT(kBindingX, 0)
GPUML_CONSTANT(kBindingWeights, 1)
GPUML_CONSTANT(kBindingLabels, 2)
GPUML_CONSTANT(kBindingCenters, 3)
GPUML_CONSTANT(kBindingPartials, 4)   // kModeInertia: one exact partial sum (int64) per workgroup
GPUML_CONSTANT(kBindingDistances, 5)  // kModeDistances: the distances
GPUML_CONSTANT(kBindingCount, 6)

GPUML_CONSTANT(kSpecThreads, 0)  // a power of two
GPUML_CONSTANT(kSpecFeatures, 1)
GPUML_CONSTANT(kSpecMode, 2)
GPUML_CONSTANT(kSpecCount, 3)

// kModeInertia: partial sums of w_i ||x_i - c_{l_i}||^2. kModeDistances: ||x_i - c_j|| for every row and center
// (KMeans.transform), row-major rows x centers at partial_base; weights and labels are not read.
GPUML_CONSTANT(kModeInertia, 0)
GPUML_CONSTANT(kModeDistances, 1)

GPUML_PUSH_CONSTANTS(Push) {
  uint rows;          // samples in this chunk
  uint groups;        // workgroups in this dispatch
  uint partial_base;  // partial of this dispatch's first workgroup
  uint centers;       // kModeDistances: centers per row
  int exponent;       // kModeInertia: the exact sum's exponent (algorithms::SumFrame::inertia_exponent)
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 5)
GPUML_SHADER_INTERFACE_END

#endif
