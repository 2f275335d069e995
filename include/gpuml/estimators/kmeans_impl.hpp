// KMeans' members that run an engine (see estimators/kmeans.hpp for when this is included).
#pragma once

#include <gpuml/estimators/kmeans.hpp>
#include <gpuml/estimators/kmeans_fit.hpp>
#include <gpuml/policy/kmeans.hpp>

#include <limits>
#include <string>

namespace gpuml {

template <class T, class Policy>
KMeans<T, Policy>& KMeans<T, Policy>::fit(MatrixView<T> X) {
  return commit(fit_kmeans<T, Policy>(backend_, X, nullptr, params_));
}

template <class T, class Policy>
KMeans<T, Policy>& KMeans<T, Policy>::fit(MatrixView<T> X, VectorView<T> sample_weight) {
  return commit(fit_kmeans<T, Policy>(backend_, X, &sample_weight, params_));
}

template <class T, class Policy>
KMeans<T, Policy>& KMeans<T, Policy>::set_cluster_centers(MatrixView<T> centers) {
  checks::data(centers, "cluster_centers");
  centers_ = centers;
  labels_.resize(0);
  inertia_ = std::numeric_limits<double>::quiet_NaN();
  n_iter_ = 0;
  iteration_seconds_ = 0;
  step_times_ = {};
  fit_times_ = {};
  uploads_ = 0;
  fitted_ = true;
  return *this;
}

template <class T, class Policy>
Labels KMeans<T, Policy>::predict(MatrixView<T> X) const {
  check_input(X);
  return detail::run_assign<T>(backend_, X, centers_, Policy::fixed_tile);
}

template <class T, class Policy>
Matrix<T> KMeans<T, Policy>::transform(MatrixView<T> X) const {
  check_input(X);
  return detail::run_transform<T>(backend_, X, centers_);
}

template <class T, class Policy>
double KMeans<T, Policy>::score(MatrixView<T> X) const {
  check_input(X);
  const Vector<T> w = Vector<T>::Ones(X.rows());
  return score(X, w);
}

template <class T, class Policy>
double KMeans<T, Policy>::score(MatrixView<T> X, VectorView<T> sample_weight) const {
  check_input(X);
  checks::same_length(X.rows(), sample_weight.size(), "sample_weight");
  checks::finite(sample_weight, "sample_weight");
  for (Eigen::Index i = 0; i < sample_weight.size(); ++i)
    if (sample_weight[i] < 0)
      throw invalid_input("sample_weight must be non-negative (negative at " + std::to_string(i) + ")");
  return -detail::run_labels_inertia<T>(backend_, X, sample_weight, centers_, Policy::fixed_tile);
}

}  // namespace gpuml
