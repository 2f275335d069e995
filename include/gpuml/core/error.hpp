// Exceptions thrown by gpuml. Every failure a user can cause or meet names its cause.
#pragma once

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>

namespace gpuml {

/// Base of every gpuml exception.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Bad input: NaN/inf, empty data, wrong shapes, bad parameters.
class invalid_input : public error {
 public:
  using error::error;
};

/// The operation is valid but the chosen device cannot run it (no fp64, too large for device memory, ...).
class unsupported : public error {
 public:
  using error::error;
};

/// A Vulkan call failed; what() carries the VkResult's name.
class device_error : public error {
 public:
  device_error(const std::string& what, int vk_result) : error(what), result_(vk_result) {}
  int vk_result() const noexcept { return result_; }

 private:
  int result_;
};

/// An estimator method that needs a fitted model was called before fit().
class not_fitted : public error {
 public:
  using error::error;
};

/// A fit stopped because its iteration callback asked it to (KMeansParams::on_iteration); nothing was changed.
class cancelled : public error {
 public:
  using error::error;
};

/// The host ran out of memory; what() says what was being done and on how much data.
class out_of_memory : public error {
 public:
  using error::error;
};

/// Runs `f`; a std::bad_alloc from it becomes gpuml::out_of_memory naming `what` and the data's size.
template <class F>
decltype(auto) naming_host_memory(const std::string& what, std::uint64_t rows, std::uint64_t cols, std::uint64_t scalar_bytes,
                                  F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    const std::uint64_t mib = rows * cols * scalar_bytes >> 20;
    throw out_of_memory("out of host memory while " + what + " on " + std::to_string(rows) + " x " + std::to_string(cols) +
                        " values of " + std::to_string(scalar_bytes) + " bytes (" + std::to_string(mib) +
                        " MiB; gpuml keeps about one more copy of the data while fitting)");
  }
}

}  // namespace gpuml
