// Exceptions thrown by gpuml. Every failure a user can cause or meet names its cause.
#pragma once

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

}  // namespace gpuml
