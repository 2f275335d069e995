// Tile policies of the Vulkan k-means kernels: workgroup size and register/shared tiles, as compile-time types
// mapped to specialisation constants. Each policy is checked against the device's shared memory before any
// dispatch (plan_lloyd); the default policy picks its tiles per device class at run time.
#pragma once

#include <gpuml/vulkan/instance.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace gpuml {

/// The tile shape a policy resolves to on one device.
struct KMeansTileParams {
  std::uint32_t threads, samples_per_thread, centres_per_thread, feature_tile, centre_tile;
};

/// Threads per workgroup (a multiple of 32), samples per thread, centres per thread (register tile), features
/// per tile, centres per shared tile (a multiple of CentresPerThread).
template <std::uint32_t Threads = 128, std::uint32_t SamplesPerThread = 4, std::uint32_t CentresPerThread = 8,
          std::uint32_t FeatureTile = 16, std::uint32_t CentreTile = 128>
struct KMeansTile {
  static_assert(Threads % 32 == 0 && Threads >= 32 && Threads <= 1024, "threads: a multiple of 32, at most 1024");
  static_assert(SamplesPerThread >= 1 && SamplesPerThread <= 16, "1 to 16 samples per thread");
  static_assert(CentresPerThread >= 1 && FeatureTile >= 1, "tiles must be non-empty");
  static_assert(CentreTile % CentresPerThread == 0, "the shared centre tile is a whole number of register tiles");
  static_assert(SamplesPerThread * (FeatureTile + CentresPerThread) <= 256, "register tile too large");
  static constexpr KMeansTileParams tile{Threads, SamplesPerThread, CentresPerThread, FeatureTile, CentreTile};
  static KMeansTileParams params(const vulkan::DeviceInfo&) { return tile; }
};

/// Per-device-class defaults (ggml-style catalogue). CPU Vulkan devices (lavapipe) get small register tiles:
/// Mesa 22.3's llvmpipe miscomputes this kernel with SPT x KT x DS of 256 and more on large k x d.
/// GPUML_KMEANS_TILE=threads,spt,kt,ds,ks overrides the choice (for tuning sweeps); plan_lloyd still checks it.
struct kmeans_default_policy {
  static KMeansTileParams params(const vulkan::DeviceInfo& device) {
    if (const char* env = std::getenv("GPUML_KMEANS_TILE")) {
      KMeansTileParams p{};
      if (std::sscanf(env, "%u,%u,%u,%u,%u", &p.threads, &p.samples_per_thread, &p.centres_per_thread,
                      &p.feature_tile, &p.centre_tile) == 5 &&
          p.threads % 32 == 0 && p.threads > 0 && p.samples_per_thread > 0 && p.centres_per_thread > 0 &&
          p.feature_tile > 0 && p.centre_tile % p.centres_per_thread == 0)
        return p;
    }
    if (device.type == vulkan::DeviceType::cpu) return KMeansTile<128, 4, 4, 8, 128>::tile;
    return KMeansTile<128, 4, 8, 16, 128>::tile;
  }
};

}  // namespace gpuml
