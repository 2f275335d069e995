// Interface of shaders/kmeans_lloyd.comp (see interface.h).
#ifndef GPUML_SHADERS_KMEANS_LLOYD_H
#define GPUML_SHADERS_KMEANS_LLOYD_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(kmeans_lloyd)
GPUML_CONSTANT(kBindingX, 0)
GPUML_CONSTANT(kBindingWeights, 1)
GPUML_CONSTANT(kBindingLabels, 2)
GPUML_CONSTANT(kBindingCentres, 3)
GPUML_CONSTANT(kBindingCentreNorms, 4)
GPUML_CONSTANT(kBindingPartials, 5)  // k x (d + 1) partial sums per workgroup
GPUML_CONSTANT(kBindingStatus, 6)
GPUML_CONSTANT(kBindingCount, 7)

GPUML_CONSTANT(kSpecThreads, 0)           // a multiple of 32
GPUML_CONSTANT(kSpecSamplesPerThread, 1)  // per tile
GPUML_CONSTANT(kSpecCentresPerThread, 2)  // the register tile
GPUML_CONSTANT(kSpecCentreTile, 3)        // centres per shared tile
GPUML_CONSTANT(kSpecFeatureTile, 4)       // features per shared tile
GPUML_CONSTANT(kSpecClusters, 5)
GPUML_CONSTANT(kSpecFeatures, 6)
GPUML_CONSTANT(kSpecAccShared, 7)   // 1: partial sums in shared memory; 0: in the group's global region
GPUML_CONSTANT(kSpecLoopGuard, 8)   // 1 on CPU devices: report llvmpipe's loop limit (common.glsl)
GPUML_CONSTANT(kSpecCount, 9)

// Bits of status[0], set by any workgroup.
GPUML_CONSTANT(kStatusLabelChanged, 1)
GPUML_CONSTANT(kStatusLoopLimit, 2)

GPUML_PUSH_CONSTANTS(Push) {
  uint rows;          // samples in this chunk
  uint groups;        // workgroups of this chunk (the stride over its sample tiles)
  uint partial_base;  // partial row-block of the chunk's first workgroup
  uint update;        // 0: labels only (predict, the final E-step)
  uint group_base;    // the chunk's workgroup that this dispatch's first one is (a step submitted in parts)
  uint x_row0;        // the chunk's row that the X and weight bindings start at (a streamed slice; else 0)
  uint tile_begin;    // the chunk's sample tiles this dispatch covers: [tile_begin, tile_end); a slice with
  uint tile_end;      // tile_begin > 0 adds to the partial sums the earlier slices wrote
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 8)
GPUML_SHADER_INTERFACE_END

#endif
