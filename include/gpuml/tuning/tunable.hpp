// What the tuner needs from a kernel. A kernel plugs in by describing itself as a TunableKernel and adding it to
// tunable_kernels() (tuning/tuner.hpp); tuning/kmeans.hpp is the worked example. It gives:
//   name        its key in the tuning store; the kernel's default policy looks its winner up under the same name
//   shapes      its problem-shape classes (the store's shape key); its policy maps a problem to one of them
//   candidates  the parameter sets to try for a shape on a device, the catalogue's default first, duplicates removed
//   misfit      why a candidate cannot run the shape's problem on the device (empty: it can); the tuner never
//               times a candidate that fails it, and the policy never dispatches one
//   describe    a candidate as short text for reports ("128,4,8,16,128")
//   rows        the problem sizes to use: a probe size quick on any device of its class, and a largest size
//               bounded by memory; the tuner scales between them until one call takes a few milliseconds (a
//               range of one size fixes the problem: k-NN's, sized like real searches, see tuning/knn.hpp)
//   bench       the shape's representative problem of a given size, built on the device, timing candidates
// Parameters travel as std::vector<std::uint32_t>, the store's form; the kernel encodes and decodes them.
#pragma once

#include <gpuml/policy/tile.hpp>
#include <gpuml/vulkan/device.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gpuml::tuning {

using Params = std::vector<std::uint32_t>;

/// A shape class's representative problem, on the device, timed with one candidate after another.
class ShapeBench {
 public:
  virtual ~ShapeBench() = default;
  /// The problem, for reports: "n=4194304 d=14 k=127".
  virtual std::string problem() const = 0;
  /// Milliseconds per call with `params`: the median of `reps` timed calls after `warmups` untimed ones.
  virtual double time_ms(const Params& params, int warmups, int reps) = 0;
};

struct RowRange {
  std::uint64_t probe = 0, max = 0;
};

struct TunableKernel {
  std::string name;
  std::vector<std::string> shapes;
  std::function<std::vector<Params>(const vulkan::DeviceInfo&, const std::string& shape)> candidates;
  std::function<std::string(const vulkan::DeviceInfo&, const Params&, const std::string& shape, const std::string& scalar)> misfit;
  std::function<std::string(const Params&)> describe;
  std::function<RowRange(const vulkan::DeviceInfo&, const std::string& shape, const std::string& scalar)> rows;
  std::function<std::unique_ptr<ShapeBench>(vulkan::Device&, const std::string& shape, const std::string& scalar,
                                            std::uint64_t rows)>
      bench;
};

/// The fields every tile-policy kernel fills the same way from its traits (policy/tile.hpp): its name in
/// the store, a candidate's misfit for the shape class's representative problem (`representative(shape)` gives its
/// k and d), and a candidate's text.
template <kernels::TileTraits Traits, class Representative>
void describe_tiles(TunableKernel& t, Representative representative) {
  t.name = Traits::kernel;
  t.misfit = [representative](const vulkan::DeviceInfo& device, const Params& p, const std::string& shape,
                              const std::string& scalar) {
    const auto tile = Traits::decode(p);
    if (!tile) return std::string("not a ") + Traits::kernel + " tile";
    const auto s = representative(shape);
    const kernels::TileProblem problem{s.k, s.d};
    return scalar == "f64" ? Traits::template misfit<double>(device, *tile, problem)
                           : Traits::template misfit<float>(device, *tile, problem);
  };
  t.describe = [](const Params& p) {
    const auto tile = Traits::decode(p);
    return tile ? Traits::text(*tile) : std::string("?");
  };
}

}  // namespace gpuml::tuning
