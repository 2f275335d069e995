// Shared by every gpuml shader: the scalar type of this build (GPUML_F32 or GPUML_F64) and linear group ids.
#ifndef GPUML_COMMON_GLSL
#define GPUML_COMMON_GLSL

#if defined(GPUML_F64)
#define scalar double
#define scalar4 dvec4
scalar scalar_inf() { return packDouble2x32(uvec2(0u, 0x7FF00000u)); }
#else
#define scalar float
#define scalar4 vec4
scalar scalar_inf() { return uintBitsToFloat(0x7F800000u); }
#endif

// Dispatches wider than maxComputeWorkGroupCount.x are laid out as a 2-D grid of groups.
uint linear_group_id() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

#endif
