// What an iterative fit reports after each iteration, and what a long search reports between its parts, with the
// callbacks that receive them (progress bars, cancellation).
#pragma once

#include <cstdint>
#include <functional>

namespace gpuml {

/// One finished Lloyd iteration: its 0-based number, the fit's max_iter, and the squared centre shift it made
/// (scikit-learn's center_shift_tot, which the tolerance bounds).
struct LloydIteration {
  int iteration = 0;
  int max_iter = 0;
  double center_shift = 0;
};

/// Returns whether the fit goes on; false stops it with gpuml::cancelled.
using IterationCallback = std::function<bool(const LloydIteration&)>;

/// Polled on the calling thread inside a long step (a device's E-step that takes longer than about a fifth of a
/// second is submitted in parts, with a poll between them), so cancellation does not wait for a whole iteration;
/// returns whether the work goes on, and false stops it with gpuml::cancelled.
using KeepGoing = std::function<bool()>;

/// How long, in milliseconds, a step may run between two polls of a KeepGoing.
inline constexpr double kKeepGoingSliceMs = 200;

/// How far a long search is: `done` of `total` units of work (query rows times database blocks for k-NN).
struct WorkProgress {
  std::uint64_t done = 0;
  std::uint64_t total = 0;
};

/// Called on the calling thread between parts of a search (progress bars, cancellation); returns whether the
/// search goes on; false stops it with gpuml::cancelled.
using ProgressCallback = std::function<bool(const WorkProgress&)>;

}  // namespace gpuml
