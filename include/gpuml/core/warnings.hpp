// Warnings (scikit-learn's ConvergenceWarning and friends) go to a replaceable handler; the default prints to stderr.
#pragma once

#include <cstdio>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace gpuml {

using WarningHandler = std::function<void(const std::string&)>;

namespace detail {
inline WarningHandler& warning_handler() {
  static WarningHandler handler = [](const std::string& msg) { std::fprintf(stderr, "gpuml warning: %s\n", msg.c_str()); };
  return handler;
}
}  // namespace detail

/// Replaces the warning handler; returns the previous one (tests use it to capture warnings).
inline WarningHandler set_warning_handler(WarningHandler handler) {
  return std::exchange(detail::warning_handler(), std::move(handler));
}

inline void warn(const std::string& message) {
  if (detail::warning_handler()) detail::warning_handler()(message);
}

/// warn(), once per distinct message in the process (conditions of a device or a configuration, which would
/// otherwise repeat on every call).
inline void warn_once(const std::string& message) {
  static std::mutex m;
  static std::set<std::string> said;
  {
    std::lock_guard lock(m);
    if (!said.insert(message).second) return;
  }
  warn(message);
}

}  // namespace gpuml
