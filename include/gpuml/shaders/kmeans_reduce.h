// Interface of shaders/kmeans_reduce.comp (see interface.h).
#ifndef GPUML_SHADERS_KMEANS_REDUCE_H
#define GPUML_SHADERS_KMEANS_REDUCE_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(kmeans_reduce)
GPUML_CONSTANT(kBindingPartials, 0)
GPUML_CONSTANT(kBindingSums, 1)
GPUML_CONSTANT(kBindingCount, 2)

GPUML_CONSTANT(kSpecLanes, 0)  // partials summed in parallel per element (the workgroup's y size)
GPUML_CONSTANT(kSpecCount, 1)

GPUML_CONSTANT(kElementsPerGroup, 32)  // the workgroup's x size: elements per workgroup

GPUML_PUSH_CONSTANTS(Push) {
  uint elements;  // numbers per partial
  uint parts;     // partials
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 2)
GPUML_SHADER_INTERFACE_END

#endif
