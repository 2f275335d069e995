// Interface of shaders/kmeans_inertia.comp (see interface.h).
#ifndef GPUML_SHADERS_KMEANS_INERTIA_H
#define GPUML_SHADERS_KMEANS_INERTIA_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(kmeans_inertia)
GPUML_CONSTANT(kBindingX, 0)
GPUML_CONSTANT(kBindingWeights, 1)
GPUML_CONSTANT(kBindingLabels, 2)
GPUML_CONSTANT(kBindingCentres, 3)
GPUML_CONSTANT(kBindingPartials, 4)  // one partial sum per workgroup
GPUML_CONSTANT(kBindingCount, 5)

GPUML_CONSTANT(kSpecThreads, 0)  // a power of two
GPUML_CONSTANT(kSpecFeatures, 1)
GPUML_CONSTANT(kSpecCount, 2)

GPUML_PUSH_CONSTANTS(Push) {
  uint rows;          // samples in this chunk
  uint groups;        // workgroups in this dispatch
  uint partial_base;  // partial of this dispatch's first workgroup
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 3)
GPUML_SHADER_INTERFACE_END

#endif
