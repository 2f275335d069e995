// Public pairwise kernels, as in sklearn.metrics.pairwise: one call, any backend (engine chosen by gpuml::run_on).
// Defined in pairwise_impl.hpp: included at the end here, or in the compiled mode (core/compiled.hpp) only by the
// library, which instantiates them for float and double with the default tile policy.
#pragma once

#include <gpuml/backend_choice.hpp>
#include <gpuml/core/backend.hpp>
#include <gpuml/core/compiled.hpp>
#include <gpuml/core/matrix.hpp>

namespace gpuml {

/// Squared Euclidean norm of each row of X.
template <class T>
Vector<T> row_sq_norms(MatrixView<T> X, const Backend& backend = default_backend());

/// D(i, j) = ||x_i - y_j||^2 (via the norm expansion, clamped at 0), for X (n x d) and Y (m x d), with the default
/// tile policy (kernels::distance_default_policy).
template <class T>
Matrix<T> pairwise_sq_distances(MatrixView<T> X, MatrixView<T> Y, const Backend& backend = default_backend());

/// The same with a tile policy of the caller's (policy/distance.hpp).
template <class T, class Policy>
Matrix<T> pairwise_sq_distances(MatrixView<T> X, MatrixView<T> Y, const Backend& backend = default_backend());

}  // namespace gpuml

#if GPUML_DEFINES_LIBRARY
#include <gpuml/metrics/pairwise_impl.hpp>
#endif
#if defined(GPUML_COMPILED)
namespace gpuml {
extern template Vector<float> row_sq_norms<float>(MatrixView<float>, const Backend&);
extern template Vector<double> row_sq_norms<double>(MatrixView<double>, const Backend&);
extern template Matrix<float> pairwise_sq_distances<float>(MatrixView<float>, MatrixView<float>, const Backend&);
extern template Matrix<double> pairwise_sq_distances<double>(MatrixView<double>, MatrixView<double>, const Backend&);
}  // namespace gpuml
#endif
