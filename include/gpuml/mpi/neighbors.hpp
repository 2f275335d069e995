// Distributed nearest neighbours over MPI: every rank holds one part of the database (parts in rank order make the
// global row numbers), searches it on its own backend, and the per-rank k best lists are merged by (value, global
// index), the order the engines themselves use; every rank gets the merged result. Queries come from rank 0.
//
// Optional, like <gpuml/mpi/kmeans.hpp>: needs MPI and is not part of <gpuml/gpuml.hpp>.
//
// What a distributed search returns against one process: each rank's engine selects by its kernel's values and
// then recomputes the selected values exactly, so the merged list can differ from one process's at the k-th place,
// by a neighbour nearer within float rounding (as with several devices, see NearestNeighbors); on the host engine,
// whose selection values are the exact ones, the lists are the same. KNeighborsClassifier and KNeighborsRegressor
// vote and average over those lists as the one-process estimators do.
#pragma once

#include <gpuml/gpuml.hpp>
#include <gpuml/mpi/kmeans.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpuml::mpi {

/// NearestNeighbors over the ranks of a communicator (brute force, scikit-learn's semantics per part).
template <class T>
class NearestNeighbors {
  static_assert(is_supported_scalar<T>, "gpuml supports float and double");

 public:
  explicit NearestNeighbors(NeighborsParams params = {}, MPI_Comm comm = MPI_COMM_WORLD,
                            Backend backend = default_backend())
      : params_(std::move(params)), comm_(comm), local_(searched_params(params_), std::move(backend)) {}

  /// Collective: every rank passes its part of the database (any size, an empty part included).
  NearestNeighbors& fit(MatrixView<T> X_local) {
    const auto features = comm_.gather(X_local.cols());
    std::string problem;
    for (int r = 0; r < comm_.size() && problem.empty(); ++r)
      if (features[static_cast<std::size_t>(r)] != features[0])
        problem = "database parts disagree on the number of features: rank 0 has " + std::to_string(features[0]) +
                  ", rank " + std::to_string(r) + " has " + std::to_string(features[static_cast<std::size_t>(r)]);
    comm_.check(comm_.rank() == 0 ? problem : std::string());
    const auto rows = comm_.gather(X_local.rows());
    first_ = 0;
    for (int r = 0; r < comm_.rank(); ++r) first_ += rows[static_cast<std::size_t>(r)];
    n_ = 0;
    for (auto r : rows) n_ += r;
    d_ = features[0];
    comm_.guarded([&] {
      if (n_ == 0) throw invalid_input("the database is empty on every rank");
      if (X_local.rows() > 0) local_.fit(X_local);
    });
    fitted_ = true;
    return *this;
  }

  /// Collective: rank 0's queries (other ranks' are ignored) against the whole database; every rank returns the
  /// merged k nearest (k = 0: params().n_neighbors), global row numbers, sorted as one process sorts them.
  KnnResult<T> kneighbors(MatrixView<T> queries_rank0, int k = 0) const {
    if (!fitted_) throw not_fitted("This NearestNeighbors instance is not fitted yet; call fit() first");
    if (k == 0) k = params_.n_neighbors;
    // The queries, from rank 0.
    std::int64_t shape[2] = {queries_rank0.rows(), queries_rank0.cols()};
    MPI_Bcast(shape, 2, MPI_INT64_T, 0, comm_.get());
    comm_.check(comm_.rank() == 0 && shape[1] != d_
                    ? "queries have " + std::to_string(shape[1]) + " features, the database " + std::to_string(d_)
                    : std::string());
    comm_.check(k < 1 || k > n_ ? "Expected 1 <= n_neighbors <= n_samples_fit, but n_neighbors = " + std::to_string(k) +
                                      ", n_samples_fit = " + std::to_string(n_)
                                : std::string());
    Matrix<T> queries(shape[0], shape[1]);
    if (comm_.rank() == 0) queries = queries_rank0;
    MPI_Bcast(queries.data(), static_cast<int>(queries.size()), mpi_type<T>(), 0, comm_.get());
    const std::int64_t m = shape[0];

    // This rank's k best (fewer where its part is smaller), as (value, global index) pairs padded to k.
    const Metric metric = parse_metric(params_.metric);
    std::vector<double> mine(static_cast<std::size_t>(m * k * 2), -1.0);
    comm_.guarded([&] {
      const auto local_rows = local_.fitted() ? local_.n_samples_fit() : 0;
      if (local_rows == 0 || m == 0) return;
      const int kk = static_cast<int>(std::min<std::int64_t>(k, local_rows));
      const KnnResult<T> r = local_.kneighbors(queries, kk);
      for (std::int64_t i = 0; i < m; ++i)
        for (int c = 0; c < kk; ++c) {
          mine[static_cast<std::size_t>((i * k + c) * 2)] = double(r.distances(i, c));
          mine[static_cast<std::size_t>((i * k + c) * 2 + 1)] = double(r.indices(i, c) + first_);
        }
    });
    std::vector<double> all(mine.size() * static_cast<std::size_t>(comm_.size()));
    MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()),
                  MPI_DOUBLE, comm_.get());
    // Each rank's list as a part with global row numbers (padding dropped), merged as one process merges shards.
    std::vector<KnnResult<T>> parts(static_cast<std::size_t>(comm_.size()));
    const std::vector<Eigen::Index> first(parts.size(), 0);
    for (int r = 0; r < comm_.size(); ++r) {
      const double* rank_list = all.data() + static_cast<std::size_t>(r) * mine.size();
      int kk = 0;
      while (m > 0 && kk < k && rank_list[static_cast<std::size_t>(kk * 2 + 1)] >= 0) ++kk;
      KnnResult<T>& part = parts[static_cast<std::size_t>(r)];
      part.distances.resize(m, kk);
      part.indices.resize(m, kk);
      for (std::int64_t i = 0; i < m; ++i)
        for (int c = 0; c < kk; ++c) {
          part.distances(i, c) = static_cast<T>(rank_list[static_cast<std::size_t>((i * k + c) * 2)]);
          part.indices(i, c) = static_cast<std::int64_t>(rank_list[static_cast<std::size_t>((i * k + c) * 2 + 1)]);
        }
    }
    return algorithms::merge_parts<T>(parts, first, m, k, metric);
  }

  std::int64_t n_samples_fit() const noexcept { return n_; }
  /// The first global row of this rank's part.
  std::int64_t first_row() const noexcept { return first_; }
  const Communicator& communicator() const noexcept { return comm_; }

 private:
  /// Each rank searches euclidean as squared distances: the merge orders by the values the engines sort by (two
  /// squared distances can share a square root), and the square root comes last, as in the engines' finish.
  static NeighborsParams searched_params(NeighborsParams p) {
    if (algorithms::part_metric(parse_metric(p.metric)) == Metric::sqeuclidean) p.metric = "sqeuclidean";
    return p;
  }

  NeighborsParams params_;
  Communicator comm_;
  gpuml::NearestNeighbors<T> local_;
  std::int64_t first_ = 0, n_ = 0, d_ = 0;
  bool fitted_ = false;
};

namespace detail {

/// For each neighbour in `indices` (global rows), `width` values of its row, written by fill(local_row, out) on the
/// rank that holds it (its `rows` rows from nn.first_row()); every other rank contributes zeros, so the sum over
/// ranks is those values exactly. Collective; every rank gets them all (queries x neighbours x width).
template <class V, class T, class Fill>
std::vector<V> neighbour_rows(const NearestNeighbors<T>& nn, const IndexMatrix& indices, std::int64_t rows,
                              std::int64_t width, Fill&& fill) {
  const std::int64_t first = nn.first_row(), k = indices.cols();
  std::vector<V> values(static_cast<std::size_t>(indices.size() * width), V(0));
  for (Eigen::Index i = 0; i < indices.rows(); ++i)
    for (Eigen::Index c = 0; c < k; ++c)
      if (const std::int64_t g = indices(i, c); g >= first && g < first + rows)
        fill(g - first, values.data() + (i * k + c) * width);
  MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), mpi_type<V>(), MPI_SUM,
                nn.communicator().get());
  return values;
}

}  // namespace detail

/// KNeighborsClassifier over the ranks of a communicator: each rank holds one part of the training rows and their
/// labels; predictions for rank 0's queries come back on every rank. The neighbours are NearestNeighbors' merged
/// lists; their labels are sent by the ranks that hold them; the vote is the one-process classifier's.
template <class T>
class KNeighborsClassifier {
 public:
  explicit KNeighborsClassifier(NeighborsParams params = {}, MPI_Comm comm = MPI_COMM_WORLD,
                                Backend backend = default_backend())
      : params_(std::move(params)), nn_(params_, comm, std::move(backend)) {}

  /// Collective: every rank passes its rows and their labels (any int32 values).
  KNeighborsClassifier& fit(MatrixView<T> X_local, const Labels& y_local) {
    const Communicator& comm = nn_.communicator();
    comm.guarded([&] {
      weights_ = gpuml::detail::parse_weights(params_.weights, parse_metric(params_.metric));
      checks::same_length(X_local.rows(), y_local.size(), "y");
    });
    nn_.fit(X_local);
    // classes(): the sorted union of every rank's distinct labels; this rank's labels as indices into it.
    const Labels mine = gpuml::detail::distinct_labels(y_local);
    const std::vector<std::int32_t> all = comm.concatenate(std::vector<std::int32_t>(mine.data(), mine.data() + mine.size()));
    classes_ = gpuml::detail::distinct_labels(Eigen::Map<const Labels>(all.data(), static_cast<Eigen::Index>(all.size())));
    local_classes_ = gpuml::detail::class_indices(y_local, classes_);
    fitted_ = true;
    return *this;
  }

  /// Collective: normalised (weighted) votes for rank 0's queries, one column per class, on every rank.
  Matrix<double> predict_proba(MatrixView<T> queries_rank0) const {
    return gpuml::detail::vote_shares(votes(queries_rank0));
  }
  /// Collective: the class with the largest vote for each of rank 0's queries (ties: the smallest label).
  Labels predict(MatrixView<T> queries_rank0) const { return gpuml::detail::vote_winners(votes(queries_rank0), classes_); }

  const Labels& classes() const {
    require_fitted();
    return classes_;
  }
  const NearestNeighbors<T>& neighbors() const noexcept { return nn_; }

 private:
  void require_fitted() const {
    if (!fitted_) throw not_fitted("This KNeighborsClassifier instance is not fitted yet; call fit() first");
  }

  Matrix<double> votes(MatrixView<T> queries_rank0) const {
    require_fitted();
    const KnnResult<T> r = nn_.kneighbors(queries_rank0, params_.n_neighbors);
    const std::vector<std::int32_t> cls = detail::neighbour_rows<std::int32_t>(
        nn_, r.indices, static_cast<std::int64_t>(local_classes_.size()), 1,
        [&](std::int64_t row, std::int32_t* out) { *out = local_classes_[static_cast<std::size_t>(row)]; });
    return gpuml::detail::class_votes<T>(r, weights_, classes_.size(), [&](Eigen::Index i, int c) {
      return cls[static_cast<std::size_t>(i * r.indices.cols() + c)];
    });
  }

  NeighborsParams params_;
  NearestNeighbors<T> nn_;
  gpuml::detail::Weights weights_ = gpuml::detail::Weights::uniform;
  Labels classes_;
  std::vector<std::int32_t> local_classes_;
  bool fitted_ = false;
};

/// KNeighborsRegressor over the ranks of a communicator: each rank holds one part of the training rows and their
/// targets (one or several outputs, the same count on every rank); predictions for rank 0's queries come back on
/// every rank, the one-process regressor's (weighted) mean of the neighbours' targets, sent by the ranks that hold
/// them.
template <class T>
class KNeighborsRegressor {
 public:
  explicit KNeighborsRegressor(NeighborsParams params = {}, MPI_Comm comm = MPI_COMM_WORLD,
                               Backend backend = default_backend())
      : params_(std::move(params)), nn_(params_, comm, std::move(backend)) {}

  /// Collective: every rank passes its rows and their targets (rows x outputs).
  KNeighborsRegressor& fit(MatrixView<T> X_local, const Matrix<T>& y_local) {
    const Communicator& comm = nn_.communicator();
    const auto outputs = comm.gather(y_local.cols());
    comm.guarded([&] {
      weights_ = gpuml::detail::parse_weights(params_.weights, parse_metric(params_.metric));
      checks::same_length(X_local.rows(), y_local.rows(), "y");
      if (y_local.rows() > 0) checks::data(y_local, "y");
      for (auto o : outputs)
        if (o != outputs[0])
          throw invalid_input("the ranks' targets disagree on the number of outputs (" + std::to_string(outputs[0]) +
                              " against " + std::to_string(o) + ")");
    });
    nn_.fit(X_local);
    y_ = y_local;
    outputs_ = outputs[0];
    fitted_ = true;
    return *this;
  }

  /// Collective: rank 0's queries x outputs, on every rank.
  Matrix<T> predict(MatrixView<T> queries_rank0) const {
    if (!fitted_) throw not_fitted("This KNeighborsRegressor instance is not fitted yet; call fit() first");
    const KnnResult<T> r = nn_.kneighbors(queries_rank0, params_.n_neighbors);
    const std::int64_t k = r.indices.cols(), o = outputs_;
    const std::vector<T> targets = detail::neighbour_rows<T>(nn_, r.indices, y_.rows(), o, [&](std::int64_t row, T* out) {
      for (std::int64_t f = 0; f < o; ++f) out[f] = y_(row, f);
    });
    return gpuml::detail::neighbor_mean<T>(r, weights_, o, [&](Eigen::Index i, int c) {
      return Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(targets.data() + (i * k + c) * o, o);
    });
  }

  const NearestNeighbors<T>& neighbors() const noexcept { return nn_; }

 private:
  NeighborsParams params_;
  NearestNeighbors<T> nn_;
  gpuml::detail::Weights weights_ = gpuml::detail::Weights::uniform;
  Matrix<T> y_;
  std::int64_t outputs_ = 1;
  bool fitted_ = false;
};

}  // namespace gpuml::mpi
