// Data in and out of gpuml: row-major Eigen matrices of float or double, taken as Eigen::Ref views.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <type_traits>

namespace gpuml {

template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// Read-only view of a row-major matrix (a Matrix, a Map over user memory, or a block of rows).
template <class T>
using MatrixView = Eigen::Ref<const Matrix<T>>;

template <class T>
using VectorView = Eigen::Ref<const Vector<T>>;

/// Cluster labels, as scikit-learn's int32 labels_.
using Labels = Eigen::Matrix<std::int32_t, Eigen::Dynamic, 1>;

/// Neighbour indices, as scikit-learn's int64 indices.
using IndexMatrix = Eigen::Matrix<std::int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
inline constexpr bool is_supported_scalar = std::is_same_v<T, float> || std::is_same_v<T, double>;

template <class T>
constexpr const char* scalar_name() {
  static_assert(is_supported_scalar<T>, "gpuml supports float and double");
  return std::is_same_v<T, float> ? "float32" : "float64";
}

}  // namespace gpuml
