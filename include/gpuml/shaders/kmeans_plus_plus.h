// Interface of shaders/kmeans_plus_plus.comp (see interface.h).
#ifndef GPUML_SHADERS_KMEANS_PLUS_PLUS_H
#define GPUML_SHADERS_KMEANS_PLUS_PLUS_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(kmeans_plus_plus)
GPUML_CONSTANT(kBindingX, 0)
GPUML_CONSTANT(kBindingWeights, 1)
GPUML_CONSTANT(kBindingClosest, 2)     // each sample's squared distance to its nearest center so far
GPUML_CONSTANT(kBindingCandidates, 3)
GPUML_CONSTANT(kBindingOut, 4)         // exact sums (int64): potentials' partials per workgroup; commit: mass sums per block
GPUML_CONSTANT(kBindingCount, 5)

GPUML_CONSTANT(kSpecThreads, 0)           // a power of two
GPUML_CONSTANT(kSpecSamplesPerThread, 1)  // per tile
GPUML_CONSTANT(kSpecFeatures, 2)
GPUML_CONSTANT(kSpecTrials, 3)            // candidates per round
GPUML_CONSTANT(kSpecMode, 4)
GPUML_CONSTANT(kSpecCount, 5)

// Values of the kSpecMode constant.
GPUML_CONSTANT(kModePotentials, 0)
GPUML_CONSTANT(kModeCommit, 1)

GPUML_PUSH_CONSTANTS(Push) {
  uint rows;       // samples in this chunk
  uint groups;     // workgroups in this dispatch
  uint out_base;   // potentials: partial row of the first workgroup; commit: the out slot of the chunk's first block
  uint candidate;  // commit: the candidate kept
  uint first;      // commit: 1 for the first center (no earlier distance to compare with)
  uint offset;     // commit: the chunk's first row's place in its sampling block
  int exponent;    // the exact sums' exponent (algorithms::SumFrame::plus_plus_exponent)
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 7)
GPUML_SHADER_INTERFACE_END

#endif
