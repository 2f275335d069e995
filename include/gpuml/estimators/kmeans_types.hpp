// What a k-means fit returns (KMeansFit) and where it spent its time (FitTimes), apart from the fit
// (kmeans_fit.hpp), so the compiled mode's consumers of KMeans read only these.
#pragma once

#include <gpuml/algorithms/kmeans_params.hpp>
#include <gpuml/core/matrix.hpp>

namespace gpuml {

/// Where a KMeans fit spent its wall time, in seconds: what benchmarks of the whole fit report beside the iterations.
struct FitTimes {
  double checks = 0;      ///< input checks and the column statistics (mean, tolerance); where the devices check,
                          ///< the wait for the reservation's allocation and copy too
  double reserve = 0;     ///< device memory for the samples allocated beside the checks (the slowest device's;
                          ///< with the rows' copy where the devices check them)
  double seeding = 0;     ///< initial centers, every run
  double lloyd = 0;       ///< Lloyd runs in all: the data's upload, iterations, final E-step, inertia, labels
  double setup = 0;       ///< of which the engines' set-up (on a device: allocation and the upload of X)
  double upload = 0;      ///< X's and the weights' copies to the devices, centring included (the slowest device's;
                          ///< in the set-up, in the seeding where k-means++ uploads first, or in the checks where
                          ///< the devices check the rows the reservation copied)
  double iterations = 0;  ///< of which the iterations (every run's iteration_seconds)
  double finish = 0;      ///< of which the final E-steps, inertia and labels
  double total = 0;       ///< the whole fit
};

/// What fit_kmeans returns: the kept run's model and how the fit went.
template <class T>
struct KMeansFit {
  Matrix<T> cluster_centers;  ///< in X's coordinates (the mean added back)
  Labels labels;
  double inertia = 0.0;
  int n_iter = 0;
  int n_init = 0;                   ///< runs made
  int best_run = 0;                 ///< the run kept (scikit-learn's rule: a lower inertia, not the same clustering)
  int distinct_clusters = 0;        ///< clusters holding a label (scikit-learn warns when fewer than n_clusters)
  int uploads = 0;                  ///< times X went to a device (one per fit and device; 0 on the host)
  int reserved_uploads = 0;         ///< of which into device memory allocated beside the input checks
  bool checks_on_device = false;    ///< the input checks' column passes ran on the devices, over the rows copied
                                    ///< there beside their allocation (Config::device_checks)
  double tol_absolute = 0.0;        ///< the tolerance on the centers' shift (tol times X's mean variance)
  double iteration_seconds = 0.0;   ///< the kept run's Lloyd iterations alone
  algorithms::StepTimes step_times; ///< the kept run's device timing of its steps
  FitTimes times;
};

}  // namespace gpuml
