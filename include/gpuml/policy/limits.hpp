// What every tile policy shares: compile-time shape checks, a run-time check against the device's limits
// (a policy the device cannot run is never dispatched), sizing helpers for split dispatches, and the
// specialisation constants a policy maps to.
#pragma once

#include <gpuml/core/config.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/vulkan/instance.hpp>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace gpuml::kernels {

constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

/// The dispatch grid of `groups` workgroups numbered by common.glsl's linear_group_id(): rows of at most
/// maxComputeWorkGroupCount[0] groups. More rows than maxComputeWorkGroupCount[1] throw unsupported naming `what`.
struct LinearGrid {
  std::uint32_t x = 1, y = 0;
};
inline LinearGrid linear_grid(const vulkan::DeviceInfo& device, std::uint64_t groups, const std::string& what) {
  const std::uint64_t x = std::max<std::uint64_t>(1, std::min<std::uint64_t>(groups, device.max_workgroup_count[0]));
  const std::uint64_t y = ceil_div(groups, x);
  if (y > device.max_workgroup_count[1]) throw unsupported(what + ": " + std::to_string(groups) + " workgroups exceed the dispatch grid");
  return {static_cast<std::uint32_t>(x), static_cast<std::uint32_t>(y)};
}

/// Device memory a kernel may plan with: what the device reports, capped by Config::device_memory_limit (0: no
/// known bound).
inline std::uint64_t device_memory_budget(const vulkan::DeviceInfo& device) {
  const std::uint64_t limit = config().device_memory_limit();
  if (!limit) return device.device_local_bytes;
  return device.device_local_bytes ? std::min(device.device_local_bytes, limit) : limit;
}

/// Limits a workgroup shape and its shared memory must respect on `device`; empty when it fits, else why not.
inline std::string workgroup_misfit(const vulkan::DeviceInfo& device, std::uint32_t x, std::uint32_t y,
                                    std::uint64_t shared_bytes) {
  if (x * y > device.max_workgroup_invocations)
    return std::to_string(x * y) + " invocations per workgroup exceed the device's " +
           std::to_string(device.max_workgroup_invocations);
  if (x > device.max_workgroup_size[0] || y > device.max_workgroup_size[1]) return "workgroup shape exceeds maxComputeWorkGroupSize";
  if (shared_bytes > device.max_shared_memory)
    return std::to_string(shared_bytes) + " bytes of shared memory exceed the device's " +
           std::to_string(device.max_shared_memory);
  return {};
}

/// A kernel's specialisation constants from (id, value) pairs, the ids named by its shader's interface header
/// (kSpec*, <gpuml/shaders/*.h>): every id below `count` set exactly once, so a constant added to a shader cannot
/// silently keep its default.
inline std::vector<std::uint32_t> spec_constants(std::uint32_t count,
                                                 std::initializer_list<std::pair<std::uint32_t, std::uint32_t>> by_id) {
  std::vector<std::uint32_t> values(count);
  std::vector<bool> set(count, false);
  for (const auto& [id, value] : by_id) {
    if (id >= count || set[id])
      throw error("specialisation constant " + std::to_string(id) + " is out of range or set twice");
    set[id] = true;
    values[id] = value;
  }
  if (by_id.size() != count)
    throw error(std::to_string(by_id.size()) + " of " + std::to_string(count) + " specialisation constants set");
  return values;
}

}  // namespace gpuml::kernels
