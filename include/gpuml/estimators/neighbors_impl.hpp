// NearestNeighbors' members that run an engine, and the engine calls (see estimators/neighbors.hpp for when this is
// included).
#pragma once

#include <gpuml/algorithms/knn.hpp>
#include <gpuml/estimators/neighbors.hpp>
#include <gpuml/host/float64_distances.hpp>
#include <gpuml/host/knn.hpp>
#include <gpuml/host/radius.hpp>
#include <gpuml/kernels/knn.hpp>
#include <gpuml/kernels/radius.hpp>
#include <gpuml/select.hpp>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpuml {

namespace detail {

/// The engine for a backend, by gpuml::run_on's rule: the Vulkan kernel (kernels::knn_search) on a Vulkan
/// backend, the host engine otherwise. On a Vulkan backend the host engine is used only where the kernel throws
/// gpuml::unsupported before doing any work: float64 on a device without shaderFloat64, k above the kernel's
/// limit (the policy's max_k, kernels::kKnnMaxK = 4096 by default), a tile policy the device cannot run, one row larger than a
/// storage-buffer binding, or more than 2^32 - 2 database rows. `resident` is the database kept on the device by fit. Both engines return the same result contract
/// (see host/knn.hpp), so the fallback is invisible apart from speed. Invalid input and device errors propagate.
/// The search on `backend`. `database_max_abs` (the largest magnitude in the database, kept by fit) decides with
/// the queries' whether float32 values could overflow: such searches run in float64 on the host, as scikit-learn
/// computes float32 distances in float64, and return float32 results in the float64 order (values beyond float32's
/// range come back as inf, still in the order of the real distances).
template <class T>
KnnResult<T> run_knn(const Backend& backend, MatrixView<T> database, MatrixView<T> queries, int k, Metric metric,
                     const kernels::KnnDatabase<T>* resident = nullptr, double database_max_abs = -1,
                     const ProgressCallback& on_progress = {}, const kernels::KnnTileChoice& policy = {}) {
  if constexpr (std::is_same_v<T, float>) {
    if (database_max_abs < 0) database_max_abs = max_abs<T>(database);
    if (values_may_overflow<T>(std::max(database_max_abs, max_abs<T>(queries)), database.cols(), metric)) {
      const Matrix<double> db = database.template cast<double>(), q = queries.template cast<double>();
      const KnnResult<double> wide = host::knn_search<double>(db, q, k, metric, on_progress);
      return {wide.distances.template cast<float>(), wide.indices, wide.stats};
    }
  }
  return run_on<T>(
      backend, "k-NN search",
      [&] {
        kernels::KnnSearchOptions options = kernels::KnnSearchOptions::from(config());
        options.on_progress = on_progress;
        options.policy = policy;
        return kernels::knn_search<T>(*backend.device(), database, queries, k, metric, resident, options);
      },
      [&] { return host::knn_search<T>(database, queries, k, metric, on_progress); });
}

/// The radius search on `backend` by gpuml::run_on's rule: the device engine (kernels::radius_search, host::
/// radius_search's result bit for bit) on a Vulkan backend, the host engine otherwise or where the device throws
/// gpuml::unsupported. `distances` false leaves RadiusResult::distances empty.
template <class T>
RadiusResult<T> run_radius(const Backend& backend, MatrixView<T> database, MatrixView<T> queries, double radius, Metric metric,
                           bool sort, bool exclude_self, bool distances, const kernels::KnnDatabase<T>* resident = nullptr,
                           Eigen::Index sorted_feature = -1) {
  return run_on<T>(
      backend, "radius search",
      [&] {
        kernels::RadiusSearchOptions options;
        options.sort = sort;
        options.distances = distances;
        options.exclude_self = exclude_self;
        options.sorted_feature = sorted_feature;
        return kernels::radius_search<T>(*backend.device(), database, queries, radius, metric, resident, options);
      },
      [&] {
        RadiusResult<T> found = host::radius_search<T>(database, queries, radius, metric, sort, exclude_self, sorted_feature);
        if (!distances) found.distances = {};
        return found;
      });
}

}  // namespace detail

template <class T, class Policy>
NearestNeighbors<T, Policy>& NearestNeighbors<T, Policy>::fit(MatrixView<T> X) {
  const Metric metric = parse_metric(params_.metric);
  detail::check_n_neighbors(params_.n_neighbors);
  checks::data(X, "X");
  Matrix<T> copy = naming_host_memory("copying the NearestNeighbors database", X.rows(), X.cols(), sizeof(T),
                                      [&] { return Matrix<T>(X); });
  std::shared_ptr<const kernels::KnnDatabase<T>> on_device;
  if (backend_.device_count() == 1 && X.rows() < Eigen::Index(UINT32_MAX)) {
    try {
      on_device = std::make_shared<const kernels::KnnDatabase<T>>(*backend_.device(), copy);
    } catch (const unsupported&) {
      // Too large to keep, or float64 without device support: each search streams or falls back instead.
    }
  }
  // Several devices: the database cut into one contiguous shard per device, each kept on its device.
  std::vector<Shard> shards;
  if (backend_.device_count() > 1 && X.rows() < Eigen::Index(UINT32_MAX)) {
    const auto count = static_cast<Eigen::Index>(std::min<std::size_t>(backend_.device_count(), std::size_t(X.rows())));
    for (Eigen::Index s = 0; s < count; ++s) {
      Shard shard{X.rows() * s / count, X.rows() * (s + 1) / count - X.rows() * s / count,
                  backend_.part(static_cast<std::size_t>(s)), nullptr};
      try {
        shard.resident = std::make_shared<const kernels::KnnDatabase<T>>(*shard.backend.device(),
                                                                         copy.middleRows(shard.first, shard.rows));
      } catch (const unsupported&) {
      }
      shards.push_back(std::move(shard));
    }
    on_device.reset();
  }
  max_abs_ = detail::max_abs<T>(copy);
  X_.swap(copy);
  device_X_ = std::move(on_device);
  shards_ = std::move(shards);
  metric_ = metric;
  fitted_ = true;
  return *this;
}

template <class T, class Policy>
KnnResult<T> NearestNeighbors<T, Policy>::kneighbors(MatrixView<T> X, int n_neighbors) const {
  require_fitted();
  const int k = n_neighbors == 0 ? params_.n_neighbors : n_neighbors;
  detail::check_n_neighbors(k);
  checks::data(X, "X");
  checks::same_features(X_.cols(), X.cols(), "X");
  if (k > X_.rows())
    throw invalid_input("Expected n_neighbors <= n_samples_fit, but n_neighbors = " + std::to_string(k) +
                        ", n_samples_fit = " + std::to_string(X_.rows()) + ", n_samples = " +
                        std::to_string(X.rows()));
  return search(X, k);
}

template <class T, class Policy>
Matrix<double> NearestNeighbors<T, Policy>::float64_distances(MatrixView<T> X, Eigen::Ref<const IndexMatrix> indices) const {
  require_fitted();
  checks::data(X, "X");
  checks::same_features(X_.cols(), X.cols(), "X");
  return float64_distances_of(&X, indices);
}

template <class T, class Policy>
Matrix<double> NearestNeighbors<T, Policy>::float64_distances_self(Eigen::Ref<const IndexMatrix> indices) const {
  require_fitted();
  return float64_distances_of(nullptr, indices);
}

template <class T, class Policy>
std::vector<double> NearestNeighbors<T, Policy>::float64_distances(MatrixView<T> X, const RadiusResult<T>& lists) const {
  require_fitted();
  checks::data(X, "X");
  checks::same_features(X_.cols(), X.cols(), "X");
  return float64_distances_of(&X, lists);
}

template <class T, class Policy>
std::vector<double> NearestNeighbors<T, Policy>::float64_distances_self(const RadiusResult<T>& lists) const {
  require_fitted();
  return float64_distances_of(nullptr, lists);
}

template <class T, class Policy>
Matrix<double> NearestNeighbors<T, Policy>::float64_distances_of(const MatrixView<T>* queries,
                                                                 Eigen::Ref<const IndexMatrix> indices) const {
  const Eigen::Index m = queries ? queries->rows() : X_.rows(), k = indices.cols();
  if (indices.rows() != m)
    throw invalid_input("indices have " + std::to_string(indices.rows()) + " rows for " + std::to_string(m) + " queries");
  Matrix<double> out(m, k);
  // A contiguous copy where the caller's indices are strided (an Eigen::Ref of a block).
  const IndexMatrix dense = indices.outerStride() == k ? IndexMatrix() : IndexMatrix(indices);
  pair_distances(queries, k, nullptr, dense.size() ? dense.data() : indices.data(), out.data());
  return out;
}

template <class T, class Policy>
std::vector<double> NearestNeighbors<T, Policy>::float64_distances_of(const MatrixView<T>* queries,
                                                                      const RadiusResult<T>& lists) const {
  const auto m = std::size_t(queries ? queries->rows() : X_.rows());
  const std::vector<std::int64_t>& offsets = lists.offsets;
  bool ascending = offsets.size() == m + 1 && offsets.front() == 0 && std::uint64_t(offsets.back()) == lists.indices.size();
  for (std::size_t i = 0; ascending && i < m; ++i) ascending = offsets[i] <= offsets[i + 1];
  if (!ascending)
    throw invalid_input("lists: " + std::to_string(m) + " queries need " + std::to_string(m + 1) +
                        " ascending offsets from 0 to the number of indices");
  std::vector<double> out(lists.indices.size());
  pair_distances(queries, 0, offsets.data(), lists.indices.data(), out.data());
  return out;
}

template <class T, class Policy>
void NearestNeighbors<T, Policy>::pair_distances(const MatrixView<T>* queries, Eigen::Index k, const std::int64_t* list_offsets,
                                                 const std::int64_t* pairs, double* out) const {
  if constexpr (!std::is_same_v<T, float>) {
    throw invalid_input("float64_distances: the database is float64; its searches return float64 distances");
  } else {
    const Eigen::Index m = queries ? queries->rows() : X_.rows();
    const auto offsets = [k, list_offsets](std::int64_t i) { return list_offsets ? list_offsets[i] : i * k; };
    const std::int64_t count = offsets(m);
    if (m == 0 || count == 0) return;
    const MatrixView<float> q = queries ? *queries : MatrixView<float>(X_);
    std::atomic<std::int64_t> outside{-1};  // the first index out of range that a thread saw
    parallel_chunks(count, 1 << 16, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
      for (std::int64_t p = begin; p < end; ++p)
        if (pairs[p] < 0 || pairs[p] >= X_.rows()) {
          std::int64_t none = -1;
          outside.compare_exchange_strong(none, p);
          return;
        }
    });
    if (const std::int64_t p = outside.load(); p >= 0)
      throw invalid_input("indices hold " + std::to_string(pairs[p]) + ", outside [0, " + std::to_string(X_.rows()) + ")");
    const bool on_device = (metric_ == Metric::euclidean || metric_ == Metric::sqeuclidean) && device_X_ &&
                           shards_.size() <= 1 && kernels::knn_float64_squared_can_run(*device_X_);
    if (!on_device) {
      host::float64_distances<double>(q, X_, pairs, offsets, metric_, out);
      return;
    }
    if (k > 0) kernels::knn_float64_squared(*device_X_, queries, std::uint64_t(m), std::uint64_t(k), pairs, out);
    else kernels::knn_float64_squared_lists(*device_X_, queries, std::uint64_t(m), list_offsets, pairs, out);
    const bool root = metric_ == Metric::euclidean;
    parallel_chunks(m, 256, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i)
        for (std::int64_t p = offsets(i); p < offsets(i + 1); ++p) {
          double& v = out[p];
          if (std::isnan(v)) v = host::float64_distance(q.row(i).data(), X_.row(pairs[p]).data(), X_.cols(), metric_);
          else if (root) v = std::sqrt(v);
        }
    });
  }
}

template <class T, class Policy>
KnnResult<T> NearestNeighbors<T, Policy>::kneighbors_self(int n_neighbors) const {
  require_fitted();
  const int k = n_neighbors == 0 ? params_.n_neighbors : n_neighbors;
  detail::check_n_neighbors(k);
  const auto n = X_.rows();
  if (k >= n)
    throw invalid_input("Expected n_neighbors < n_samples_fit when querying the training set, but n_neighbors = " +
                        std::to_string(k) + ", n_samples_fit = " + std::to_string(n));
  const KnnResult<T> full = search(X_, k + 1);
  KnnResult<T> out{Matrix<T>(n, k), IndexMatrix(n, k), full.stats};
  const int absent_skip = metric_ == Metric::inner_product ? k : 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    int skip = absent_skip;  // where the sample itself is not among its k+1
    for (int c = 0; c <= k; ++c)
      if (full.indices(i, c) == i) {
        skip = c;
        break;
      }
    for (int c = 0, o = 0; c <= k; ++c) {
      if (c == skip) continue;
      out.distances(i, o) = full.distances(i, c);
      out.indices(i, o) = full.indices(i, c);
      ++o;
    }
  }
  return out;
}

template <class T, class Policy>
RadiusResult<T> NearestNeighbors<T, Policy>::radius_neighbors(MatrixView<T> X, double radius, bool sort_results) const {
  require_fitted();
  checks::data(X, "X");
  checks::same_features(X_.cols(), X.cols(), "X");
  return radius_search(X, radius, sort_results, false);
}

template <class T, class Policy>
RadiusResult<T> NearestNeighbors<T, Policy>::radius_neighbors_self(double radius, bool sort_results) const {
  require_fitted();
  return radius_search(X_, radius, sort_results, true);
}

template <class T, class Policy>
RadiusResult<T> NearestNeighbors<T, Policy>::radius_graph_self(double radius, Eigen::Index sorted_feature) const {
  require_fitted();
  if (!(radius >= 0)) throw invalid_input("radius must be a number >= 0, got " + std::to_string(radius));
  if (sorted_feature >= X_.cols())
    throw invalid_input("radius_graph_self: sorted_feature " + std::to_string(sorted_feature) + " of " +
                        std::to_string(X_.cols()) + " features");
  return radius_search(X_, radius, false, false, false, sorted_feature);
}

template <class T, class Policy>
KnnResult<T> NearestNeighbors<T, Policy>::search(MatrixView<T> queries, int k) const {
  if (shards_.size() <= 1)
    return detail::run_knn<T>(backend_, X_, queries, k, metric_, device_X_.get(), max_abs_, params_.on_progress,
                              kernels::knn_tile_choice<Policy>());
  const Metric shard_metric = algorithms::part_metric(metric_);
  std::vector<KnnResult<T>> parts(shards_.size());
  std::vector<Eigen::Index> first;
  for (const Shard& shard : shards_) first.push_back(shard.first);
  concurrently(shards_.size(), [&](std::size_t s) {
    const Shard& shard = shards_[s];
    parts[s] = detail::run_knn<T>(shard.backend, X_.middleRows(shard.first, shard.rows), queries,
                                  static_cast<int>(std::min<Eigen::Index>(k, shard.rows)), shard_metric,
                                  shard.resident.get(), max_abs_, {}, kernels::knn_tile_choice<Policy>());
  });
  return algorithms::merge_parts<T>(parts, first, queries.rows(), k, metric_);
}

template <class T, class Policy>
RadiusResult<T> NearestNeighbors<T, Policy>::radius_search(MatrixView<T> queries, double radius, bool sort, bool exclude_self,
                                                   bool distances, Eigen::Index sorted_feature) const {
  const double r = radius < 0 ? params_.radius : radius;
  if constexpr (std::is_same_v<T, float>) {
    if (detail::values_may_overflow<T>(std::max(max_abs_, detail::max_abs<T>(queries)), X_.cols(), metric_)) {
      const Matrix<double> database = X_.template cast<double>(), q = queries.template cast<double>();
      auto wide = host::radius_search<double>(database, q, r, metric_, sort, exclude_self, sorted_feature);
      RadiusResult<T> out{std::move(wide.offsets), std::move(wide.indices), {}};
      if (distances) {
        out.distances.reserve(wide.distances.size());
        for (double v : wide.distances) out.distances.push_back(static_cast<T>(v));
      }
      return out;
    }
  }
  if (shards_.size() <= 1)
    return detail::run_radius<T>(backend_, X_, queries, r, metric_, sort, exclude_self, distances, device_X_.get(),
                                 sorted_feature);
  if (!(r >= 0)) throw invalid_input("radius must be a number >= 0, got " + std::to_string(r));
  std::vector<RadiusResult<T>> parts(shards_.size());
  concurrently(shards_.size(), [&](std::size_t s) {
    const Shard& shard = shards_[s];
    parts[s] = detail::run_radius<T>(shard.backend, X_.middleRows(shard.first, shard.rows), queries, r, metric_, false, false,
                                     distances || sort, shard.resident.get(), sorted_feature);
  });
  const auto m = static_cast<std::size_t>(queries.rows());
  RadiusResult<T> out;
  out.offsets.assign(m + 1, 0);
  std::vector<std::pair<T, std::int64_t>> row;
  for (std::size_t i = 0; i < m; ++i) {
    row.clear();
    for (std::size_t s = 0; s < parts.size(); ++s)
      for (auto f = parts[s].offsets[i]; f < parts[s].offsets[i + 1]; ++f) {
        const std::int64_t j = parts[s].indices[std::size_t(f)] + shards_[s].first;
        if (exclude_self && j == std::int64_t(i)) continue;
        row.emplace_back(distances || sort ? parts[s].distances[std::size_t(f)] : T(0), j);
      }
    if (sort) std::sort(row.begin(), row.end());
    for (const auto& [v, j] : row) {
      out.indices.push_back(j);
      if (distances) out.distances.push_back(v);
    }
    out.offsets[i + 1] = std::int64_t(out.indices.size());
  }
  return out;
}

}  // namespace gpuml
