// Move-only ownership of a Vulkan object that is destroyed through its VkDevice.
#pragma once

#include <gpuml/vulkan/loader.hpp>

#include <utility>

namespace gpuml::vulkan {

template <class H>
using DeviceDestroyFn = void (*)(VkDevice, H, const VkAllocationCallbacks*);

/// Owns one handle of type H; `Destroy` names the entry point in the function table that frees it.
template <class H, DeviceDestroyFn<H> Functions::*Destroy>
class DeviceHandle {
 public:
  DeviceHandle() = default;
  DeviceHandle(VkDevice device, H handle) : device_(device), handle_(handle) {}
  DeviceHandle(DeviceHandle&& o) noexcept
      : device_(std::exchange(o.device_, VK_NULL_HANDLE)), handle_(std::exchange(o.handle_, VK_NULL_HANDLE)) {}
  DeviceHandle& operator=(DeviceHandle&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = std::exchange(o.device_, VK_NULL_HANDLE);
      handle_ = std::exchange(o.handle_, VK_NULL_HANDLE);
    }
    return *this;
  }
  DeviceHandle(const DeviceHandle&) = delete;
  DeviceHandle& operator=(const DeviceHandle&) = delete;
  ~DeviceHandle() { reset(); }

  void reset() {
    if (handle_ != VK_NULL_HANDLE && !process_exiting()) (fn().*Destroy)(device_, handle_, nullptr);
    handle_ = VK_NULL_HANDLE;
  }
  H get() const noexcept { return handle_; }
  const H& get_ref() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return handle_ != VK_NULL_HANDLE; }

 private:
  VkDevice device_ = VK_NULL_HANDLE;
  H handle_ = VK_NULL_HANDLE;
};

using BufferHandle = DeviceHandle<VkBuffer, &Functions::vkDestroyBuffer>;
using MemoryHandle = DeviceHandle<VkDeviceMemory, &Functions::vkFreeMemory>;
using ShaderModuleHandle = DeviceHandle<VkShaderModule, &Functions::vkDestroyShaderModule>;
using DescriptorSetLayoutHandle = DeviceHandle<VkDescriptorSetLayout, &Functions::vkDestroyDescriptorSetLayout>;
using PipelineLayoutHandle = DeviceHandle<VkPipelineLayout, &Functions::vkDestroyPipelineLayout>;
using PipelineHandle = DeviceHandle<VkPipeline, &Functions::vkDestroyPipeline>;
using PipelineCacheHandle = DeviceHandle<VkPipelineCache, &Functions::vkDestroyPipelineCache>;
using DescriptorPoolHandle = DeviceHandle<VkDescriptorPool, &Functions::vkDestroyDescriptorPool>;
using CommandPoolHandle = DeviceHandle<VkCommandPool, &Functions::vkDestroyCommandPool>;
using QueryPoolHandle = DeviceHandle<VkQueryPool, &Functions::vkDestroyQueryPool>;
using FenceHandle = DeviceHandle<VkFence, &Functions::vkDestroyFence>;
using SemaphoreHandle = DeviceHandle<VkSemaphore, &Functions::vkDestroySemaphore>;

}  // namespace gpuml::vulkan
