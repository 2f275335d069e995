// Public pairwise kernels, as in sklearn.metrics.pairwise: one call, any backend (engine chosen by gpuml::run_on).
#pragma once

#include <gpuml/core/backend.hpp>
#include <gpuml/core/checks.hpp>
#include <gpuml/host/distance.hpp>
#include <gpuml/kernels/distance.hpp>
#include <gpuml/select.hpp>

namespace gpuml {

/// Squared Euclidean norm of each row of X.
template <class T>
Vector<T> row_sq_norms(MatrixView<T> X, const Backend& backend = default_backend()) {
  checks::data(X, "X");
  return run_on<T>(
      backend, "row_sq_norms", [&] { return kernels::row_sq_norms<T>(*backend.device(), X); },
      [&] { return host::row_sq_norms<T>(X); });
}

/// D(i, j) = ||x_i - y_j||^2 (via the norm expansion, clamped at 0), for X (n x d) and Y (m x d).
template <class T, class Policy = kernels::default_distance_policy<T>>
Matrix<T> pairwise_sq_distances(MatrixView<T> X, MatrixView<T> Y, const Backend& backend = default_backend()) {
  checks::data(X, "X");
  checks::data(Y, "Y");
  checks::same_features(X.cols(), Y.cols(), "Y");
  return run_on<T>(
      backend, "pairwise_sq_distances", [&] { return kernels::pairwise_sq_distances<T, Policy>(*backend.device(), X, Y); },
      [&] { return host::pairwise_sq_distances<T>(X, Y); });
}

}  // namespace gpuml
