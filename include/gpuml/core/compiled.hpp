// The compiled mode (CMake -DGPUML_COMPILED=ON, target gpuml::compiled, which defines GPUML_COMPILED for its
// consumers): one library translation unit (src/gpuml.cpp, which also defines GPUML_COMPILED_LIBRARY) defines the
// functions and estimator members that need the engines, for float and double; a consumer's translation unit reads
// their declarations only, so it does not parse the engines, the kernels and Vulkan. Header-only (no macro) is the
// default: every header defines everything it declares.
#pragma once

// Functions defined once in the library in the compiled mode, inline in every translation unit otherwise.
#if defined(GPUML_COMPILED)
#define GPUML_INLINE
#else
#define GPUML_INLINE inline
#endif

// Whether this translation unit holds the definitions that the compiled mode keeps in the library.
#if !defined(GPUML_COMPILED) || defined(GPUML_COMPILED_LIBRARY)
#define GPUML_DEFINES_LIBRARY 1
#else
#define GPUML_DEFINES_LIBRARY 0
#endif
