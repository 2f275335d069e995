// What an iterative fit reports after each iteration, and what a long search reports between its parts, with the
// callbacks that receive them (progress bars, cancellation).
#pragma once

#include <gpuml/core/error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>

namespace gpuml {

/// Adds one device-time reading to a running total (StepTimes, KnnSearchStats); a reading the queue could not take
/// (negative) makes the total -1 for good, so a total is either the sum of every reading or says that there is none.
inline void add_device_ms(double& total, double ms) { total = ms < 0 || total < 0 ? -1.0 : total + ms; }

/// One finished Lloyd iteration: its 0-based number, the fit's max_iter, and the squared center shift it made
/// (scikit-learn's center_shift_tot, which the tolerance bounds).
struct LloydIteration {
  int iteration = 0;
  int max_iter = 0;
  double center_shift = 0;
};

/// Returns whether the fit goes on; false stops it with gpuml::cancelled.
using IterationCallback = std::function<bool(const LloydIteration&)>;

/// Polled on the calling thread inside a long step (an E-step that takes longer than about a fifth of a second
/// runs in parts, on the device or the host, with a poll between them), so cancellation does not wait for a whole
/// iteration; returns whether the work goes on, and false stops it with gpuml::cancelled.
using KeepGoing = std::function<bool()>;

/// How long, in milliseconds, a step may run between two polls of a KeepGoing.
inline constexpr double kKeepGoingSliceMs = 200;

/// A KeepGoing paced by the step it is polled in: an engine asks how many parts its next step takes (one, unless
/// someone polls and the last step ran longer than a slice), records how long each step took, and polls between
/// the parts.
class KeepGoingPacer {
 public:
  using Clock = std::chrono::steady_clock;

  void set(KeepGoing keep_going, double slice_ms = kKeepGoingSliceMs) {
    keep_going_ = std::move(keep_going);
    slice_ms_ = slice_ms;
  }

  /// Parts for the next step, from 1 to max_parts.
  std::int64_t parts(std::int64_t max_parts) const {
    if (!keep_going_ || !(last_step_ms_ > slice_ms_)) return 1;
    const double wanted = std::ceil(last_step_ms_ / std::max(slice_ms_, 1e-3));
    return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::min(wanted, 1e9)), 1, std::max<std::int64_t>(1, max_parts));
  }

  /// The step that began at `started` has ended.
  void step_done(Clock::time_point started) {
    last_step_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  }

  /// Between two parts: throws gpuml::cancelled when the poll says stop.
  void poll() const {
    if (keep_going_ && !keep_going_()) throw cancelled("KMeans.fit was cancelled during an E-step; the estimator is unchanged");
  }

 private:
  KeepGoing keep_going_;
  double slice_ms_ = kKeepGoingSliceMs, last_step_ms_ = 0;
};

/// How far a long search is: `done` of `total` units of work (query rows times database blocks for k-NN).
struct WorkProgress {
  std::uint64_t done = 0;
  std::uint64_t total = 0;
};

/// Called on the calling thread between parts of a search (progress bars, cancellation); returns whether the
/// search goes on; false stops it with gpuml::cancelled.
using ProgressCallback = std::function<bool(const WorkProgress&)>;

}  // namespace gpuml
