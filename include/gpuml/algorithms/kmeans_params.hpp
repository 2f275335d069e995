// What a k-means fit is asked (KMeansParams) and the device's timing of its steps (StepTimes): the types the
// KMeans class names, apart from the algorithm (algorithms/kmeans.hpp), so the compiled mode's consumers read only these.
#pragma once

#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuml {

/// The E-step a device runs. Every choice returns the same labels, centers, inertia and n_iter, bit for bit.
enum class KMeansEStep {
  automatic,  ///< bounded where it pays (GPUs), unless Config::kmeans_bounds is off
  plain,      ///< every distance of every iteration (for comparison)
  bounded,    ///< per-sample distance bounds skip the distances that cannot change a label
};

struct KMeansParams {
  int n_clusters = 8;
  std::string init = "k-means++";  ///< or "random"
  std::optional<Matrix<double>> init_centers;  ///< array init (n_clusters x n_features); when set it overrides init
  int n_init = 0;  ///< 0 means "auto": 1 for k-means++ or an array init, 10 for random
  int max_iter = 300;
  double tol = 1e-4;  ///< relative to the mean per-feature variance of X
  /// scikit-learn's "lloyd" or "elkan". Both give Lloyd's iterations exactly, as in scikit-learn; the E-step
  /// below decides how a device computes them.
  std::string algorithm = "lloyd";
  KMeansEStep e_step = KMeansEStep::automatic;
  std::uint64_t random_state = 0;
  bool verbose = false;
  /// Called after every Lloyd iteration of every initialisation (progress bars, cancellation): return false to stop
  /// the fit, which then throws gpuml::cancelled and leaves the estimator as it was.
  IterationCallback on_iteration;
  /// Polled between the parts of an E-step long enough to be split, on the device and on the host (see
  /// KeepGoing): false cancels the fit as on_iteration's false does, within about a fifth of a second.
  KeepGoing keep_going;
};

}  // namespace gpuml

namespace gpuml::algorithms {

/// GPU time of a fit's steps, as a device engine measured it with timestamps (all zero for the host engine, negative
/// where the queue has no timestamps): where the iterations spend the device.
struct StepTimes {
  double e_step_ms = 0, reduce_ms = 0;  ///< E-steps with partial sums (one per iteration), and their reductions
  double labels_ms = 0;                 ///< E-steps that only label (the final one, predict)
  int e_steps = 0, label_steps = 0;
  std::vector<double> e_step_each_ms;   ///< per iteration, in order
  /// The bounded E-step's samples searched over all centers, per iteration (the rest kept their labels on the
  /// bounds alone); empty for the plain E-step.
  std::vector<std::uint64_t> e_step_searched;
  /// The bounded E-step's three dispatches summed over its steps with partial sums (device time, where whole
  /// steps were timed): checking the bounds (with the centers' upload), searching, adding the partial sums.
  double check_ms = 0, search_ms = 0, sums_ms = 0;
  int stage_timed_steps = 0;
  /// Bounded E-steps whose search moved the changed samples' terms between the exact sums (no sums stage).
  int moved_steps = 0;
  /// Rows sharded across devices: each shard's E-step time summed over its steps with partial sums (e_step_each_ms
  /// then holds the slowest shard's per step, and e_step_searched every shard's samples added); empty otherwise.
  std::vector<double> shard_e_step_ms;
};

}  // namespace gpuml::algorithms
