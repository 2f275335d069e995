// Choosing where work runs. GPUML_DEVICE (or select_backend in C++) takes:
//   auto (default)  a discrete GPU, else an integrated GPU, else another GPU; the host when the only Vulkan
//                   device is a CPU (lavapipe), which the Eigen host backend outruns
//   gpu | discrete | integrated | cpu   the first Vulkan device of that kind ("cpu": lavapipe and the like)
//   host            Eigen on the CPU's cores
//   N               Vulkan device number N;  any other text: the first device whose name contains it
//   A,B,...         several of the above (KMeans shards its rows across them)
// select_backend, default_backend, set_default_backend and describe are declared in backend_choice.hpp as well; in the
// compiled mode (core/compiled.hpp) the library alone defines them.
#pragma once

#include <gpuml/backend_choice.hpp>
#include <gpuml/core/backend.hpp>
#include <gpuml/core/compiled.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/warnings.hpp>
#include <gpuml/vulkan/device.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace gpuml {

/// The Vulkan devices present (empty without a loader or driver).
inline std::vector<vulkan::DeviceInfo> vulkan_devices() {
  auto instance = vulkan::Instance::get();
  return instance ? instance->devices() : std::vector<vulkan::DeviceInfo>{};
}

namespace detail {

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// One logical device per physical device, shared by every Backend that picks it.
inline std::shared_ptr<vulkan::Device> open_device(const vulkan::DeviceInfo& info) {
  static std::mutex m;
  static std::map<std::uint32_t, std::weak_ptr<vulkan::Device>> open;
  std::lock_guard lock(m);
  if (auto live = open[info.index].lock()) return live;
  auto device = std::make_shared<vulkan::Device>(vulkan::Instance::get(), info);
  open[info.index] = device;
  return device;
}

inline int gpu_rank(vulkan::DeviceType t) {
  switch (t) {
    case vulkan::DeviceType::discrete: return 0;
    case vulkan::DeviceType::integrated: return 1;
    case vulkan::DeviceType::virtual_gpu: return 2;
    case vulkan::DeviceType::other: return 3;
    default: return 99;
  }
}

/// The device `choice` names, or nullopt for the host; throws gpuml::unsupported when it names none present.
inline std::optional<vulkan::DeviceInfo> resolve(std::string_view choice_text) {
  const std::string choice = lower(choice_text);
  if (choice == "host") return std::nullopt;
  const auto devices = vulkan_devices();
  const bool automatic = choice.empty() || choice == "auto";
  auto describe_present = [&] {
    std::string s;
    for (auto& d : devices) s += "\n  " + std::to_string(d.index) + ": " + d.name + " (" + device_type_name(d.type) + ")";
    return devices.empty() ? std::string(" (no Vulkan device found)") : ", present:" + s;
  };
  auto fail = [&]() -> std::optional<vulkan::DeviceInfo> {
    throw unsupported("GPUML_DEVICE / select_backend: no Vulkan device matches '" + std::string(choice_text) + "'" +
                      describe_present());
  };
  if (automatic || choice == "gpu") {
    const vulkan::DeviceInfo* best = nullptr;
    for (auto& d : devices)
      if (d.is_gpu() && (!best || gpu_rank(d.type) < gpu_rank(best->type))) best = &d;
    if (best) return *best;
    if (automatic) return std::nullopt;
    return fail();
  }
  auto first_of = [&](vulkan::DeviceType t) -> std::optional<vulkan::DeviceInfo> {
    for (auto& d : devices)
      if (d.type == t) return d;
    return fail();
  };
  if (choice == "discrete") return first_of(vulkan::DeviceType::discrete);
  if (choice == "integrated") return first_of(vulkan::DeviceType::integrated);
  if (choice == "cpu") return first_of(vulkan::DeviceType::cpu);
  if (std::all_of(choice.begin(), choice.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    const auto index = static_cast<std::uint32_t>(std::stoul(choice));
    for (auto& d : devices)
      if (d.index == index) return d;
    return fail();
  }
  for (auto& d : devices)
    if (lower(d.name).find(choice) != std::string::npos) return d;
  return fail();
}

inline std::optional<Backend>& default_backend_slot() {
  static std::optional<Backend> slot;
  return slot;
}

inline std::mutex& default_backend_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace detail

#if GPUML_DEFINES_LIBRARY
/// The backend `choice` names (see the top of this header). A comma-separated list ("0,1", "cpu,cpu") names
/// several devices, whose rows KMeans shards across them; a device named twice is opened twice (two logical devices
/// of one physical device, as tests use on lavapipe). Throws gpuml::unsupported if one is not present, and
/// gpuml::invalid_input for "host" or "auto" inside a list. The devices are found now and opened on first use.
GPUML_INLINE Backend select_backend(std::string_view choice) {
  auto deferred = [](const vulkan::DeviceInfo& info, bool again) {
    Backend::DeviceOpener open = [info, again] {
      return again ? std::make_shared<vulkan::Device>(vulkan::Instance::get(), info) : detail::open_device(info);
    };
    return Backend::DeferredDevice{std::make_shared<const vulkan::DeviceInfo>(info), std::move(open)};
  };
  if (choice.find(',') == std::string_view::npos) {
    auto info = detail::resolve(choice);
    return info ? Backend::deferred({deferred(*info, false)}) : Backend::host();
  }
  std::vector<Backend::DeferredDevice> devices;
  std::vector<std::uint32_t> opened;
  std::size_t start = 0;
  while (start <= choice.size()) {
    const std::size_t comma = std::min(choice.find(',', start), choice.size());
    const std::string part = detail::lower(choice.substr(start, comma - start));
    if (part.empty() || part == "host" || part == "auto")
      throw invalid_input("a device list names Vulkan devices only (an index, a kind or a name), got '" +
                          std::string(choice) + "'");
    const auto info = detail::resolve(part);
    const bool again = std::find(opened.begin(), opened.end(), info->index) != opened.end();
    devices.push_back(deferred(*info, again));
    opened.push_back(info->index);
    start = comma + 1;
  }
  return Backend::deferred(std::move(devices));
}
#endif

/// A backend on a Vulkan device that the application created and owns (see vulkan::ExternalDevice for what
/// gpuml uses of it and what the application promises). Throws gpuml::invalid_input for handles that do not fit
/// together and gpuml::unsupported for a device gpuml cannot run on.
inline Backend external_backend(const vulkan::ExternalDevice& external) {
  auto instance = vulkan::Instance::adopt(external.instance, external.instance_api_version);
  return Backend::on(std::make_shared<vulkan::Device>(std::move(instance), external));
}

#if GPUML_DEFINES_LIBRARY
/// The process default: Config::device (GPUML_DEVICE, default automatic). A device asked for but absent gives a warning
/// and the host backend. Decided once; set_default_backend overrides it.
GPUML_INLINE Backend default_backend() {
  std::lock_guard lock(detail::default_backend_mutex());
  auto& slot = detail::default_backend_slot();
  if (!slot) {
    const std::string choice = config().device();
    try {
      slot = select_backend(choice);
    } catch (const error& e) {
      warn(std::string(e.what()) + "; using the host backend");
      slot = Backend::host();
    }
  }
  return *slot;
}

/// Makes `backend` the default for estimators constructed from now on.
GPUML_INLINE void set_default_backend(Backend backend) {
  std::lock_guard lock(detail::default_backend_mutex());
  detail::default_backend_slot() = std::move(backend);
}
#endif

/// The one rule by which every estimator and function chooses its engine:
///  - the host backend runs `on_host()`;
///  - a Vulkan backend runs `on_device()`, unless T is double and a device lacks shaderFloat64, or the device engine
///    throws gpuml::unsupported (a problem beyond what the device can run: memory, bindings, a kernel limit, a
///    device fault found before any result is used); then `on_host()` runs instead, after one warning per distinct
///    reason in the process, which names `task`.
/// Invalid input, cancellation and device errors propagate unchanged.
template <class T, class OnDevice, class OnHost>
auto run_on(const Backend& backend, std::string_view task, OnDevice&& on_device, OnHost&& on_host)
    -> decltype(on_host()) {
  if (backend.is_host()) return on_host();
  if constexpr (std::is_same_v<T, double>) {
    for (std::size_t i = 0; i < backend.device_count(); ++i)
      if (!backend.device_info(i).float64) {
        warn_once(backend.device_info(i).name + " has no float64 support: " + std::string(task) +
                  " on float64 data runs on the host backend");
        return on_host();
      }
  }
  try {
    return on_device();
  } catch (const unsupported& e) {
    warn_once(std::string(e.what()) + "; " + std::string(task) + " runs on the host backend");
  }
  return on_host();
}

#if GPUML_DEFINES_LIBRARY
/// A one-line description: "host (Eigen, 2 threads)" or "Vulkan: NAME (discrete GPU)".
GPUML_INLINE std::string describe(const Backend& backend) {
  if (backend.is_host()) return "host (Eigen)";
  const auto& info = backend.device_info();
  return "Vulkan: " + info.name + " (" + vulkan::device_type_name(info.type) + ")";
}
#endif

}  // namespace gpuml
