// The run-time choice of AVX2+FMA code on x86, shared by the host engines (host/simd.hpp) and the algorithm layer's
// column passes: a generic x86-64 build still runs 32-byte vectors where the CPU has them. Functions marked
// GPUML_HOST_AVX2 are built for AVX2+FMA and called only where cpu_has_avx2_fma() says so.
#pragma once

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define GPUML_HOST_AVX2_DISPATCH 1
#define GPUML_HOST_AVX2 __attribute__((target("avx2,fma")))
#define GPUML_ALWAYS_INLINE __attribute__((always_inline))
#else
#define GPUML_HOST_AVX2_DISPATCH 0
#define GPUML_HOST_AVX2
#define GPUML_ALWAYS_INLINE
#endif

namespace gpuml {

/// Whether this CPU runs the GPUML_HOST_AVX2 builds (x86 with AVX2 and FMA).
inline bool cpu_has_avx2_fma() {
#if GPUML_HOST_AVX2_DISPATCH
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

namespace cpu_detail {
template <class Work>
GPUML_HOST_AVX2 void run_avx2(Work& work) {
  work();
}
}  // namespace cpu_detail

/// Runs work() built for AVX2+FMA where the CPU has it, else as the rest of the program is built: work (and what its
/// loops call) must be GPUML_ALWAYS_INLINE, so that it is compiled into each caller with the caller's target.
template <class Work>
void with_best_isa(Work&& work) {
#if GPUML_HOST_AVX2_DISPATCH
  if (cpu_has_avx2_fma()) {
    cpu_detail::run_avx2(work);
    return;
  }
#endif
  work();
}

}  // namespace gpuml
