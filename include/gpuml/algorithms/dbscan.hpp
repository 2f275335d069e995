// DBSCAN as scikit-learn computes it (sklearn/cluster/_dbscan.py and dbscan_inner), from each sample's
// eps-neighbourhood: core samples by weighted neighbourhood size, clusters as the connected components of core
// samples, labels numbered as dbscan_inner numbers them. No Vulkan: an engine supplies the neighbourhoods, the core
// flags and the components (the host engine from a host graph by this layer's functions, a device engine from a
// graph it keeps on the device by its own kernels: the same flags and roots).
#pragma once

#include <gpuml/algorithms/knn.hpp>
#include <gpuml/algorithms/radius.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/parallel.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpuml::algorithms {

/// What a DBSCAN engine gives the driver (keeping its neighbourhood graph wherever it likes):
/// - search(eps, weighted): every sample's neighbours within eps, itself included where its distance to itself is
///   within eps (as scikit-learn's radius_neighbors(X) includes it); `weighted`: the core samples will sum weights
///   over each neighbourhood in index order (else neighbour counts suffice);
/// - core_samples(min_samples, sample_weight): core_samples()'s flags, in X's order;
/// - components(core): each sample's component root as union_find_roots defines it (any engine returns exactly
///   those roots: they are minima, so no order of work changes them);
/// - edges(): neighbourhood entries in all.
template <class E, class W>
concept DbscanEngine = requires(E& engine, double eps, bool weighted, std::int64_t min_samples, const W* sample_weight,
                                const std::vector<std::uint8_t>& core) {
  engine.search(eps, weighted);
  { engine.core_samples(min_samples, sample_weight) } -> std::same_as<std::vector<std::uint8_t>>;
  { engine.components(core) } -> std::same_as<std::vector<std::int64_t>>;
  { engine.edges() } -> std::convertible_to<std::int64_t>;
};

/// Where one fit's time went, in seconds: the setup (the caller's: checks, the engine built, data sorted and sent
/// to a device), the neighbourhoods (the engine's search and their check), the core samples, the components (the
/// engine's), the labels (clusters numbered, core indices listed).
struct DbscanTimes {
  double setup = 0, neighbourhoods = 0, core_samples = 0, components = 0, labels = 0, total = 0;
};

/// The clustering of one fit.
struct DbscanResult {
  std::vector<std::int64_t> labels;               ///< per sample: its cluster, or -1 for noise
  std::vector<std::int64_t> core_sample_indices;  ///< increasing
  std::int64_t n_clusters = 0;
  std::int64_t n_edges = 0;  ///< neighbourhood entries in all (each sample itself included)
  DbscanTimes times;
};

namespace dbscan_detail {
inline constexpr std::int64_t kChunk = 1 << 15;
}  // namespace dbscan_detail

/// numpy's pairwise summation of a[0], ..., a[n - 1] in T (np.sum over a contiguous 1-d array: below 8 values in
/// turn, up to 128 in eight interleaved partial sums, beyond that the two halves, split at a multiple of 8), so a
/// weighted neighbourhood size equals scikit-learn's np.sum(sample_weight[neighbors]) for the same neighbour order.
template <class T, class Value>
T numpy_sum(std::int64_t n, Value&& value) {
  struct Sum {
    Value& value;
    T operator()(std::int64_t first, std::int64_t count) const {
      if (count < 8) {
        T s = 0;
        for (std::int64_t i = 0; i < count; ++i) s += value(first + i);
        return s;
      }
      if (count <= 128) {
        T r[8];
        for (int j = 0; j < 8; ++j) r[j] = value(first + j);
        std::int64_t i = 8;
        for (; i < count - count % 8; i += 8)
          for (int j = 0; j < 8; ++j) r[j] += value(first + i + j);
        T s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < count; ++i) s += value(first + i);
        return s;
      }
      std::int64_t half = count / 2;
      half -= half % 8;
      return (*this)(first, half) + (*this)(first + half, count - half);
    }
  };
  return Sum{value}(0, n);
}

/// Checks that `hood` holds n compressed rows of indices in [0, n), each row increasing (threaded; a defect is
/// reported at its first sample, whatever the thread count).
template <class T>
void check_neighbourhoods(const RadiusResult<T>& hood, std::int64_t n) {
  if (std::int64_t(hood.offsets.size()) != n + 1 || hood.offsets.front() != 0 ||
      hood.offsets.back() != std::int64_t(hood.indices.size()))
    throw invalid_input("DBSCAN: the neighbourhoods need " + std::to_string(n + 1) + " offsets from 0 to " +
                        std::to_string(hood.indices.size()) + ", got " + std::to_string(hood.offsets.size()));
  const std::int64_t chunks = (n + dbscan_detail::kChunk - 1) / dbscan_detail::kChunk;
  std::vector<std::int64_t> first_bad(std::size_t(std::max<std::int64_t>(chunks, 0)), -1);
  std::vector<std::uint8_t> decreasing(first_bad.size(), 0);
  parallel_chunks(n, dbscan_detail::kChunk, [&](std::int64_t c, std::int64_t b0, std::int64_t e0) {
    for (std::int64_t i = b0; i < e0; ++i) {
      const std::int64_t b = hood.offsets[std::size_t(i)], e = hood.offsets[std::size_t(i) + 1];
      if (e < b || e > hood.offsets.back()) {
        first_bad[std::size_t(c)] = i;
        decreasing[std::size_t(c)] = 1;
        return;
      }
      for (std::int64_t p = b; p < e; ++p) {
        const std::int64_t j = hood.indices[std::size_t(p)];
        if (j < 0 || j >= n || (p > b && j <= hood.indices[std::size_t(p) - 1])) {
          first_bad[std::size_t(c)] = i;
          return;
        }
      }
    }
  });
  for (std::size_t c = 0; c < first_bad.size(); ++c) {
    const std::int64_t i = first_bad[c];
    if (i < 0) continue;
    if (decreasing[c]) throw invalid_input("DBSCAN: neighbourhood offsets decrease at sample " + std::to_string(i));
    throw invalid_input("DBSCAN: the neighbourhood of sample " + std::to_string(i) +
                        " is not increasing indices in [0, " + std::to_string(n) + ")");
  }
}

/// Which samples are core: weighted neighbourhood size >= min_samples (scikit-learn: the neighbour count without
/// weights, else np.sum(sample_weight[neighbors]) in the weights' type, here in index order). Threaded over
/// samples; each sum is one sample's, in numpy's order, so the thread count changes nothing.
template <class T, class W>
std::vector<std::uint8_t> core_samples(const RadiusResult<T>& hood, const W* sample_weight, std::int64_t min_samples) {
  const std::int64_t n = std::int64_t(hood.offsets.size()) - 1;
  std::vector<std::uint8_t> core(std::size_t(std::max<std::int64_t>(n, 0)), 0);
  parallel_chunks(n, dbscan_detail::kChunk, [&](std::int64_t, std::int64_t b0, std::int64_t e0) {
    for (std::int64_t i = b0; i < e0; ++i) {
      const std::int64_t b = hood.offsets[std::size_t(i)], e = hood.offsets[std::size_t(i) + 1];
      if (!sample_weight) {
        core[std::size_t(i)] = e - b >= min_samples;
      } else {
        const W size =
            numpy_sum<W>(e - b, [&](std::int64_t p) { return sample_weight[hood.indices[std::size_t(b + p)]]; });
        core[std::size_t(i)] = double(size) >= double(min_samples);
      }
    }
  });
  return core;
}

/// Each sample's component root, from core flags and neighbourhoods: a core sample's is the smallest core index of
/// its connected component of core samples (core j joined to core i when j is in i's neighbourhood); a non-core
/// sample's is the smallest root among the cores whose neighbourhood holds it, or -1 (noise). A union-find whose
/// every root is its component's smallest index, on one thread (the host engine's components).
template <class T>
std::vector<std::int64_t> union_find_roots(const RadiusResult<T>& hood, const std::vector<std::uint8_t>& core) {
  const std::int64_t n = std::int64_t(core.size());
  std::vector<std::int64_t> parent(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) parent[std::size_t(i)] = i;
  auto find = [&](std::int64_t i) {
    while (parent[std::size_t(i)] != i) {
      parent[std::size_t(i)] = parent[std::size_t(parent[std::size_t(i)])];  // path halving
      i = parent[std::size_t(i)];
    }
    return i;
  };
  for (std::int64_t i = 0; i < n; ++i) {
    if (!core[std::size_t(i)]) continue;
    for (std::int64_t p = hood.offsets[std::size_t(i)]; p < hood.offsets[std::size_t(i) + 1]; ++p) {
      const std::int64_t j = hood.indices[std::size_t(p)];
      if (!core[std::size_t(j)]) continue;
      const std::int64_t a = find(i), b = find(j);
      if (a != b) parent[std::size_t(std::max(a, b))] = std::min(a, b);  // the smaller index stays the root
    }
  }
  std::vector<std::int64_t> roots(static_cast<std::size_t>(n), -1);
  for (std::int64_t i = 0; i < n; ++i)
    if (core[std::size_t(i)]) roots[std::size_t(i)] = find(i);
  for (std::int64_t i = 0; i < n; ++i) {
    if (!core[std::size_t(i)]) continue;
    const std::int64_t root = roots[std::size_t(i)];
    for (std::int64_t p = hood.offsets[std::size_t(i)]; p < hood.offsets[std::size_t(i) + 1]; ++p) {
      const std::int64_t j = hood.indices[std::size_t(p)];
      if (core[std::size_t(j)]) continue;
      std::int64_t& r = roots[std::size_t(j)];
      if (r == -1 || root < r) r = root;
    }
  }
  return roots;
}

/// Labels from component roots, as dbscan_inner assigns them. Its depth-first search from each unlabelled core
/// sample in index order labels the component of core samples it reaches and the non-core neighbours of those cores
/// that no earlier cluster took. So clusters are numbered in the order of their roots (each component's smallest
/// core index), and a non-core sample's smallest root is its smallest label. Threaded, the same on any machine.
inline DbscanResult number_clusters(const std::vector<std::int64_t>& roots, const std::vector<std::uint8_t>& core) {
  const std::int64_t n = std::int64_t(core.size());
  if (std::int64_t(roots.size()) != n) throw invalid_input("DBSCAN: the components need one root per sample");
  const std::int64_t chunks = (n + dbscan_detail::kChunk - 1) / dbscan_detail::kChunk;
  // Per chunk: its roots and its core samples, then their running totals.
  std::vector<std::int64_t> chunk_roots(std::size_t(chunks) + 1, 0), chunk_cores(std::size_t(chunks) + 1, 0);
  parallel_chunks(n, dbscan_detail::kChunk, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    std::int64_t r = 0, k = 0;
    for (std::int64_t i = b; i < e; ++i) {
      if (!core[std::size_t(i)]) continue;
      const std::int64_t root = roots[std::size_t(i)];
      if (root < 0 || root > i || !core[std::size_t(root)])
        throw invalid_input("DBSCAN: core sample " + std::to_string(i) + " has root " + std::to_string(root) +
                            ", not a core sample at or below it");
      r += root == i;
      ++k;
    }
    chunk_roots[std::size_t(c) + 1] = r;
    chunk_cores[std::size_t(c) + 1] = k;
  });
  for (std::int64_t c = 0; c < chunks; ++c) {
    chunk_roots[std::size_t(c) + 1] += chunk_roots[std::size_t(c)];
    chunk_cores[std::size_t(c) + 1] += chunk_cores[std::size_t(c)];
  }
  DbscanResult r;
  r.n_clusters = chunk_roots.back();
  r.labels.assign(std::size_t(n), -1);
  r.core_sample_indices.resize(std::size_t(chunk_cores.back()));
  // The roots first (their cluster numbers), then every other sample takes its root's.
  parallel_chunks(n, dbscan_detail::kChunk, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    std::int64_t label = chunk_roots[std::size_t(c)], at = chunk_cores[std::size_t(c)];
    for (std::int64_t i = b; i < e; ++i) {
      if (!core[std::size_t(i)]) continue;
      r.core_sample_indices[std::size_t(at++)] = i;
      if (roots[std::size_t(i)] == i) r.labels[std::size_t(i)] = label++;
    }
  });
  parallel_chunks(n, dbscan_detail::kChunk, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const std::int64_t root = roots[std::size_t(i)];
      if (root < 0 || root == i) continue;
      if (root >= n || !core[std::size_t(root)] || roots[std::size_t(root)] != root)
        throw invalid_input("DBSCAN: sample " + std::to_string(i) + " has root " + std::to_string(root) +
                            ", not the root of a component");
      r.labels[std::size_t(i)] = r.labels[std::size_t(root)];
    }
  });
  return r;
}

/// Labels from core flags and neighbourhoods on the host: union_find_roots, then number_clusters.
template <class T>
DbscanResult label_components(const RadiusResult<T>& hood, const std::vector<std::uint8_t>& core) {
  return number_clusters(union_find_roots(hood, core), core);
}

/// A neighbourhood graph held on the host in X's order (checked when set), and the driver's steps on it: the host
/// engine's, and a device engine's where its graph comes back to the host.
template <class T>
class HostNeighbourhoods {
 public:
  void set(RadiusResult<T> hood, std::int64_t n) {
    check_neighbourhoods(hood, n);
    hood_ = std::move(hood);
  }
  template <class W>
  std::vector<std::uint8_t> core_samples(std::int64_t min_samples, const W* sample_weight) const {
    return algorithms::core_samples(hood_, sample_weight, min_samples);
  }
  std::vector<std::int64_t> components(const std::vector<std::uint8_t>& core) const { return union_find_roots(hood_, core); }
  std::int64_t edges() const { return std::int64_t(hood_.indices.size()); }
  const RadiusResult<T>& graph() const { return hood_; }

 private:
  RadiusResult<T> hood_;
};

/// The radius graph of X with itself from `search(rows, sorted_feature)`, over `sorted`'s rows (each scans its
/// window) where it sorted them, mapped back to X's order.
template <class T, class Search>
RadiusResult<T> sorted_self_graph(const SortedRows<T>& sorted, MatrixView<T> X, Search&& search) {
  if (!sorted.sorted()) return search(X, Eigen::Index(-1));
  return unsort_graph(search(MatrixView<T>(sorted.rows), sorted.feature), sorted.order);
}

/// The arguments every fit takes.
inline void check_dbscan(double eps, std::int64_t min_samples) {
  if (!(eps > 0)) throw invalid_input("DBSCAN: eps must be > 0, got " + std::to_string(eps));
  if (min_samples < 1) throw invalid_input("DBSCAN: min_samples must be >= 1, got " + std::to_string(min_samples));
}

/// The whole fit on an engine: its neighbourhoods (checked), core samples, its components, the labels, each phase
/// timed. `sample_weight`: n values or nullptr. `on_progress` hears (1, 3) after the neighbourhoods, (2, 3) after
/// the core samples, (3, 3) at the end; returning false cancels with gpuml::cancelled.
template <class W, DbscanEngine<W> Engine>
DbscanResult dbscan(Engine& engine, std::int64_t n, double eps, std::int64_t min_samples, const W* sample_weight,
                    const ProgressCallback& on_progress = {}) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto phase = start;
  auto lap = [&phase] {
    const auto now = Clock::now();
    const double s = std::chrono::duration<double>(now - phase).count();
    phase = now;
    return s;
  };
  check_dbscan(eps, min_samples);
  auto step = [&](std::uint64_t done) {
    if (on_progress && !on_progress(WorkProgress{done, 3})) throw cancelled("DBSCAN fit cancelled");
  };
  DbscanTimes times;
  engine.search(eps, sample_weight != nullptr);
  times.neighbourhoods = lap();
  step(1);
  phase = Clock::now();
  const std::vector<std::uint8_t> core = engine.core_samples(min_samples, sample_weight);
  if (std::int64_t(core.size()) != n) throw error("DBSCAN: the engine's core flags do not match the samples");
  times.core_samples = lap();
  step(2);
  phase = Clock::now();
  const std::vector<std::int64_t> roots = engine.components(core);
  times.components = lap();
  DbscanResult r = number_clusters(roots, core);
  times.labels = lap();
  r.n_edges = engine.edges();
  step(3);
  times.total = std::chrono::duration<double>(Clock::now() - start).count();
  r.times = times;
  return r;
}

}  // namespace gpuml::algorithms
