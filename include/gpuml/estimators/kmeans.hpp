// KMeans with scikit-learn's semantics (Lloyd, greedy k-means++ / random / array init, n_init restarts, relative tol,
// centring, empty-cluster relocation): the model of the last fit, made by fit_kmeans (estimators/kmeans_fit.hpp,
// the one fit driver), and predict, transform and score on its centers. The members that run an engine or check
// data are defined in kmeans_impl.hpp: included at the end here, or in the compiled mode (core/compiled.hpp) only by
// the library, which instantiates KMeans<float> and KMeans<double> (another policy includes kmeans_impl.hpp).
#pragma once

#include <gpuml/algorithms/kmeans_params.hpp>
#include <gpuml/backend_choice.hpp>
#include <gpuml/core/backend.hpp>
#include <gpuml/core/checks.hpp>
#include <gpuml/core/compiled.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/estimators/kmeans_types.hpp>

#include <string>
#include <utility>

namespace gpuml {

struct kmeans_default_policy;  // policy/kmeans.hpp

template <class T, class Policy = kmeans_default_policy>
class KMeans {
  static_assert(is_supported_scalar<T>, "KMeans supports float and double");

 public:
  explicit KMeans(KMeansParams params = {}, Backend backend = default_backend())
      : params_(std::move(params)), backend_(std::move(backend)) {}

  /// Fits on X (unit weights) or on X with sample weights: fit_kmeans with numpy's stream seeded by
  /// params().random_state. A failed fit leaves an earlier one untouched.
  KMeans& fit(MatrixView<T> X);
  KMeans& fit(MatrixView<T> X, VectorView<T> sample_weight);

 private:
  KMeans& commit(KMeansFit<T>&& fit) {
    centers_ = std::move(fit.cluster_centers);
    labels_ = std::move(fit.labels);
    inertia_ = fit.inertia;
    n_iter_ = fit.n_iter;
    iteration_seconds_ = fit.iteration_seconds;
    step_times_ = std::move(fit.step_times);
    fit_times_ = fit.times;
    uploads_ = fit.uploads;
    fitted_ = true;
    return *this;
  }

 public:
  /// Makes this a fitted model with the given centers (k x d, from an earlier fit: a saved model, an unpickled
  /// one): predict, transform and score use them. labels() is then empty, inertia() NaN and n_iter() 0, as there
  /// was no fit on data. Refused (and nothing changed) for an empty or non-finite matrix.
  KMeans& set_cluster_centers(MatrixView<T> centers);

  Labels predict(MatrixView<T> X) const;
  Matrix<T> transform(MatrixView<T> X) const;
  double score(MatrixView<T> X) const;
  double score(MatrixView<T> X, VectorView<T> sample_weight) const;

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
  /// How many times the last fit sent X to a device (once per fit and device, whatever n_init; 0 on the host).
  int uploads() const {
    require_fitted();
    return uploads_;
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
  int uploads_ = 0;
  bool fitted_ = false;
};

}  // namespace gpuml

#if GPUML_DEFINES_LIBRARY
#include <gpuml/estimators/kmeans_impl.hpp>
#endif
#if defined(GPUML_COMPILED)
namespace gpuml {
extern template class KMeans<float>;
extern template class KMeans<double>;
}  // namespace gpuml
#endif
