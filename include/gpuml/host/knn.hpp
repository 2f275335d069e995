// Host engine for brute-force k-nearest-neighbour search: blocked Eigen GEMM (or a direct loop for manhattan and
// chebyshev) followed by a bounded per-query selection. The full n_queries x n_database matrix is never formed.
//
// Guarantees (algorithms/knn.hpp's contract):
// - results are the first k of every database row by (returned value, index): distance ascending (inner product
//   descending for Metric::inner_product), equal values by the lower index, whatever k, the thread count or the
//   blocking;
// - identical database rows get bit-identical values during selection, so a group of duplicates is always cut
//   at the k-th neighbour in index order;
// - euclidean, sqeuclidean and cosine values of the selected neighbours are recomputed directly (not from the
//   norm expansion), so exact duplicates are at distance exactly 0; the selection keeps a few pairs more than
//   returned, whose values bound what the norm expansion's rounding can have left out (search_exactly).
#pragma once

#include <gpuml/algorithms/knn.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/host/simd.hpp>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

namespace gpuml::host {

using algorithms::KnnResult;

namespace knn_detail {
using Index = std::int64_t;
// The result contract (exact recompute, finish) lives in the algorithm layer, shared with the Vulkan engine.
using algorithms::check_search;
using algorithms::dot_fixed;
}  // namespace knn_detail


namespace knn_detail {

using Index = std::int64_t;

/// Bounded max-heap of (value, index) pairs in external storage; the root is the worst kept pair.
template <class T>
struct TopK {
  T* val = nullptr;
  Index* idx = nullptr;
  int size = 0;
  int cap = 0;

  static bool before(T a, Index ia, T b, Index ib) { return a < b || (a == b && ia < ib); }
  bool full() const { return size >= cap; }

  void push(T v, Index i) {
    if (size < cap) {  // sift up
      int c = size++;
      while (c > 0) {
        const int p = (c - 1) / 2;
        if (!before(val[p], idx[p], v, i)) break;
        val[c] = val[p];
        idx[c] = idx[p];
        c = p;
      }
      val[c] = v;
      idx[c] = i;
    } else if (before(v, i, val[0], idx[0])) {  // replace the root, sift down
      int p = 0;
      for (;;) {
        int c = 2 * p + 1;
        if (c >= size) break;
        if (c + 1 < size && before(val[c], idx[c], val[c + 1], idx[c + 1])) ++c;
        if (!before(v, i, val[c], idx[c])) break;
        val[p] = val[c];
        idx[p] = idx[c];
        p = c;
      }
      val[p] = v;
      idx[p] = i;
    }
  }
};

/// Squared row norms of a row-major view, computed with dot_fixed.
template <class T>
std::vector<T> squared_norms(const MatrixView<T>& X) {
  std::vector<T> out(static_cast<std::size_t>(X.rows()));
  parallel_chunks(X.rows(), 8192, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) out[r] = dot_fixed(X.row(r).data(), X.row(r).data(), X.cols());
  });
  return out;
}

// ---- Run-time dispatched AVX2+FMA tile kernel for builds without -mavx2 ------------------------------------
// Eigen picks its SIMD width at compile time, so a generic x86-64 build would run its GEMM on SSE2 only. When
// the CPU has AVX2 and FMA but the build does not, the GEMM metrics use this register-blocked kernel instead:
// S(i, j) = sum_f Q(i, f) * Dt(f, j) for up to 6 query rows x 2 vectors of database columns, accumulated in
// order over f with one FMA per lane, so identical database rows get identical values (host/simd.hpp's vectors
// and run-time dispatch).
#if GPUML_HOST_AVX2_DISPATCH && !defined(__AVX2__)
#define GPUML_KNN_AVX2_DISPATCH 1
template <class T>
struct Avx2 {
  using V = typename simd::Vec<T, 32>::V;
  static constexpr int lanes = 32 / sizeof(T);
};

template <class T, int R>
GPUML_HOST_AVX2 inline void tile_avx2(const T* q, Index ldq, const T* dt, Index ldd, Index d, T* s, Index lds) {
  using V = typename Avx2<T>::V;
  constexpr int L = Avx2<T>::lanes;
  V acc0[R], acc1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = V{};
  for (Index f = 0; f < d; ++f) {
    V b0, b1;
    simd::load(b0, dt + f * ldd);
    simd::load(b1, dt + f * ldd + L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V a = V{} + q[r * ldq + f];
      if constexpr (std::is_same_v<T, float>) {
        acc0[r] = __builtin_ia32_vfmaddps256(a, b0, acc0[r]);
        acc1[r] = __builtin_ia32_vfmaddps256(a, b1, acc1[r]);
      } else {
        acc0[r] = __builtin_ia32_vfmaddpd256(a, b0, acc0[r]);
        acc1[r] = __builtin_ia32_vfmaddpd256(a, b1, acc1[r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    simd::store(s + r * lds, acc0[r]);
    simd::store(s + r * lds + L, acc1[r]);
  }
}

/// S (ni x ncols, row-major, leading dimension lds) = Q (ni x d, leading dimension ldq) * Dt (d x ncols,
/// leading dimension ldd); ncols a multiple of 2 * Avx2<T>::lanes.
template <class T>
GPUML_HOST_AVX2 void gemm_avx2(const T* q, Index ldq, Index ni, const T* dt, Index ldd, Index ncols, Index d, T* s,
                               Index lds) {
  constexpr Index W = 2 * Avx2<T>::lanes;
  for (Index j = 0; j < ncols; j += W) {
    Index i = 0;
    for (; i + 6 <= ni; i += 6) tile_avx2<T, 6>(q + i * ldq, ldq, dt + j, ldd, d, s + i * lds + j, lds);
    switch (ni - i) {
      case 5: tile_avx2<T, 5>(q + i * ldq, ldq, dt + j, ldd, d, s + i * lds + j, lds); break;
      case 4: tile_avx2<T, 4>(q + i * ldq, ldq, dt + j, ldd, d, s + i * lds + j, lds); break;
      case 3: tile_avx2<T, 3>(q + i * ldq, ldq, dt + j, ldd, d, s + i * lds + j, lds); break;
      case 2: tile_avx2<T, 2>(q + i * ldq, ldq, dt + j, ldd, d, s + i * lds + j, lds); break;
      case 1: tile_avx2<T, 1>(q + i * ldq, ldq, dt + j, ldd, d, s + i * lds + j, lds); break;
      default: break;
    }
  }
}
#else
#define GPUML_KNN_AVX2_DISPATCH 0
template <class T>
void gemm_avx2(const T*, Index, Index, const T*, Index, Index, Index, T*, Index) {}
template <class T>
struct Avx2 {
  static constexpr int lanes = 1;
};
#endif

constexpr Index round_up(Index x, Index to) { return (x + to - 1) / to * to; }

/// The selection: the best k (selection value, index) pairs of every query (algorithms::Candidates, into `out`),
/// by the norm expansion for the GEMM metrics (inner product negated), by the direct loop for manhattan and
/// chebyshev; 1 <= k <= database rows.
template <class T>
void select_candidates(MatrixView<T> database, MatrixView<T> queries, int k, Metric metric, algorithms::Candidates<T>& out) {
  using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  const Index n = database.rows(), d = database.cols(), m = queries.rows();
  out.resize(static_cast<std::size_t>(m * k));
  if (m == 0) return;

  const bool use_gemm = metric == Metric::euclidean || metric == Metric::sqeuclidean || metric == Metric::cosine ||
                        metric == Metric::inner_product;

  // Norms. Cosine scans with inverse norms (0 for a zero row: cosine similarity 0, distance 1, as sklearn).
  std::vector<T> dn, qn, dinv, qinv;
  if (use_gemm && metric != Metric::inner_product) {
    dn = squared_norms<T>(database);
    qn = squared_norms<T>(queries);
    if (metric == Metric::cosine) {
      auto inv = [](const std::vector<T>& sq) {
        std::vector<T> out(sq.size());
        for (std::size_t i = 0; i < sq.size(); ++i) out[i] = sq[i] > 0 ? T(1) / std::sqrt(sq[i]) : T(0);
        return out;
      };
      dinv = inv(dn);
      qinv = inv(qn);
    }
  }

  // Block shapes. Every GEMM has the same shape (qb x nb x d): partial blocks are zero-padded, queries to at
  // least 2 rows and the database to a multiple of 8 (at least 32) rows, so that Eigen always takes its GEMM
  // kernel with every database row in a full 4-column panel, giving identical rows identical values.
  constexpr Index kQueryBlock = 256;
  constexpr Index kGemmDbBlock = 512;
  constexpr Index kDirectDbBlock = 1024;
  const Index qb = std::min<Index>(kQueryBlock, std::max<Index>(m, 2));
  const Index nb = use_gemm ? std::min<Index>(kGemmDbBlock, std::max<Index>(round_up(n, 8), 32))
                            : std::min<Index>(kDirectDbBlock, n);
  const Index n_qsub = (m + qb - 1) / qb;
  const Index n_dblk = (n + nb - 1) / nb;

  // Work split: query chunks (groups of whole query blocks) x database slabs (groups of whole database
  // blocks). Slabs are only used when there are too few query chunks to keep the threads busy; their partial
  // top-k lists are merged exactly, so the result does not depend on the split.
  const Index threads = host_threads();
  const Index target_chunks = std::max<Index>(1, std::min<Index>(n_qsub, 4 * threads));
  const Index g = (n_qsub + target_chunks - 1) / target_chunks;  // query blocks per chunk
  const Index n_qchunks = (n_qsub + g - 1) / g;
  Index n_slabs = 1;
  if (n_qchunks < threads && n_dblk > 1) n_slabs = std::min<Index>(n_dblk, (2 * threads + n_qchunks - 1) / n_qchunks);
  const Index blocks_per_slab = (n_dblk + n_slabs - 1) / n_slabs;
  n_slabs = (n_dblk + blocks_per_slab - 1) / blocks_per_slab;

  // Heap storage: one m x k buffer per slab.
  std::vector<T> slab_val(static_cast<std::size_t>(n_slabs * m * k));
  std::vector<Index> slab_idx(slab_val.size());
  std::vector<int> slab_size(static_cast<std::size_t>(n_slabs * m), 0);

  const T inf = std::numeric_limits<T>::infinity();
  using ArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
  const ArrayMap qn_arr(qn.data(), static_cast<Index>(qn.size()));
  const ArrayMap qinv_arr(qinv.data(), static_cast<Index>(qinv.size()));
  const ArrayMap dn_arr(dn.data(), static_cast<Index>(dn.size()));
  const ArrayMap dinv_arr(dinv.data(), static_cast<Index>(dinv.size()));
  const bool avx2 = use_gemm && GPUML_KNN_AVX2_DISPATCH && cpu_has_avx2_fma();

  auto task = [&](std::int64_t t, std::int64_t, std::int64_t) {
    const Index chunk = t / n_slabs, slab = t % n_slabs;
    const Index sub_begin = chunk * g, sub_end = std::min(n_qsub, sub_begin + g);
    const Index q0 = sub_begin * qb, q1 = std::min(m, sub_end * qb);
    const Index blk_begin = slab * blocks_per_slab, blk_end = std::min(n_dblk, blk_begin + blocks_per_slab);

    std::vector<TopK<T>> heaps(static_cast<std::size_t>(q1 - q0));
    std::vector<T> thr(heaps.size(), inf);
    for (Index i = q0; i < q1; ++i) {
      auto& h = heaps[i - q0];
      h.cap = k;
      const std::size_t off = static_cast<std::size_t>((slab * m + i) * k);
      h.val = slab_val.data() + off;
      h.idx = slab_idx.data() + off;
    }
    auto offer = [&](Index local, T v, Index j) {
      if (v < thr[local] || !heaps[local].full()) {
        auto& h = heaps[local];
        h.push(v, j);
        if (h.full()) thr[local] = h.val[0];
      }
    };

    // One query row's values for database columns j0 .. j0 + nj, filtered in runs of 64 as in the direct path.
    auto scan_row = [&](Index local, const T* v, Index nj, Index j0) {
      for (Index j = 0; j < nj; j += 64) {
        const Index len = std::min<Index>(64, nj - j);
        if (heaps[local].full() && !(Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(v + j, len).minCoeff() < thr[local]))
          continue;
        for (Index jj = j; jj < j + len; ++jj) offer(local, v[jj], j0 + jj);
      }
    };

    if (use_gemm && avx2) {
      constexpr Index W = 2 * Avx2<T>::lanes;
      const Index nbp = round_up(nb, W);
      Matrix<T> Dt(d, nbp), Sr(qb, nbp);
      Eigen::Array<T, 1, Eigen::Dynamic> vals(nbp);
      for (Index blk = blk_begin; blk < blk_end; ++blk) {
        const Index j0 = blk * nb, nj = std::min(nb, n - j0);
        Dt.leftCols(nj) = database.middleRows(j0, nj).transpose();
        if (nj < nbp) Dt.rightCols(nbp - nj).setZero();
        for (Index sub = sub_begin; sub < sub_end; ++sub) {
          const Index i0 = sub * qb, ni = std::min(qb, m - i0);
          gemm_avx2<T>(queries.row(i0).data(), queries.outerStride(), ni, Dt.data(), nbp, nbp, d, Sr.data(), nbp);
          for (Index i = 0; i < ni; ++i) {
            const auto srow = Sr.row(i).head(nj).array();
            auto v = vals.head(nj);
            switch (metric) {
              case Metric::inner_product: v = -srow; break;
              case Metric::cosine:
                v = (T(1) - srow * (qinv[i0 + i] * dinv_arr.segment(j0, nj).transpose())).max(T(0)).min(T(2));
                break;
              default: v = (qn[i0 + i] + dn_arr.segment(j0, nj).transpose()) - T(2) * srow;
            }
            scan_row(i0 + i - q0, vals.data(), nj, j0);
          }
        }
      }
    } else if (use_gemm) {
      ColMat S(qb, nb);
      Matrix<T> dpad, qpad;
      Eigen::Array<T, Eigen::Dynamic, 1> vals(qb);
      std::vector<char> unfilled(static_cast<std::size_t>(sub_end - sub_begin), 1);  // some heap of the block not full
      for (Index blk = blk_begin; blk < blk_end; ++blk) {
        const Index j0 = blk * nb, nj = std::min(nb, n - j0);
        if (nj < nb) {
          dpad.setZero(nb, d);
          dpad.topRows(nj) = database.middleRows(j0, nj);
        }
        const MatrixView<T> D = nj < nb ? MatrixView<T>(dpad) : MatrixView<T>(database.middleRows(j0, nj));
        for (Index sub = sub_begin; sub < sub_end; ++sub) {
          const Index i0 = sub * qb, ni = std::min(qb, m - i0);
          if (ni < qb && qpad.rows() != qb) {  // only the last query block is partial
            qpad.setZero(qb, d);
            qpad.topRows(ni) = queries.middleRows(i0, ni);
          }
          const MatrixView<T> Q = ni < qb ? MatrixView<T>(qpad) : MatrixView<T>(queries.middleRows(i0, ni));
          S.noalias() = Q * D.transpose();
          // Scan column by column (one database row against the block's queries): the values are formed with
          // Eigen's packet code into `vals`, and a vectorised min of vals - thresholds skips the column unless
          // some query would take it (rare once the heaps are full).
          const Index base = i0 - q0;
          auto thr_blk = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(thr.data() + base, ni);
          for (Index j = 0; j < nj; ++j) {
            const auto col = S.col(j).head(ni).array();
            const Index gj = j0 + j;
            auto v = vals.head(ni);
            switch (metric) {
              case Metric::inner_product: v = -col; break;
              case Metric::cosine:
                v = (T(1) - col * (qinv_arr.segment(i0, ni) * dinv[gj])).max(T(0)).min(T(2));
                break;
              default: v = (qn_arr.segment(i0, ni) + dn[gj]) - T(2) * col;
            }
            if (!unfilled[sub - sub_begin] && !((v - thr_blk).minCoeff() < T(0))) continue;
            for (Index i = 0; i < ni; ++i) offer(base + i, v[i], gj);
          }
          if (unfilled[sub - sub_begin]) {
            bool any = false;
            for (Index i = 0; i < ni && !any; ++i) any = !heaps[base + i].full();
            unfilled[sub - sub_begin] = any;
          }
        }
      }
    } else {
      // Direct loop for manhattan / chebyshev: the database block transposed so that each feature is a
      // contiguous row, and each query accumulates over features into a vector of nb partial distances.
      Matrix<T> Dt(d, nb);
      Eigen::Array<T, 1, Eigen::Dynamic> acc(nb);
      const bool cheb = metric == Metric::chebyshev;
      for (Index blk = blk_begin; blk < blk_end; ++blk) {
        const Index j0 = blk * nb, nj = std::min(nb, n - j0);
        Dt.leftCols(nj) = database.middleRows(j0, nj).transpose();
        for (Index i = q0; i < q1; ++i) {
          auto a = acc.head(nj);
          a.setZero();
          const T* q = queries.row(i).data();
          for (Index f = 0; f < d; ++f) {
            const auto diff = (Dt.row(f).head(nj).array() - q[f]).abs();
            if (cheb)
              a = a.max(diff);
            else
              a += diff;
          }
          scan_row(i - q0, a.data(), nj, j0);
        }
      }
    }
    for (Index i = q0; i < q1; ++i) slab_size[static_cast<std::size_t>(slab * m + i)] = heaps[i - q0].size;
  };
  parallel_chunks(n_qchunks * n_slabs, 1, task);

  // Each query's k best: its heap, or the best of its slabs' heaps.
  parallel_chunks(m, 64, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    std::vector<std::pair<T, Index>> cand;
    for (Index i = b; i < e; ++i) {
      auto* kept = out.data() + i * k;
      if (n_slabs == 1) {
        for (int c = 0; c < k; ++c) kept[c] = {slab_val[static_cast<std::size_t>(i * k + c)], slab_idx[static_cast<std::size_t>(i * k + c)]};
        continue;
      }
      cand.clear();
      for (Index s = 0; s < n_slabs; ++s) {
        const std::size_t off = static_cast<std::size_t>((s * m + i) * k);
        const int cnt = slab_size[static_cast<std::size_t>(s * m + i)];
        for (int c = 0; c < cnt; ++c) cand.emplace_back(slab_val[off + c], slab_idx[off + c]);
      }
      std::partial_sort(cand.begin(), cand.begin() + k, cand.end());
      std::copy_n(cand.begin(), k, kept);
    }
  });
}

}  // namespace knn_detail

/// The k nearest database rows of every query row (algorithms/knn.hpp's contract): sorted by distance, for
/// Metric::inner_product the k rows with the largest inner product, descending; equal values by the lower index.
template <class T>
KnnResult<T> knn_search(MatrixView<T> database, MatrixView<T> queries, int k, Metric metric) {
  static_assert(is_supported_scalar<T>, "gpuml supports float and double");
  knn_detail::check_search(database.rows(), database.cols(), queries.cols(), k);
  algorithms::Candidates<T> candidates;
  std::vector<T> squared;
  return algorithms::search_exactly<T>(
      database, queries, k, metric, database.rows(), candidates, squared,
      [&](MatrixView<T> batch, knn_detail::Index width, algorithms::Candidates<T>& out, std::vector<T>& squared) {
        squared.clear();  // finish_query forms them
        knn_detail::select_candidates<T>(database, batch, static_cast<int>(width), metric, out);
      },
      [&] { return algorithms::knn_boundary::integer_rows_norm<T>(database); });
}

/// knn_search reporting progress between batches of queries (and stopping with gpuml::cancelled when the callback
/// returns false). Batches are whole multiples of the query block, so every value is computed as in one call: the
/// result is the same bit for bit.
template <class T>
KnnResult<T> knn_search(MatrixView<T> database, MatrixView<T> queries, int k, Metric metric,
                        const ProgressCallback& on_progress) {
  using knn_detail::Index;
  if (!on_progress) return knn_search<T>(database, queries, k, metric);
  const Index m = queries.rows();
  knn_detail::check_search(database.rows(), database.cols(), queries.cols(), k);
  constexpr Index kQueryBlock = 256;  // knn_search's query block
  const Index batch = std::max<Index>(4 * kQueryBlock, knn_detail::round_up((m + 49) / 50, kQueryBlock));
  KnnResult<T> result{Matrix<T>(m, k), IndexMatrix(m, k)};
  for (Index q0 = 0; q0 < m; q0 += batch) {
    const Index rows = std::min(batch, m - q0);
    KnnResult<T> part = knn_search<T>(database, queries.middleRows(q0, rows), k, metric);
    result.distances.middleRows(q0, rows) = part.distances;
    result.indices.middleRows(q0, rows) = part.indices;
    result.stats.boundary_queries += part.stats.boundary_queries;
    if (!on_progress(WorkProgress{std::uint64_t(q0 + rows), std::uint64_t(m)}))
      throw cancelled("the k-NN search was cancelled");
  }
  return result;
}

}  // namespace gpuml::host
