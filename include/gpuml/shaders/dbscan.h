// Interface of shaders/dbscan.comp (see interface.h).
#ifndef GPUML_SHADERS_DBSCAN_H
#define GPUML_SHADERS_DBSCAN_H
#include "interface.h"

GPUML_SHADER_INTERFACE_BEGIN(dbscan)
GPUML_CONSTANT(kBindingLabels, 0)   // per sample: a core sample's label (a smaller core index of its component, at
                                    // the end the smallest), or kNotCore | the smallest root a border sample reached
GPUML_CONSTANT(kBindingOffsets, 1)  // the piece's rows row0 .. row0 + rows: rows + 1 offsets into the piece's edges
GPUML_CONSTANT(kBindingIndices, 2)  // the piece's edges: neighbour indices, each row's in increasing order
GPUML_CONSTANT(kBindingChanged, 3)  // one word, set when a dispatch changed a label
GPUML_CONSTANT(kBindingPosition, 4) // PERMUTED: per original index, its sample's position
GPUML_CONSTANT(kBindingCount, 5)

GPUML_CONSTANT(kSpecThreads, 0)
GPUML_CONSTANT(kSpecMode, 1)
GPUML_CONSTANT(kSpecPermuted, 2)  // 1: samples in a sorted order, labels naming original indices
GPUML_CONSTANT(kSpecCount, 3)

// Values of kSpecMode. HOOK (per edge between two core samples): both ends, and the larger of their labels, take
// the smaller label. JUMP (per core sample): its label becomes its label's label, followed at most kJumpSteps
// times. BORDER (per edge from a core sample to a non-core one): the non-core sample keeps the smallest label of
// its core neighbours.
GPUML_CONSTANT(kModeHook, 0)
GPUML_CONSTANT(kModeJump, 1)
GPUML_CONSTANT(kModeBorder, 2)
GPUML_CONSTANT(kJumpSteps, 32)

// The flag of a non-core sample's label (so at most 2^31 - 1 samples); kNotCore alone: no core neighbour yet.
GPUML_CONSTANT(kNotCore, 0x80000000)
GPUML_CONSTANT(kNoRoot, 0xFFFFFFFF)
// An index with this bit is no edge (radius.h's kUncertain: the same bit).
GPUML_CONSTANT(kSkippedEdge, 0x80000000)

// n samples; the piece: `edges` edges of rows [row0, row0 + rows).
GPUML_PUSH_CONSTANTS(Push) {
  uint n; uint row0; uint rows; uint edges;
} GPUML_PUSH_INSTANCE(p);
GPUML_CHECK_PUSH(Push, 4)
GPUML_SHADER_INTERFACE_END

#endif
