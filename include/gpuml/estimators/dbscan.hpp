// DBSCAN with scikit-learn's semantics (sklearn.cluster.DBSCAN, algorithm="brute"): the neighbourhoods, core
// samples and components from an engine (the host's radius scan and union-find; on a Vulkan backend a graph kept on
// the device and read there by the components kernel, or NearestNeighbors' graph brought back: the same flags and
// roots), and the algorithm layer's numbering (algorithms/dbscan.hpp), so labels and core samples are
// scikit-learn's on every backend.
#pragma once

#include <gpuml/algorithms/dbscan.hpp>
#include <gpuml/algorithms/radius.hpp>
#include <gpuml/core/backend.hpp>
#include <gpuml/core/checks.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/core/warnings.hpp>
#include <gpuml/estimators/neighbors.hpp>
#include <gpuml/host/dbscan.hpp>
#include <gpuml/host/radius.hpp>
#include <gpuml/kernels/dbscan.hpp>
#include <gpuml/select.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpuml {

struct DBSCANParams {
  double eps = 0.5;         ///< neighbourhood radius, > 0 (a sample at distance exactly eps is a neighbour)
  int min_samples = 5;      ///< weighted neighbourhood size (the sample itself included) that makes a core sample
  std::string metric = "euclidean";  ///< parse_metric's names but inner_product, or "minkowski" with p
  /// The Minkowski power when metric is "minkowski": 1 (manhattan), 2 (euclidean) or infinity (chebyshev).
  double p = 2;
  /// Called after each stage of the fit (neighbourhoods, core samples, components: done of 3); return false to
  /// stop the fit, which throws gpuml::cancelled and leaves the estimator as it was.
  ProgressCallback on_progress;

  DBSCANParams& set_eps(double v) { eps = v; return *this; }
  DBSCANParams& set_min_samples(int v) { min_samples = v; return *this; }
  DBSCANParams& set_metric(std::string v) { metric = std::move(v); return *this; }
  DBSCANParams& set_p(double v) { p = v; return *this; }
  DBSCANParams& set_on_progress(ProgressCallback v) { on_progress = std::move(v); return *this; }
};

/// Where a Vulkan engine kept the neighbourhood graph and found the components.
struct DbscanEngineStats {
  bool graph_on_device = false;         ///< the graph stayed on the device (else it came back to the host)
  std::string graph_on_host_because;    ///< why it did not (empty where it did, or on the host backend)
  bool components_on_device = false;    ///< the components kernel ran (else the host's union-find)
  kernels::RadiusSearchStats search;    ///< the device graph's passes (graph_on_device only)
  kernels::DbscanComponentsStats components;  ///< the kernel's pieces, rounds and submissions (device only)
};

/// Where one fit's time went and how its neighbourhoods and components were found.
struct DBSCANFitStats : DbscanEngineStats {
  algorithms::DbscanTimes times;  ///< seconds per phase (neighbourhoods, core samples, components, labels)
  std::int64_t n_edges = 0;       ///< neighbourhood entries in all (each sample itself included)
};

namespace detail {

/// The metric DBSCAN's parameters name; a distance metric (inner_product is a similarity) and, for "minkowski",
/// p of 1, 2 or infinity.
inline Metric dbscan_metric(const DBSCANParams& p) {
  if (p.metric == "minkowski") {
    if (p.p == 1) return Metric::manhattan;
    if (p.p == 2) return Metric::euclidean;
    if (std::isinf(p.p) && p.p > 0) return Metric::chebyshev;
    throw invalid_input("DBSCAN: metric 'minkowski' is supported with p = 1, 2 or inf, got p = " + std::to_string(p.p));
  }
  const Metric m = parse_metric(p.metric);
  if (m == Metric::inner_product)
    throw invalid_input("DBSCAN: metric 'inner_product' is a similarity, not a distance; valid metrics are euclidean, "
                        "sqeuclidean, manhattan, cosine, chebyshev and minkowski (p = 1, 2 or inf)");
  return m;
}

/// DBSCAN's engine on a Vulkan backend, over the rows sorted by their widest feature (each query tile scans only its
/// window of rows). Unweighted fits keep the graph on the backend's first device (kernels::radius_self_graph): the
/// core samples from its exact neighbourhood sizes, the components read it in place (kernels::dbscan_components).
/// Weighted fits (whose core samples sum weights in index order), and graphs beyond one device binding, take the
/// general path: NearestNeighbors' radius graph on the backend, mapped back to X's order, its components on the
/// first device (the host's union-find, after one warning, where the device cannot hold the graph).
template <class T>
class NeighborsDbscanEngine {
 public:
  NeighborsDbscanEngine(const Backend& backend, MatrixView<T> X, Metric metric)
      : backend_(backend), X_(X), metric_(metric), sorted_(X, metric) {}

  void search(double eps, bool weighted) {
    if (weighted) stats_.graph_on_host_because = "weighted core samples sum weights over each neighbourhood in index order";
    else if (!sorted_.sorted()) stats_.graph_on_host_because = "the metric or the size leaves the rows unsorted";
    else {
      try {
        kernels::RadiusSearchOptions options;
        options.sorted_feature = sorted_.feature;
        device_graph_ = kernels::radius_self_graph<T>(*backend_.device(), sorted_.rows, eps, metric_, options, &stats_.search);
        stats_.graph_on_device = true;
        for (const std::int64_t c : device_graph_.counts) edges_ += c;
        return;
      } catch (const unsupported& e) {
        stats_.graph_on_host_because = e.what();
      }
    }
    NearestNeighbors<T> nn(NeighborsParams{1, metric_name(metric_)}, backend_);
    nn.fit(sorted_.sorted() ? MatrixView<T>(sorted_.rows) : X_);
    host_graph_.set(algorithms::sorted_self_graph<T>(sorted_, X_,
                                                     [&](MatrixView<T>, Eigen::Index feature) {
                                                       return nn.radius_graph_self(eps, feature);
                                                     }),
                    X_.rows());
  }

  template <class W>
  std::vector<std::uint8_t> core_samples(std::int64_t min_samples, const W* sample_weight) const {
    if (!stats_.graph_on_device) return host_graph_.core_samples(min_samples, sample_weight);
    const std::int64_t n = X_.rows();
    std::vector<std::uint8_t> core(std::size_t(n), 0);  // in X's order
    parallel_chunks(n, 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (std::int64_t s = b; s < e; ++s)
        core[std::size_t(sorted_.order[std::size_t(s)])] = device_graph_.counts[std::size_t(s)] >= min_samples;
    });
    return core;
  }

  std::vector<std::int64_t> components(const std::vector<std::uint8_t>& core) {
    if (stats_.graph_on_device) {
      std::vector<std::uint8_t> by_position(core.size());
      parallel_chunks(std::int64_t(core.size()), 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
        for (std::int64_t s = b; s < e; ++s) by_position[std::size_t(s)] = core[std::size_t(sorted_.order[std::size_t(s)])];
      });
      auto roots = kernels::dbscan_components(*backend_.device(), device_graph_, by_position, sorted_.order, {}, &stats_.components);
      stats_.components_on_device = true;
      return roots;
    }
    try {
      auto roots = kernels::dbscan_components(*backend_.device(), host_graph_.graph(), core, {}, &stats_.components);
      stats_.components_on_device = true;
      return roots;
    } catch (const unsupported& e) {
      warn_once(std::string(e.what()) + "; DBSCAN's components run on the host");
    }
    return host_graph_.components(core);
  }

  std::int64_t edges() const { return stats_.graph_on_device ? edges_ : host_graph_.edges(); }

  const DbscanEngineStats& stats() const noexcept { return stats_; }

 private:
  Backend backend_;
  MatrixView<T> X_;
  Metric metric_;
  algorithms::SortedRows<T> sorted_;
  kernels::RadiusDeviceGraph device_graph_;
  algorithms::HostNeighbourhoods<T> host_graph_;
  std::int64_t edges_ = 0;
  DbscanEngineStats stats_;
};

}  // namespace detail

/// sklearn.cluster.DBSCAN (brute force): clusters of samples that have at least min_samples (weighted) neighbours
/// within eps, and the samples within eps of them; the rest noise (-1).
template <class T>
class DBSCAN {
  static_assert(is_supported_scalar<T>, "DBSCAN supports float and double");

 public:
  using IndexVector = Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>;

  explicit DBSCAN(DBSCANParams params = {}, Backend backend = default_backend())
      : params_(std::move(params)), backend_(std::move(backend)) {}

  /// Clusters X; sample_weight empty means unit weights (negative weights are allowed: scikit-learn lets one keep a
  /// neighbour from being core). Validates everything first; a failed or cancelled fit leaves an earlier one
  /// untouched.
  DBSCAN& fit(MatrixView<T> X, VectorView<T> sample_weight = Vector<T>()) {
    using Clock = std::chrono::steady_clock;
    const auto fit_start = Clock::now();
    auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    const Metric metric = detail::dbscan_metric(params_);
    algorithms::check_dbscan(params_.eps, params_.min_samples);
    checks::data(X, "X");
    const bool weighted = sample_weight.size() != 0;
    if (weighted) {
      checks::same_length(X.rows(), sample_weight.size(), "sample_weight");
      checks::finite(sample_weight, "sample_weight");
    }
    const T* w = weighted ? sample_weight.data() : nullptr;
    const std::int64_t n = X.rows();
    algorithms::DbscanResult r;
    DBSCANFitStats stats;
    bool widened = false;
    if constexpr (std::is_same_v<T, float>) {
      // float32 data whose distances could overflow are decided in float64, as the neighbour search decides them.
      if (detail::values_may_overflow<T>(detail::max_abs<T>(X), X.cols(), metric)) {
        const Matrix<double> wide = X.template cast<double>();
        host::DbscanEngine<double> engine(wide, metric);
        const double setup = since(fit_start);
        r = algorithms::dbscan(engine, n, params_.eps, params_.min_samples, w, params_.on_progress);
        r.times.setup = setup;
        widened = true;
      }
    }
    if (!widened) {
      r = run_on<T>(
          backend_, "DBSCAN",
          [&] {
            detail::NeighborsDbscanEngine<T> engine(backend_, X, metric);
            const double setup = since(fit_start);
            auto result = algorithms::dbscan(engine, n, params_.eps, params_.min_samples, w, params_.on_progress);
            result.times.setup = setup;
            static_cast<DbscanEngineStats&>(stats) = engine.stats();
            return result;
          },
          [&] {
            host::DbscanEngine<T> engine(X, metric);
            const double setup = since(fit_start);
            auto result = algorithms::dbscan(engine, n, params_.eps, params_.min_samples, w, params_.on_progress);
            result.times.setup = setup;
            return result;
          });
    }
    const auto finish_start = Clock::now();
    Labels labels(n);
    IndexVector core(static_cast<Eigen::Index>(r.core_sample_indices.size()));
    Matrix<T> components(core.size(), X.cols());
    parallel_chunks(n, 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) labels[i] = static_cast<std::int32_t>(r.labels[std::size_t(i)]);
    });
    parallel_chunks(core.size(), 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (std::int64_t c = b; c < e; ++c) {
        core[c] = r.core_sample_indices[std::size_t(c)];
        components.row(c) = X.row(core[c]);
      }
    });
    stats.times = r.times;
    stats.times.labels += since(finish_start);
    stats.times.total = since(fit_start);
    stats.n_edges = r.n_edges;
    labels_ = std::move(labels);
    core_ = std::move(core);
    components_ = std::move(components);
    n_clusters_ = r.n_clusters;
    n_features_ = X.cols();
    stats_ = stats;
    fitted_ = true;
    return *this;
  }

  Labels fit_predict(MatrixView<T> X, VectorView<T> sample_weight = Vector<T>()) { return fit(X, sample_weight).labels_; }

  /// Each sample's cluster (0, 1, ... numbered by their smallest core sample) or -1 for noise.
  const Labels& labels() const {
    require_fitted();
    return labels_;
  }
  /// The core samples' indices, increasing.
  const IndexVector& core_sample_indices() const {
    require_fitted();
    return core_;
  }
  /// The core samples' rows of X (core_sample_indices().size() x n_features).
  const Matrix<T>& components() const {
    require_fitted();
    return components_;
  }
  std::int64_t n_clusters() const {
    require_fitted();
    return n_clusters_;
  }
  Eigen::Index n_features_in() const {
    require_fitted();
    return n_features_;
  }
  /// Where the last fit's time went (seconds per phase: setup from the call to the engine built, the labels' phase
  /// including the estimator's copies, total the whole fit) and where its components were found.
  const DBSCANFitStats& fit_stats() const {
    require_fitted();
    return stats_;
  }
  bool fitted() const noexcept { return fitted_; }
  const DBSCANParams& params() const noexcept { return params_; }
  const Backend& backend() const noexcept { return backend_; }

 private:
  void require_fitted() const {
    if (!fitted_) throw not_fitted("This DBSCAN instance is not fitted yet; call fit() first");
  }

  DBSCANParams params_;
  Backend backend_;
  Labels labels_;
  IndexVector core_;
  Matrix<T> components_;
  std::int64_t n_clusters_ = 0;
  Eigen::Index n_features_ = 0;
  DBSCANFitStats stats_;
  bool fitted_ = false;
};

}  // namespace gpuml
