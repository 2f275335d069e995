// What every tile policy shares: compile-time shape checks, a run-time check against the device's limits
// (a policy the device cannot run is never dispatched), and sizing helpers for split dispatches.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/vulkan/instance.hpp>

#include <cstdint>
#include <string>

namespace gpuml::kernels {

constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

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

}  // namespace gpuml::kernels
