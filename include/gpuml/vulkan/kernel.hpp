// A compute kernel: embedded SPIR-V specialised with constants from a policy, N storage buffers, push constants.
#pragma once

#include <gpuml/vulkan/handle.hpp>
#include <gpuml/vulkan/result.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gpuml::vulkan {

/// SPIR-V words generated at build time from shaders/*.comp (see cmake/GpumlShaders.cmake).
struct ShaderCode {
  const std::uint32_t* words;
  std::size_t word_count;
  const char* name;
};

/// Everything that makes one pipeline: the code, its interface and its specialisation.
struct KernelSpec {
  ShaderCode code;
  std::uint32_t buffer_count = 0;
  std::uint32_t push_constant_bytes = 0;
  std::vector<std::uint32_t> constants;     // specialisation constants 0..N-1, in order
  std::uint32_t required_subgroup_size = 0;  // 0: the driver's choice

  bool operator<(const KernelSpec& o) const {
    if (code.words != o.code.words) return code.words < o.code.words;
    if (constants != o.constants) return constants < o.constants;
    return required_subgroup_size < o.required_subgroup_size;
  }
};

class Kernel;
/// A pipeline, shared by the device's cache and the callers recording with it.
using KernelRef = std::shared_ptr<const Kernel>;

class Kernel {
 public:
  Kernel(VkDevice device, VkPipelineCache cache, const KernelSpec& spec) : spec_(spec) {
    auto& f = fn();
    VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = spec.code.word_count * sizeof(std::uint32_t);
    mi.pCode = spec.code.words;
    VkShaderModule module = VK_NULL_HANDLE;
    check(f.vkCreateShaderModule(device, &mi, nullptr, &module), "vkCreateShaderModule");
    module_ = ShaderModuleHandle(device, module);

    std::vector<VkDescriptorSetLayoutBinding> bindings(spec.buffer_count);
    for (std::uint32_t i = 0; i < spec.buffer_count; ++i)
      bindings[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    li.bindingCount = spec.buffer_count;
    li.pBindings = bindings.data();
    VkDescriptorSetLayout dsl = VK_NULL_HANDLE;
    check(f.vkCreateDescriptorSetLayout(device, &li, nullptr, &dsl), "vkCreateDescriptorSetLayout");
    set_layout_ = DescriptorSetLayoutHandle(device, dsl);

    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, spec.push_constant_bytes};
    VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pli.setLayoutCount = 1;
    pli.pSetLayouts = &dsl;
    pli.pushConstantRangeCount = spec.push_constant_bytes ? 1 : 0;
    pli.pPushConstantRanges = &range;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    check(f.vkCreatePipelineLayout(device, &pli, nullptr, &layout), "vkCreatePipelineLayout");
    layout_ = PipelineLayoutHandle(device, layout);

    std::vector<VkSpecializationMapEntry> entries(spec.constants.size());
    for (std::uint32_t i = 0; i < entries.size(); ++i)
      entries[i] = {i, static_cast<std::uint32_t>(i * sizeof(std::uint32_t)), sizeof(std::uint32_t)};
    VkSpecializationInfo si{};
    si.mapEntryCount = static_cast<std::uint32_t>(entries.size());
    si.pMapEntries = entries.data();
    si.dataSize = spec.constants.size() * sizeof(std::uint32_t);
    si.pData = spec.constants.data();

    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo subgroup{
        VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
    subgroup.requiredSubgroupSize = spec.required_subgroup_size;
    VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    ci.stage.pNext = spec.required_subgroup_size ? &subgroup : nullptr;
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = module;
    ci.stage.pName = "main";
    ci.stage.pSpecializationInfo = entries.empty() ? nullptr : &si;
    ci.layout = layout;
    VkPipeline pipeline = VK_NULL_HANDLE;
    check(f.vkCreateComputePipelines(device, cache, 1, &ci, nullptr, &pipeline), "vkCreateComputePipelines");
    pipeline_ = PipelineHandle(device, pipeline);
  }

  VkPipeline pipeline() const noexcept { return pipeline_.get(); }
  VkPipelineLayout layout() const noexcept { return layout_.get(); }
  VkDescriptorSetLayout set_layout() const noexcept { return set_layout_.get(); }
  const KernelSpec& spec() const noexcept { return spec_; }

 private:
  KernelSpec spec_;
  ShaderModuleHandle module_;
  DescriptorSetLayoutHandle set_layout_;
  PipelineLayoutHandle layout_;
  PipelineHandle pipeline_;
};

}  // namespace gpuml::vulkan
