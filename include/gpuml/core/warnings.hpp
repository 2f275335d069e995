// Warnings (scikit-learn's ConvergenceWarning and friends) go to a replaceable handler; the default prints to stderr.
// Verbose progress lines (scikit-learn's verbose=1 output) go to a replaceable sink; the default prints to stdout.
// A thread may route both to its own handlers for a scope (a binding that gives each call's messages to its caller).
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

namespace detail {
inline thread_local const WarningHandler* thread_warning_handler = nullptr;
inline thread_local const WarningHandler* thread_verbose_sink = nullptr;
}  // namespace detail

inline void warn(const std::string& message) {
  if (detail::thread_warning_handler) return (*detail::thread_warning_handler)(message);
  if (detail::warning_handler()) detail::warning_handler()(message);
}

/// One line of verbose output ("Iteration 3, inertia 12.5."), without its newline.
inline void verbose_line(const std::string& line) {
  if (detail::thread_verbose_sink) return (*detail::thread_verbose_sink)(line);
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);  // as it happens, also when stdout is a pipe
}

/// For its lifetime, warnings and verbose lines raised on this thread go to the given handlers (an empty one: the
/// process-wide default). The handlers must outlive the scope.
class ScopedThreadMessages {
 public:
  ScopedThreadMessages(const WarningHandler& warnings, const WarningHandler& verbose)
      : previous_warnings_(detail::thread_warning_handler), previous_verbose_(detail::thread_verbose_sink) {
    detail::thread_warning_handler = warnings ? &warnings : nullptr;
    detail::thread_verbose_sink = verbose ? &verbose : nullptr;
  }
  ~ScopedThreadMessages() {
    detail::thread_warning_handler = previous_warnings_;
    detail::thread_verbose_sink = previous_verbose_;
  }
  ScopedThreadMessages(const ScopedThreadMessages&) = delete;
  ScopedThreadMessages& operator=(const ScopedThreadMessages&) = delete;

 private:
  const WarningHandler* previous_warnings_;
  const WarningHandler* previous_verbose_;
};

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
