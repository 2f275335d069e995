// Host k-means engine (Eigen, multithreaded): Lloyd iterations with scikit-learn's empty-cluster relocation,
// greedy k-means++ and random seeding, nearest-center assignment, exact distances and inertia.
//
// Work is cut into a fixed partition of sample blocks (it depends on n, k, d and the scalar type, never on the
// thread count); each block accumulates its center sums privately in the fit's exact fixed point
// (algorithms::ClusterSums), so results are identical for any GPUML_NUM_THREADS and any cut of the rows. Inside a block, samples go in chunks of 256 (as scikit-learn):
// one GEMM per chunk gives <x,c>, the argmin of ||c||^2 - 2<x,c> keeps the lowest index on ties.
#pragma once

#include <gpuml/algorithms/kmeans.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/host/simd.hpp>

#include <algorithm>
#include <chrono>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpuml::host {

namespace kmeans_detail {
// scikit-learn's algorithm lives in the algorithm layer; the host engine below implements its engine operations.
using algorithms::average_centers;
using algorithms::kPlusPlusBlock;
using algorithms::lloyd_loop;
using algorithms::plus_plus_loop;
using algorithms::plus_plus_trials;
using algorithms::py_repr;
using algorithms::relocate_empty_clusters;
using algorithms::sampling_masses;
using algorithms::sq_dist;
using algorithms::WeightMasses;
}  // namespace kmeans_detail

using algorithms::LloydResult;
using algorithms::random_init;


namespace kmeans_detail {

inline constexpr std::int64_t kChunk = 256;


/// Fixed partition of the samples into blocks of whole chunks: at most 128 blocks (fewer when k*(d+1) is large,
/// so the private accumulators stay below ~64 MiB), at least one chunk per block.
struct Blocking {
  std::int64_t block = kChunk;
  std::int64_t n_blocks = 1;
};

template <class T>
Blocking blocking(std::int64_t n, std::int64_t k, std::int64_t d) {
  const std::int64_t acc_bytes = std::max<std::int64_t>(1, k * (d + 1) * static_cast<std::int64_t>(sizeof(T)));
  const std::int64_t max_blocks = std::clamp<std::int64_t>((std::int64_t{64} << 20) / acc_bytes, 16, 128);
  std::int64_t block = (n + max_blocks - 1) / max_blocks;
  block = std::max<std::int64_t>(kChunk, (block + kChunk - 1) / kChunk * kChunk);
  return {block, std::max<std::int64_t>(1, (n + block - 1) / block)};
}

#if GPUML_HOST_VECTORS
// Fused distance + argmin over one chunk with vector extensions (host/simd.hpp): the chunk is stored transposed
// (d x 256) so each vector holds one feature of consecutive samples; 4 centers x 2 vectors of samples stay in
// registers. Built for the baseline ISA and, chosen at run time on x86, for AVX2+FMA (32 bytes).
#if defined(__clang__)
#define GPUML_HOST_CONTRACT_FAST _Pragma("clang fp contract(fast)")
#else
#define GPUML_HOST_CONTRACT_FAST
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
#endif
/// best[i], label[i] for the 256 samples of xt (d x 256): argmin over j of cn[j] + sum_f cm2[j, f] x[f, i], where
/// cm2 = -2 C; strict < in increasing j, so the lowest index wins ties.
template <class T, int Bytes>
__attribute__((always_inline)) inline void argmin_tile_body(const T* __restrict xt, std::int64_t d, const T* __restrict cm2,
                                                            const T* __restrict cn, std::int64_t k, T* __restrict best,
                                                            std::int32_t* __restrict label) {
  GPUML_HOST_CONTRACT_FAST
  using V = typename simd::Vec<T, Bytes>::V;
  using I = typename simd::Vec<T, Bytes>::I;
  using IE = std::remove_reference_t<decltype(I{}[0])>;
  constexpr int L = Bytes / static_cast<int>(sizeof(T));
  constexpr std::int64_t kC = 256;
  for (std::int64_t ib = 0; ib < kC; ib += 2 * L) {
    V b0, b1;
    I l0 = I{} + IE(0), l1 = I{} + IE(0);
    b0 = V{} + std::numeric_limits<T>::infinity();
    b1 = b0;
    std::int64_t j = 0;
    for (; j + 4 <= k; j += 4) {
      V a00 = V{} + cn[j], a10 = V{} + cn[j + 1], a20 = V{} + cn[j + 2], a30 = V{} + cn[j + 3];
      V a01 = a00, a11 = a10, a21 = a20, a31 = a30;
      const T* c0 = cm2 + j * d;
      const T* c1 = c0 + d;
      const T* c2 = c1 + d;
      const T* c3 = c2 + d;
      for (std::int64_t f = 0; f < d; ++f) {
        V x0, x1;
        __builtin_memcpy(&x0, xt + f * kC + ib, sizeof(V));
        __builtin_memcpy(&x1, xt + f * kC + ib + L, sizeof(V));
        const T s0 = c0[f], s1 = c1[f], s2 = c2[f], s3 = c3[f];
        a00 += s0 * x0;
        a01 += s0 * x1;
        a10 += s1 * x0;
        a11 += s1 * x1;
        a20 += s2 * x0;
        a21 += s2 * x1;
        a30 += s3 * x0;
        a31 += s3 * x1;
      }
      I m;
      m = a00 < b0, b0 = m ? a00 : b0, l0 = m ? (I{} + IE(j)) : l0;
      m = a01 < b1, b1 = m ? a01 : b1, l1 = m ? (I{} + IE(j)) : l1;
      m = a10 < b0, b0 = m ? a10 : b0, l0 = m ? (I{} + IE(j + 1)) : l0;
      m = a11 < b1, b1 = m ? a11 : b1, l1 = m ? (I{} + IE(j + 1)) : l1;
      m = a20 < b0, b0 = m ? a20 : b0, l0 = m ? (I{} + IE(j + 2)) : l0;
      m = a21 < b1, b1 = m ? a21 : b1, l1 = m ? (I{} + IE(j + 2)) : l1;
      m = a30 < b0, b0 = m ? a30 : b0, l0 = m ? (I{} + IE(j + 3)) : l0;
      m = a31 < b1, b1 = m ? a31 : b1, l1 = m ? (I{} + IE(j + 3)) : l1;
    }
    for (; j < k; ++j) {
      V a0 = V{} + cn[j], a1 = a0;
      const T* c0 = cm2 + j * d;
      for (std::int64_t f = 0; f < d; ++f) {
        V x0, x1;
        __builtin_memcpy(&x0, xt + f * kC + ib, sizeof(V));
        __builtin_memcpy(&x1, xt + f * kC + ib + L, sizeof(V));
        a0 += c0[f] * x0;
        a1 += c0[f] * x1;
      }
      I m;
      m = a0 < b0, b0 = m ? a0 : b0, l0 = m ? (I{} + IE(j)) : l0;
      m = a1 < b1, b1 = m ? a1 : b1, l1 = m ? (I{} + IE(j)) : l1;
    }
    __builtin_memcpy(best + ib, &b0, sizeof(V));
    __builtin_memcpy(best + ib + L, &b1, sizeof(V));
    for (int l = 0; l < L; ++l) {
      label[ib + l] = static_cast<std::int32_t>(l0[l]);
      label[ib + L + l] = static_cast<std::int32_t>(l1[l]);
    }
  }
}

template <class T>
void argmin_tile_base(const T* xt, std::int64_t d, const T* cm2, const T* cn, std::int64_t k, T* best,
                      std::int32_t* label) {
  argmin_tile_body<T, simd::kBaselineBytes>(xt, d, cm2, cn, k, best, label);
}

/// For the 256 samples of xt (d x 256): out[i] = min(closest[i], ||x_i - c||^2) (from differences).
template <class T, int Bytes>
__attribute__((always_inline)) inline void potential_tile_body(const T* __restrict xt, std::int64_t d,
                                                               const T* __restrict c, const T* __restrict closest,
                                                               T* __restrict out) {
  GPUML_HOST_CONTRACT_FAST
  using V = typename simd::Vec<T, Bytes>::V;
  constexpr int L = Bytes / static_cast<int>(sizeof(T));
  constexpr std::int64_t kC = 256;
  for (std::int64_t ib = 0; ib < kC; ib += 2 * L) {
    V a0 = V{}, a1 = V{};
    for (std::int64_t f = 0; f < d; ++f) {
      V x0, x1;
      __builtin_memcpy(&x0, xt + f * kC + ib, sizeof(V));
      __builtin_memcpy(&x1, xt + f * kC + ib + L, sizeof(V));
      x0 -= c[f];
      x1 -= c[f];
      a0 += x0 * x0;
      a1 += x1 * x1;
    }
    V c0, c1;
    __builtin_memcpy(&c0, closest + ib, sizeof(V));
    __builtin_memcpy(&c1, closest + ib + L, sizeof(V));
    a0 = c0 < a0 ? c0 : a0;
    a1 = c1 < a1 ? c1 : a1;
    __builtin_memcpy(out + ib, &a0, sizeof(V));
    __builtin_memcpy(out + ib + L, &a1, sizeof(V));
  }
}

template <class T>
void potential_tile_base(const T* xt, std::int64_t d, const T* c, const T* closest, T* out) {
  potential_tile_body<T, simd::kBaselineBytes>(xt, d, c, closest, out);
}

#if GPUML_HOST_AVX2_DISPATCH
template <class T>
GPUML_HOST_AVX2 void potential_tile_avx2(const T* xt, std::int64_t d, const T* c, const T* closest, T* out) {
  potential_tile_body<T, 32>(xt, d, c, closest, out);
}

template <class T>
GPUML_HOST_AVX2 void argmin_tile_avx2(const T* xt, std::int64_t d, const T* cm2, const T* cn, std::int64_t k, T* best,
                                      std::int32_t* label) {
  argmin_tile_body<T, 32>(xt, d, cm2, cn, k, best, label);
}
#endif
#if !defined(__clang__)
#pragma GCC pop_options
#endif
#undef GPUML_HOST_CONTRACT_FAST
#endif  // GPUML_HOST_VECTORS

/// k-means++ candidate tile: out[i] = min(closest[i], ||x_i - c||^2) for the 256 samples of xt (d x 256,
/// zero-padded).
template <class T>
void potential_tile(const T* xt, std::int64_t d, const T* c, const T* closest, T* out) {
#if GPUML_HOST_VECTORS
#if GPUML_HOST_AVX2_DISPATCH
  if (cpu_has_avx2_fma()) return potential_tile_avx2<T>(xt, d, c, closest, out);
#endif
  potential_tile_base<T>(xt, d, c, closest, out);
#else
  for (std::int64_t i = 0; i < kChunk; ++i) {
    T acc = 0;
    for (std::int64_t f = 0; f < d; ++f) {
      const T diff = xt[f * kChunk + i] - c[f];
      acc += diff * diff;
    }
    out[i] = std::min(closest[i], acc);
  }
#endif
}

/// Scratch for one chunk: the transposed chunk (vector kernel) or the k x 256 tile of dot products (Eigen GEMM),
/// the running minimum and its index.
template <class T>
struct ChunkScratch {
#if GPUML_HOST_VECTORS
  std::vector<T> xt;
  explicit ChunkScratch(Eigen::Index, Eigen::Index d) : xt(static_cast<std::size_t>(d * kChunk), T(0)) {}
#else
  Matrix<T> dots;
  explicit ChunkScratch(Eigen::Index k, Eigen::Index) : dots(Matrix<T>::Zero(k, kChunk)) {}
#endif
  alignas(64) T best[kChunk];
  alignas(64) std::int32_t label[kChunk];
};

/// The centers as the assignment kernels use them: -2 C (row-major, contiguous) and ||c||^2.
template <class T>
struct CenterTerms {
  Matrix<T> minus2;
  Vector<T> norms;
  explicit CenterTerms(const Matrix<T>& C) : minus2(T(-2) * C), norms(C.rowwise().squaredNorm()) {}
};

/// Labels of rows [begin, begin + m) of X (m <= 256): argmin over j of ||c_j||^2 - 2<x, c_j>, strict <.
template <class T>
void argmin_chunk(const MatrixView<T>& X, std::int64_t begin, std::int64_t m, const Matrix<T>& C,
                  const CenterTerms<T>& terms, ChunkScratch<T>& s) {
  const Eigen::Index k = C.rows(), d = C.cols();
#if GPUML_HOST_VECTORS
  T* xt = s.xt.data();
  for (std::int64_t i = 0; i < m; ++i) {
    const T* x = X.data() + (begin + i) * X.outerStride();
    for (std::int64_t f = 0; f < d; ++f) xt[f * kChunk + i] = x[f];
  }
  if (m < kChunk)
    for (std::int64_t f = 0; f < d; ++f) std::fill(xt + f * kChunk + m, xt + (f + 1) * kChunk, T(0));
#if GPUML_HOST_AVX2_DISPATCH
  if (cpu_has_avx2_fma()) {
    argmin_tile_avx2<T>(xt, d, terms.minus2.data(), terms.norms.data(), k, s.best, s.label);
    return;
  }
#endif
  argmin_tile_base<T>(xt, d, terms.minus2.data(), terms.norms.data(), k, s.best, s.label);
#else
  (void)d;
  s.dots.leftCols(m).noalias() = C * X.middleRows(begin, m).transpose();
  T* best = s.best;
  std::int32_t* label = s.label;
  {
    const T* g = s.dots.data();
    const T c = terms.norms[0];
    for (std::int64_t i = 0; i < kChunk; ++i) {
      best[i] = c - T(2) * g[i];
      label[i] = 0;
    }
  }
  for (Eigen::Index j = 1; j < k; ++j) {
    const T* g = s.dots.data() + j * kChunk;
    const T c = terms.norms[j];
    const std::int32_t jj = static_cast<std::int32_t>(j);
    for (std::int64_t i = 0; i < kChunk; ++i) {
      const T v = c - T(2) * g[i];
      const bool lt = v < best[i];
      best[i] = lt ? v : best[i];
      label[i] = lt ? jj : label[i];
    }
  }
#endif
}

/// One pass over X with the centers C: labels, and when `sums` is given the exact per-cluster weighted sums
/// sum_i w_i x_i and weights sum_i w_i in `frame`'s fixed point (algorithms::ClusterSums; per block, then added).
/// With a `pacer`, the blocks run in as many consecutive groups as it asks for, with its poll between them.
template <class T>
void assign_pass(const MatrixView<T>& X, const VectorView<T>* w, const Matrix<T>& C, Labels& labels,
                 algorithms::ClusterSums* sums, const algorithms::SumFrame* frame, const KeepGoingPacer* pacer = nullptr) {
  const std::int64_t n = X.rows(), d = X.cols(), k = C.rows();
  const CenterTerms<T> terms(C);
  const bool update = sums != nullptr;
  if (update) sums->template reset<T>(k, d, *frame);
  const double value_scale = std::ldexp(1.0, update ? sums->value_exponent : 0),
               weight_scale = std::ldexp(1.0, update ? sums->weight_exponent : 0);
  const Blocking bl = blocking<T>(n, k, d);
  const std::int64_t acc_size = k * (d + 1);
  std::vector<std::int64_t> acc(update ? static_cast<std::size_t>(bl.n_blocks * acc_size) : 0, 0);
  // At most 64 slices, and a block per host thread at least in each, so slicing never idles threads.
  const std::int64_t slices = pacer ? pacer->parts(std::min<std::int64_t>(64, bl.n_blocks / host_threads())) : 1;
  const std::int64_t slice_blocks = (bl.n_blocks + slices - 1) / slices;
  auto block_pass = [&](std::int64_t blk, std::int64_t b, std::int64_t e) {
    ChunkScratch<T> s(k, d);
    std::int64_t* a_sum = update ? acc.data() + blk * acc_size : nullptr;
    std::int64_t* a_w = update ? a_sum + k * d : nullptr;
    for (std::int64_t cb = b; cb < e; cb += kChunk) {
      const std::int64_t m = std::min(kChunk, e - cb);
      argmin_chunk(X, cb, m, C, terms, s);
      std::memcpy(labels.data() + cb, s.label, static_cast<std::size_t>(m) * sizeof(std::int32_t));
      if (update) {
        for (std::int64_t i = 0; i < m; ++i) {
          const std::int32_t l = s.label[i];
          const T wi = (*w)[cb + i];
          const T* x = X.data() + (cb + i) * X.outerStride();
          std::int64_t* dst = a_sum + static_cast<std::int64_t>(l) * d;
          for (std::int64_t f = 0; f < d; ++f) dst[f] += algorithms::fixed_point<T>(x[f] * wi, value_scale);
          a_w[l] += algorithms::fixed_point<T>(wi, weight_scale);
        }
      }
    }
  };
  for (std::int64_t first = 0; first < bl.n_blocks; first += slice_blocks) {
    const std::int64_t r0 = first * bl.block, r1 = std::min(n, (first + slice_blocks) * bl.block);
    parallel_chunks(r1 - r0, bl.block,
                    [&](std::int64_t blk, std::int64_t b, std::int64_t e) { block_pass(first + blk, r0 + b, r0 + e); });
    if (r1 < n && pacer) pacer->poll();
  }
  if (update) {
    for (std::int64_t blk = 0; blk < bl.n_blocks; ++blk) {
      const std::int64_t* a = acc.data() + blk * acc_size;
      std::int64_t* dst = sums->values.data();
      for (std::int64_t t = 0; t < k * d; ++t) dst[t] += a[t];
      for (std::int64_t j = 0; j < k; ++j) sums->weights[j] += a[k * d + j];
    }
  }
}

}  // namespace kmeans_detail

/// Nearest center of each row (predict): argmin of ||c||^2 - 2<x,c>, lowest index on ties.
template <class T>
Labels assign(MatrixView<T> X, const Matrix<T>& centers) {
  Labels labels(X.rows());
  kmeans_detail::assign_pass<T>(X, nullptr, centers, labels, nullptr, nullptr);
  return labels;
}

/// sum_i w_i ||x_i - c_{l_i}||^2 from differences, exact in `frame`'s fixed point (each term w_i d_i^2 in T).
template <class T>
algorithms::ExactSum exact_inertia(MatrixView<T> X, VectorView<T> w, const Matrix<T>& centers, const Labels& labels,
                                   const algorithms::SumFrame& frame) {
  const std::int64_t n = X.rows(), d = X.cols();
  const int exponent = frame.inertia_exponent(centers);
  const double scale = std::ldexp(1.0, exponent);
  const auto bl = kmeans_detail::blocking<T>(n, centers.rows(), d);
  std::vector<std::int64_t> part(static_cast<std::size_t>(bl.n_blocks), 0);
  parallel_chunks(n, bl.block, [&](std::int64_t blk, std::int64_t b, std::int64_t e) {
    std::int64_t s = 0;
    for (std::int64_t i = b; i < e; ++i) {
      const T d2 = kmeans_detail::sq_dist(X.data() + i * X.outerStride(), centers.data() + std::int64_t{labels[i]} * d, d);
      s += algorithms::fixed_point<T>(d2 * w[i], scale);
    }
    part[blk] = s;
  });
  algorithms::ExactSum total{0, exponent};
  for (std::int64_t p : part) total.value += p;
  return total;
}

/// sum_i w_i ||x_i - c_{l_i}||^2 from differences (exact_inertia over these rows alone).
template <class T>
double inertia(MatrixView<T> X, VectorView<T> w, const Matrix<T>& centers, const Labels& labels) {
  return exact_inertia<T>(X, w, centers, labels, algorithms::SumFrame::of<T>(X, w)).to_double();
}

/// Euclidean distances of every row to every center (transform), from differences: exact 0 when x == c.
template <class T>
Matrix<T> euclidean_to_centers(MatrixView<T> X, const Matrix<T>& centers) {
  const std::int64_t n = X.rows(), d = X.cols(), k = centers.rows();
  Matrix<T> out(n, k);
  parallel_chunks(n, kmeans_detail::kChunk, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      for (std::int64_t j = 0; j < k; ++j)
        out(i, j) = std::sqrt(kmeans_detail::sq_dist(X.data() + i * X.outerStride(), centers.data() + j * d, d));
  });
  return out;
}

namespace kmeans_detail {

/// The host engine's E-step for lloyd_loop.
template <class T>
class HostLloyd {
 public:
  /// `frame`: the whole fit's (algorithms::SumFrame); none: a fit over exactly these rows.
  HostLloyd(MatrixView<T> X, VectorView<T> w, const std::optional<algorithms::SumFrame>& frame = {})
      : X_(X), w_(w), labels_(Labels::Constant(X.rows(), -1)), frame_(frame ? *frame : algorithms::SumFrame::of<T>(X, w)) {}
  bool e_step(const Matrix<T>& C, algorithms::ClusterSums& sums) {
    const Labels old = labels_;
    const auto started = KeepGoingPacer::Clock::now();
    assign_pass<T>(X_, &w_, C, labels_, &sums, &frame_, &pacer_);
    pacer_.step_done(started);
    return labels_ != old;
  }
  /// Polls `keep_going` between slices of an E-step that ran longer than `slice_ms` the last time (see KeepGoing).
  void set_keep_going(KeepGoing keep_going, double slice_ms = kKeepGoingSliceMs) {
    pacer_.set(std::move(keep_going), slice_ms);
  }
  const Labels& labels() const { return labels_; }
  void assign(const Matrix<T>& C) { assign_pass<T>(X_, nullptr, C, labels_, nullptr, nullptr); }
  algorithms::ExactSum inertia(const Matrix<T>& C) const;

 private:
  MatrixView<T> X_;
  VectorView<T> w_;
  Labels labels_;
  algorithms::SumFrame frame_;
  KeepGoingPacer pacer_;
};

}  // namespace kmeans_detail

template <class T>
algorithms::ExactSum kmeans_detail::HostLloyd<T>::inertia(const Matrix<T>& C) const {
  return host::exact_inertia<T>(X_, w_, C, labels_, frame_);
}

/// The full Lloyd loop of scikit-learn's _kmeans_single_lloyd on centred data, on the host. `frame`: the fit's
/// bounds where the caller knows them (none: one pass over X finds them).
template <class T>
LloydResult<T> lloyd(MatrixView<T> X, VectorView<T> w, const Matrix<T>& init_centers, int max_iter, double tol_absolute,
                     bool verbose, const IterationCallback& on_iteration = {}, const KeepGoing& keep_going = {},
                     const std::optional<algorithms::SumFrame>& frame = {}) {
  kmeans_detail::HostLloyd<T> engine(X, w, frame);
  engine.set_keep_going(keep_going);
  return kmeans_detail::lloyd_loop<T>(engine, X, w, init_centers, max_iter, tol_absolute, verbose, on_iteration);
}

namespace kmeans_detail {

/// The host engine of plus_plus_loop. Distances are exact (from differences); potentials and block masses are exact
/// sums of their terms (algorithms::plus_plus_term in `frame`'s fixed point), so results do not depend on the thread
/// count or the cut of the rows. `block_offset`: this shard's first row's place in its sampling block (MPI ranks).
template <class T>
class HostPlusPlus {
 public:
  HostPlusPlus(MatrixView<T> X, VectorView<T> w, int n_trials, const algorithms::SumFrame& frame,
               std::int64_t block_offset = 0)
      : X_(X),
        w_(w),
        n_trials_(n_trials),
        bl_(blocking<T>(X.rows(), 1, X.cols())),
        blocks_{X.rows(), block_offset},
        exponent_(frame.plus_plus_exponent<T>(X.cols())),
        scale_(std::ldexp(1.0, exponent_)),
        closest_(static_cast<std::size_t>(X.rows())),
        cand_dist_(static_cast<std::size_t>(n_trials) * static_cast<std::size_t>(X.rows())) {
    sums_.exponent = exponent_;
    sums_.exact.assign(static_cast<std::size_t>(blocks_.count()), 0);
  }

  void start(const Matrix<T>& center) {
    const std::int64_t d = X_.cols();
    parallel_chunks(X_.rows(), bl_.block, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) closest_[i] = sq_dist(X_.data() + i * X_.outerStride(), center.data(), d);
    });
    sum_blocks();
  }

  /// Per block, samples are transposed into a d x 256 tile so the distance loop runs across samples.
  std::vector<algorithms::ExactSum> potentials(const Matrix<T>& cand) {
    const std::int64_t n = X_.rows(), d = X_.cols();
    std::vector<std::int64_t> part(static_cast<std::size_t>(n_trials_ * bl_.n_blocks), 0);
    parallel_chunks(n, bl_.block, [&](std::int64_t blk, std::int64_t b, std::int64_t e) {
      std::vector<T> xt(static_cast<std::size_t>(d * kChunk));
      alignas(64) T ct[kChunk], out[kChunk];
      std::vector<std::int64_t> pot(static_cast<std::size_t>(n_trials_), 0);
      for (std::int64_t cb = b; cb < e; cb += kChunk) {
        const std::int64_t m = std::min(kChunk, e - cb);
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t f = 0; f < d; ++f) xt[f * kChunk + i] = X_(cb + i, f);
        for (std::int64_t i = 0; i < m; ++i) ct[i] = closest_[cb + i];
        if (m < kChunk) {
          for (std::int64_t f = 0; f < d; ++f) std::fill(xt.data() + f * kChunk + m, xt.data() + (f + 1) * kChunk, T(0));
          std::fill(ct + m, ct + kChunk, T(0));
        }
        for (int t = 0; t < n_trials_; ++t) {
          potential_tile<T>(xt.data(), d, cand.data() + t * d, ct, out);
          std::int64_t s = 0;
          for (std::int64_t i = 0; i < m; ++i) s += algorithms::plus_plus_term<T>(w_[cb + i], out[i], scale_);
          pot[t] += s;
          std::copy(out, out + m, cand_dist_.begin() + t * n + cb);
        }
      }
      for (int t = 0; t < n_trials_; ++t) part[t * bl_.n_blocks + blk] = pot[t];
    });
    std::vector<algorithms::ExactSum> total(static_cast<std::size_t>(n_trials_), algorithms::ExactSum{0, exponent_});
    for (int t = 0; t < n_trials_; ++t)
      for (std::int64_t blk = 0; blk < bl_.n_blocks; ++blk) total[t].value += part[t * bl_.n_blocks + blk];
    return total;
  }

  void keep(int t) {
    const std::int64_t n = X_.rows();
    std::copy(cand_dist_.begin() + t * n, cand_dist_.begin() + (t + 1) * n, closest_.begin());
    sum_blocks();
  }

  std::int64_t block_rows() const { return kPlusPlusBlock; }
  const std::vector<double>& block_sums() const { return sums_.values; }
  const algorithms::BlockSums& exact_block_sums() const { return sums_; }
  void prefetch(const std::vector<std::int64_t>&) {}
  std::vector<double> block(std::int64_t b) const {
    const std::int64_t begin = blocks_.begin(b), end = blocks_.end(b);
    return sampling_masses<T>(w_.data() + begin, closest_.data() + begin, end - begin);
  }

 private:
  void sum_blocks() {
    parallel_chunks(blocks_.count(), 1, [&](std::int64_t blk, std::int64_t, std::int64_t) {
      std::int64_t s = 0;
      for (std::int64_t i = blocks_.begin(blk); i < blocks_.end(blk); ++i)
        s += algorithms::plus_plus_term<T>(w_[i], closest_[i], scale_);
      sums_.exact[static_cast<std::size_t>(blk)] = s;
    });
    sums_.round();
  }

  MatrixView<T> X_;
  VectorView<T> w_;
  int n_trials_;
  Blocking bl_;
  algorithms::SamplingBlocks blocks_;
  int exponent_;
  double scale_;
  std::vector<T> closest_, cand_dist_;
  algorithms::BlockSums sums_;
};

}  // namespace kmeans_detail

/// Greedy k-means++ (scikit-learn's _kmeans_plusplus) on centred data, on the host (kmeans_detail::plus_plus_loop).
/// `frame`: the fit's bounds for the exact sums (none: those of exactly these rows).
template <class T>
Matrix<T> kmeans_plus_plus(MatrixView<T> X, VectorView<T> w, int k, algorithms::NumpyRandomState& random,
                           std::vector<std::int64_t>* chosen = nullptr,
                           const std::optional<algorithms::SumFrame>& frame = {}) {
  const algorithms::SumFrame f = frame ? *frame : algorithms::SumFrame::of<T>(ShiftedView<T>(X), w);
  kmeans_detail::HostPlusPlus<T> engine(X, w, kmeans_detail::plus_plus_trials(k), f);
  return kmeans_detail::plus_plus_loop<T>(engine, ShiftedView<T>(X), w, f, k, random, chosen);
}

}  // namespace gpuml::host
