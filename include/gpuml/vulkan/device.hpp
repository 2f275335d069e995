// A logical device: one compute queue, the pipeline cache, and the kernels built so far.
#pragma once

#include <gpuml/vulkan/buffer.hpp>
#include <gpuml/vulkan/instance.hpp>
#include <gpuml/vulkan/kernel.hpp>
#include <gpuml/vulkan/pipeline_cache.hpp>

#include <chrono>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpuml::vulkan {

/// A Vulkan device that the application created and owns, handed to gpuml (gpuml::external_backend) so gpuml runs
/// on it. gpuml creates its own objects on it (buffers, pipelines, command pools, fences) and destroys them all when
/// its last estimator or backend using the device is gone; it never destroys the instance or the device. The
/// application keeps them alive until then, and does not use `queue` from another thread while gpuml records or
/// submits (Vulkan's external-synchronisation rule: give gpuml a queue of its own to share nothing).
/// The application says which features it enabled at vkCreateDevice; gpuml uses no other.
struct ExternalDevice {
  VkInstance instance = VK_NULL_HANDLE;
  std::uint32_t instance_api_version = VK_API_VERSION_1_1;  ///< VkApplicationInfo::apiVersion of the instance
  VkPhysicalDevice physical_device = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;        ///< a queue of `queue_family`, which must support compute
  std::uint32_t queue_family = 0;
  bool shader_float64 = false;           ///< VkPhysicalDeviceFeatures::shaderFloat64 (float64 data on the device)
  bool shader_int64 = false;             ///< shaderInt64
  bool subgroup_size_control = false;    ///< subgroupSizeControl (Vulkan 1.3 or VK_EXT_subgroup_size_control)
  bool shader_float16 = false;           ///< shaderFloat16
  bool cooperative_matrix_nv = false;    ///< VK_NV_cooperative_matrix's cooperativeMatrix
  bool vulkan_memory_model = false;      ///< vulkanMemoryModel
  bool vulkan_memory_model_device_scope = false;  ///< vulkanMemoryModelDeviceScope (needed with the memory model)
  bool external_memory_host = false;     ///< VK_EXT_external_memory_host (uploads read host memory in place)
};

class Device {
 public:
  Device(std::shared_ptr<Instance> instance, const DeviceInfo& info) : instance_(std::move(instance)), info_(info) {
    auto& f = fn();
    std::uint32_t nq = 0;
    f.vkGetPhysicalDeviceQueueFamilyProperties(info.handle, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> families(nq);
    f.vkGetPhysicalDeviceQueueFamilyProperties(info.handle, &nq, families.data());
    // Prefer a compute-only family (async compute on discrete GPUs), else any family with compute.
    queue_family_ = UINT32_MAX;
    for (std::uint32_t i = 0; i < nq; ++i)
      if ((families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(families[i].queueFlags & VK_QUEUE_GRAPHICS_BIT) &&
          families[i].timestampValidBits > 0) {
        queue_family_ = i;
        break;
      }
    for (std::uint32_t i = 0; i < nq && queue_family_ == UINT32_MAX; ++i)
      if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) queue_family_ = i;
    if (queue_family_ == UINT32_MAX) throw unsupported(info.name + " has no compute queue");
    timestamps_ = families[queue_family_].timestampValidBits > 0 && info.timestamp_period_ns > 0;

    // A transfer-only family (the copy engines of a discrete GPU), where there is one: streamed k-means copies
    // its next slice of samples there while the compute queue runs the E-step.
    for (std::uint32_t i = 0; i < nq && transfer_family_ == UINT32_MAX; ++i)
      if ((families[i].queueFlags & VK_QUEUE_TRANSFER_BIT) &&
          !(families[i].queueFlags & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT)) && families[i].queueCount > 0)
        transfer_family_ = i;

    const float priority = 1.0f;
    VkDeviceQueueCreateInfo qi[2] = {{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}, {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}};
    qi[0].queueFamilyIndex = queue_family_;
    qi[0].queueCount = 1;
    qi[0].pQueuePriorities = &priority;
    qi[1].queueFamilyIndex = transfer_family_;
    qi[1].queueCount = 1;
    qi[1].pQueuePriorities = &priority;

    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features.features.shaderFloat64 = info.float64;
    features.features.shaderInt64 = info.int64;
    VkPhysicalDeviceSubgroupSizeControlFeatures sgc{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    sgc.subgroupSizeControl = VK_TRUE;
    std::vector<const char*> extensions;
    if (info.subgroup_size_control) {
      features.pNext = &sgc;
      // Core only where both the device and the instance speak Vulkan 1.3; the extension otherwise.
      if (std::min(info.api_version, instance_->api_version()) < VK_API_VERSION_1_3)
        extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    }
    // Cooperative matrices (shaders/knn_filter_coop.comp): the extension, float16 arithmetic, the memory model with
    // device scope (with the model on, every other shader's buffer atomics use device scope).
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coop{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceVulkanMemoryModelFeatures model{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    VkPhysicalDeviceShaderFloat16Int8Features f16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    if (info.coop_matrix_f16) {
      coop.cooperativeMatrix = VK_TRUE;
      model.vulkanMemoryModel = VK_TRUE;
      model.vulkanMemoryModelDeviceScope = VK_TRUE;
      f16.shaderFloat16 = VK_TRUE;
      coop.pNext = &model;
      model.pNext = &f16;
      f16.pNext = features.pNext;
      features.pNext = &coop;
      extensions.push_back("VK_NV_cooperative_matrix");
    }
    if (info.host_memory_import) extensions.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    di.pNext = &features;
    di.queueCreateInfoCount = transfer_family_ == UINT32_MAX ? 1 : 2;
    di.pQueueCreateInfos = qi;
    di.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
    di.ppEnabledExtensionNames = extensions.data();
    check(f.vkCreateDevice(info.handle, &di, nullptr, &device_), "vkCreateDevice");
    f.vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
    if (transfer_family_ != UINT32_MAX) f.vkGetDeviceQueue(device_, transfer_family_, 0, &transfer_queue_);
    try {
      finish_setup();
    } catch (...) {
      f.vkDestroyDevice(device_, nullptr);  // the destructor does not run for a constructor that throws
      throw;
    }
  }

  /// A device the application created and owns (see ExternalDevice): gpuml creates and destroys its own objects
  /// on it, never the device, and uses only the features the application says it enabled.
  Device(std::shared_ptr<Instance> instance, const ExternalDevice& external)
      : instance_(std::move(instance)), owned_(false) {
    if (!external.physical_device || !external.device || !external.queue)
      throw invalid_input("ExternalDevice: physical_device, device and queue must all be set");
    const DeviceInfo* found = nullptr;
    for (const auto& d : instance_->devices())
      if (d.handle == external.physical_device) found = &d;
    if (!found)
      throw invalid_input("ExternalDevice: physical_device is not a Vulkan 1.1 device of the given instance");
    if (external.vulkan_memory_model && !external.vulkan_memory_model_device_scope)
      throw unsupported("ExternalDevice: vulkanMemoryModel is enabled without vulkanMemoryModelDeviceScope, which "
                        "gpuml's shaders need for their buffer atomics once the memory model is on");
    auto& f = fn();
    std::uint32_t nq = 0;
    f.vkGetPhysicalDeviceQueueFamilyProperties(external.physical_device, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> families(nq);
    f.vkGetPhysicalDeviceQueueFamilyProperties(external.physical_device, &nq, families.data());
    if (external.queue_family >= nq || !(families[external.queue_family].queueFlags & VK_QUEUE_COMPUTE_BIT))
      throw invalid_input("ExternalDevice: queue family " + std::to_string(external.queue_family) +
                          " has no compute capability");
    info_ = *found;
    // Only what the application enabled (a feature the device has but the application did not enable is absent).
    info_.float64 = info_.float64 && external.shader_float64;
    info_.int64 = info_.int64 && external.shader_int64;
    info_.subgroup_size_control = info_.subgroup_size_control && external.subgroup_size_control;
    info_.coop_matrix_f16 = info_.coop_matrix_f16 && external.cooperative_matrix_nv && external.shader_float16 &&
                            external.vulkan_memory_model && external.vulkan_memory_model_device_scope;
    info_.host_memory_import = info_.host_memory_import && external.external_memory_host;
    device_ = external.device;
    queue_ = external.queue;
    queue_family_ = external.queue_family;
    timestamps_ = families[queue_family_].timestampValidBits > 0 && info_.timestamp_period_ns > 0;
    finish_setup();
  }

  ~Device() {
    release();
    std::lock_guard lock(live_mutex());
    live().erase(this);
  }

  /// Destroys the device and everything it owns. Runs from the destructor, or from the exit hook for devices
  /// still held by statics: that hook is registered after the driver's own, so it runs before the driver's
  /// teardown, while static destructors may run after it (a segfault seen with NVIDIA's driver).
  void release() {
    wait_for_releases();  // before the driver's teardown, even at exit: no thread may outlive the device
    if (!device_ || process_exiting()) return;
    // An application's device may be busy with the application's own work (and waiting on it all would need every
    // queue of it): gpuml's own submissions are complete, each having waited on its fence.
    if (owned_) fn().vkDeviceWaitIdle(device_);
    save_pipeline_cache();
    {
      std::lock_guard lock(staging_mutex_);
      staging_pool_.clear();
    }
    kernels_.clear();
    recent_.clear();
    pipeline_cache_.reset();
    if (owned_) fn().vkDestroyDevice(device_, nullptr);
    device_ = VK_NULL_HANDLE;
    Instance::check_strict_validation();  // the layer reports objects never destroyed here
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const noexcept { return info_; }
  /// Whether gpuml created this device (and destroys it), or runs on the application's.
  bool owned() const noexcept { return owned_; }
  VkDevice handle() const noexcept { return device_; }
  VkQueue queue() const noexcept { return queue_; }
  std::uint32_t queue_family() const noexcept { return queue_family_; }
  bool timestamps() const noexcept { return timestamps_; }
  /// Serialises use of the queue (a Device may be shared by threads; each Commands has its own command pool).
  std::mutex& mutex() const noexcept { return mutex_; }
  /// A transfer-only queue beside the compute queue (null where the device has none, and on an application's
  /// device), its family, and the mutex that serialises its use.
  VkQueue transfer_queue() const noexcept { return transfer_queue_; }
  std::uint32_t transfer_family() const noexcept { return transfer_family_; }
  std::mutex& transfer_mutex() const noexcept { return transfer_mutex_; }

  /// Largest byte range one kernel binding may cover, and the largest single buffer.
  VkDeviceSize max_binding_bytes() const noexcept { return info_.max_storage_buffer_range; }
  VkDeviceSize max_buffer_bytes() const noexcept {
    return info_.max_allocation_size ? std::min<VkDeviceSize>(info_.max_allocation_size, info_.max_storage_buffer_range)
                                     : info_.max_storage_buffer_range;
  }

  /// `with_transfer_queue`: the buffer is also used on transfer_queue() (shared concurrently; where there is one).
  Buffer buffer(VkDeviceSize bytes, MemoryUse use = MemoryUse::device, bool with_transfer_queue = false) const {
    wait_for_releases();  // memory still being freed counts against this allocation
    if (info_.max_allocation_size && bytes > info_.max_allocation_size)
      throw unsupported("a buffer of " + std::to_string(bytes) + " bytes exceeds this device's maxMemoryAllocationSize (" +
                        std::to_string(info_.max_allocation_size) + ")");
    if (with_transfer_queue && transfer_queue_)
      return Buffer(device_, memory_, bytes, use, info_.unified_memory, {queue_family_, transfer_family_});
    return Buffer(device_, memory_, bytes, use, info_.unified_memory);
  }

  /// Destroys `owned` (buffers, and what else holds them) on a thread of its own: freeing many gigabytes of device
  /// memory takes a noticeable time, which a fit need not wait for. Every device's next buffer() and release wait
  /// for it (the releases are the process's: two devices may share one GPU's memory). Only for objects no
  /// submission still uses (gpuml's submissions each wait on a fence). Where no thread can start, or the process
  /// is exiting, `owned` goes here and now.
  void release_later(std::shared_ptr<void> owned) const noexcept {
    if (process_exiting()) return;
    try {
      PendingReleases& p = pending_releases();
      std::lock_guard lock(p.mutex);
      p.threads.emplace_back([held = std::move(owned)]() mutable { held.reset(); });
    } catch (...) {
      // No thread: `owned` is released on return.
    }
  }
  /// release_later for several objects moved in together (an engine's buffers): destroyed together on one thread.
  /// Where the handle cannot be allocated they stay with the caller, who destroys them as before.
  template <class... Owned>
  void release_later_all(Owned&&... owned) const noexcept {
    static_assert((!std::is_lvalue_reference_v<Owned> && ...), "release_later_all takes what is moved in");
    std::shared_ptr<void> held;
    try {
      held = std::make_shared<std::tuple<std::decay_t<Owned>...>>(std::forward<Owned>(owned)...);
    } catch (...) {
      return;
    }
    release_later(std::move(held));
  }
  /// Waits until everything handed to release_later (by any device) is destroyed.
  static void wait_for_releases() {
    PendingReleases& p = pending_releases();
    std::lock_guard joining(p.joining);  // a second caller waits until the first has joined them all
    std::vector<std::thread> pending;
    {
      std::lock_guard lock(p.mutex);
      pending.swap(p.threads);
    }
    for (auto& t : pending) t.join();
  }

  /// Host memory the device reads in place: a transfer source covering [data, data + bytes), and where `data` lies
  /// in it (the import starts and ends on the device's alignment, in pages the caller's memory already spans).
  struct HostImport {
    Buffer buffer;  ///< empty where the device cannot import this memory
    VkDeviceSize offset = 0;
  };
  /// Imports host memory for the device to copy from (VK_EXT_external_memory_host), or gives an empty buffer where
  /// the device has no such import or the driver refuses this memory: the caller then stages the bytes.
  HostImport import_host(const void* data, std::size_t bytes) const {
    HostImport out;
    if (!info_.host_memory_import || bytes == 0) return out;
    const std::uintptr_t a = info_.host_import_alignment, begin = reinterpret_cast<std::uintptr_t>(data);
    const std::uintptr_t first = begin / a * a, end = (begin + bytes + a - 1) / a * a;
    // Vulkan takes a non-const pointer; the buffer is only ever a transfer source.
    out.buffer = Buffer::import_host(device_, reinterpret_cast<void*>(first), end - first);
    out.offset = begin - first;
    return out;
  }

  /// A staging buffer (MemoryUse::upload or readback) of at least `bytes` bytes, taken from the device's pool and
  /// given back when the lease ends, so that repeated transfers neither allocate nor pin host memory each time.
  class StagingLease {
   public:
    StagingLease(const Device& device, MemoryUse use, Buffer buffer) : device_(&device), use_(use), buffer_(std::move(buffer)) {}
    StagingLease(StagingLease&& o) noexcept : device_(std::exchange(o.device_, nullptr)), use_(o.use_), buffer_(std::move(o.buffer_)) {}
    StagingLease& operator=(StagingLease&&) = delete;
    StagingLease(const StagingLease&) = delete;
    ~StagingLease() {
      if (device_) device_->give_back_staging(use_, std::move(buffer_));
    }
    const Buffer& buffer() const noexcept { return buffer_; }
    void* mapped() const noexcept { return buffer_.mapped(); }

   private:
    const Device* device_;
    MemoryUse use_;
    Buffer buffer_;
  };

  /// Staging buffers kept per use beyond those leased.
  static constexpr std::size_t kKeptStaging = 4;

  StagingLease staging(VkDeviceSize bytes, MemoryUse use) const {
    {
      std::lock_guard lock(staging_mutex_);
      // The smallest kept buffer that holds `bytes`.
      auto best = staging_pool_.end();
      for (auto it = staging_pool_.begin(); it != staging_pool_.end(); ++it)
        if (it->first == use && it->second.size() >= bytes && (best == staging_pool_.end() || it->second.size() < best->second.size()))
          best = it;
      if (best != staging_pool_.end()) {
        Buffer b = std::move(best->second);
        staging_pool_.erase(best);
        return StagingLease(*this, use, std::move(b));
      }
    }
    VkDeviceSize size = VkDeviceSize(1) << 20;  // powers of two from 1 MiB, so sizes recur and buffers are reused
    while (size < bytes) size <<= 1;
    return StagingLease(*this, use, buffer(size, use));
  }

  /// Pipelines kept for reuse beyond those in use: problems specialise pipelines (k-means on k and d), so a
  /// process fitting many shapes would otherwise keep one pipeline per shape for ever.
  static constexpr std::size_t kKeptKernels = 32;

  /// The pipeline for `spec`, built on first use (through the pipeline cache). The device keeps the most recently
  /// used kKeptKernels of those no caller holds; a caller holds its KernelRef while it records and submits.
  KernelRef kernel(const KernelSpec& spec) {
    std::lock_guard lock(kernels_mutex_);
    auto it = kernels_.find(spec);
    if (it != kernels_.end()) {
      recent_.splice(recent_.begin(), recent_, it->second.second);  // now the most recently used
      return it->second.first;
    }
    const auto start = std::chrono::steady_clock::now();
    auto made = std::make_shared<const Kernel>(device_, pipeline_cache_.get(), spec);
    pipeline_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++pipelines_built_;
    cache_dirty_ = true;
    save_pipeline_cache();  // now, not at exit: pipelines are built rarely, and exit order is fragile
    recent_.push_front(spec);
    kernels_.emplace(spec, std::make_pair(made, recent_.begin()));
    // Release the least recently used pipelines no caller holds, beyond the kept number.
    for (auto r = std::prev(recent_.end()); kernels_.size() > kKeptKernels && r != recent_.begin();) {
      auto entry = kernels_.find(*r);
      auto older = std::prev(r);
      if (entry->second.first.use_count() == 1) {
        kernels_.erase(entry);
        recent_.erase(r);
      }
      r = older;
    }
    return made;
  }

  /// Pipelines the device holds now (in use or kept for reuse).
  std::size_t kernels_held() const {
    std::lock_guard lock(kernels_mutex_);
    return kernels_.size();
  }

  /// Time spent creating pipelines so far, and how many: the cost the on-disk cache saves.
  double pipeline_seconds() const noexcept { return pipeline_seconds_; }
  std::uint32_t pipelines_built() const noexcept { return pipelines_built_; }
  const std::string& pipeline_cache_file() const noexcept { return cache_path_; }

  void save_pipeline_cache() {
    if (!cache_dirty_ || cache_path_.empty() || !pipeline_cache_) return;
    auto& f = fn();
    std::size_t n = 0;
    if (f.vkGetPipelineCacheData(device_, pipeline_cache_.get(), &n, nullptr) != VK_SUCCESS || n == 0) return;
    std::vector<char> data(n);
    if (f.vkGetPipelineCacheData(device_, pipeline_cache_.get(), &n, data.data()) != VK_SUCCESS) return;
    data.resize(n);
    write_file_bytes(cache_path_, data);
    cache_dirty_ = false;
  }

 private:
  /// What both constructors share once the device and its queue exist: memory types, the pipeline cache, and the
  /// registry the exit hook walks.
  void finish_setup() {
    auto& f = fn();
    f.vkGetPhysicalDeviceMemoryProperties(info_.handle, &memory_);
    if (pipeline_cache_enabled()) cache_path_ = pipeline_cache_path(info_);
    const std::vector<char> initial = read_file_bytes(cache_path_);
    VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    ci.initialDataSize = initial.size();
    ci.pInitialData = initial.empty() ? nullptr : initial.data();
    VkPipelineCache cache = VK_NULL_HANDLE;
    // Drivers ignore stale data (the header carries the UUID), but be safe and retry empty on failure.
    if (f.vkCreatePipelineCache(device_, &ci, nullptr, &cache) != VK_SUCCESS) {
      ci.initialDataSize = 0;
      ci.pInitialData = nullptr;
      check(f.vkCreatePipelineCache(device_, &ci, nullptr, &cache), "vkCreatePipelineCache");
    }
    pipeline_cache_ = PipelineCacheHandle(device_, cache);
    std::lock_guard lock(live_mutex());
    live().insert(this);
    static const bool hook = [] {
      std::atexit(+[] {
        {
          std::lock_guard l(live_mutex());
          for (Device* d : live()) d->release();
        }
        Instance::check_strict_validation();
        process_exiting() = true;  // objects outliving their device are not destroyed through Vulkan
      });
      return true;
    }();
    (void)hook;
  }

  static std::set<Device*>& live() {
    static auto* const devices = new std::set<Device*>();  // never destroyed: used by the exit hook
    return *devices;
  }
  static std::mutex& live_mutex() {
    static auto* const m = new std::mutex();
    return *m;
  }

  std::shared_ptr<Instance> instance_;  // outlives the device
  bool owned_ = true;                   // false: the application's device, never destroyed here
  DeviceInfo info_;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  std::uint32_t queue_family_ = 0;
  VkQueue transfer_queue_ = VK_NULL_HANDLE;  // null: none
  std::uint32_t transfer_family_ = UINT32_MAX;
  mutable std::mutex transfer_mutex_;
  bool timestamps_ = false;
  VkPhysicalDeviceMemoryProperties memory_{};
  PipelineCacheHandle pipeline_cache_;
  std::string cache_path_;
  bool cache_dirty_ = false;
  mutable std::mutex kernels_mutex_;
  std::list<KernelSpec> recent_;  // most recently used first
  std::map<KernelSpec, std::pair<KernelRef, std::list<KernelSpec>::iterator>> kernels_;
  double pipeline_seconds_ = 0;
  std::uint32_t pipelines_built_ = 0;
  mutable std::mutex mutex_;
  mutable std::mutex staging_mutex_;
  mutable std::vector<std::pair<MemoryUse, Buffer>> staging_pool_;

  struct PendingReleases {
    std::mutex mutex, joining;
    std::vector<std::thread> threads;  // release_later's, joined by wait_for_releases
  };
  /// Never destroyed: an exit hook may release a device after static destructors have run.
  static PendingReleases& pending_releases() {
    static PendingReleases* p = new PendingReleases;
    return *p;
  }

  void give_back_staging(MemoryUse use, Buffer b) const {
    std::lock_guard lock(staging_mutex_);
    if (!device_) return;  // released: the buffer goes with the lease
    std::size_t kept = 0;
    for (const auto& e : staging_pool_) kept += e.first == use;
    if (kept < kKeptStaging) staging_pool_.emplace_back(use, std::move(b));
  }
};

}  // namespace gpuml::vulkan
