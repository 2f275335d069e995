// Input validation shared by every public entry point: each check throws gpuml::invalid_input naming the problem.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>

#include <string>

namespace gpuml::checks {

/// X must have at least one row and one column.
template <class Derived>
void non_empty(const Eigen::MatrixBase<Derived>& X, const char* name) {
  if (X.rows() == 0 || X.cols() == 0)
    throw invalid_input(std::string(name) + " is empty (shape " + std::to_string(X.rows()) + " x " +
                        std::to_string(X.cols()) + "); at least one sample and one feature are required");
}

/// Every value must be finite.
template <class Derived>
void finite(const Eigen::MatrixBase<Derived>& X, const char* name) {
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (Eigen::Index j = 0; j < X.cols(); ++j) {
      const auto v = X(i, j);
      if (!(v - v == v - v))  // false for NaN and +-inf
        throw invalid_input(std::string(name) + " contains NaN or infinity (at row " + std::to_string(i) +
                            ", column " + std::to_string(j) + ")");
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
