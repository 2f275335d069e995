// Distributed KMeans over MPI: every rank holds its own rows (a shard of one data set, in rank order) and runs the
// E-step on them with its own backend (a Vulkan device, or the host); per iteration the k x (d + 1) partial sums
// and weights are added across ranks (MPI_Allreduce in float64), and every rank applies scikit-learn's M-step to
// the same totals, so all ranks hold the same centres, inertia and n_iter, and each the labels of its own rows.
//
// Optional: this header needs MPI (<mpi.h>, e.g. Debian's libopenmpi-dev) and is not part of <gpuml/gpuml.hpp>.
// CMake: link gpuml::mpi (defined when MPI is found).
//
// What a distributed fit returns, against the same rows fitted in one process: with one rank, the same bit for bit;
// with several, the per-cluster sums differ by the rounding of each rank's partial sums (as with several devices,
// algorithms::ShardedLloydEngine), so labels agree except for samples within that rounding of two centres.
//
// Faults: every collective step carries a status word. A rank whose input is bad (another feature count, a
// non-finite value) or whose local work throws reports it at the next collective, and every rank then throws
// gpuml::error naming that rank and its message: the job ends on every rank, it does not hang.
#pragma once

#include <gpuml/gpuml.hpp>

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpuml::mpi {

/// One MPI communicator: rank, size, and the collectives the distributed estimators use, each with a status word.
class Communicator {
 public:
  explicit Communicator(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  MPI_Comm get() const noexcept { return comm_; }

  /// Collective: every rank passes its own problem ("" when it has none); if any rank has one, every rank throws
  /// gpuml::error naming the first failing rank and its message.
  void check(const std::string& problem) const {
    int mine = problem.empty() ? 0 : 1, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm_);
    if (!any) return;
    constexpr int kText = 512;
    std::array<char, kText> text{};
    std::strncpy(text.data(), problem.c_str(), kText - 1);
    std::vector<char> all(static_cast<std::size_t>(kText) * static_cast<std::size_t>(size_));
    MPI_Allgather(text.data(), kText, MPI_CHAR, all.data(), kText, MPI_CHAR, comm_);
    for (int r = 0; r < size_; ++r) {
      const char* m = all.data() + static_cast<std::size_t>(r) * kText;
      if (m[0] != '\0') throw error("rank " + std::to_string(r) + " of " + std::to_string(size_) + ": " + std::string(m));
    }
  }

  /// Collective: runs `work` on this rank, then check()s, so a failure on any rank ends the step on every rank.
  template <class Work>
  void guarded(Work&& work) const {
    std::string problem;
    try {
      work();
    } catch (const std::exception& e) {
      problem = e.what();
      if (problem.empty()) problem = "an exception without a message";
    } catch (...) {
      problem = "an unknown exception";
    }
    check(problem);
  }

  void sum(std::vector<double>& values) const {
    MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, comm_);
  }
  std::int64_t sum(std::int64_t v) const {
    std::int64_t total = 0;
    MPI_Allreduce(&v, &total, 1, MPI_INT64_T, MPI_SUM, comm_);
    return total;
  }
  /// Each rank's value, in rank order.
  std::vector<std::int64_t> gather(std::int64_t v) const {
    std::vector<std::int64_t> all(static_cast<std::size_t>(size_));
    MPI_Allgather(&v, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, comm_);
    return all;
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

namespace detail {

/// The local E-step of one rank as a LloydEngine over all ranks: sums, weights, the changed flag and the inertia
/// are added across ranks; labels are this rank's; empty clusters are relocated to the globally farthest samples.
template <class Local, class T>
class DistributedLloyd {
 public:
  DistributedLloyd(const Communicator& comm, Local& local, MatrixView<T> X, VectorView<T> w, std::int64_t first_row)
      : comm_(comm), local_(local), X_(X), w_(w), first_(first_row) {}

  bool e_step(const Matrix<T>& C, Matrix<T>& sums, Vector<T>& weights) {
    const Eigen::Index k = C.rows(), d = C.cols();
    bool changed = false;
    comm_.guarded([&] { changed = local_.e_step(C, sums, weights); });
    std::vector<double> buffer(static_cast<std::size_t>(k * (d + 1) + 1));
    for (Eigen::Index j = 0; j < k; ++j) {
      for (Eigen::Index f = 0; f < d; ++f) buffer[static_cast<std::size_t>(j * (d + 1) + f)] = double(sums(j, f));
      buffer[static_cast<std::size_t>(j * (d + 1) + d)] = double(weights[j]);
    }
    buffer.back() = changed ? 1.0 : 0.0;
    comm_.sum(buffer);
    for (Eigen::Index j = 0; j < k; ++j) {
      for (Eigen::Index f = 0; f < d; ++f) sums(j, f) = static_cast<T>(buffer[static_cast<std::size_t>(j * (d + 1) + f)]);
      weights[j] = static_cast<T>(buffer[static_cast<std::size_t>(j * (d + 1) + d)]);
    }
    return buffer.back() > 0;
  }

  const Labels& labels() { return local_.labels(); }

  void assign(const Matrix<T>& C) {
    comm_.guarded([&] { local_.assign(C); });
  }

  double inertia(const Matrix<T>& C) {
    std::vector<double> total(1, 0.0);
    comm_.guarded([&] { total[0] = local_.inertia(C); });
    comm_.sum(total);
    return total[0];
  }

  /// scikit-learn's relocation across ranks: the n_empty samples farthest from their old centres, over all ranks
  /// (ties: the higher global index first, as algorithms::relocate_empty_clusters), move to the empty clusters.
  void relocate_empty_clusters(const Matrix<T>& centers_old, Matrix<T>& sums, Vector<T>& weights) {
    const std::int64_t k = centers_old.rows(), d = centers_old.cols();
    std::vector<std::int64_t> empty;
    for (std::int64_t j = 0; j < k; ++j)
      if (weights[j] == T(0)) empty.push_back(j);
    if (empty.empty()) return;
    const auto n_empty = static_cast<std::int64_t>(empty.size());
    // This rank's candidates: its n_empty farthest samples as (distance, global index).
    const Labels& labels = local_.labels();
    const std::int64_t n = X_.rows();
    std::vector<std::pair<double, std::int64_t>> mine;
    for (std::int64_t i = 0; i < n; ++i)
      mine.emplace_back(double(algorithms::sq_dist(X_.data() + i * X_.outerStride(),
                                                   centers_old.data() + std::int64_t{labels[i]} * d, d)),
                        first_ + i);
    auto farther = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second > b.second); };
    const auto keep = std::min<std::int64_t>(n_empty, n);
    std::partial_sort(mine.begin(), mine.begin() + keep, mine.end(), farther);
    std::vector<double> offer(static_cast<std::size_t>(2 * n_empty), -1.0);  // (distance, index) pairs; -1: none
    for (std::int64_t t = 0; t < keep; ++t) {
      offer[static_cast<std::size_t>(2 * t)] = mine[static_cast<std::size_t>(t)].first;
      offer[static_cast<std::size_t>(2 * t + 1)] = double(mine[static_cast<std::size_t>(t)].second);
    }
    std::vector<double> all(offer.size() * static_cast<std::size_t>(comm_.size()));
    MPI_Allgather(offer.data(), static_cast<int>(offer.size()), MPI_DOUBLE, all.data(), static_cast<int>(offer.size()),
                  MPI_DOUBLE, comm_.get());
    std::vector<std::pair<double, std::int64_t>> candidates;
    for (std::size_t c = 0; c + 1 < all.size(); c += 2)
      if (all[c + 1] >= 0) candidates.emplace_back(all[c], static_cast<std::int64_t>(all[c + 1]));
    if (candidates.empty()) return;
    std::sort(candidates.begin(), candidates.end(), farther);
    if (candidates.front().first == 0) return;  // more clusters than distinct points
    const auto moves = std::min<std::int64_t>(n_empty, static_cast<std::int64_t>(candidates.size()));
    // The chosen samples' rows, weights and old labels, from their owners (every other rank adds zeros).
    std::vector<double> chosen(static_cast<std::size_t>(moves * (d + 2)), 0.0);
    for (std::int64_t t = 0; t < moves; ++t) {
      const std::int64_t g = candidates[static_cast<std::size_t>(t)].second;
      if (g < first_ || g >= first_ + n) continue;
      const std::int64_t i = g - first_;
      double* row = chosen.data() + t * (d + 2);
      for (std::int64_t f = 0; f < d; ++f) row[f] = double(X_(i, f));
      row[d] = double(w_[i]);
      row[d + 1] = double(labels[i]);
    }
    comm_.sum(chosen);
    for (std::int64_t t = 0; t < moves; ++t) {
      const double* row = chosen.data() + t * (d + 2);
      const std::int64_t new_id = empty[static_cast<std::size_t>(t)], old_id = static_cast<std::int64_t>(row[d + 1]);
      const T wi = static_cast<T>(row[d]);
      for (std::int64_t f = 0; f < d; ++f) {
        const T x = static_cast<T>(row[f]);
        sums(old_id, f) -= x * wi;
        sums(new_id, f) = x * wi;
      }
      weights[new_id] = wi;
      weights[old_id] -= wi;
    }
  }

 private:
  const Communicator& comm_;
  Local& local_;
  MatrixView<T> X_;
  VectorView<T> w_;
  std::int64_t first_;
};

}  // namespace detail

/// KMeans over the ranks of a communicator. Each rank passes its own rows to fit (shards of one data set in rank
/// order; any sizes, an empty shard included) and gets the same cluster_centers, inertia and n_iter as every other
/// rank, and labels for its own rows. Parameters are KMeansParams; every rank must pass the same ones. Initial
/// centres: an array (init_centers, rank 0's is used). k-means++ and random seeding across ranks are not built yet
/// and are refused with gpuml::unsupported.
template <class T>
class KMeans {
  static_assert(is_supported_scalar<T>, "KMeans supports float and double");

 public:
  explicit KMeans(KMeansParams params, MPI_Comm comm = MPI_COMM_WORLD, Backend backend = default_backend())
      : params_(std::move(params)), comm_(comm), backend_(std::move(backend)) {}

  /// Collective: every rank calls it with its rows (and, optionally, their weights).
  KMeans& fit(MatrixView<T> X) {
    const Vector<T> w = Vector<T>::Ones(X.rows());
    return fit(X, w);
  }

  KMeans& fit(MatrixView<T> X, VectorView<T> sample_weight) {
    const KMeansParams& p = params_;
    const std::int64_t n_local = X.rows(), d_local = X.cols();
    // Shapes and parameters first, on every rank, so that a bad shard ends every rank before any work.
    const auto features = comm_.gather(d_local);
    const auto scalar_bytes = comm_.gather(static_cast<std::int64_t>(sizeof(T)));
    std::string problem;
    for (int r = 0; r < comm_.size(); ++r) {
      if (features[static_cast<std::size_t>(r)] != features[0] && problem.empty())
        problem = "shards disagree on the number of features: rank 0 has " + std::to_string(features[0]) + ", rank " +
                  std::to_string(r) + " has " + std::to_string(features[static_cast<std::size_t>(r)]);
      if (scalar_bytes[static_cast<std::size_t>(r)] != scalar_bytes[0] && problem.empty())
        problem = "shards disagree on the scalar type (float32 against float64)";
    }
    comm_.check(comm_.rank() == 0 ? problem : std::string());
    double weight_sum = 0;
    comm_.guarded([&] {
      algorithms::check_kmeans_params(p);
      if (n_local > 0) checks::data(X, "X");
      checks::same_length(n_local, sample_weight.size(), "sample_weight");
      weight_sum = algorithms::check_sample_weight(sample_weight).sum;
      if (!p.init_centers)
        throw unsupported("distributed KMeans takes initial centres (init_centers); k-means++ and random seeding "
                          "across ranks are not built yet");
    });
    std::vector<double> total_weight{weight_sum};
    comm_.sum(total_weight);
    if (!(total_weight[0] > 0))  // the same on every rank: all of them check
      comm_.check("sample_weight sums to zero; at least one sample needs a positive weight");
    const std::int64_t n = comm_.sum(n_local), d = features[0], k = p.n_clusters;
    const auto first_rows = comm_.gather(n_local);
    std::int64_t first = 0;
    for (int r = 0; r < comm_.rank(); ++r) first += first_rows[static_cast<std::size_t>(r)];
    if (n < k)
      comm_.check("n_samples=" + std::to_string(n) + " should be >= n_clusters=" + std::to_string(k) + ".");

    // Initial centres: rank 0's, the same on every rank.
    std::vector<double> init(static_cast<std::size_t>(k * d), 0.0);
    comm_.guarded([&] {
      if (comm_.rank() != 0) return;
      const Matrix<double>& c = *p.init_centers;
      algorithms::check_init_centers<T>(c, k, d);
      std::copy_n(c.data(), init.size(), init.data());
    });
    MPI_Bcast(init.data(), static_cast<int>(init.size()), MPI_DOUBLE, 0, comm_.get());

    // Mean and tolerance over all rows: each rank's column sums (as one process makes them over its rows), added
    // across ranks in float64; then centring in T as one process does.
    auto summed = [&](const Eigen::RowVectorXd& local) {
      std::vector<double> v(local.data(), local.data() + local.size());
      comm_.sum(v);
      return Eigen::RowVectorXd(Eigen::Map<const Eigen::RowVectorXd>(v.data(), d));
    };
    const Eigen::RowVectorXd mean = summed(algorithms::column_sums(X, nullptr)) / double(n);
    const double tol_absolute =
        p.tol == 0 ? 0.0 : algorithms::absolute_tolerance(summed(algorithms::column_sums(X, &mean)), double(n), p.tol);
    const Eigen::Matrix<T, 1, Eigen::Dynamic> mean_t = mean.template cast<T>();
    const Matrix<T> Xc = X.rowwise() - mean_t;
    Matrix<T> start = Eigen::Map<const Matrix<double>>(init.data(), k, d).template cast<T>().rowwise() - mean_t;

    // Verbose output from rank 0 only (every rank computes it: the inertia it prints is a collective); a
    // cancellation on any rank stops every rank at the same iteration.
    const WarningHandler discard = [](const std::string&) {};
    ScopedThreadMessages quiet_ranks(WarningHandler{}, comm_.rank() == 0 ? WarningHandler{} : discard);
    IterationCallback on_iteration;
    if (p.on_iteration)
      on_iteration = [&](const LloydIteration& it) {
        bool go_on = true;
        comm_.guarded([&] { go_on = p.on_iteration(it); });
        std::vector<double> stop(1, go_on ? 0.0 : 1.0);
        comm_.sum(stop);
        return stop[0] == 0;
      };
    algorithms::LloydResult<T> r;
    auto run = [&](auto& local) {
      detail::DistributedLloyd<std::decay_t<decltype(local)>, T> engine(comm_, local, Xc, sample_weight, first);
      r = algorithms::lloyd_loop<T>(engine, Xc, sample_weight, start, p.max_iter, tol_absolute, p.verbose, on_iteration);
    };
    std::optional<kernels::LloydEngine<T, kmeans_default_policy>> on_device;
    std::optional<host::kmeans_detail::HostLloyd<T>> on_host;
    comm_.guarded([&] {
      const Backend local = n_local > 0 ? backend_ : Backend::host();  // a rank without rows needs no device
      run_on<T>(
          local, "distributed KMeans",
          [&] {
            on_device.emplace(*local.device(), Xc, sample_weight.data(), static_cast<std::uint32_t>(k));
            on_device->reset_labels();
          },
          [&] { on_host.emplace(Xc, sample_weight); });
    });
    if (on_device) run(*on_device);
    else run(*on_host);

    centers_ = r.centers.rowwise() + mean_t;
    labels_ = std::move(r.labels);
    inertia_ = r.inertia;
    n_iter_ = r.n_iter;
    fitted_ = true;
    return *this;
  }

  const Matrix<T>& cluster_centers() const { return require_fitted(), centers_; }
  /// This rank's labels (of the rows it passed to fit).
  const Labels& labels() const { return require_fitted(), labels_; }
  double inertia() const { return require_fitted(), inertia_; }
  int n_iter() const { return require_fitted(), n_iter_; }
  const Communicator& communicator() const noexcept { return comm_; }

 private:
  void require_fitted() const {
    if (!fitted_) throw not_fitted("This KMeans instance is not fitted yet. Call 'fit' with appropriate arguments first.");
  }

  KMeansParams params_;
  Communicator comm_;
  Backend backend_;
  Matrix<T> centers_;
  Labels labels_;
  double inertia_ = 0;
  int n_iter_ = 0;
  bool fitted_ = false;
};

}  // namespace gpuml::mpi
