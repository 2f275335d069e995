// KMeans with scikit-learn's semantics (Lloyd, greedy k-means++ / random / array init, n_init restarts, relative tol,
// centring, empty-cluster relocation). The estimator holds the scikit-learn logic and the checks; the engines behind
// detail::run_* hold the numerics, chosen by gpuml::run_on.
#pragma once

#include <gpuml/core/backend.hpp>
#include <gpuml/core/checks.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/warnings.hpp>
#include <gpuml/host/kmeans.hpp>
#include <gpuml/kernels/kmeans.hpp>
#include <gpuml/kernels/kmeans_plus_plus.hpp>
#include <gpuml/kernels/kmeans_policy.hpp>
#include <gpuml/select.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpuml {

namespace detail {

// Every engine call goes through gpuml::run_on (select.hpp): the device engine on a Vulkan backend, the host engine
// where the device cannot run the problem, with one warning.

/// Calls fn with X less its shift as one matrix view: X itself where there is no shift, otherwise a centred copy made
/// on the host threads (the host engines read a plain matrix; the device engines subtract on their upload instead).
template <class T, class Fn>
decltype(auto) with_centred_copy(const ShiftedView<T>& X, Fn&& fn) {
  if (!X.shift) return fn(X.X);
  Matrix<T> Xc(X.rows(), X.cols());
  X.copy_rows(0, X.rows(), Xc.data());
  return fn(MatrixView<T>(Xc));
}

template <class T, class Policy>
host::LloydResult<T> run_lloyd(const Backend& backend, ShiftedView<T> X, VectorView<T> w, const Matrix<T>& init,
                               int max_iter, double tol_absolute, bool verbose, const IterationCallback& on_iteration,
                               const KeepGoing& keep_going = {}, KMeansEStep e_step = KMeansEStep::automatic,
                               kernels::ResidentSamples<T>* resident = nullptr) {
  // Config::kmeans_bounds (GPUML_KMEANS_BOUNDS=0) turns the automatic choice into the plain E-step.
  if (e_step == KMeansEStep::automatic && !config().kmeans_bounds()) e_step = KMeansEStep::plain;
  return run_on<T>(
      backend, "KMeans",
      [&] {
        if (backend.device_count() == 1)
          return kernels::lloyd<T, Policy>(*backend.device(), X, w, init, max_iter, tol_absolute, verbose, on_iteration,
                                           keep_going, e_step, resident);
        std::vector<vulkan::Device*> devices;
        for (std::size_t i = 0; i < backend.device_count(); ++i) devices.push_back(backend.device(i));
        return kernels::lloyd_sharded<T, Policy>(devices, X, w, init, max_iter, tol_absolute, verbose, on_iteration, e_step);
      },
      [&] {
        return with_centred_copy(X, [&](MatrixView<T> Xc) {
          return host::lloyd<T>(Xc, w, init, max_iter, tol_absolute, verbose, on_iteration, keep_going);
        });
      });
}

template <class T, class Policy>
Matrix<T> run_kmeans_plus_plus(const Backend& backend, ShiftedView<T> X, VectorView<T> w, int k, std::mt19937_64& rng,
                               kernels::ResidentSamples<T>* resident = nullptr) {
  const std::mt19937_64 before = rng;  // a fallback draws the same sequence the device would have
  return run_on<T>(
      backend, "k-means++ seeding",
      [&] { return kernels::kmeans_plus_plus<T>(*backend.device(), X, w, k, rng, 0, resident); },
      [&] {
        rng = before;
        return with_centred_copy(X, [&](MatrixView<T> Xc) { return host::kmeans_plus_plus<T>(Xc, w, k, rng); });
      });
}

template <class T, class Policy>
Labels run_assign(const Backend& backend, MatrixView<T> X, const Matrix<T>& centers) {
  return run_on<T>(
      backend, "KMeans.predict", [&] { return kernels::assign<T, Policy>(*backend.device(), X, centers); },
      [&] { return host::assign<T>(X, centers); });
}

template <class T, class Policy>
Matrix<T> run_transform(const Backend& backend, MatrixView<T> X, const Matrix<T>& centers) {
  return run_on<T>(
      backend, "KMeans.transform", [&] { return kernels::transform<T>(*backend.device(), X, centers); },
      [&] { return host::euclidean_to_centers<T>(X, centers); });
}

/// sum_i w_i ||x_i - c_{l_i}||^2 with l_i the nearest centre (scikit-learn's score, negated), labels and sum on one
/// engine.
template <class T, class Policy>
double run_labels_inertia(const Backend& backend, MatrixView<T> X, VectorView<T> w, const Matrix<T>& centers) {
  return run_on<T>(
      backend, "KMeans.score",
      [&] { return kernels::labels_inertia<T, Policy>(*backend.device(), X, w, centers); },
      [&] { return host::inertia<T>(X, w, centers, host::assign<T>(X, centers)); });
}

/// scikit-learn's _is_same_clustering: labels1 maps consistently onto labels2.
inline bool same_clustering(const Labels& a, const Labels& b, int n_clusters) {
  std::vector<std::int32_t> mapping(static_cast<std::size_t>(n_clusters), -1);
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    auto& m = mapping[static_cast<std::size_t>(a[i])];
    if (m == -1)
      m = b[i];
    else if (m != b[i])
      return false;
  }
  return true;
}

}  // namespace detail

/// Where a KMeans fit spent its wall time, in seconds: what benchmarks of the whole fit report beside the iterations.
struct FitTimes {
  double checks = 0;      ///< input checks and the column statistics (mean, tolerance)
  double seeding = 0;     ///< initial centres, every run
  double lloyd = 0;       ///< Lloyd runs in all: the data's upload, iterations, final E-step, inertia, labels
  double setup = 0;       ///< of which the engines' set-up (on a device: allocation and the upload of X)
  double iterations = 0;  ///< of which the iterations (every run's iteration_seconds)
  double finish = 0;      ///< of which the final E-steps, inertia and labels
  double total = 0;       ///< the whole fit
};

template <class T, class Policy = kmeans_default_policy>
class KMeans {
  static_assert(is_supported_scalar<T>, "KMeans supports float and double");

 public:
  explicit KMeans(KMeansParams params = {}, Backend backend = default_backend())
      : params_(std::move(params)), backend_(std::move(backend)) {}

  KMeans& fit(MatrixView<T> X) {
    checks::non_empty(X, "X");
    return naming_host_memory("fitting KMeans", X.rows(), X.cols(), sizeof(T), [&]() -> KMeans& {
      Vector<T> w(X.rows());
      parallel_chunks(X.rows(), algorithms::kRowChunk, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
        w.segment(begin, end - begin).setOnes();
      });
      return fit_checked(X, w);
    });
  }

  KMeans& fit(MatrixView<T> X, VectorView<T> sample_weight) {
    return naming_host_memory("fitting KMeans", X.rows(), X.cols(), sizeof(T),
                              [&]() -> KMeans& { return fit_checked(X, sample_weight); });
  }

 private:
  KMeans& fit_checked(MatrixView<T> X, VectorView<T> sample_weight) {
    using Clock = std::chrono::steady_clock;
    const auto fit_start = Clock::now();
    auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    const KMeansParams& p = params_;
    algorithms::check_kmeans_params(p);
    const bool array_init = p.init_centers.has_value();
    checks::non_empty(X, "X");
    // The column sums give the mean and, in the same pass, the finite check: a sum of finite floats in double is
    // finite, so only a non-finite sum needs the search for the first bad value (which a double X may also pass).
    const Eigen::RowVectorXd column_sums = algorithms::column_sums(X, nullptr);
    if (!column_sums.allFinite()) checks::finite(X, "X");
    const Eigen::Index n = X.rows(), d = X.cols();
    const int k = p.n_clusters;
    if (n < k)
      throw invalid_input("n_samples=" + std::to_string(n) + " should be >= n_clusters=" + std::to_string(k) + ".");
    checks::same_length(n, sample_weight.size(), "sample_weight");
    const auto weights = algorithms::check_sample_weight(sample_weight);
    if (!(weights.sum > 0)) throw invalid_input("sample_weight sums to zero; at least one sample needs a positive weight");
    if (!array_init && p.init == "random" && weights.positive < k)
      throw invalid_input("init=\"random\" needs n_clusters=" + std::to_string(k) +
                          " samples with positive weight, but only " + std::to_string(weights.positive) + " have one");
    if (array_init) algorithms::check_init_centers<T>(*p.init_centers, k, d);

    int n_init = p.n_init;
    if (n_init == 0) n_init = (array_init || p.init == "k-means++") ? 1 : 10;
    if (array_init && n_init != 1) {
      warn("Explicit initial center position passed: performing only one init in KMeans instead of n_init=" +
           std::to_string(n_init) + ".");
      n_init = 1;
    }

    // Relative tol: mean of the per-feature population variances of X (unweighted, before centring).
    const Eigen::RowVectorXd mean = column_sums / static_cast<double>(n);
    const double tol_absolute =
        p.tol == 0 ? 0.0 : algorithms::absolute_tolerance(algorithms::column_sums(X, &mean), static_cast<double>(n), p.tol);

    // X centred by its mean, in T as scikit-learn does: the engines subtract as they read (no centred copy of X).
    const Eigen::Matrix<T, 1, Eigen::Dynamic> mean_t = mean.template cast<T>();
    const ShiftedView<T> Xc(X, mean_t.data());
    Matrix<T> init_c;
    if (array_init) init_c = p.init_centers->template cast<T>().rowwise() - mean_t;
    FitTimes times;
    times.checks = seconds_since(fit_start);

    std::mt19937_64 rng(p.random_state);
    std::optional<host::LloydResult<T>> best;
    kernels::ResidentSamples<T> resident;  // X and the weights on the device: uploaded once for every run
    for (int run = 0; run < n_init; ++run) {
      auto phase = Clock::now();
      Matrix<T> start;
      if (array_init)
        start = init_c;
      else if (p.init == "k-means++")
        start = detail::run_kmeans_plus_plus<T, Policy>(backend_, Xc, sample_weight, k, rng, &resident);
      else
        start = host::random_init<T>(Xc, sample_weight, k, rng);
      if (p.verbose) verbose_line("Initialization complete");
      times.seeding += seconds_since(phase);
      phase = Clock::now();
      host::LloydResult<T> r =
          detail::run_lloyd<T, Policy>(backend_, Xc, sample_weight, start, p.max_iter, tol_absolute, p.verbose,
                                       p.on_iteration, p.keep_going, p.e_step, &resident);
      times.lloyd += seconds_since(phase);
      times.setup += r.setup_seconds;
      times.iterations += r.iteration_seconds;
      times.finish += r.finish_seconds;
      if (!best || (r.inertia < best->inertia && !detail::same_clustering(r.labels, best->labels, k)))
        best = std::move(r);
    }

    Matrix<T> centers = best->centers.rowwise() + mean_t;
    const int distinct = algorithms::distinct_labels(best->labels, k);
    if (distinct < k)
      warn("Number of distinct clusters (" + std::to_string(distinct) + ") found smaller than n_clusters (" +
           std::to_string(k) + "). Possibly due to duplicate points in X.");
    times.total = seconds_since(fit_start);

    // Commit only now: a failed fit leaves an earlier one untouched.
    centers_ = std::move(centers);
    labels_ = std::move(best->labels);
    inertia_ = best->inertia;
    n_iter_ = best->n_iter;
    iteration_seconds_ = best->iteration_seconds;
    step_times_ = best->step_times;
    fit_times_ = times;
    fitted_ = true;
    return *this;
  }

 public:
  /// Makes this a fitted model with the given centres (k x d, from an earlier fit: a saved model, an unpickled
  /// one): predict, transform and score use them. labels() is then empty, inertia() NaN and n_iter() 0, as there
  /// was no fit on data. Refused (and nothing changed) for an empty or non-finite matrix.
  KMeans& set_cluster_centers(MatrixView<T> centers) {
    checks::data(centers, "cluster_centers");
    centers_ = centers;
    labels_.resize(0);
    inertia_ = std::numeric_limits<double>::quiet_NaN();
    n_iter_ = 0;
    iteration_seconds_ = 0;
    step_times_ = {};
    fit_times_ = {};
    fitted_ = true;
    return *this;
  }

  Labels predict(MatrixView<T> X) const {
    check_input(X);
    return detail::run_assign<T, Policy>(backend_, X, centers_);
  }

  Matrix<T> transform(MatrixView<T> X) const {
    check_input(X);
    return detail::run_transform<T, Policy>(backend_, X, centers_);
  }

  double score(MatrixView<T> X) const {
    check_input(X);
    const Vector<T> w = Vector<T>::Ones(X.rows());
    return score(X, w);
  }

  double score(MatrixView<T> X, VectorView<T> sample_weight) const {
    check_input(X);
    checks::same_length(X.rows(), sample_weight.size(), "sample_weight");
    checks::finite(sample_weight, "sample_weight");
    for (Eigen::Index i = 0; i < sample_weight.size(); ++i)
      if (sample_weight[i] < 0)
        throw invalid_input("sample_weight must be non-negative (negative at " + std::to_string(i) + ")");
    return -detail::run_labels_inertia<T, Policy>(backend_, X, sample_weight, centers_);
  }

  Labels fit_predict(MatrixView<T> X) { return fit(X).labels_; }
  Labels fit_predict(MatrixView<T> X, VectorView<T> w) { return fit(X, w).labels_; }
  Matrix<T> fit_transform(MatrixView<T> X) { return fit(X).transform(X); }
  Matrix<T> fit_transform(MatrixView<T> X, VectorView<T> w) { return fit(X, w).transform(X); }

  const Matrix<T>& cluster_centers() const {
    require_fitted();
    return centers_;
  }
  const Labels& labels() const {
    require_fitted();
    return labels_;
  }
  double inertia() const {
    require_fitted();
    return inertia_;
  }
  int n_iter() const {
    require_fitted();
    return n_iter_;
  }
  /// Wall time of the kept run's Lloyd iterations alone (no data transfer, seeding, final E-step or inertia):
  /// what benchmarks divide by n_iter.
  double iteration_seconds() const {
    require_fitted();
    return iteration_seconds_;
  }
  /// The device's own timing of the kept run's steps (GPU timestamps; all zero on the host backend).
  const algorithms::StepTimes& step_times() const {
    require_fitted();
    return step_times_;
  }
  /// Wall time of the last fit's phases (zero after set_cluster_centers).
  const FitTimes& fit_times() const {
    require_fitted();
    return fit_times_;
  }
  bool fitted() const { return fitted_; }
  const KMeansParams& params() const { return params_; }
  const Backend& backend() const { return backend_; }

 private:
  void require_fitted() const {
    if (!fitted_)
      throw not_fitted("This KMeans instance is not fitted yet. Call 'fit' with appropriate arguments first.");
  }
  void check_input(const MatrixView<T>& X) const {
    require_fitted();
    checks::data(X, "X");
    checks::same_features(centers_.cols(), X.cols(), "X");
  }

  KMeansParams params_;
  Backend backend_;
  Matrix<T> centers_;
  Labels labels_;
  double inertia_ = 0.0;
  int n_iter_ = 0;
  double iteration_seconds_ = 0.0;
  algorithms::StepTimes step_times_;
  FitTimes fit_times_;
  bool fitted_ = false;
};

}  // namespace gpuml
