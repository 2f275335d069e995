// DBSCAN with scikit-learn's semantics (sklearn.cluster.DBSCAN, algorithm="brute"): the neighbourhoods from an
// engine (the host's radius scan, or NearestNeighbors on a Vulkan backend), the algorithm layer's core samples, the
// components from the engine (the host's union-find, or kernels/dbscan.hpp on the device: the same roots), and the
// algorithm layer's numbering (algorithms/dbscan.hpp), so labels and core samples are scikit-learn's on every
// backend.
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

/// Where one fit's time went and how its components were found.
struct DBSCANFitStats {
  algorithms::DbscanTimes times;      ///< seconds per phase (neighbourhoods, core samples, components, labels)
  std::int64_t n_edges = 0;           ///< neighbourhood entries in all (each sample itself included)
  bool components_on_device = false;  ///< the components kernel ran (else the host's union-find)
  kernels::DbscanComponentsStats components;  ///< the kernel's pieces, rounds and submissions (device only)
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

/// DBSCAN's engine on a Vulkan backend: NearestNeighbors' radius graph (each sample itself included where its
/// distance to itself is within eps) over the rows sorted by their widest feature, so each query tile scans only
/// its window of rows, mapped back to X's order; the components on the backend's first device (the host's
/// union-find, after one warning, where the device cannot hold the graph).
template <class T>
class NeighborsDbscanEngine {
 public:
  NeighborsDbscanEngine(const Backend& backend, MatrixView<T> X, Metric metric)
      : backend_(backend), sorted_(X, metric), nn_(NeighborsParams{1, metric_name(metric)}, backend) {
    if (sorted_.sorted()) nn_.fit(sorted_.rows);
    else nn_.fit(X);
  }

  algorithms::RadiusResult<T> neighbourhoods(double eps) {
    if (!sorted_.sorted()) return nn_.radius_graph_self(eps);
    return algorithms::unsort_graph(nn_.radius_graph_self(eps, sorted_.feature), sorted_.order);
  }

  std::vector<std::int64_t> components(const algorithms::RadiusResult<T>& hood, const std::vector<std::uint8_t>& core) {
    try {
      auto roots = kernels::dbscan_components(*backend_.device(), hood, core, {}, &stats_);
      on_device_ = true;
      return roots;
    } catch (const unsupported& e) {
      warn_once(std::string(e.what()) + "; DBSCAN's components run on the host");
    }
    return algorithms::union_find_roots(hood, core);
  }

  bool components_on_device() const noexcept { return on_device_; }
  const kernels::DbscanComponentsStats& components_stats() const noexcept { return stats_; }

 private:
  Backend backend_;
  algorithms::SortedRows<T> sorted_;
  NearestNeighbors<T> nn_;
  kernels::DbscanComponentsStats stats_;
  bool on_device_ = false;
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
        r = algorithms::dbscan<double>(engine, n, params_.eps, params_.min_samples, w, params_.on_progress);
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
            auto result = algorithms::dbscan<T>(engine, n, params_.eps, params_.min_samples, w, params_.on_progress);
            result.times.setup = setup;
            stats.components_on_device = engine.components_on_device();
            stats.components = engine.components_stats();
            return result;
          },
          [&] {
            host::DbscanEngine<T> engine(X, metric);
            const double setup = since(fit_start);
            auto result = algorithms::dbscan<T>(engine, n, params_.eps, params_.min_samples, w, params_.on_progress);
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
