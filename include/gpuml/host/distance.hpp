// Host (Eigen) row norms and pairwise squared-Euclidean distances: the same results as the Vulkan kernels,
// blocked and multithreaded so the n x m output is filled without large temporaries.
#pragma once

#include <gpuml/core/matrix.hpp>
#include <gpuml/core/parallel.hpp>

#include <algorithm>

namespace gpuml::host {

template <class T>
Vector<T> row_sq_norms(MatrixView<T> X) {
  Vector<T> out(X.rows());
  parallel_chunks(X.rows(), 4096, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) out[i] = X.row(i).squaredNorm();
  });
  return out;
}

template <class T>
Matrix<T> pairwise_sq_distances(MatrixView<T> X, MatrixView<T> Y) {
  const Vector<T> xn = row_sq_norms<T>(X), yn = row_sq_norms<T>(Y);
  Matrix<T> D(X.rows(), Y.rows());
  constexpr std::int64_t block = 256;
  parallel_chunks(X.rows(), block, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    auto Db = D.middleRows(b, e - b);
    Db.noalias() = T(-2) * X.middleRows(b, e - b) * Y.transpose();
    for (std::int64_t i = b; i < e; ++i)
      for (Eigen::Index j = 0; j < Y.rows(); ++j) D(i, j) = std::max(D(i, j) + xn[i] + yn[j], T(0));
  });
  return D;
}

}  // namespace gpuml::host
