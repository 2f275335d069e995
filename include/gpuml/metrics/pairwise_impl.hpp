// The pairwise kernels' definitions (see metrics/pairwise.hpp for when this is included).
#pragma once

#include <gpuml/core/backend.hpp>
#include <gpuml/core/checks.hpp>
#include <gpuml/host/distance.hpp>
#include <gpuml/kernels/distance.hpp>
#include <gpuml/metrics/pairwise.hpp>
#include <gpuml/select.hpp>

namespace gpuml {

template <class T>
Vector<T> row_sq_norms(MatrixView<T> X, const Backend& backend) {
  checks::data(X, "X");
  return run_on<T>(
      backend, "row_sq_norms", [&] { return kernels::row_sq_norms<T>(*backend.device(), X); },
      [&] { return host::row_sq_norms<T>(X); });
}

template <class T, class Policy>
Matrix<T> pairwise_sq_distances(MatrixView<T> X, MatrixView<T> Y, const Backend& backend) {
  checks::data(X, "X");
  checks::data(Y, "Y");
  checks::same_features(X.cols(), Y.cols(), "Y");
  return run_on<T>(
      backend, "pairwise_sq_distances", [&] { return kernels::pairwise_sq_distances<T, Policy>(*backend.device(), X, Y); },
      [&] { return host::pairwise_sq_distances<T>(X, Y); });
}

template <class T>
Matrix<T> pairwise_sq_distances(MatrixView<T> X, MatrixView<T> Y, const Backend& backend) {
  return pairwise_sq_distances<T, kernels::default_distance_policy<T>>(X, Y, backend);
}

}  // namespace gpuml
