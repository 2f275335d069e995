// Tile policies of the pairwise distance kernel (shaders/pairwise_sq_distances.comp): the tile shape, its traits in
// the tile-policy system (policy/tile.hpp), compile-time tiles and the default policy.
#pragma once

#include <gpuml/policy/limits.hpp>
#include <gpuml/policy/tile.hpp>
#include <gpuml/shaders/pairwise_sq_distances.h>
#include <gpuml/vulkan/instance.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuml::kernels {

/// Tile shape of the distance kernel on one device: a workgroup of wx x wy threads, each computing tm x tn
/// distances, with bk features staged in shared memory per step (shaders/tile_product.glsl; tm and tn multiples
/// of 4).
struct DistanceTileParams {
  std::uint32_t wx = 16, wy = 16, tm = 8, tn = 8, bk = 16;

  constexpr std::uint32_t block_rows() const { return wy * tm; }
  constexpr std::uint32_t block_cols() const { return wx * tn; }
  constexpr std::uint32_t threads() const { return wx * wy; }
  template <class T>
  constexpr std::uint64_t shared_bytes() const {
    return sizeof(T) * std::uint64_t(bk) * (block_rows() + 4 + block_cols() + 4);
  }
  /// Why the device cannot run this tile (empty: it can).
  template <class T>
  std::string misfit(const vulkan::DeviceInfo& d) const {
    if (!wx || !wy || !tm || !tn || !bk || tm % 4 || tn % 4 || tm * tn > 256)
      return "tm and tn must be multiples of 4 with at most 256 values per thread, the rest positive";
    return workgroup_misfit(d, wx, wy, shared_bytes<T>());
  }
  std::vector<std::uint32_t> constants() const {
    namespace shader = shader_interface::pairwise_sq_distances;
    return spec_constants(shader::kSpecCount, {{shader::kSpecWX, wx}, {shader::kSpecWY, wy}, {shader::kSpecTM, tm},
                                               {shader::kSpecTN, tn}, {shader::kSpecBK, bk}});
  }
};

/// The distance kernel's tiles in the tile-policy system (policy/tile.hpp). No override and nothing tuned
/// yet: the resolver gives the catalogue's tile, 128 x 128 output blocks, with half the features per step for
/// double (shared memory within lavapipe's 32 KiB).
struct DistanceTileTraits {
  using Params = DistanceTileParams;
  static constexpr const char* kernel = "pairwise_sq_distances";
  static constexpr const char* override_syntax = "wx,wy,tm,tn,bk";
  static std::vector<std::uint32_t> encode(const Params& t) { return {t.wx, t.wy, t.tm, t.tn, t.bk}; }
  static std::optional<Params> decode(const std::vector<std::uint32_t>& p) {
    if (p.size() != 5) return std::nullopt;
    return Params{p[0], p[1], p[2], p[3], p[4]};
  }
  static std::string text(const Params& t) {
    std::string s;
    for (auto v : encode(t)) s += (s.empty() ? "" : ",") + std::to_string(v);
    return s;
  }
  static std::string override_value() { return {}; }
  static std::optional<Params> parse_override(const std::string&) { return std::nullopt; }
  static std::string shape_class(const TileProblem& p) { return p.d <= 32 ? "d<=32" : "d>32"; }
  template <class T>
  static Params catalogue(const vulkan::DeviceInfo&, const TileProblem& = {}) {
    return {16, 16, 8, 8, sizeof(T) == 4 ? 16u : 8u};
  }
  template <class T>
  static std::string shape_misfit(const vulkan::DeviceInfo& device, const Params& t) {
    return t.misfit<T>(device);
  }
  template <class T>
  static std::string misfit(const vulkan::DeviceInfo& device, const Params& t, const TileProblem&) {
    return t.misfit<T>(device);  // the driver splits any problem to fit the tile
  }
};

/// A fixed tile as a compile-time policy.
template <std::uint32_t WX = 16, std::uint32_t WY = 16, std::uint32_t TM = 8, std::uint32_t TN = 8, std::uint32_t BK = 16>
struct DistanceTile {
  static_assert(WX > 0 && WY > 0 && TM > 0 && TN > 0 && BK > 0, "tile dimensions must be positive");
  static_assert(WX * WY <= 1024, "at most 1024 threads per workgroup");
  static_assert(TM * TN <= 256, "at most 256 accumulators per thread");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN are multiples of 4 (shared tiles are read as 4-vectors)");
  static constexpr DistanceTileParams tile{WX, WY, TM, TN, BK};
  static constexpr std::optional<DistanceTileParams> fixed_tile{tile};
};

/// The default policy: no fixed tile, so the kernel resolves one (resolve_tile over DistanceTileTraits).
struct distance_default_policy : DefaultTile<DistanceTileTraits> {};

}  // namespace gpuml::kernels
