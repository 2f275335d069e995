// Where work runs: the host (Eigen, multithreaded), one Vulkan device, or several (rows sharded across them, for the
// estimators that support it; the others use the first). Cheap to copy; devices are shared. A device chosen by
// gpuml::select_backend is opened on first use, not when the backend or an estimator holding it is made.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace gpuml {

namespace vulkan {
class Device;
struct DeviceInfo;
}  // namespace vulkan

class Backend {
 public:
  /// Opens one device (called once, by the first thread that needs it).
  using DeviceOpener = std::function<std::shared_ptr<vulkan::Device>()>;
  /// A device not opened yet: what it is, and how to open it.
  struct DeferredDevice {
    std::shared_ptr<const vulkan::DeviceInfo> info;
    DeviceOpener open;
  };

  /// The host backend: Eigen on the CPU's cores.
  static Backend host() { return Backend(); }
  /// A Vulkan device already open (see gpuml::select_backend to pick one by name or kind, opened on first use).
  template <class Device>
  static Backend on(std::shared_ptr<Device> device) {
    std::vector<std::shared_ptr<Device>> one{std::move(device)};
    return on(std::move(one));
  }
  /// Several Vulkan devices already open (at least one; none null): KMeans shards its rows across them, the rest
  /// uses the first.
  template <class Device>
  static Backend on(std::vector<std::shared_ptr<Device>> devices) {
    std::vector<std::shared_ptr<Slot>> slots;
    for (auto& d : devices) {
      if (!d) return Backend();  // a null device makes no backend: the host
      auto slot = std::make_shared<Slot>();
      slot->info = std::make_shared<const std::decay_t<decltype(d->info())>>(d->info());
      slot->device = std::move(d);
      slot->opened = true;
      slots.push_back(std::move(slot));
    }
    return Backend(std::move(slots));
  }
  /// Vulkan devices opened on first use (by device(), from any copy of this backend).
  static Backend deferred(std::vector<DeferredDevice> devices) {
    std::vector<std::shared_ptr<Slot>> slots;
    for (auto& d : devices) {
      if (!d.info || !d.open) return Backend();
      auto slot = std::make_shared<Slot>();
      slot->info = std::move(d.info);
      slot->open = std::move(d.open);
      slots.push_back(std::move(slot));
    }
    return Backend(std::move(slots));
  }

  bool is_host() const noexcept { return slots_.empty(); }
  bool is_vulkan() const noexcept { return !slots_.empty(); }
  /// How many Vulkan devices (0 for the host backend).
  std::size_t device_count() const noexcept { return slots_.size(); }

  /// What Vulkan device i is (name, kind, limits, features), without opening it.
  const vulkan::DeviceInfo& device_info(std::size_t i = 0) const { return *slots_.at(i)->info; }
  /// Whether Vulkan device i has been opened (by a call to device()).
  bool opened(std::size_t i = 0) const {
    Slot& s = *slots_.at(i);
    std::lock_guard lock(s.mutex);
    return s.opened;
  }

  /// The (first) Vulkan device, opened now if it is not yet; nullptr for the host backend. Throws what opening
  /// throws (gpuml::unsupported, gpuml::vulkan_error); a later call tries again.
  vulkan::Device* device() const { return slots_.empty() ? nullptr : open(*slots_.front()).get(); }
  /// Vulkan device i, opened now if it is not yet.
  vulkan::Device* device(std::size_t i) const { return open(*slots_.at(i)).get(); }
  const std::shared_ptr<vulkan::Device>& shared_device() const {
    static const std::shared_ptr<vulkan::Device> none;
    return slots_.empty() ? none : open(*slots_.front());
  }
  /// Device i alone, as a backend of its own (sharing its opening with this one).
  Backend part(std::size_t i) const { return Backend({slots_.at(i)}); }

 private:
  struct Slot {
    std::shared_ptr<const vulkan::DeviceInfo> info;
    DeviceOpener open;
    std::shared_ptr<vulkan::Device> device;
    bool opened = false;
    std::mutex mutex;  // held while opening, so a device is opened once
  };
  static const std::shared_ptr<vulkan::Device>& open(Slot& s) {
    std::lock_guard lock(s.mutex);
    if (!s.opened) {
      s.device = s.open();
      s.opened = true;
      s.open = nullptr;
    }
    return s.device;
  }

  Backend() = default;
  explicit Backend(std::vector<std::shared_ptr<Slot>> slots) : slots_(std::move(slots)) {}
  std::vector<std::shared_ptr<Slot>> slots_;
};

}  // namespace gpuml
