// The k-means fit, written once: gpuml::KMeans::fit, the Python package's KMeans.fit and the programs call
// fit_kmeans. It takes parameters already validated by the caller's own rules (scikit-learn's, for Python) and does
// the rest as scikit-learn's KMeans.fit does: the input checks, the mean and the tolerance, centring (the engines
// subtract the mean as they read X: no centred copy), the starting centers of every n_init run from numpy's random
// stream, the Lloyd runs with empty-cluster relocation, scikit-learn's rule for the best run, and the final
// labels. On a device X and the weights are uploaded once and read by every engine of the fit.
#pragma once

#include <gpuml/algorithms/kmeans.hpp>
#include <gpuml/algorithms/numpy_random.hpp>
#include <gpuml/core/backend.hpp>
#include <gpuml/core/checks.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/core/warnings.hpp>
#include <gpuml/estimators/kmeans_types.hpp>
#include <gpuml/host/kmeans.hpp>
#include <gpuml/kernels/column_checks.hpp>
#include <gpuml/kernels/kmeans.hpp>
#include <gpuml/kernels/kmeans_plus_plus.hpp>
#include <gpuml/policy/kmeans.hpp>
#include <gpuml/select.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace gpuml {

namespace detail {

// Every engine call goes through gpuml::run_on (select.hpp): the device engine on a Vulkan backend, the host engine
// where the device cannot run the problem, with one warning.

/// Calls fn with X less its shift as one matrix view: X itself where there is no shift, otherwise a centred copy made
/// on the host threads (the host engines read a plain matrix; the device engines subtract on their upload instead).
template <class T, class Fn>
decltype(auto) with_centred_copy(const ShiftedView<T>& X, Fn&& fn) {
  if (!X.shift) return fn(X.X);
  Matrix<T> Xc(X.rows(), X.cols());
  X.copy_rows(0, X.rows(), Xc.data());
  return fn(MatrixView<T>(Xc));
}

// `tile`, where an engine takes one: the policy's fixed tile (Policy::fixed_tile), none for the resolver's.

/// The devices of a backend of several (each runs its shard of the rows).
inline std::vector<vulkan::Device*> devices_of(const Backend& backend) {
  std::vector<vulkan::Device*> devices;
  for (std::size_t i = 0; i < backend.device_count(); ++i) devices.push_back(backend.device(i));
  return devices;
}

/// The E-step the engines run where `asked` is: Config::kmeans_bounds (GPUML_KMEANS_BOUNDS=0) turns the automatic
/// choice into the plain E-step.
inline KMeansEStep configured_e_step(KMeansEStep asked) {
  return asked == KMeansEStep::automatic && !config().kmeans_bounds() ? KMeansEStep::plain : asked;
}

template <class T>
host::LloydResult<T> run_lloyd(const Backend& backend, ShiftedView<T> X, VectorView<T> w, const Matrix<T>& init,
                               int max_iter, double tol_absolute, bool verbose, const IterationCallback& on_iteration,
                               const KeepGoing& keep_going = {}, KMeansEStep e_step = KMeansEStep::automatic,
                               std::vector<kernels::ResidentSamples<T>>* resident = nullptr,
                               const std::optional<KMeansTileParams>& tile = {},
                               const std::optional<algorithms::SumFrame>& frame = {}) {
  e_step = configured_e_step(e_step);
  return run_on<T>(
      backend, "KMeans",
      [&] {
        if (backend.device_count() == 1)
          return kernels::lloyd<T>(*backend.device(), X, w, init, max_iter, tol_absolute, verbose, on_iteration,
                                   keep_going, e_step, resident ? &resident->front() : nullptr, tile, frame);
        return kernels::lloyd_sharded<T>(devices_of(backend), X, w, init, max_iter, tol_absolute, verbose, on_iteration,
                                         keep_going, e_step, tile, frame, resident);
      },
      [&] {
        return with_centred_copy(X, [&](MatrixView<T> Xc) {
          return host::lloyd<T>(Xc, w, init, max_iter, tol_absolute, verbose, on_iteration, keep_going, frame);
        });
      });
}

/// `frame`: the fit's bounds for the seeding's exact sums (none: those of exactly these rows).
template <class T>
Matrix<T> run_kmeans_plus_plus(const Backend& backend, ShiftedView<T> X, VectorView<T> w, int k,
                               algorithms::NumpyRandomState& random,
                               std::vector<kernels::ResidentSamples<T>>* resident = nullptr,
                               std::vector<std::int64_t>* chosen = nullptr,
                               const std::optional<algorithms::SumFrame>& frame = {}) {
  const algorithms::NumpyRandomState before = random;  // a fallback draws the same sequence the device would have
  const algorithms::SumFrame f = frame ? *frame : algorithms::SumFrame::of<T>(X, w);
  return run_on<T>(
      backend, "k-means++ seeding",
      [&] {
        if (backend.device_count() == 1)
          return kernels::kmeans_plus_plus<T>(*backend.device(), X, w, k, random, 0,
                                              resident ? &resident->front() : nullptr, chosen, f);
        return kernels::kmeans_plus_plus_sharded<T>(devices_of(backend), X, w, k, random, chosen, f, resident);
      },
      [&] {
        random = before;
        return with_centred_copy(X, [&](MatrixView<T> Xc) { return host::kmeans_plus_plus<T>(Xc, w, k, random, chosen, f); });
      });
}

template <class T>
Labels run_assign(const Backend& backend, MatrixView<T> X, const Matrix<T>& centers,
                  const std::optional<KMeansTileParams>& tile = {}) {
  return run_on<T>(
      backend, "KMeans.predict",
      [&] {
        if (backend.device_count() == 1) return kernels::assign<T>(*backend.device(), X, centers, tile);
        return kernels::assign_sharded<T>(devices_of(backend), X, centers, tile);
      },
      [&] { return host::assign<T>(X, centers); });
}

template <class T>
Matrix<T> run_transform(const Backend& backend, MatrixView<T> X, const Matrix<T>& centers) {
  return run_on<T>(
      backend, "KMeans.transform",
      [&] {
        if (backend.device_count() == 1) return kernels::transform<T>(*backend.device(), X, centers);
        return kernels::transform_sharded<T>(devices_of(backend), X, centers);
      },
      [&] { return host::euclidean_to_centers<T>(X, centers); });
}

/// sum_i w_i ||x_i - c_{l_i}||^2 with l_i the nearest center (scikit-learn's score, negated), labels and sum on one
/// engine.
template <class T>
double run_labels_inertia(const Backend& backend, MatrixView<T> X, VectorView<T> w, const Matrix<T>& centers,
                          const std::optional<KMeansTileParams>& tile = {}) {
  return run_on<T>(
      backend, "KMeans.score",
      [&] {
        if (backend.device_count() == 1) return kernels::labels_inertia<T>(*backend.device(), X, w, centers, tile);
        return kernels::labels_inertia_sharded<T>(devices_of(backend), X, w, centers, tile);
      },
      [&] { return host::inertia<T>(X, w, centers, host::assign<T>(X, centers)); });
}

/// scikit-learn's _is_same_clustering: labels1 maps consistently onto labels2.
inline bool same_clustering(const Labels& a, const Labels& b, int n_clusters) {
  std::vector<std::int32_t> mapping(static_cast<std::size_t>(n_clusters), -1);
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    auto& m = mapping[static_cast<std::size_t>(a[i])];
    if (m == -1)
      m = b[i];
    else if (m != b[i])
      return false;
  }
  return true;
}

/// What a fit derives from its inputs before any run: the checks' results, the mean, the tolerance and the number
/// of runs, over the rows of every shard where `rows` spans several (see LocalRows). The weights are the caller's or
/// unit weights made here.
template <class T>
struct KMeansInputs {
  Vector<T> unit_weights;  // sized before w refers to it, filled below
  VectorView<T> w;
  Eigen::Matrix<T, 1, Eigen::Dynamic> mean;  ///< X's column means in T, as scikit-learn centers
  double tol_absolute = 0;
  algorithms::SumFrame frame;  ///< the bounds of the exact sums, over every shard's rows
  int n_init = 1;
  bool subnormal_free = false;  ///< no subnormal in X, the mean or X - mean (ShiftedView::subnormal_free)

  template <class Rows>
  KMeansInputs(Rows& rows, MatrixView<T> X, const VectorView<T>* sample_weight, const KMeansParams& p)
      : unit_weights(sample_weight ? Eigen::Index(0) : X.rows()),
        w(sample_weight ? *sample_weight : VectorView<T>(unit_weights)) {
    const Eigen::Index n_local = X.rows(), d = X.cols();
    // One pass gives each column's range and the finite check: only where it found a sum that is not finite does the
    // search for the first bad value run (finite values may overflow a sum: the search then finds none).
    algorithms::ColumnRange range;
    // Each column's smallest magnitude only where the rows may be centred on a device (subnormal_free below).
    if (!rows.column_range(X, range, config().may_centre_on_device())) rows.guarded([&] { checks::finite(X, "X"); });
    const std::int64_t n = rows.total_rows(n_local);
    const int k = p.n_clusters;
    if (n < k)
      throw invalid_input("n_samples=" + std::to_string(n) + " should be >= n_clusters=" + std::to_string(k) + ".");
    if (!sample_weight) {
      parallel_chunks(n_local, algorithms::kRowChunk, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
        unit_weights.segment(begin, end - begin).setOnes();
      });
    }
    rows.guarded([&] { checks::same_length(n_local, w.size(), "sample_weight"); });
    const algorithms::WeightSummary weights = rows.weight_summary(w);
    if (!(weights.sum > 0)) throw invalid_input("sample_weight sums to zero; at least one sample needs a positive weight");
    const bool array_init = p.init_centers.has_value();
    if (!array_init && p.init == "random" && weights.positive < k)
      throw invalid_input("init=\"random\" needs n_clusters=" + std::to_string(k) +
                          " samples with positive weight, but only " + std::to_string(weights.positive) + " have one");
    if (array_init) algorithms::check_init_centers<T>(*p.init_centers, k, d);

    n_init = p.n_init;
    if (n_init == 0) n_init = (array_init || p.init == "k-means++") ? 1 : 10;
    if (array_init && n_init != 1) {
      warn("Explicit initial center position passed: performing only one init in KMeans instead of n_init=" +
           std::to_string(n_init) + ".");
      n_init = 1;
    }
    // The mean and the variances from exact column sums (algorithms::ExactColumnSums): the same on any number of
    // ranks. Relative tol: mean of the per-feature population variances of X (unweighted, before centring).
    using algorithms::ExactColumnSums;
    const Eigen::RowVectorXd mean_d =
        rows.exact_column_sums(X, nullptr, ExactColumnSums::exponents_for(algorithms::column_bounds(range, nullptr), n)) /
        static_cast<double>(n);
    if (p.tol != 0) {
      const auto exponents = ExactColumnSums::exponents_for(algorithms::column_bounds(range, &mean_d), n);
      tol_absolute = algorithms::absolute_tolerance(rows.exact_column_sums(X, &mean_d, exponents), static_cast<double>(n), p.tol);
    }
    mean = mean_d.template cast<T>();
    frame = algorithms::SumFrame::of<T>(range, mean, weights.largest, n);
    subnormal_free = algorithms::subnormal_free<T>(range, mean);
  }
  /// X less its mean, as the engines read it (with what the checks found about subnormals).
  ShiftedView<T> centred(MatrixView<T> X) const {
    ShiftedView<T> Xc(X, mean.data());
    Xc.subnormal_free = subnormal_free;
    return Xc;
  }
  KMeansInputs(const KMeansInputs&) = delete;
  KMeansInputs& operator=(const KMeansInputs&) = delete;
};

/// The rows of a fit held by this process, on one backend: what fit_kmeans_on asks of where the rows are. The MPI
/// estimator's mpi::detail::RankRows answers the same for the rows of every rank (sums added across ranks, engines
/// spanning the ranks); the driver is the same. `tile`: the policy's fixed tile for the Lloyd engines (none: resolved).
template <class T>
class LocalRows {
 public:
  explicit LocalRows(Backend backend, std::optional<KMeansTileParams> tile = {})
      : backend_(std::move(backend)), tile_(tile) {}
  /// A fit that failed before its first engine (its checks) waits only for the chunk being reserved.
  ~LocalRows() {
    enough_reserved_ = true;
    abandoned_ = true;
  }
  LocalRows(const LocalRows&) = delete;
  LocalRows& operator=(const LocalRows&) = delete;

  void check_non_empty(MatrixView<T> X) const { checks::non_empty(X, "X"); }
  std::int64_t total_rows(std::int64_t n) const { return n; }
  /// Runs a check of this process's own rows (across ranks, a failure on one rank ends every rank).
  template <class Work>
  void guarded(Work&& work) const {
    work();
  }
  /// The column passes run on the devices where the rows were copied there (reserve_samples), else on the host;
  /// the same results either way.
  bool column_range(MatrixView<T> X, algorithms::ColumnRange& range, bool smallest) {
    if (rows_on_devices()) {
      const Eigen::Index d = X.cols();
      std::vector<algorithms::ColumnRange> part(resident_.size(), algorithms::ColumnRange::empty(d));
      std::vector<char> finite(resident_.size(), 1);
      if (on_devices([&](std::size_t s, vulkan::Device& device, const std::vector<kernels::ResidentChunk>& chunks) {
            finite[s] = kernels::column_range_on_device(device, chunks, static_cast<std::uint32_t>(d), part[s]);
          })) {
        range = part.front();
        for (std::size_t s = 1; s < part.size(); ++s) range.merge(part[s]);
        if (!smallest) range.smallest.setZero();
        return std::all_of(finite.begin(), finite.end(), [](char f) { return f != 0; });
      }
    }
    return algorithms::column_range(X, range, smallest);
  }
  Eigen::RowVectorXd exact_column_sums(MatrixView<T> X, const Eigen::RowVectorXd* center,
                                       const Eigen::RowVectorXi& exponents) {
    // The squared deviations (the variances behind tol) where every device has float64.
    const auto devices = devices_of(backend_);
    const bool squares =
        std::all_of(devices.begin(), devices.end(), [](const vulkan::Device* d) { return kernels::can_sum_squares(*d); });
    if ((!center || squares) && rows_on_devices()) {
      std::vector<algorithms::ExactColumnSums> part(resident_.size(), algorithms::ExactColumnSums::zero(exponents));
      if (on_devices([&](std::size_t s, vulkan::Device& device, const std::vector<kernels::ResidentChunk>& chunks) {
            kernels::exact_column_sums_on_device(device, chunks, static_cast<std::uint32_t>(X.cols()), part[s], center);
          })) {
        for (std::size_t s = 1; s < part.size(); ++s) part.front().add(part[s]);
        return part.front().to_double();
      }
    }
    return algorithms::exact_column_sums(X, center, exponents).to_double();
  }
  /// Whether the input checks' column passes ran on the devices.
  bool checks_on_device() const { return checks_on_device_; }
  algorithms::WeightSummary weight_summary(VectorView<T> w) const { return algorithms::check_sample_weight(w); }

  /// Starts allocating, on a thread of its own, the device memory the fit's first engine on each device will place
  /// its rows in (kernels::reserve_samples), while the input checks run on the host: the engines then fill it. When
  /// the first engine comes, the reservation stops after the chunk in hand and that engine allocates the rest
  /// (allocation competes with the checks for the host, and may take longer). Nothing where the backend is the host;
  /// a failure leaves the engines to allocate.
  ///
  /// Where the devices can check the rows (Config::device_checks, float32 rows centred on the devices, at least
  /// Config::device_checks_min_bytes of them), the
  /// reservation also copies each shard's rows there as they are once its chunks are allocated, and the input
  /// checks' column passes then run on the devices (column_range, exact_column_sums).
  void reserve_samples(MatrixView<T> X, const KMeansParams& p) {
    const std::int64_t n = X.rows(), d = X.cols();
    if (!backend_.is_vulkan() || n <= 0 || d <= 0) return;
    const KMeansEStep e_step = configured_e_step(p.e_step);
    const bool plus_plus_first = !p.init_centers && p.init == "k-means++";
    const auto k = static_cast<std::uint32_t>(p.n_clusters);
    const auto cols = static_cast<std::uint64_t>(d);
    // Each shard's layout on this thread: choosing a tile may warn, and warnings go to the caller's handlers.
    const std::vector<vulkan::Device*> devices = devices_of(backend_);
    const std::size_t shards = kernels::shard_count(devices, n);
    std::vector<std::uint64_t> chunk_rows(shards);
    for (std::size_t s = 0; s < shards; ++s) {
      const auto [first, end] = kernels::shard_rows(n, static_cast<std::int64_t>(shards), static_cast<std::int64_t>(s));
      const auto r = static_cast<std::uint64_t>(end - first);
      chunk_rows[s] = plus_plus_first ? kernels::PlusPlusEngine<T>::sample_chunk_rows(*devices[s], r, cols)
                                      : kernels::LloydEngine<T>::sample_chunk_rows(*devices[s], r, static_cast<std::uint32_t>(cols), k, e_step, tile_);
    }
    const bool contiguous = X.innerStride() == 1 && (X.outerStride() == d || n <= 1);
    bool copy_rows = std::is_same_v<T, float> && config().device_checks() && config().may_centre_on_device() && contiguous &&
                     static_cast<std::uint64_t>(n) * cols * sizeof(T) >= config().device_checks_min_bytes();
    for (std::size_t s = 0; s < shards; ++s) copy_rows = copy_rows && kernels::can_check_columns(*devices[s], chunk_rows[s], cols);
    rows_copied_ = copy_rows;
    try {
      reserving_ = std::async(std::launch::async, [this, X, n, cols, devices, chunk_rows, copy_rows] {
        try {
          kernels::on_shards(devices, n, [&](std::size_t s, vulkan::Device& device, std::int64_t first, std::int64_t rows) {
            const MatrixView<T> shard = X.middleRows(first, rows);
            // Copying rows, every chunk is reserved: only a failed fit (abandoned_) ends the reservation early.
            kernels::reserve_samples<T>(device, static_cast<std::uint64_t>(rows), cols, chunk_rows[s], resident_[s],
                                        copy_rows ? &abandoned_ : &enough_reserved_, copy_rows ? &shard : nullptr);
          });
        } catch (...) {
          // No memory to reserve: each engine allocates, and says what is wrong.
        }
      });
    } catch (...) {
      // No thread (or no memory for one): the engines allocate as they go.
    }
  }

  /// One run's starting centers (centred), drawn as scikit-learn draws them; `chosen` receives the samples' indices.
  /// `frame`: the fit's bounds (KMeansInputs), which fix k-means++'s exact sums.
  Matrix<T> starting_centers(const ShiftedView<T>& Xc, VectorView<T> w, const KMeansParams& p,
                             algorithms::NumpyRandomState& random, const algorithms::SumFrame& frame,
                             std::vector<std::int64_t>* chosen = nullptr) {
    reserved();
    if (p.init == "k-means++") {
      Matrix<T> centers = run_kmeans_plus_plus<T>(backend_, Xc, w, p.n_clusters, random, &resident_, chosen, frame);
      drop_reserved();
      return centers;
    }
    return algorithms::random_init<T>(Xc, w, p.n_clusters, random, chosen);
  }
  algorithms::LloydResult<T> lloyd(const ShiftedView<T>& Xc, VectorView<T> w, const Matrix<T>& start,
                                   const KMeansParams& p, double tol_absolute, const algorithms::SumFrame& frame) {
    reserved();
    auto result = run_lloyd<T>(backend_, Xc, w, start, p.max_iter, tol_absolute, p.verbose, p.on_iteration, p.keep_going,
                               p.e_step, &resident_, tile_, frame);
    drop_reserved();
    return result;
  }
  bool same_clustering(const Labels& a, const Labels& b, int k) const { return detail::same_clustering(a, b, k); }
  int distinct_labels(const Labels& labels, int k) const { return algorithms::distinct_labels(labels, k); }
  int uploads() const {
    int total = 0;
    for (const auto& r : resident_) total += r.uploads();
    return total;
  }
  int reserved_uploads() const {
    int total = 0;
    for (const auto& r : resident_) total += r.reserved_uploads();
    return total;
  }
  double reserve_seconds() const {
    double longest = 0;
    for (const auto& r : resident_) longest = std::max(longest, r.reserve_seconds());
    return longest;
  }
  /// The slowest device's time copying the samples (the devices copy at once).
  double upload_seconds() const {
    double longest = 0;
    for (const auto& r : resident_) longest = std::max(longest, r.upload_seconds());
    return longest;
  }

 private:
  Backend backend_;
  std::optional<KMeansTileParams> tile_;
  /// Ends the reservation (reserve_samples) after the chunks in hand, before any engine takes from resident_.
  void reserved() {
    enough_reserved_ = true;
    if (reserving_.valid()) reserving_.get();
  }
  /// Frees what an engine left reserved (it fell back to the host before placing its samples): not held for the
  /// rest of the fit.
  void drop_reserved() {
    for (auto& r : resident_) r.drop_reserved();
  }
  /// Whether every shard's rows are on its device as they are (the reservation copied them): waits for it.
  bool rows_on_devices() {
    if (!rows_copied_) return false;
    if (reserving_.valid()) reserving_.get();
    rows_copied_ = std::all_of(resident_.begin(), resident_.end(), [](const auto& r) { return !r.reserved_rows().empty(); });
    return rows_copied_;
  }
  /// Runs pass(s, device, chunks) over the rows each shard holds on its device, all at once; false (and no more
  /// passes on the devices: the host checks) where a device failed.
  template <class Pass>
  bool on_devices(Pass&& pass) {
    try {
      const std::vector<vulkan::Device*> devices = devices_of(backend_);
      concurrently(resident_.size(), [&](std::size_t s) { pass(s, *devices[s], resident_[s].reserved_rows()); });
      checks_on_device_ = true;
      return true;
    } catch (...) {
      rows_copied_ = false;
      checks_on_device_ = false;
      return false;
    }
  }

  // X and the weights on each device (its shard where there are several): uploaded once for every engine and run.
  std::vector<kernels::ResidentSamples<T>> resident_ =
      std::vector<kernels::ResidentSamples<T>>(std::max<std::size_t>(1, backend_.device_count()));
  // Declared after resident_: a reservation still running when the fit fails ends before resident_ goes.
  std::atomic<bool> enough_reserved_{false};
  std::atomic<bool> abandoned_{false};  // the fit failed: a reservation copying rows stops after its chunk in hand
  bool rows_copied_ = false;            // the reservation copies the rows as they are (once waited for: it did)
  bool checks_on_device_ = false;
  std::future<void> reserving_;
};

}  // namespace detail

/// The k-means fit over `rows` (detail::LocalRows, or the MPI estimator's ranks): fit_kmeans below, and the MPI
/// estimator's fit, are this.
template <class T, class Rows>
KMeansFit<T> fit_kmeans_on(Rows& rows, MatrixView<T> X, const VectorView<T>* sample_weight, const KMeansParams& p,
                           algorithms::NumpyRandomState& random_state) {
  static_assert(is_supported_scalar<T>, "k-means supports float and double");
  using Clock = std::chrono::steady_clock;
  const auto fit_start = Clock::now();
  auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  algorithms::check_kmeans_params(p);
  rows.check_non_empty(X);
  return naming_host_memory("fitting KMeans", X.rows(), X.cols(), sizeof(T), [&]() -> KMeansFit<T> {
    // Device memory for the samples is allocated while the host checks them, where the rows offer it.
    if constexpr (requires { rows.reserve_samples(X, p); }) rows.reserve_samples(X, p);
    const detail::KMeansInputs<T> in(rows, X, sample_weight, p);
    const int k = p.n_clusters;
    // X centred by its mean, in T as scikit-learn does: the engines subtract as they read (no centred copy of X).
    const ShiftedView<T> Xc = in.centred(X);
    Matrix<T> init_c;
    if (p.init_centers) init_c = p.init_centers->template cast<T>().rowwise() - in.mean;
    KMeansFit<T> fit;
    fit.tol_absolute = in.tol_absolute;
    fit.times.checks = seconds_since(fit_start);

    std::optional<algorithms::LloydResult<T>> best;
    for (int run = 0; run < in.n_init; ++run) {
      auto phase = Clock::now();
      const Matrix<T> start = p.init_centers ? init_c : rows.starting_centers(Xc, in.w, p, random_state, in.frame);
      if (p.verbose) verbose_line("Initialization complete");
      fit.times.seeding += seconds_since(phase);
      phase = Clock::now();
      algorithms::LloydResult<T> r = rows.lloyd(Xc, in.w, start, p, in.tol_absolute, in.frame);
      fit.times.lloyd += seconds_since(phase);
      fit.times.setup += r.setup_seconds;
      fit.times.iterations += r.iteration_seconds;
      fit.times.finish += r.finish_seconds;
      if (!best || (r.inertia < best->inertia && !rows.same_clustering(r.labels, best->labels, k))) {
        best = std::move(r);
        fit.best_run = run;
      }
    }

    fit.cluster_centers = best->centers.rowwise() + in.mean;
    fit.distinct_clusters = rows.distinct_labels(best->labels, k);
    if (fit.distinct_clusters < k)
      warn("Number of distinct clusters (" + std::to_string(fit.distinct_clusters) +
           ") found smaller than n_clusters (" + std::to_string(k) + "). Possibly due to duplicate points in X.");
    fit.labels = std::move(best->labels);
    fit.inertia = best->inertia;
    fit.n_iter = best->n_iter;
    fit.n_init = in.n_init;
    fit.uploads = rows.uploads();
    if constexpr (requires { rows.reserved_uploads(); }) {
      fit.reserved_uploads = rows.reserved_uploads();
      fit.times.reserve = rows.reserve_seconds();
      fit.checks_on_device = rows.checks_on_device();
    }
    fit.times.upload = rows.upload_seconds();
    fit.iteration_seconds = best->iteration_seconds;
    fit.step_times = std::move(best->step_times);
    fit.times.total = seconds_since(fit_start);
    return fit;
  });
}

/// Fits k-means as scikit-learn's KMeans.fit does, on `backend`, and returns the model without keeping anything:
/// a failure throws and leaves nothing half-made. `random_state` is numpy's stream the starting centers are drawn
/// from (every run draws in turn); it is advanced as numpy's would be. `sample_weight` null means unit weights.
///
/// @code
///   gpuml::KMeansParams p;
///   p.n_clusters = 127;
///   gpuml::algorithms::NumpyRandomState random(0);  // numpy.random.RandomState(0)
///   const gpuml::KMeansFit<float> fit = gpuml::fit_kmeans<float>(gpuml::default_backend(), X, nullptr, p, random);
///   // fit.cluster_centers, fit.labels, fit.inertia, fit.n_iter
/// @endcode
template <class T, class Policy = kmeans_default_policy>
KMeansFit<T> fit_kmeans(const Backend& backend, MatrixView<T> X, const VectorView<T>* sample_weight,
                        const KMeansParams& p, algorithms::NumpyRandomState& random_state) {
  static_assert(KMeansPolicy<Policy>, "a k-means policy gives a static fixed_tile (see policy/kmeans.hpp)");
  detail::LocalRows<T> rows(backend, Policy::fixed_tile);
  return fit_kmeans_on<T>(rows, X, sample_weight, p, random_state);
}

/// The samples a fit's first run starts from (init "k-means++" or "random"; p.init_centers is ignored), as
/// scikit-learn's KMeans.fit draws them on X less its mean: indices into X, in the order drawn. The stream advances
/// as one run's seeding advances it.
///
/// @code
///   gpuml::algorithms::NumpyRandomState random(42);
///   const std::vector<std::int64_t> ids = gpuml::kmeans_starting_samples<float>(backend, X, nullptr, p, random);
/// @endcode
template <class T, class Policy = kmeans_default_policy>
std::vector<std::int64_t> kmeans_starting_samples(const Backend& backend, MatrixView<T> X,
                                                  const VectorView<T>* sample_weight, KMeansParams p,
                                                  algorithms::NumpyRandomState& random_state) {
  p.init_centers.reset();
  algorithms::check_kmeans_params(p);
  checks::non_empty(X, "X");
  detail::LocalRows<T> rows(backend, Policy::fixed_tile);
  const detail::KMeansInputs<T> in(rows, X, sample_weight, p);
  const ShiftedView<T> Xc = in.centred(X);
  std::vector<std::int64_t> chosen;
  rows.starting_centers(Xc, in.w, p, random_state, in.frame, &chosen);
  return chosen;
}

/// fit_kmeans with the stream numpy.random.RandomState(p.random_state) draws.
template <class T, class Policy = kmeans_default_policy>
KMeansFit<T> fit_kmeans(const Backend& backend, MatrixView<T> X, const VectorView<T>* sample_weight,
                        const KMeansParams& p) {
  algorithms::NumpyRandomState random(p.random_state);
  return fit_kmeans<T, Policy>(backend, X, sample_weight, p, random);
}

}  // namespace gpuml
