// The Vulkan instance (one per process, shared) and what each physical device can do.
#pragma once

#include <gpuml/core/config.hpp>
#include <gpuml/vulkan/loader.hpp>
#include <gpuml/vulkan/result.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gpuml::vulkan {

enum class DeviceType { discrete, integrated, virtual_gpu, cpu, other };

inline const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::discrete: return "discrete GPU";
    case DeviceType::integrated: return "integrated GPU";
    case DeviceType::virtual_gpu: return "virtual GPU";
    case DeviceType::cpu: return "CPU";
    default: return "other";
  }
}

/// Capabilities of one physical device, read once at enumeration.
struct DeviceInfo {
  std::uint32_t index = 0;  // position in vkEnumeratePhysicalDevices
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  std::string name;
  DeviceType type = DeviceType::other;
  std::uint32_t vendor_id = 0, device_id = 0, driver_version = 0, api_version = 0;
  std::string driver_name, driver_info;
  std::array<std::uint8_t, VK_UUID_SIZE> pipeline_cache_uuid{}, device_uuid{};
  std::uint32_t subgroup_size = 1, min_subgroup_size = 1, max_subgroup_size = 1;
  bool subgroup_size_control = false;  // VK_EXT_subgroup_size_control / Vulkan 1.3, usable for compute
  std::uint32_t max_workgroup_subgroups = 0;  // maxComputeWorkgroupSubgroups: bounds a workgroup at a pinned size
  bool subgroup_arithmetic = false, subgroup_shuffle = false, subgroup_ballot = false;
  std::uint32_t max_shared_memory = 0, max_workgroup_invocations = 0;
  std::array<std::uint32_t, 3> max_workgroup_size{}, max_workgroup_count{};
  std::uint64_t max_storage_buffer_range = 0, max_allocation_size = 0, min_storage_buffer_offset_alignment = 1;
  std::uint32_t max_push_constants = 0;
  float timestamp_period_ns = 1.0f;
  bool timestamps = false;
  bool float64 = false, int64 = false, float16 = false;
  // VK_NV_cooperative_matrix with 16 x 16 x 16 float16 products summed in float32 per subgroup, shaderFloat16 and
  // the Vulkan memory model with device scope (what shaders/knn_filter_coop.comp needs; enabled at device creation
  // when present). Device scope is required too: once the memory model is enabled, every shader's buffer atomics
  // (device scope) are valid only with vulkanMemoryModelDeviceScope.
  bool coop_matrix_f16 = false;
  bool unified_memory = false;  // device-local memory is host visible (integrated GPUs, CPU devices)
  // VK_EXT_external_memory_host: the device reads ordinary host memory in place once imported (enabled at device
  // creation when present); imports start and end on multiples of the alignment.
  bool host_memory_import = false;
  std::uint64_t host_import_alignment = 0;
  std::uint64_t device_local_bytes = 0;

  bool is_gpu() const { return type != DeviceType::cpu; }
};

/// Messages from the Khronos validation layer (GPUML_VALIDATION=1). Each one is printed and counted;
/// gpuml's tests fail on any.
struct ValidationLog {
  std::atomic<std::uint64_t> count{0};
  std::mutex mutex;
  std::vector<std::string> messages;
};

inline ValidationLog& validation_log() {
  static ValidationLog log;
  return log;
}

inline std::uint64_t validation_message_count() { return validation_log().count.load(); }

inline VKAPI_ATTR VkBool32 VKAPI_CALL debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                                     VkDebugUtilsMessageTypeFlagsEXT,
                                                     const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
  auto& log = validation_log();
  std::lock_guard lock(log.mutex);
  log.count++;
  log.messages.emplace_back(data && data->pMessage ? data->pMessage : "(no message)");
  std::fprintf(stderr, "gpuml: Vulkan validation: %s\n", log.messages.back().c_str());
  return VK_FALSE;
}


class Instance {
 public:
  /// The process's instance, created on first use and never destroyed: physical-device handles belong to it, and
  /// vkDestroyInstance from a static destructor can run after the driver has torn itself down (seen with NVIDIA's
  /// driver). nullptr when there is no Vulkan loader or no usable driver.
  static std::shared_ptr<Instance> get() {
    static std::mutex m;
    static auto* const cached = new std::shared_ptr<Instance>();  // intentionally never freed
    static bool failed = false;
    std::lock_guard lock(m);
    if (*cached) return *cached;
    if (failed) return nullptr;
    try {
      cached->reset(new Instance());
    } catch (const error&) {
      failed = true;
      return nullptr;
    }
    return *cached;
  }

  /// An instance the application created and owns (gpuml never destroys it). `api_version` is the apiVersion it
  /// was created with. Its physical devices are described as gpuml's own are.
  static std::shared_ptr<Instance> adopt(VkInstance instance, std::uint32_t api_version) {
    if (!instance) throw invalid_input("ExternalDevice: instance is VK_NULL_HANDLE");
    if (!load_vulkan_library()) throw unsupported("no Vulkan loader (libvulkan.so.1) found");
    load_instance_functions(instance, /*only_missing=*/true);
    return std::shared_ptr<Instance>(new Instance(instance, api_version));
  }

  ~Instance() {
    if (!owned_) return;
    auto& f = fn();
    if (messenger_) f.vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
    if (instance_) f.vkDestroyInstance(instance_, nullptr);
  }

  static bool strict_validation() { return config().validation() == Validation::strict; }

  /// GPUML_VALIDATION=strict: any validation message fails the process (at exit, and when a device is destroyed,
  /// which is when the layer reports objects never destroyed), so tests catch leaks that only show late.
  static void check_strict_validation() {
    if (strict_validation() && validation_message_count() > 0) {
      std::fprintf(stderr, "gpuml: %llu Vulkan validation message(s); failing (GPUML_VALIDATION=strict)\n",
                   static_cast<unsigned long long>(validation_message_count()));
      std::fflush(stderr);
      std::_Exit(70);
    }
  }

  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  VkInstance handle() const { return instance_; }
  std::uint32_t api_version() const { return api_version_; }
  bool validation_enabled() const { return messenger_ != VK_NULL_HANDLE; }
  const std::vector<DeviceInfo>& devices() const { return devices_; }
  /// Whether gpuml created this instance (and destroys it), or adopted the application's.
  bool owned() const { return owned_; }

 private:
  Instance(VkInstance external, std::uint32_t api_version)
      : instance_(external), api_version_(std::max<std::uint32_t>(api_version, VK_API_VERSION_1_1)), owned_(false) {
    enumerate();
  }

  Instance() {
    if (!load_vulkan_library()) throw error("no Vulkan loader (libvulkan.so.1) found");
    auto& f = fn();
    api_version_ = VK_API_VERSION_1_1;
    if (auto enum_version = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(
            f.vkGetInstanceProcAddr(VK_NULL_HANDLE, "vkEnumerateInstanceVersion"))) {
      std::uint32_t v = 0;
      if (enum_version(&v) == VK_SUCCESS && v >= VK_API_VERSION_1_3) api_version_ = VK_API_VERSION_1_3;
      else if (v >= VK_API_VERSION_1_2) api_version_ = VK_API_VERSION_1_2;
    }
    const bool want_validation = config().validation() != Validation::off;
    std::vector<const char*> layers, extensions;
    if (want_validation) {
      if (!has_layer("VK_LAYER_KHRONOS_validation"))
        throw error("GPUML_VALIDATION=1 but the Khronos validation layer is not installed");
      layers.push_back("VK_LAYER_KHRONOS_validation");
      extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    }
    if (has_instance_extension(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME))
      extensions.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);

    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "gpuml";
    app.pEngineName = "gpuml";
    app.apiVersion = api_version_;
    VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.pApplicationInfo = &app;
    ci.enabledLayerCount = static_cast<std::uint32_t>(layers.size());
    ci.ppEnabledLayerNames = layers.data();
    ci.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
    ci.ppEnabledExtensionNames = extensions.data();
    if (has_instance_extension(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME))
      ci.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    VkDebugUtilsMessengerCreateInfoEXT dbg{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    dbg.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    dbg.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    dbg.pfnUserCallback = debug_callback;
    if (want_validation) ci.pNext = &dbg;  // also reports problems during instance creation
    check(f.vkCreateInstance(&ci, nullptr, &instance_), "vkCreateInstance");
    load_instance_functions(instance_);
    if (want_validation)
      check(f.vkCreateDebugUtilsMessengerEXT(instance_, &dbg, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");
    enumerate();
  }

  static bool has_layer(const char* name) {
    auto& f = fn();
    std::uint32_t n = 0;
    f.vkEnumerateInstanceLayerProperties(&n, nullptr);
    std::vector<VkLayerProperties> props(n);
    f.vkEnumerateInstanceLayerProperties(&n, props.data());
    for (auto& p : props)
      if (std::strcmp(p.layerName, name) == 0) return true;
    return false;
  }

  static bool has_instance_extension(const char* name) {
    auto& f = fn();
    std::uint32_t n = 0;
    f.vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> props(n);
    f.vkEnumerateInstanceExtensionProperties(nullptr, &n, props.data());
    for (auto& p : props)
      if (std::strcmp(p.extensionName, name) == 0) return true;
    return false;
  }

  void enumerate() {
    auto& f = fn();
    std::uint32_t n = 0;
    check(f.vkEnumeratePhysicalDevices(instance_, &n, nullptr), "vkEnumeratePhysicalDevices");
    std::vector<VkPhysicalDevice> handles(n);
    check(f.vkEnumeratePhysicalDevices(instance_, &n, handles.data()), "vkEnumeratePhysicalDevices");
    for (std::uint32_t i = 0; i < n; ++i) {
      DeviceInfo info = describe(handles[i]);
      info.index = i;
      if (info.api_version >= VK_API_VERSION_1_1) devices_.push_back(std::move(info));
    }
  }

  static bool has_device_extension(VkPhysicalDevice pd, const char* name) {
    auto& f = fn();
    std::uint32_t n = 0;
    f.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> props(n);
    f.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, props.data());
    for (auto& p : props)
      if (std::strcmp(p.extensionName, name) == 0) return true;
    return false;
  }

  DeviceInfo describe(VkPhysicalDevice pd) const {
    auto& f = fn();
    DeviceInfo info;
    info.handle = pd;
    VkPhysicalDeviceProperties base{};
    f.vkGetPhysicalDeviceProperties(pd, &base);
    info.api_version = base.apiVersion;

    VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceIDProperties ids{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceSubgroupSizeControlProperties sgc{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
    VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    subgroup.pNext = &ids;
    ids.pNext = &m3;
    const bool has_sgc = base.apiVersion >= VK_API_VERSION_1_3 ||
                         has_device_extension(pd, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    const bool has_driver_props = base.apiVersion >= VK_API_VERSION_1_2;
    void** tail = &m3.pNext;
    if (has_sgc) { *tail = &sgc; tail = &sgc.pNext; }
    if (has_driver_props) { *tail = &driver; tail = &driver.pNext; }
    VkPhysicalDeviceExternalMemoryHostPropertiesEXT host_import{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
    const bool has_host_import = has_device_extension(pd, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    if (has_host_import) { *tail = &host_import; tail = &host_import.pNext; }
    VkPhysicalDeviceProperties2 props2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props2.pNext = &subgroup;
    f.vkGetPhysicalDeviceProperties2(pd, &props2);
    const VkPhysicalDeviceProperties& p = props2.properties;

    info.name = p.deviceName;
    switch (p.deviceType) {
      case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: info.type = DeviceType::discrete; break;
      case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: info.type = DeviceType::integrated; break;
      case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: info.type = DeviceType::virtual_gpu; break;
      case VK_PHYSICAL_DEVICE_TYPE_CPU: info.type = DeviceType::cpu; break;
      default: info.type = DeviceType::other;
    }
    info.vendor_id = p.vendorID;
    info.device_id = p.deviceID;
    info.driver_version = p.driverVersion;
    std::memcpy(info.pipeline_cache_uuid.data(), p.pipelineCacheUUID, VK_UUID_SIZE);
    std::memcpy(info.device_uuid.data(), ids.deviceUUID, VK_UUID_SIZE);
    if (has_driver_props) {
      info.driver_name = driver.driverName;
      info.driver_info = driver.driverInfo;
    }
    info.host_import_alignment = has_host_import ? host_import.minImportedHostPointerAlignment : 0;
    info.host_memory_import = has_host_import && info.host_import_alignment > 0 &&
                              (info.host_import_alignment & (info.host_import_alignment - 1)) == 0;
    info.subgroup_size = subgroup.subgroupSize;
    info.min_subgroup_size = info.max_subgroup_size = subgroup.subgroupSize;
    info.subgroup_arithmetic = (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                               (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
    info.subgroup_shuffle = (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) &&
                            (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
    info.subgroup_ballot = (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_BALLOT_BIT) &&
                           (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
    if (has_sgc) {
      info.min_subgroup_size = sgc.minSubgroupSize;
      info.max_subgroup_size = sgc.maxSubgroupSize;
      info.max_workgroup_subgroups = sgc.maxComputeWorkgroupSubgroups;
      info.subgroup_size_control = (sgc.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
    }
    const auto& lim = p.limits;
    info.max_shared_memory = lim.maxComputeSharedMemorySize;
    info.max_workgroup_invocations = lim.maxComputeWorkGroupInvocations;
    for (int i = 0; i < 3; ++i) {
      info.max_workgroup_size[i] = lim.maxComputeWorkGroupSize[i];
      info.max_workgroup_count[i] = lim.maxComputeWorkGroupCount[i];
    }
    info.max_storage_buffer_range = lim.maxStorageBufferRange;
    info.max_allocation_size = m3.maxMemoryAllocationSize;
    info.min_storage_buffer_offset_alignment = lim.minStorageBufferOffsetAlignment;
    info.max_push_constants = lim.maxPushConstantsSize;
    info.timestamp_period_ns = lim.timestampPeriod;

    VkPhysicalDeviceShaderFloat16Int8Features f16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDeviceSubgroupSizeControlFeatures sgc_features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features.pNext = &f16;
    if (has_sgc) f16.pNext = &sgc_features;
    f.vkGetPhysicalDeviceFeatures2(pd, &features);
    info.float64 = features.features.shaderFloat64;
    info.int64 = features.features.shaderInt64;
    info.float16 = f16.shaderFloat16;
    if (has_device_extension(pd, "VK_NV_cooperative_matrix") && f.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV &&
        base.apiVersion >= VK_API_VERSION_1_2 && api_version_ >= VK_API_VERSION_1_2) {
      VkPhysicalDeviceCooperativeMatrixFeaturesNV coop{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
      VkPhysicalDeviceVulkanMemoryModelFeatures model{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
      coop.pNext = &model;
      VkPhysicalDeviceFeatures2 more{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
      more.pNext = &coop;
      f.vkGetPhysicalDeviceFeatures2(pd, &more);
      std::uint32_t n = 0;
      f.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &n, nullptr);
      std::vector<VkCooperativeMatrixPropertiesNV> shapes(n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
      f.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &n, shapes.data());
      bool shape = false;
      for (const auto& c : shapes)
        shape = shape || (c.MSize == 16 && c.NSize == 16 && c.KSize == 16 && c.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                          c.BType == VK_COMPONENT_TYPE_FLOAT16_NV && c.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                          c.DType == VK_COMPONENT_TYPE_FLOAT32_NV && c.scope == VK_SCOPE_SUBGROUP_NV);
      info.coop_matrix_f16 = shape && coop.cooperativeMatrix && model.vulkanMemoryModel &&
                             model.vulkanMemoryModelDeviceScope && info.float16 &&
                             info.min_subgroup_size <= 32 && info.max_subgroup_size >= 32;
    }
    info.subgroup_size_control = info.subgroup_size_control && sgc_features.subgroupSizeControl;

    std::uint32_t nq = 0;
    f.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> queues(nq);
    f.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, queues.data());
    for (auto& q : queues)
      if ((q.queueFlags & VK_QUEUE_COMPUTE_BIT) && q.timestampValidBits > 0) info.timestamps = true;

    VkPhysicalDeviceMemoryProperties mem{};
    f.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
    bool all_local_visible = true, any_local = false;
    for (std::uint32_t h = 0; h < mem.memoryHeapCount; ++h)
      if (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) info.device_local_bytes += mem.memoryHeaps[h].size;
    for (std::uint32_t t = 0; t < mem.memoryTypeCount; ++t) {
      const auto flags = mem.memoryTypes[t].propertyFlags;
      if (flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) {
        any_local = true;
        if (!(flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) all_local_visible = false;
      }
    }
    info.unified_memory = info.type == DeviceType::integrated || info.type == DeviceType::cpu ||
                          (any_local && all_local_visible);
    return info;
  }

  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  std::uint32_t api_version_ = VK_API_VERSION_1_1;
  bool owned_ = true;
  std::vector<DeviceInfo> devices_;
};

}  // namespace gpuml::vulkan
