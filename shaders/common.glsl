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

// llvmpipe (lavapipe) counts every loop iteration of an invocation against one limit (65535 in all, shared by
// all loops) and silently leaves each loop once it is spent, so a long invocation computes garbage. Shaders that may
// run that long end with this probe on CPU devices: a loop of at least two iterations whose count the compiler
// cannot know (`runtime` is any value it cannot fold); once the limit is spent it stops after one iteration, and
// the shader reports it so the host never uses the result.
bool loop_limit_reached(uint runtime) {
  uint n = 0u;
  for (uint i = 0u; i < 2u + (runtime & 1u); ++i) n += 1u;
  return n < 2u;
}

// Dispatches wider than maxComputeWorkGroupCount.x are laid out as a 2-D grid of groups.
uint linear_group_id() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

#endif
