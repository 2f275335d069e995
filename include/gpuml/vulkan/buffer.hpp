// A storage buffer with its own memory. Host-visible buffers stay mapped for their lifetime.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/vulkan/handle.hpp>
#include <gpuml/vulkan/result.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace gpuml::vulkan {

/// What a buffer is for; decides its memory type.
enum class MemoryUse {
  device,    // kernel operands: device-local (and mapped, where device memory is host visible)
  upload,    // staging from the host
  readback,  // staging to the host (cached where possible)
  host,      // kernel operands left in pinned host memory, read by the device in place (data beyond device memory)
};

inline std::uint32_t find_memory_type(const VkPhysicalDeviceMemoryProperties& mem, std::uint32_t allowed,
                                      std::initializer_list<VkMemoryPropertyFlags> preferences) {
  for (VkMemoryPropertyFlags want : preferences)
    for (std::uint32_t t = 0; t < mem.memoryTypeCount; ++t)
      if ((allowed & (1u << t)) && (mem.memoryTypes[t].propertyFlags & want) == want) return t;
  return UINT32_MAX;
}

class Buffer {
 public:
  Buffer() = default;
  /// `families`: the queue families that use the buffer, where more than one (shared concurrently); else empty.
  Buffer(VkDevice device, const VkPhysicalDeviceMemoryProperties& mem, VkDeviceSize bytes, MemoryUse use,
         bool unified_memory, const std::vector<std::uint32_t>& families = {})
      : size_(bytes) {
    auto& f = fn();
    if (bytes == 0) bytes = 4;  // Vulkan forbids empty buffers; keep size_ as asked
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = bytes;
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    bi.sharingMode = families.size() > 1 ? VK_SHARING_MODE_CONCURRENT : VK_SHARING_MODE_EXCLUSIVE;
    if (families.size() > 1) {
      bi.queueFamilyIndexCount = static_cast<std::uint32_t>(families.size());
      bi.pQueueFamilyIndices = families.data();
    }
    VkBuffer b = VK_NULL_HANDLE;
    check(f.vkCreateBuffer(device, &bi, nullptr, &b), "vkCreateBuffer");
    buffer_ = BufferHandle(device, b);
    VkMemoryRequirements req{};
    f.vkGetBufferMemoryRequirements(device, b, &req);

    constexpr auto local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    constexpr auto visible = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    constexpr auto cached = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    std::uint32_t type = UINT32_MAX;
    switch (use) {
      case MemoryUse::device:
        type = unified_memory ? find_memory_type(mem, req.memoryTypeBits, {local | visible | cached, local | visible, local})
                              : find_memory_type(mem, req.memoryTypeBits, {local});
        break;
      case MemoryUse::upload:
        type = find_memory_type(mem, req.memoryTypeBits, {visible});
        break;
      case MemoryUse::readback:
        type = find_memory_type(mem, req.memoryTypeBits, {visible | cached, visible});
        break;
      case MemoryUse::host:  // system memory, not a host-visible window onto device memory, where there is one
        for (std::uint32_t t = 0; t < mem.memoryTypeCount && type == UINT32_MAX; ++t)
          if ((req.memoryTypeBits & (1u << t)) && (mem.memoryTypes[t].propertyFlags & visible) == visible &&
              !(mem.memoryTypes[t].propertyFlags & local))
            type = t;
        if (type == UINT32_MAX) type = find_memory_type(mem, req.memoryTypeBits, {visible});
        break;
    }
    if (type == UINT32_MAX) throw unsupported("no suitable Vulkan memory type for a buffer");
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = type;
    VkDeviceMemory m = VK_NULL_HANDLE;
    const VkResult r = f.vkAllocateMemory(device, &ai, nullptr, &m);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
      throw device_error("allocating " + std::to_string(req.size) + " bytes of device memory failed: " + result_name(r) +
                             " (the data does not fit on this device)",
                         static_cast<int>(r));
    check(r, "vkAllocateMemory");
    memory_ = MemoryHandle(device, m);
    check(f.vkBindBufferMemory(device, b, m, 0), "vkBindBufferMemory");
    if (mem.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)
      check(f.vkMapMemory(device, m, 0, VK_WHOLE_SIZE, 0, &mapped_), "vkMapMemory");
  }

  /// Host memory [aligned, aligned + bytes) imported as a buffer the device copies from in place
  /// (VK_EXT_external_memory_host; both ends on the device's import alignment). The memory stays the caller's and must
  /// outlive the buffer. An empty buffer where the driver refuses this memory (the caller takes another way).
  static Buffer import_host(VkDevice device, void* aligned, VkDeviceSize bytes) {
    auto& f = fn();
    Buffer out;
    if (!f.vkGetMemoryHostPointerPropertiesEXT || bytes == 0) return out;
    constexpr auto handle_type = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    VkMemoryHostPointerPropertiesEXT host{VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
    if (f.vkGetMemoryHostPointerPropertiesEXT(device, handle_type, aligned, &host) != VK_SUCCESS) return out;
    VkExternalMemoryBufferCreateInfo external{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
    external.handleTypes = handle_type;
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.pNext = &external;
    bi.size = bytes;
    bi.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    VkBuffer b = VK_NULL_HANDLE;
    if (f.vkCreateBuffer(device, &bi, nullptr, &b) != VK_SUCCESS) return out;
    BufferHandle buffer(device, b);
    VkMemoryRequirements req{};
    f.vkGetBufferMemoryRequirements(device, b, &req);
    const std::uint32_t types = req.memoryTypeBits & host.memoryTypeBits;
    if (types == 0 || req.size > bytes) return out;
    std::uint32_t type = 0;
    while (!(types & (1u << type))) ++type;
    VkImportMemoryHostPointerInfoEXT import{VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT};
    import.handleType = handle_type;
    import.pHostPointer = aligned;
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.pNext = &import;
    ai.allocationSize = bytes;
    ai.memoryTypeIndex = type;
    VkDeviceMemory m = VK_NULL_HANDLE;
    if (f.vkAllocateMemory(device, &ai, nullptr, &m) != VK_SUCCESS) return out;
    MemoryHandle memory(device, m);
    if (f.vkBindBufferMemory(device, b, m, 0) != VK_SUCCESS) return out;
    out.buffer_ = std::move(buffer);
    out.memory_ = std::move(memory);
    out.size_ = bytes;
    return out;
  }

  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      buffer_ = std::move(o.buffer_);  // buffer first, then its memory (freeing memory unmaps it)
      memory_ = std::move(o.memory_);
      size_ = o.size_;
      mapped_ = std::exchange(o.mapped_, nullptr);
    }
    return *this;
  }
  ~Buffer() { buffer_.reset(); }

  VkBuffer handle() const noexcept { return buffer_.get(); }
  VkDeviceSize size() const noexcept { return size_; }
  /// Host pointer to the contents, or nullptr when the memory is not host visible.
  void* mapped() const noexcept { return mapped_; }
  explicit operator bool() const noexcept { return static_cast<bool>(buffer_); }

 private:
  BufferHandle buffer_;
  MemoryHandle memory_;
  VkDeviceSize size_ = 0;
  void* mapped_ = nullptr;
};

/// A byte range of a buffer bound to one kernel binding.
struct BufferSlice {
  const Buffer* buffer = nullptr;
  VkDeviceSize offset = 0;
  VkDeviceSize range = VK_WHOLE_SIZE;

  BufferSlice() = default;
  BufferSlice(const Buffer& b) : buffer(&b) {}  // NOLINT: a whole buffer converts implicitly
  BufferSlice(const Buffer& b, VkDeviceSize off, VkDeviceSize len) : buffer(&b), offset(off), range(len) {}
  VkDeviceSize bytes() const { return range == VK_WHOLE_SIZE ? buffer->size() - offset : range; }
};

}  // namespace gpuml::vulkan
