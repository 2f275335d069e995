// DBSCAN as scikit-learn computes it (sklearn/cluster/_dbscan.py and dbscan_inner), from each sample's
// eps-neighbourhood: core samples by weighted neighbourhood size, clusters as the connected components of core
// samples, labels numbered as dbscan_inner numbers them. No Vulkan: an engine supplies the neighbourhoods.
#pragma once

#include <gpuml/algorithms/knn.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpuml::algorithms {

/// What a DBSCAN engine gives the driver: every sample's neighbours within eps (itself included where its distance
/// to itself is within eps, as scikit-learn's radius_neighbors(X) includes it), in increasing index order, as
/// compressed rows. Distances may be left empty.
template <class E, class T>
concept DbscanEngine = requires(E& engine, double eps) {
  { engine.neighbourhoods(eps) } -> std::same_as<RadiusResult<T>>;
};

/// The clustering of one fit.
struct DbscanResult {
  std::vector<std::int64_t> labels;               ///< per sample: its cluster, or -1 for noise
  std::vector<std::int64_t> core_sample_indices;  ///< increasing
  std::int64_t n_clusters = 0;
};

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

/// Checks that `hood` holds n compressed rows of indices in [0, n), each row increasing.
template <class T>
void check_neighbourhoods(const RadiusResult<T>& hood, std::int64_t n) {
  if (std::int64_t(hood.offsets.size()) != n + 1 || hood.offsets.front() != 0 ||
      hood.offsets.back() != std::int64_t(hood.indices.size()))
    throw invalid_input("DBSCAN: the neighbourhoods need " + std::to_string(n + 1) + " offsets from 0 to " +
                        std::to_string(hood.indices.size()) + ", got " + std::to_string(hood.offsets.size()));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t b = hood.offsets[std::size_t(i)], e = hood.offsets[std::size_t(i) + 1];
    if (e < b) throw invalid_input("DBSCAN: neighbourhood offsets decrease at sample " + std::to_string(i));
    for (std::int64_t p = b; p < e; ++p) {
      const std::int64_t j = hood.indices[std::size_t(p)];
      if (j < 0 || j >= n || (p > b && j <= hood.indices[std::size_t(p) - 1]))
        throw invalid_input("DBSCAN: the neighbourhood of sample " + std::to_string(i) +
                            " is not increasing indices in [0, " + std::to_string(n) + ")");
    }
  }
}

/// Which samples are core: weighted neighbourhood size >= min_samples (scikit-learn: the neighbour count without
/// weights, else np.sum(sample_weight[neighbors]) in the weights' type, here in index order).
template <class T, class W>
std::vector<std::uint8_t> core_samples(const RadiusResult<T>& hood, const W* sample_weight, std::int64_t min_samples) {
  const std::int64_t n = std::int64_t(hood.offsets.size()) - 1;
  std::vector<std::uint8_t> core(std::size_t(std::max<std::int64_t>(n, 0)), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t b = hood.offsets[std::size_t(i)], e = hood.offsets[std::size_t(i) + 1];
    if (!sample_weight) {
      core[std::size_t(i)] = e - b >= min_samples;
    } else {
      const W size = numpy_sum<W>(e - b, [&](std::int64_t p) { return sample_weight[hood.indices[std::size_t(b + p)]]; });
      core[std::size_t(i)] = double(size) >= double(min_samples);
    }
  }
  return core;
}

/// Labels from core flags and neighbourhoods, as dbscan_inner assigns them. Its depth-first search from each
/// unlabelled core sample in index order labels the component of core samples it reaches and the non-core
/// neighbours of those cores that no earlier cluster took. So: clusters are the connected components of core samples
/// (core j joined to core i when j is in i's neighbourhood), numbered by their smallest core index; a non-core
/// sample gets the smallest label among the cores whose neighbourhood holds it; the rest is noise (-1). Computed by
/// a union-find whose every root is its component's smallest index, on one thread: the same result on any machine.
template <class T>
DbscanResult label_components(const RadiusResult<T>& hood, const std::vector<std::uint8_t>& core) {
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
  DbscanResult r;
  r.labels.assign(std::size_t(n), -1);
  for (std::int64_t i = 0; i < n; ++i) {
    if (!core[std::size_t(i)]) continue;
    r.core_sample_indices.push_back(i);
    const std::int64_t root = find(i);
    // A root is its component's smallest index, so it is labelled before any other member.
    r.labels[std::size_t(i)] = root == i ? r.n_clusters++ : r.labels[std::size_t(root)];
  }
  for (std::int64_t i = 0; i < n; ++i) {
    if (!core[std::size_t(i)]) continue;
    const std::int64_t label = r.labels[std::size_t(i)];
    for (std::int64_t p = hood.offsets[std::size_t(i)]; p < hood.offsets[std::size_t(i) + 1]; ++p) {
      const std::int64_t j = hood.indices[std::size_t(p)];
      if (core[std::size_t(j)]) continue;
      std::int64_t& l = r.labels[std::size_t(j)];
      if (l == -1 || label < l) l = label;
    }
  }
  return r;
}

/// The arguments every fit takes.
inline void check_dbscan(double eps, std::int64_t min_samples) {
  if (!(eps > 0)) throw invalid_input("DBSCAN: eps must be > 0, got " + std::to_string(eps));
  if (min_samples < 1) throw invalid_input("DBSCAN: min_samples must be >= 1, got " + std::to_string(min_samples));
}

/// The whole fit on an engine: its neighbourhoods (checked), core samples, components. `sample_weight`: n values
/// or nullptr. `on_progress` hears (1, 3) after the neighbourhoods, (2, 3) after the core samples, (3, 3) at the
/// end; returning false cancels with gpuml::cancelled.
template <class T, class W, DbscanEngine<T> Engine>
DbscanResult dbscan(Engine& engine, std::int64_t n, double eps, std::int64_t min_samples, const W* sample_weight,
                    const ProgressCallback& on_progress = {}) {
  check_dbscan(eps, min_samples);
  auto step = [&](std::uint64_t done) {
    if (on_progress && !on_progress(WorkProgress{done, 3})) throw cancelled("DBSCAN fit cancelled");
  };
  const RadiusResult<T> hood = engine.neighbourhoods(eps);
  check_neighbourhoods(hood, n);
  step(1);
  const std::vector<std::uint8_t> core = core_samples(hood, sample_weight, min_samples);
  step(2);
  DbscanResult r = label_components(hood, core);
  step(3);
  return r;
}

}  // namespace gpuml::algorithms
