// One tile-policy system for the Vulkan kernels. Each kernel describes its tiles with one traits type
// (KMeansTileTraits, KnnTileTraits, DistanceTileTraits); one resolver picks the tile of a problem. Policies are
// compile-time types at the API (KMeans<T, Policy>, NearestNeighbors<T, Policy>, pairwise_sq_distances<T, Policy>):
// DefaultTile (no fixed tile) or a tile type (KMeansTile<...>, KnnTile<...>, DistanceTile<...>), each with a
// static `fixed_tile`. Below the estimators only that value travels: kernels and engines take an optional tile
// and resolve it once (choose_tile).
//
// A traits type gives:
//   Params                                the tile: the numbers the shader takes as specialisation constants
//   kernel                                its key in the tuning store
//   encode(p) / decode(numbers)           the store's form and back (decode: nullopt for a malformed entry)
//   text(p)                               the override's syntax ("128,4,8,16,128")
//   override_value()                      the configuration's override for sweeps (empty: none)
//   parse_override(text)                  the override's tile (nullopt: malformed), and override_syntax for messages
//   shape_class(problem)                  the store's shape key
//   catalogue<T>(device, problem)         the device class's tile for the problem
//   shape_misfit<T>(device, p)            why p is no usable tile on the device at all (empty: it is)
//   misfit<T>(device, p, problem)         why p cannot run this problem there (empty: it can; includes shape_misfit)
// The resolver: the override, if it is a usable tile (a sweep forces it: a problem it cannot run is then refused by
// the kernel with gpuml::unsupported); else the tuner's stored winner for the device, shape class and scalar type,
// if it is a usable tile (else one warning) and fits the problem (else quietly passed over); else the catalogue.
#pragma once

#include <gpuml/core/config.hpp>
#include <gpuml/policy/store.hpp>
#include <gpuml/vulkan/instance.hpp>

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuml::kernels {

/// What a tile is chosen for: the problem's k (centers, neighbours; 0 where it has none) and features.
struct TileProblem {
  std::uint32_t k = 0, d = 0;
};

template <class Traits>
concept TileTraits = requires(const typename Traits::Params& p, const std::vector<std::uint32_t>& numbers,
                              const std::string& text, const vulkan::DeviceInfo& device, const TileProblem& problem) {
  { Traits::kernel } -> std::convertible_to<const char*>;
  { Traits::encode(p) } -> std::convertible_to<std::vector<std::uint32_t>>;
  { Traits::decode(numbers) } -> std::convertible_to<std::optional<typename Traits::Params>>;
  { Traits::text(p) } -> std::convertible_to<std::string>;
  { Traits::override_value() } -> std::convertible_to<std::string>;
  { Traits::parse_override(text) } -> std::convertible_to<std::optional<typename Traits::Params>>;
  { Traits::override_syntax } -> std::convertible_to<const char*>;
  { Traits::shape_class(problem) } -> std::convertible_to<std::string>;
  { Traits::template catalogue<float>(device, problem) } -> std::convertible_to<typename Traits::Params>;
  { Traits::template shape_misfit<float>(device, p) } -> std::convertible_to<std::string>;
  { Traits::template misfit<float>(device, p, problem) } -> std::convertible_to<std::string>;
};

/// Whether `tile` can run `problem` on `device`, without throwing; `why` (when given) receives the reason it cannot.
template <TileTraits Traits, class T>
bool can_implement(const vulkan::DeviceInfo& device, const typename Traits::Params& tile, const TileProblem& problem,
                   std::string* why = nullptr) noexcept {
  try {
    std::string reason = Traits::template misfit<T>(device, tile, problem);
    const bool ok = reason.empty();
    if (why) *why = std::move(reason);
    return ok;
  } catch (...) {
    if (why) *why = "the tile's check failed";
    return false;
  }
}

/// The configuration's override, when it is a usable tile on `device`; a malformed or unusable one is ignored with
/// one warning.
template <TileTraits Traits, class T>
std::optional<typename Traits::Params> override_tile(const vulkan::DeviceInfo& device) {
  const std::string value = Traits::override_value();
  if (value.empty()) return std::nullopt;
  const auto tile = Traits::parse_override(value);
  const std::string why =
      tile ? Traits::template shape_misfit<T>(device, *tile) : std::string("expected ") + Traits::override_syntax;
  if (why.empty()) return tile;
  tuning::warn_once(std::string("ignoring the ") + Traits::kernel + " tile " + value + " on " + device.name + ": " + why);
  return std::nullopt;
}

/// The tuner's winner for the device, the problem's shape class and T, when it is a usable tile (else one warning)
/// that fits this problem (else quietly none: a valid winner may not fit every problem of its class).
template <TileTraits Traits, class T>
std::optional<typename Traits::Params> stored_tile(const vulkan::DeviceInfo& device, const TileProblem& problem) {
  const tuning::TuneKey key{Traits::kernel, Traits::shape_class(problem), tuning::scalar_name<T>()};
  const auto numbers = tuning::stored_params(device, key);
  if (!numbers) return std::nullopt;
  const auto tile = Traits::decode(*numbers);
  const std::string why = tile ? Traits::template shape_misfit<T>(device, *tile)
                               : "expected " + std::to_string(Traits::encode(typename Traits::Params{}).size()) + " numbers";
  if (!why.empty()) {
    tuning::warn_once(std::string("ignoring the tuned ") + Traits::kernel + " tile for " + key.shape + " " + key.scalar +
                      " on " + device.name + ": " + why);
    return std::nullopt;
  }
  if (!can_implement<Traits, T>(device, *tile, problem)) return std::nullopt;
  return tile;
}

/// The one resolver: override, stored winner, catalogue (see the top of this header).
template <TileTraits Traits, class T>
typename Traits::Params resolve_tile(const vulkan::DeviceInfo& device, const TileProblem& problem) {
  if (auto tile = override_tile<Traits, T>(device)) return *tile;
  if (auto tile = stored_tile<Traits, T>(device, problem)) return *tile;
  return Traits::template catalogue<T>(device, problem);
}

/// The default policy of a kernel: no fixed tile, so the kernel resolves one (resolve_tile).
template <TileTraits Traits>
struct DefaultTile {
  static constexpr std::optional<typename Traits::Params> fixed_tile{};
};

/// The tile a kernel runs with: `fixed` (a compile-time policy's tile, the tuner's candidate, a test's), else the
/// resolver's for the problem. Each kernel calls this once, when it is set up.
template <TileTraits Traits, class T>
typename Traits::Params choose_tile(const std::optional<typename Traits::Params>& fixed, const vulkan::DeviceInfo& device,
                                    const TileProblem& problem) {
  return fixed ? *fixed : resolve_tile<Traits, T>(device, problem);
}

}  // namespace gpuml::kernels
