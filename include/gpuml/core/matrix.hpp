// Data in and out of gpuml: row-major Eigen matrices of float or double, taken as Eigen::Ref views.
#pragma once

#include <gpuml/core/parallel.hpp>

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

/// The rows of X less a row vector `shift` (k-means' centred X, X - mean), without a centred copy of X: the engines
/// subtract where they read a row (on the upload to a device, in the host's passes), each value rounded in T exactly
/// as `X.rowwise() - shift` rounds it. No shift: X itself. A view: X and the shift must outlive it.
template <class T>
struct ShiftedView {
  MatrixView<T> X;
  const T* shift = nullptr;  ///< X.cols() values, or nullptr
  /// No value of X, of the shift or of X - shift is subnormal (KMeansInputs finds it): then a device that flushes
  /// subnormals forms X - shift bit for bit as the host does, and may centre the rows itself.
  bool subnormal_free = false;

  // Implicit: anything a MatrixView takes is a ShiftedView without a shift.
  template <class M>
    requires std::is_convertible_v<const M&, MatrixView<T>>
  ShiftedView(const M& x, const T* s = nullptr) : X(x), shift(s) {}  // NOLINT(google-explicit-constructor)
  Eigen::Index rows() const { return X.rows(); }
  Eigen::Index cols() const { return X.cols(); }
  T operator()(Eigen::Index i, Eigen::Index j) const { return shift ? T(X(i, j) - shift[j]) : X(i, j); }
  ShiftedView middleRows(Eigen::Index first, Eigen::Index count) const {
    ShiftedView rows(X.middleRows(first, count), shift);
    rows.subnormal_free = subnormal_free;
    return rows;
  }
  /// Rows [first, first + count), shifted, written contiguously at `out` (count x cols), in blocks on the host
  /// threads: the one place X - shift is formed in bulk (the upload to a device, the host engines' centred copy).
  void copy_rows(Eigen::Index first, Eigen::Index count, T* out) const {
    const Eigen::Index d = X.cols();
    parallel_chunks(count, std::int64_t(1) << 14, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      auto to = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(out + b * d, e - b, d);
      if (shift) to = X.middleRows(first + b, e - b).rowwise() - Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(shift, d);
      else to = X.middleRows(first + b, e - b);
    });
  }
  /// Row i, shifted, as a 1 x d row vector.
  Eigen::Matrix<T, 1, Eigen::Dynamic> row(Eigen::Index i) const {
    Eigen::Matrix<T, 1, Eigen::Dynamic> r = X.row(i);
    if (shift) r -= Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(shift, X.cols());
    return r;
  }
};

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
