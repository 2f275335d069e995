// The pairwise kernels' definitions (see metrics/pairwise.hpp for when this is included).
#pragma once

#include <gpuml/core/backend.hpp>
#include <gpuml/core/checks.hpp>
#include <gpuml/host/distance.hpp>
#include <gpuml/kernels/distance.hpp>
#include <gpuml/metrics/pairwise.hpp>
#include <gpuml/select.hpp>

#include <concepts>
#include <optional>

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
  static_assert(requires { { Policy::fixed_tile } -> std::convertible_to<std::optional<kernels::DistanceTileParams>>; },
                "a distance policy gives a static fixed_tile (see policy/distance.hpp)");
  checks::data(X, "X");
  checks::data(Y, "Y");
  checks::same_features(X.cols(), Y.cols(), "Y");
  return run_on<T>(
      backend, "pairwise_sq_distances",
      [&] { return kernels::pairwise_sq_distances<T>(*backend.device(), X, Y, Policy::fixed_tile); },
      [&] { return host::pairwise_sq_distances<T>(X, Y); });
}

template <class T>
Matrix<T> pairwise_sq_distances(MatrixView<T> X, MatrixView<T> Y, const Backend& backend) {
  return pairwise_sq_distances<T, kernels::distance_default_policy>(X, Y, backend);
}

}  // namespace gpuml
