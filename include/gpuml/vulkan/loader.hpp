// Loads the Vulkan loader at run time (dlopen), so a program using gpuml starts, and falls back to the host
// backend, on a machine without libvulkan. Function pointers live in one process-wide table.
#pragma once

#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan_core.h>

#include <atomic>
#include <mutex>

#if defined(_WIN32)
#include <windows.h>
#else
#include <dlfcn.h>
#endif

namespace gpuml::vulkan {

#define GPUML_VK_GLOBAL_FUNCTIONS(X) \
  X(vkCreateInstance)                \
  X(vkEnumerateInstanceExtensionProperties) \
  X(vkEnumerateInstanceLayerProperties)

#define GPUML_VK_INSTANCE_FUNCTIONS(X)       \
  X(vkDestroyInstance)                       \
  X(vkEnumeratePhysicalDevices)              \
  X(vkGetPhysicalDeviceProperties)           \
  X(vkGetPhysicalDeviceProperties2)          \
  X(vkGetPhysicalDeviceFeatures2)            \
  X(vkGetPhysicalDeviceMemoryProperties)     \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)    \
  X(vkGetPhysicalDeviceCooperativeMatrixPropertiesNV) \
  X(vkCreateDevice)                          \
  X(vkGetDeviceProcAddr)                     \
  X(vkCreateDebugUtilsMessengerEXT)          \
  X(vkDestroyDebugUtilsMessengerEXT)

#define GPUML_VK_DEVICE_FUNCTIONS(X)     \
  X(vkDestroyDevice)                     \
  X(vkGetDeviceQueue)                    \
  X(vkDeviceWaitIdle)                    \
  X(vkQueueSubmit)                       \
  X(vkQueueWaitIdle)                     \
  X(vkCreateBuffer)                      \
  X(vkDestroyBuffer)                     \
  X(vkGetBufferMemoryRequirements)       \
  X(vkAllocateMemory)                    \
  X(vkFreeMemory)                        \
  X(vkBindBufferMemory)                  \
  X(vkMapMemory)                         \
  X(vkUnmapMemory)                       \
  X(vkFlushMappedMemoryRanges)           \
  X(vkInvalidateMappedMemoryRanges)      \
  X(vkCreateShaderModule)                \
  X(vkDestroyShaderModule)               \
  X(vkCreateDescriptorSetLayout)         \
  X(vkDestroyDescriptorSetLayout)        \
  X(vkCreatePipelineLayout)              \
  X(vkDestroyPipelineLayout)             \
  X(vkCreateComputePipelines)            \
  X(vkDestroyPipeline)                   \
  X(vkCreatePipelineCache)               \
  X(vkDestroyPipelineCache)              \
  X(vkGetPipelineCacheData)              \
  X(vkCreateDescriptorPool)              \
  X(vkDestroyDescriptorPool)             \
  X(vkResetDescriptorPool)               \
  X(vkAllocateDescriptorSets)            \
  X(vkUpdateDescriptorSets)              \
  X(vkCreateCommandPool)                 \
  X(vkDestroyCommandPool)                \
  X(vkResetCommandPool)                  \
  X(vkAllocateCommandBuffers)            \
  X(vkFreeCommandBuffers)                \
  X(vkBeginCommandBuffer)                \
  X(vkEndCommandBuffer)                  \
  X(vkCmdBindPipeline)                   \
  X(vkCmdBindDescriptorSets)             \
  X(vkCmdPushConstants)                  \
  X(vkCmdDispatch)                       \
  X(vkCmdPipelineBarrier)                \
  X(vkCmdCopyBuffer)                     \
  X(vkCmdFillBuffer)                     \
  X(vkCmdResetQueryPool)                 \
  X(vkCmdWriteTimestamp)                 \
  X(vkCreateQueryPool)                   \
  X(vkDestroyQueryPool)                  \
  X(vkGetQueryPoolResults)               \
  X(vkCreateFence)                       \
  X(vkDestroyFence)                      \
  X(vkCreateSemaphore)                   \
  X(vkDestroySemaphore)                  \
  X(vkResetFences)                       \
  X(vkWaitForFences)                     \
  X(vkGetMemoryHostPointerPropertiesEXT)

/// The process-wide table of Vulkan entry points.
struct Functions {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
#define GPUML_VK_DECLARE(name) PFN_##name name = nullptr;
  GPUML_VK_GLOBAL_FUNCTIONS(GPUML_VK_DECLARE)
  GPUML_VK_INSTANCE_FUNCTIONS(GPUML_VK_DECLARE)
  GPUML_VK_DEVICE_FUNCTIONS(GPUML_VK_DECLARE)
#undef GPUML_VK_DECLARE
};

inline Functions& fn() {
  static Functions table;
  return table;
}

/// Set by an exit hook that runs before the driver's own teardown: from then on, objects still alive (held by
/// statics) are not destroyed through Vulkan, whose driver may already be gone at static-destruction time.
inline std::atomic<bool>& process_exiting() {
  static std::atomic<bool> flag{false};
  return flag;
}

/// Opens the Vulkan loader once; false when there is none (the caller falls back to the host backend).
inline bool load_vulkan_library() {
  static std::once_flag once;
  static bool loaded = false;
  std::call_once(once, [] {
#if defined(_WIN32)
    HMODULE lib = LoadLibraryA("vulkan-1.dll");
    if (!lib) return;
    auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(GetProcAddress(lib, "vkGetInstanceProcAddr"));
#else
    void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
#if defined(__APPLE__)
    if (!lib) lib = dlopen("libvulkan.1.dylib", RTLD_NOW | RTLD_LOCAL);
#endif
    if (!lib) return;
    auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
#endif
    if (!gipa) return;
    Functions& f = fn();
    f.vkGetInstanceProcAddr = gipa;
#define GPUML_VK_LOAD(name) f.name = reinterpret_cast<PFN_##name>(gipa(VK_NULL_HANDLE, #name));
    GPUML_VK_GLOBAL_FUNCTIONS(GPUML_VK_LOAD)
#undef GPUML_VK_LOAD
    loaded = f.vkCreateInstance != nullptr;
  });
  return loaded;
}

/// Resolves instance-level and device-level entry points through the instance. The loader returns dispatching
/// trampolines, valid for every device of every instance of this loader; `only_missing` keeps entries already
/// resolved (an application's instance, which may lack gpuml's extensions, never replaces gpuml's own).
inline void load_instance_functions(VkInstance instance, bool only_missing = false) {
  Functions& f = fn();
#define GPUML_VK_LOAD(name) \
  if (!only_missing || !f.name) f.name = reinterpret_cast<PFN_##name>(f.vkGetInstanceProcAddr(instance, #name));
  GPUML_VK_INSTANCE_FUNCTIONS(GPUML_VK_LOAD)
  GPUML_VK_DEVICE_FUNCTIONS(GPUML_VK_LOAD)
#undef GPUML_VK_LOAD
}

}  // namespace gpuml::vulkan
