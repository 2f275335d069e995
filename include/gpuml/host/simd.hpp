// The host engines' one SIMD layer: GCC/Clang vector types of 16 and 32 bytes, unaligned loads and stores, and the
// run-time choice of AVX2+FMA code on x86 (core/cpu.hpp). A kernel is written once as a template over the vector
// width and built for the baseline ISA and, on x86, for AVX2+FMA (GPUML_HOST_AVX2 marks those functions), chosen at
// run time by cpu_has_avx2_fma(): a generic x86-64 build still runs 32-byte vectors with fused multiply-adds where
// the CPU has them. Compilers without vector extensions get GPUML_HOST_VECTORS 0 and the engines' scalar code.
#pragma once

#include <gpuml/core/cpu.hpp>

#include <cstdint>
#include <cstring>

#if defined(__GNUC__) || defined(__clang__)
#define GPUML_HOST_VECTORS 1
#else
#define GPUML_HOST_VECTORS 0
#endif

namespace gpuml::host::simd {

#if GPUML_HOST_VECTORS
/// A vector of Bytes / sizeof(T) lanes of T (V) and the integer vector its comparisons give (I).
template <class T, int Bytes>
struct Vec;
template <>
struct Vec<float, 16> {
  typedef float V __attribute__((vector_size(16)));
  typedef std::int32_t I __attribute__((vector_size(16)));
};
template <>
struct Vec<float, 32> {
  typedef float V __attribute__((vector_size(32)));
  typedef std::int32_t I __attribute__((vector_size(32)));
};
template <>
struct Vec<double, 16> {
  typedef double V __attribute__((vector_size(16)));
  typedef std::int64_t I __attribute__((vector_size(16)));
};
template <>
struct Vec<double, 32> {
  typedef double V __attribute__((vector_size(32)));
  typedef std::int64_t I __attribute__((vector_size(32)));
};

/// The width of the baseline build's vectors: 32 bytes where the build targets AVX, else 16.
#if defined(__AVX__)
inline constexpr int kBaselineBytes = 32;
#else
inline constexpr int kBaselineBytes = 16;
#endif

/// Unaligned load and store of one vector (through references: a 32-byte vector returned by value from a function
/// built without AVX would change the calling convention).
template <class V, class T>
__attribute__((always_inline)) inline void load(V& v, const T* p) {
  std::memcpy(&v, p, sizeof(V));
}
template <class V, class T>
__attribute__((always_inline)) inline void store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}
#endif

}  // namespace gpuml::host::simd
