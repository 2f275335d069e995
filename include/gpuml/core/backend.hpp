// Where work runs: the host (Eigen, multithreaded) or one Vulkan device. Cheap to copy; devices are shared.
#pragma once

#include <memory>
#include <string>
#include <utility>

namespace gpuml {

namespace vulkan {
class Device;
}

class Backend {
 public:
  /// The host backend: Eigen on the CPU's cores.
  static Backend host() { return Backend(); }
  /// A Vulkan device (see gpuml::select_backend to pick one by name or kind).
  static Backend on(std::shared_ptr<vulkan::Device> device) { return Backend(std::move(device)); }

  bool is_host() const noexcept { return device_ == nullptr; }
  bool is_vulkan() const noexcept { return device_ != nullptr; }
  /// The Vulkan device, or nullptr for the host backend.
  vulkan::Device* device() const noexcept { return device_.get(); }
  const std::shared_ptr<vulkan::Device>& shared_device() const noexcept { return device_; }

 private:
  Backend() = default;
  explicit Backend(std::shared_ptr<vulkan::Device> device) : device_(std::move(device)) {}
  std::shared_ptr<vulkan::Device> device_;
};

}  // namespace gpuml
