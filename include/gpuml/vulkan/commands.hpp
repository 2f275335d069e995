// Records dispatches, copies and barriers into one command buffer, submits it, and waits on a fence.
#pragma once

#include <gpuml/vulkan/device.hpp>

#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <vector>

namespace gpuml::vulkan {

/// The device's queue a Commands records for: the compute queue, or the transfer-only queue (copies only; see
/// Device::transfer_queue).
enum class QueueKind { compute, transfer };

/// A binary semaphore: one submission signals it, one later submission (on any queue of the device) waits on it.
class Semaphore {
 public:
  explicit Semaphore(const Device& device) {
    VkSemaphoreCreateInfo si{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
    VkSemaphore s = VK_NULL_HANDLE;
    check(fn().vkCreateSemaphore(device.handle(), &si, nullptr, &s), "vkCreateSemaphore");
    handle_ = SemaphoreHandle(device.handle(), s);
  }
  VkSemaphore get() const noexcept { return handle_.get(); }

 private:
  SemaphoreHandle handle_;
};

/// One storage buffer of a dispatch and the binding it goes to, named by the shader's interface header
/// (`shader::kBindingX`), so that no call depends on the order of its list.
struct Binding {
  std::uint32_t index;
  BufferSlice slice;
};

class Commands {
 public:
  /// `timestamp_slots` > 0 reserves that many timestamp queries (ignored where the queue has no timestamps).
  explicit Commands(Device& device, std::uint32_t timestamp_slots = 0, QueueKind kind = QueueKind::compute)
      : device_(device), kind_(kind) {
    if (kind == QueueKind::transfer && !device.transfer_queue())
      throw error("Commands: " + device.info().name + " has no transfer-only queue");
    if (kind == QueueKind::transfer) timestamp_slots = 0;
    auto& f = fn();
    VkDevice d = device.handle();
    // A command pool of its own: Vulkan requires a pool and its buffers to be used by one thread at a time, and
    // threads record their own Commands concurrently on a shared device.
    VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT | VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
    pi.queueFamilyIndex = kind == QueueKind::transfer ? device.transfer_family() : device.queue_family();
    VkCommandPool pool = VK_NULL_HANDLE;
    check(f.vkCreateCommandPool(d, &pi, nullptr, &pool), "vkCreateCommandPool");
    pool_ = CommandPoolHandle(d, pool);
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    check(f.vkAllocateCommandBuffers(d, &ai, &cmd_), "vkAllocateCommandBuffers");
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fence = VK_NULL_HANDLE;
    check(f.vkCreateFence(d, &fi, nullptr, &fence), "vkCreateFence");
    fence_ = FenceHandle(d, fence);
    if (timestamp_slots && device.timestamps()) {
      VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = timestamp_slots;
      VkQueryPool qp = VK_NULL_HANDLE;
      check(f.vkCreateQueryPool(d, &qi, nullptr, &qp), "vkCreateQueryPool");
      queries_ = QueryPoolHandle(d, qp);
      query_count_ = timestamp_slots;
    }
    begin();
  }

  ~Commands() {
    if (process_exiting()) return;
    if (submitted_ && !waited_) fn().vkWaitForFences(device_.handle(), 1, &fence_.get_ref(), VK_TRUE, UINT64_MAX);
    fn().vkFreeCommandBuffers(device_.handle(), pool_.get(), 1, &cmd_);
  }
  Commands(const Commands&) = delete;
  Commands& operator=(const Commands&) = delete;

  /// Binds each buffer to the binding it names (every binding of the kernel once), pushes `push_bytes` of constants
  /// and dispatches groups (x, y, z).
  Commands& dispatch_bytes(const Kernel& kernel, std::initializer_list<Binding> buffers, const void* push,
                           std::uint32_t push_bytes, std::uint32_t x, std::uint32_t y = 1, std::uint32_t z = 1) {
    auto& f = fn();
    const auto& spec = kernel.spec();
    if (buffers.size() != spec.buffer_count || push_bytes != spec.push_constant_bytes)
      throw error(std::string("kernel ") + spec.code.name + ": wrong number of buffers or push-constant size");
    std::vector<bool> bound(spec.buffer_count, false);
    for (const Binding& b : buffers) {
      if (b.index >= spec.buffer_count || bound[b.index])
        throw error(std::string("kernel ") + spec.code.name + ": binding " + std::to_string(b.index) +
                    (b.index >= spec.buffer_count ? " does not exist" : " given twice"));
      bound[b.index] = true;
    }
    const auto& limits = device_.info();
    if (x > limits.max_workgroup_count[0] || y > limits.max_workgroup_count[1] || z > limits.max_workgroup_count[2])
      throw error(std::string("kernel ") + spec.code.name + ": dispatch exceeds maxComputeWorkGroupCount");
    if (x == 0 || y == 0 || z == 0) return *this;
    VkDescriptorSet set = allocate_set(kernel.set_layout(), spec.buffer_count);
    std::vector<VkDescriptorBufferInfo> infos;
    infos.reserve(buffers.size());
    for (const Binding& binding : buffers) {
      const BufferSlice& b = binding.slice;
      if (b.bytes() > device_.max_binding_bytes())
        throw error(std::string("kernel ") + spec.code.name + ": a binding of " + std::to_string(b.bytes()) +
                    " bytes exceeds maxStorageBufferRange (the caller must split the operand)");
      if (b.offset % limits.min_storage_buffer_offset_alignment != 0)
        throw error(std::string("kernel ") + spec.code.name + ": a binding offset of " + std::to_string(b.offset) +
                    " bytes is not a multiple of minStorageBufferOffsetAlignment");
      infos.push_back({b.buffer->handle(), b.offset, b.range == VK_WHOLE_SIZE ? b.bytes() : b.range});
    }
    std::vector<VkWriteDescriptorSet> writes(infos.size());
    for (std::uint32_t i = 0; i < writes.size(); ++i) {
      writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
      writes[i].dstSet = set;
      writes[i].dstBinding = buffers.begin()[i].index;
      writes[i].descriptorCount = 1;
      writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[i].pBufferInfo = &infos[i];
    }
    f.vkUpdateDescriptorSets(device_.handle(), static_cast<std::uint32_t>(writes.size()), writes.data(), 0, nullptr);
    f.vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, kernel.pipeline());
    f.vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, kernel.layout(), 0, 1, &set, 0, nullptr);
    if (push_bytes) f.vkCmdPushConstants(cmd_, kernel.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
    f.vkCmdDispatch(cmd_, x, y, z);
    return *this;
  }

  /// The same with a push-constant struct (or array) whose layout matches the shader's push_constant block.
  template <class Push>
  Commands& dispatch(const Kernel& kernel, std::initializer_list<Binding> buffers, const Push& push, std::uint32_t x,
                     std::uint32_t y = 1, std::uint32_t z = 1) {
    static_assert(std::is_trivially_copyable_v<Push> && !std::is_pointer_v<Push>, "push constants are copied bytewise");
    return dispatch_bytes(kernel, buffers, &push, sizeof(Push), x, y, z);
  }

  template <class Push>
  Commands& dispatch(const KernelRef& kernel, std::initializer_list<Binding> buffers, const Push& push,
                     std::uint32_t x, std::uint32_t y = 1, std::uint32_t z = 1) {
    return dispatch(*kernel, buffers, push, x, y, z);
  }

  /// Makes every earlier shader or transfer write visible to every later shader or transfer access.
  Commands& barrier() {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                       VK_ACCESS_TRANSFER_WRITE_BIT;
    const auto stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    fn().vkCmdPipelineBarrier(cmd_, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
    return *this;
  }

  /// Makes device writes visible to the host after the fence (needed before reading mapped memory).
  Commands& host_barrier() {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    fn().vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                              VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    return *this;
  }

  Commands& copy(const Buffer& src, VkDeviceSize src_offset, const Buffer& dst, VkDeviceSize dst_offset,
                 VkDeviceSize bytes) {
    if (bytes == 0) return *this;
    VkBufferCopy region{src_offset, dst_offset, bytes};
    fn().vkCmdCopyBuffer(cmd_, src.handle(), dst.handle(), 1, &region);
    return *this;
  }

  /// Fills `bytes` (a multiple of 4) from `offset` with a 32-bit pattern.
  Commands& fill(const Buffer& dst, VkDeviceSize offset, VkDeviceSize bytes, std::uint32_t value) {
    if (bytes) fn().vkCmdFillBuffer(cmd_, dst.handle(), offset, bytes, value);
    return *this;
  }

  Commands& timestamp(std::uint32_t slot) {
    if (queries_ && slot < query_count_)
      fn().vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, queries_.get(), slot);
    return *this;
  }

  /// Submits what was recorded without waiting; wait() (or the destructor) blocks until the device is done.
  /// `wait_for`: semaphores that other submissions signal, which this batch waits on before any of its work;
  /// `signal`: semaphores this batch signals when it is done.
  void submit(std::initializer_list<const Semaphore*> wait_for = {}, std::initializer_list<const Semaphore*> signal = {}) {
    auto& f = fn();
    if (kind_ == QueueKind::compute) host_barrier();  // results are read through mapped memory after the fence
    check(f.vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
    std::vector<VkSemaphore> waits, signals;
    for (const Semaphore* s : wait_for) waits.push_back(s->get());
    for (const Semaphore* s : signal) signals.push_back(s->get());
    const std::vector<VkPipelineStageFlags> stages(waits.size(), VK_PIPELINE_STAGE_ALL_COMMANDS_BIT);
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.waitSemaphoreCount = static_cast<std::uint32_t>(waits.size());
    si.pWaitSemaphores = waits.data();
    si.pWaitDstStageMask = stages.data();
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cmd_;
    si.signalSemaphoreCount = static_cast<std::uint32_t>(signals.size());
    si.pSignalSemaphores = signals.data();
    {
      const bool transfer = kind_ == QueueKind::transfer;
      std::lock_guard lock(transfer ? device_.transfer_mutex() : device_.mutex());
      check(f.vkQueueSubmit(transfer ? device_.transfer_queue() : device_.queue(), 1, &si, fence_.get()), "vkQueueSubmit");
    }
    submitted_ = true;
  }

  void wait() {
    if (!submitted_ || waited_) return;
    check(fn().vkWaitForFences(device_.handle(), 1, &fence_.get_ref(), VK_TRUE, UINT64_MAX), "vkWaitForFences");
    waited_ = true;
  }

  /// Submits what was recorded and blocks until the device has finished it.
  void submit_and_wait() {
    submit();
    wait();
  }

  /// After wait(): starts recording a new batch into the same command buffer (descriptor sets are recycled).
  void reset() {
    auto& f = fn();
    wait();
    if (submitted_) check(f.vkResetFences(device_.handle(), 1, &fence_.get_ref()), "vkResetFences");
    else check(f.vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
    for (auto& pool : pools_) f.vkResetDescriptorPool(device_.handle(), pool.get(), 0);
    active_pool_ = 0;
    sets_left_ = pools_.empty() ? 0 : kSetsPerPool;
    submitted_ = waited_ = false;
    begin();
  }

  /// Submits, waits, then resets so the object can record the next batch.
  void submit_wait_and_reset() {
    submit_and_wait();
    reset();
  }

  /// Milliseconds between two timestamp slots of the last submitted batch; negative without timestamps.
  double elapsed_ms(std::uint32_t from, std::uint32_t to) const {
    if (!queries_ || !waited_) return -1.0;
    std::uint64_t t[2] = {0, 0};
    auto& f = fn();
    if (f.vkGetQueryPoolResults(device_.handle(), queries_.get(), from, 1, sizeof(std::uint64_t), &t[0], sizeof(std::uint64_t),
                                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS ||
        f.vkGetQueryPoolResults(device_.handle(), queries_.get(), to, 1, sizeof(std::uint64_t), &t[1], sizeof(std::uint64_t),
                                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS)
      return -1.0;
    return static_cast<double>(t[1] - t[0]) * device_.info().timestamp_period_ns * 1e-6;
  }

 private:
  static constexpr std::uint32_t kSetsPerPool = 64;
  static constexpr std::uint32_t kMaxBindings = 16;

  void begin() {
    auto& f = fn();
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(f.vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
    if (queries_) f.vkCmdResetQueryPool(cmd_, queries_.get(), 0, query_count_);
  }

  VkDescriptorSet allocate_set(VkDescriptorSetLayout layout, std::uint32_t bindings) {
    auto& f = fn();
    if (bindings > kMaxBindings) throw error("kernel uses more than 16 buffers");
    if (sets_left_ == 0) {
      if (active_pool_ + 1 < pools_.size() && !pools_.empty()) {
        ++active_pool_;
      } else {
        VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kMaxBindings};
        VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
        pi.maxSets = kSetsPerPool;
        pi.poolSizeCount = 1;
        pi.pPoolSizes = &size;
        VkDescriptorPool pool = VK_NULL_HANDLE;
        check(f.vkCreateDescriptorPool(device_.handle(), &pi, nullptr, &pool), "vkCreateDescriptorPool");
        pools_.emplace_back(device_.handle(), pool);
        active_pool_ = pools_.size() - 1;
      }
      sets_left_ = kSetsPerPool;
    }
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = pools_[active_pool_].get();
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &layout;
    VkDescriptorSet set = VK_NULL_HANDLE;
    check(f.vkAllocateDescriptorSets(device_.handle(), &ai, &set), "vkAllocateDescriptorSets");
    --sets_left_;
    return set;
  }

  Device& device_;
  QueueKind kind_ = QueueKind::compute;
  CommandPoolHandle pool_;  // destroyed after the command buffer is freed
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  FenceHandle fence_;
  QueryPoolHandle queries_;
  std::uint32_t query_count_ = 0;
  std::vector<DescriptorPoolHandle> pools_;
  std::size_t active_pool_ = 0;
  std::uint32_t sets_left_ = 0;
  bool submitted_ = false, waited_ = false;
};

}  // namespace gpuml::vulkan
