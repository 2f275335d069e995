// Input validation shared by every public entry point: each check throws gpuml::invalid_input naming the problem.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/parallel.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace gpuml::checks {

/// X must have at least one row and one column.
template <class Derived>
void non_empty(const Eigen::MatrixBase<Derived>& X, const char* name) {
  if (X.rows() == 0 || X.cols() == 0)
    throw invalid_input(std::string(name) + " is empty (shape " + std::to_string(X.rows()) + " x " +
                        std::to_string(X.cols()) + "); at least one sample and one feature are required");
}

namespace checks_detail {
/// Whether the n values from p are all finite: their exponent bits tested as integers and or-ed, a loop without
/// an exit or a floating-point reduction, so compilers vectorise it.
template <class T>
bool all_finite(const T* p, std::int64_t n) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  constexpr Bits exponent = sizeof(T) == 4 ? Bits(0x7F800000u) : Bits(0x7FF0000000000000ull);
  Bits bad = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, p + i, sizeof bits);
    bad |= Bits((bits & exponent) == exponent);
  }
  return bad == 0;
}

/// Whether row i of X is all finite: through its contiguous values where X is row-major float or double with
/// direct access, else value by value.
template <class Derived>
bool row_finite(const Eigen::MatrixBase<Derived>& X, Eigen::Index i) {
  using Scalar = typename Derived::Scalar;
  if constexpr ((std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>) && Derived::IsRowMajor &&
                Derived::InnerStrideAtCompileTime == 1 && bool(Eigen::internal::traits<Derived>::Flags & Eigen::DirectAccessBit)) {
    return all_finite(X.derived().data() + i * X.derived().outerStride(), X.cols());
  } else {
    bool ok = true;
    for (Eigen::Index j = 0; j < X.cols(); ++j) {
      const auto v = X(i, j);
      ok &= v - v == v - v;  // false for NaN and +-inf
    }
    return ok;
  }
}
}  // namespace checks_detail

/// Every value must be finite. Rows are checked in blocks on the host threads (a large X is read at memory speed);
/// the message names the first non-finite value in row-major order, whatever the thread count.
template <class Derived>
void finite(const Eigen::MatrixBase<Derived>& X, const char* name) {
  constexpr std::int64_t kRows = std::int64_t(1) << 14;
  const std::int64_t n = X.rows();
  std::vector<std::int64_t> first_bad(static_cast<std::size_t>((n + kRows - 1) / kRows), -1);
  parallel_chunks(n, kRows, [&](std::int64_t c, std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      if (!checks_detail::row_finite(X, i)) {
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
