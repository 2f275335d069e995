// The prelude of gpuml's shader interface headers. Each shaders/<name>.comp has one interface header,
// <gpuml/shaders/<name>.h>, read both by glslang (the shader includes it) and by C++ (the driver in kernels/):
// the push-constant block, the binding indices, the specialisation-constant ids and the constants both sides must
// agree on are written once there. In C++ they live in namespace gpuml::shader_interface::<name>, the push block
// becomes a struct of the same layout; in GLSL they are plain constants and the push block a push_constant uniform.
// Interface headers include nothing but this prelude.
#ifndef GPUML_SHADERS_INTERFACE_H
#define GPUML_SHADERS_INTERFACE_H

#ifdef __cplusplus
#include <cstdint>
#include <type_traits>

// `uint` and `float` are the field types of push blocks: 4 bytes each in both languages, so the std430 push layout
// is the C++ struct's layout with no padding.
#define GPUML_SHADER_INTERFACE_BEGIN(name) \
  namespace gpuml::shader_interface::name { \
  using uint = std::uint32_t;
#define GPUML_SHADER_INTERFACE_END }
#define GPUML_CONSTANT(name, value) inline constexpr std::uint32_t name = value;
#define GPUML_PUSH_CONSTANTS(Type) struct Type
#define GPUML_PUSH_INSTANCE(instance)
// The push struct is copied bytewise into vkCmdPushConstants: only 4-byte fields, no padding.
#define GPUML_CHECK_PUSH(Type, fields) \
  static_assert(std::is_trivially_copyable_v<Type> && std::is_standard_layout_v<Type>); \
  static_assert(sizeof(Type) == 4 * (fields), #Type " must be " #fields " 4-byte fields, as the shader's std430 block");
#else
#define GPUML_SHADER_INTERFACE_BEGIN(name)
#define GPUML_SHADER_INTERFACE_END
#define GPUML_CONSTANT(name, value) const uint name = value;
#define GPUML_PUSH_CONSTANTS(Type) layout(push_constant) uniform Type
#define GPUML_PUSH_INSTANCE(instance) instance
#define GPUML_CHECK_PUSH(Type, fields)
#endif

#endif
