// VkResult to text, and the check that turns a failed Vulkan call into gpuml::device_error.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/vulkan/loader.hpp>

#include <string>

namespace gpuml::vulkan {

inline const char* result_name(VkResult r) {
  switch (r) {
#define GPUML_VK_CASE(x) \
  case x:                \
    return #x;
    GPUML_VK_CASE(VK_SUCCESS)
    GPUML_VK_CASE(VK_NOT_READY)
    GPUML_VK_CASE(VK_TIMEOUT)
    GPUML_VK_CASE(VK_INCOMPLETE)
    GPUML_VK_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    GPUML_VK_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    GPUML_VK_CASE(VK_ERROR_INITIALIZATION_FAILED)
    GPUML_VK_CASE(VK_ERROR_DEVICE_LOST)
    GPUML_VK_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    GPUML_VK_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    GPUML_VK_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    GPUML_VK_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    GPUML_VK_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    GPUML_VK_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    GPUML_VK_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    GPUML_VK_CASE(VK_ERROR_FRAGMENTED_POOL)
    GPUML_VK_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    GPUML_VK_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    GPUML_VK_CASE(VK_ERROR_FRAGMENTATION)
    GPUML_VK_CASE(VK_ERROR_UNKNOWN)
#undef GPUML_VK_CASE
    default:
      return "VK_ERROR_(unknown code)";
  }
}

inline void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS)
    throw device_error(std::string(what) + " failed: " + result_name(r), static_cast<int>(r));
}

}  // namespace gpuml::vulkan
