// What an iterative fit reports after each iteration, and the callback that receives it (progress bars, cancellation).
#pragma once

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

}  // namespace gpuml
