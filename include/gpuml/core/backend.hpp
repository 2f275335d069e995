// Where work runs: the host (Eigen, multithreaded), one Vulkan device, or several (rows sharded across them, for the
// estimators that support it; the others use the first). Cheap to copy; devices are shared.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpuml {

namespace vulkan {
class Device;
}

class Backend {
 public:
  /// The host backend: Eigen on the CPU's cores.
  static Backend host() { return Backend(); }
  /// A Vulkan device (see gpuml::select_backend to pick one by name or kind).
  static Backend on(std::shared_ptr<vulkan::Device> device) { return Backend({std::move(device)}); }
  /// Several Vulkan devices (at least one; none null): KMeans shards its rows across them, the rest uses the first.
  static Backend on(std::vector<std::shared_ptr<vulkan::Device>> devices) { return Backend(std::move(devices)); }

  bool is_host() const noexcept { return devices_.empty(); }
  bool is_vulkan() const noexcept { return !devices_.empty(); }
  /// The (first) Vulkan device, or nullptr for the host backend.
  vulkan::Device* device() const noexcept { return devices_.empty() ? nullptr : devices_.front().get(); }
  const std::shared_ptr<vulkan::Device>& shared_device() const noexcept {
    static const std::shared_ptr<vulkan::Device> none;
    return devices_.empty() ? none : devices_.front();
  }
  /// How many Vulkan devices (0 for the host backend), and each of them.
  std::size_t device_count() const noexcept { return devices_.size(); }
  vulkan::Device* device(std::size_t i) const { return devices_.at(i).get(); }
  /// Device i alone, as a backend of its own.
  Backend part(std::size_t i) const { return Backend({devices_.at(i)}); }

 private:
  Backend() = default;
  explicit Backend(std::vector<std::shared_ptr<vulkan::Device>> devices) : devices_(std::move(devices)) {
    for (const auto& d : devices_)
      if (!d) devices_.clear();  // a null device makes no backend: the host
  }
  std::vector<std::shared_ptr<vulkan::Device>> devices_;
};

}  // namespace gpuml
