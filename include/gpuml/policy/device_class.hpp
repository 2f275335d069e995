// Device classes of the tile catalogues, told apart as ggml's Vulkan backend does: by vendor, by the device type,
// and by the subgroup sizes a device offers (Intel: a minimum of 8 on Gen9 to Xe-HPG, 16 on Xe2; AMD: wave64
// only on GCN, wave32 and wave64 on RDNA). Also the rule for pinning a subgroup size.
#pragma once

#include <gpuml/vulkan/instance.hpp>

#include <cstdint>
#include <string>

namespace gpuml::tuning {

enum class DeviceClass { nvidia, amd_gcn, amd_rdna, intel_gen_igpu, intel_gen_dgpu, intel_xe2_igpu, intel_xe2_dgpu, cpu, other };

inline constexpr std::uint32_t kVendorAmd = 0x1002, kVendorIntel = 0x8086, kVendorNvidia = 0x10DE;

inline DeviceClass device_class(const vulkan::DeviceInfo& d) {
  if (d.type == vulkan::DeviceType::cpu) return DeviceClass::cpu;
  const bool igpu = d.type == vulkan::DeviceType::integrated;
  switch (d.vendor_id) {
    case kVendorNvidia: return DeviceClass::nvidia;
    case kVendorAmd: return d.min_subgroup_size <= 32 ? DeviceClass::amd_rdna : DeviceClass::amd_gcn;
    case kVendorIntel:
      // Without VK_EXT_subgroup_size_control the minimum is unknown (it reads as the default size): not Xe2.
      if (d.subgroup_size_control && d.min_subgroup_size == 16)
        return igpu ? DeviceClass::intel_xe2_igpu : DeviceClass::intel_xe2_dgpu;
      return igpu ? DeviceClass::intel_gen_igpu : DeviceClass::intel_gen_dgpu;
    default: return DeviceClass::other;
  }
}

inline const char* device_class_name(DeviceClass c) {
  switch (c) {
    case DeviceClass::nvidia: return "nvidia";
    case DeviceClass::amd_gcn: return "amd-gcn";
    case DeviceClass::amd_rdna: return "amd-rdna";
    case DeviceClass::intel_gen_igpu: return "intel-gen-igpu";
    case DeviceClass::intel_gen_dgpu: return "intel-gen-dgpu";
    case DeviceClass::intel_xe2_igpu: return "intel-xe2-igpu";
    case DeviceClass::intel_xe2_dgpu: return "intel-xe2-dgpu";
    case DeviceClass::cpu: return "cpu";
    default: return "other";
  }
}

/// Why a workgroup of `threads` cannot run with its subgroup size pinned to `size` on `d`; empty when it can
/// (size 0 leaves the choice to the driver and always can).
inline std::string subgroup_size_misfit(const vulkan::DeviceInfo& d, std::uint32_t size, std::uint32_t threads) {
  if (size == 0) return {};
  if (!d.subgroup_size_control) return "the device cannot pin a subgroup size (no subgroupSizeControl for compute)";
  if ((size & (size - 1)) != 0 || size < d.min_subgroup_size || size > d.max_subgroup_size)
    return "subgroup size " + std::to_string(size) + " is outside the device's " + std::to_string(d.min_subgroup_size) +
           ".." + std::to_string(d.max_subgroup_size);
  if (d.max_workgroup_subgroups && threads > std::uint64_t(d.max_workgroup_subgroups) * size)
    return std::to_string(threads) + " threads exceed maxComputeWorkgroupSubgroups x " + std::to_string(size);
  return {};
}

}  // namespace gpuml::tuning
