// Input validation shared by every public entry point: each check throws gpuml::invalid_input naming the problem.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/parallel.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace gpuml::checks {

/// X must have at least one row and one column.
template <class Derived>
void non_empty(const Eigen::MatrixBase<Derived>& X, const char* name) {
  if (X.rows() == 0 || X.cols() == 0)
    throw invalid_input(std::string(name) + " is empty (shape " + std::to_string(X.rows()) + " x " +
                        std::to_string(X.cols()) + "); at least one sample and one feature are required");
}

/// Every value must be finite. Rows are checked in blocks on the host threads (a large X is read at memory speed);
/// the message names the first non-finite value in row-major order, whatever the thread count.
template <class Derived>
void finite(const Eigen::MatrixBase<Derived>& X, const char* name) {
  constexpr std::int64_t kRows = std::int64_t(1) << 14;
  const std::int64_t n = X.rows();
  std::vector<std::int64_t> first_bad(static_cast<std::size_t>((n + kRows - 1) / kRows), -1);
  parallel_chunks(n, kRows, [&](std::int64_t c, std::int64_t begin, std::int64_t end) {
    if (X.middleRows(begin, end - begin).allFinite()) return;  // the usual case, vectorised over the block
    for (std::int64_t i = begin; i < end; ++i)
      if (!X.row(i).allFinite()) {
        first_bad[static_cast<std::size_t>(c)] = i;
        return;
      }
  });
  for (const std::int64_t i : first_bad) {
    if (i < 0) continue;
    for (Eigen::Index j = 0; j < X.cols(); ++j) {
      const auto v = X(i, j);
      if (!(v - v == v - v))  // false for NaN and +-inf
        throw invalid_input(std::string(name) + " contains NaN or infinity (at row " + std::to_string(i) +
                            ", column " + std::to_string(j) + ")");
    }
  }
}

/// Non-empty and finite: the usual check for a data matrix.
template <class Derived>
void data(const Eigen::MatrixBase<Derived>& X, const char* name) {
  non_empty(X, name);
  finite(X, name);
}

inline void same_features(Eigen::Index expected, Eigen::Index got, const char* name) {
  if (expected != got)
    throw invalid_input(std::string(name) + " has " + std::to_string(got) + " features, but " +
                        std::to_string(expected) + " were expected");
}

inline void same_length(Eigen::Index expected, Eigen::Index got, const char* name) {
  if (expected != got)
    throw invalid_input(std::string(name) + " has length " + std::to_string(got) + ", but " +
                        std::to_string(expected) + " was expected");
}

}  // namespace gpuml::checks
