// Interface of shaders/kmeans_lloyd.comp (see interface.h).
#ifndef GPUML_SHADERS_KMEANS_LLOYD_H
#define GPUML_SHADERS_KMEANS_LLOYD_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(kmeans_lloyd)
GPUML_CONSTANT(kBindingX, 0)
GPUML_CONSTANT(kBindingWeights, 1)
GPUML_CONSTANT(kBindingLabels, 2)
GPUML_CONSTANT(kBindingCenters, 3)
GPUML_CONSTANT(kBindingCenterNorms, 4)
GPUML_CONSTANT(kBindingPartials, 5)  // k x (d + 1) exact partial sums (int64) per workgroup
GPUML_CONSTANT(kBindingStatus, 6)
GPUML_CONSTANT(kBindingBounds, 7)  // bounded E-step: per sample (upper bound, lower bound, ||x||^2, unused)
GPUML_CONSTANT(kBindingDrift, 8)   // bounded E-step: k moves, k largest moves of the others, radius, centers transposed
GPUML_CONSTANT(kBindingList, 9)    // bounded E-step: per workgroup a count of uncertain samples, then their rows
GPUML_CONSTANT(kBindingDirty, 10)   // bounded E-step: per workgroup, whether a label changed since its partial sums
GPUML_CONSTANT(kBindingTotals, 11)  // bounded E-step: the running exact sums (k x (d + 1) int64), moved per change
GPUML_CONSTANT(kBindingCount, 12)

GPUML_CONSTANT(kSpecThreads, 0)           // a multiple of 32
GPUML_CONSTANT(kSpecSamplesPerThread, 1)  // per tile
GPUML_CONSTANT(kSpecCentersPerThread, 2)  // the register tile
GPUML_CONSTANT(kSpecCenterTile, 3)        // centers per shared tile
GPUML_CONSTANT(kSpecFeatureTile, 4)       // features per shared tile
GPUML_CONSTANT(kSpecClusters, 5)
GPUML_CONSTANT(kSpecFeatures, 6)
GPUML_CONSTANT(kSpecAccShared, 7)   // 1: partial sums in shared memory; 0: in the group's global region
GPUML_CONSTANT(kSpecLoopGuard, 8)   // 1 on CPU devices: report llvmpipe's loop limit (common.glsl)
GPUML_CONSTANT(kSpecStage, 9)       // kStageFull (the plain E-step), or a dispatch of the bounded one (below)
GPUML_CONSTANT(kSpecSumRounds, 10)  // rounds of samples per batch of the partial sums (divides the samples per thread)
GPUML_CONSTANT(kSpecSplitCenters, 11)  // 1: the threads split each center tile (rows of several feature tiles; one sample per thread)
GPUML_CONSTANT(kSpecCount, 12)

// With kSpecSplitCenters, each thread's register tile: kSplitSamples samples of the tile x the centers per thread.
GPUML_CONSTANT(kSplitSamples, 8)

// The dispatches of a bounded step, in order; kStageFull is a whole plain step.
GPUML_CONSTANT(kStageFull, 0)
GPUML_CONSTANT(kStageCheck, 1)   // check every sample's bounds, list the uncertain ones
GPUML_CONSTANT(kStageSearch, 2)  // search the listed samples over all centers
GPUML_CONSTANT(kStageSums, 3)    // the partial sums from the labels

// The check gathers its uncertain samples in shared memory for 2 x this many rounds of the workgroup at most,
// appending them to the list whenever more than this many rounds' worth wait.
GPUML_CONSTANT(kCheckAppendRounds, 4)

// Push.bounds_mode of the bounded E-step.
GPUML_CONSTANT(kBoundsSet, 1)  // the bounds hold nothing yet: search every sample, then set them
GPUML_CONSTANT(kBoundsUse, 2)  // the bounds hold for the last step's centers, and the drift buffer says how they moved

// Bits of status[0], set by any workgroup.
GPUML_CONSTANT(kStatusLabelChanged, 1)
GPUML_CONSTANT(kStatusLoopLimit, 2)
// status[kStatusSearched]: the bounded E-step's samples searched over all centers (the others kept their label).
GPUML_CONSTANT(kStatusSearched, 1)

GPUML_PUSH_CONSTANTS(Push) {
  uint rows;          // samples in this chunk
  uint groups;        // workgroups of this chunk (the stride over its sample tiles)
  uint partial_base;  // partial row-block of the chunk's first workgroup
  uint update;        // 0: labels only (predict, the final E-step)
  uint group_base;    // the chunk's workgroup that this dispatch's first one is (a step submitted in parts)
  uint x_row0;        // the chunk's row that the X and weight bindings start at (a streamed slice; else 0)
  uint tile_begin;    // the chunk's sample tiles this dispatch covers: [tile_begin, tile_end); a slice with
  uint tile_end;      // tile_begin > 0 adds to the partial sums the earlier slices wrote
  uint bounds_mode;   // bounded E-step: kBoundsSet or kBoundsUse (ignored by the plain one)
  int value_exponent;   // the exact sums' exponents (algorithms::SumFrame): of sum_i w_i x_if,
  int weight_exponent;  // and of sum_i w_i
  uint move_totals;     // kStageSearch: 1 to move each changed sample's terms between the totals (no sums stage)
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 12)
GPUML_SHADER_INTERFACE_END

#endif
