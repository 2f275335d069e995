// Tile policy of the Vulkan k-means kernels (workgroup and tile sizes); filled in with the Vulkan engine.
#pragma once

namespace gpuml {
struct kmeans_default_policy {};
}  // namespace gpuml
