// Brute-force neighbour estimators with scikit-learn semantics: NearestNeighbors, KNeighborsClassifier and
// KNeighborsRegressor. The numerics live in the engines (host/knn.hpp, host/radius.hpp, kernels/knn.hpp,
// kernels/radius.hpp), reached through detail::run_knn and detail::run_radius; this header holds validation, the
// X=None handling and the voting. NearestNeighbors' searches and fit are defined in neighbors_impl.hpp:
// included at the end here, or in the compiled mode (core/compiled.hpp) only by the library, which instantiates
// NearestNeighbors<float> and NearestNeighbors<double>.
#pragma once

#include <gpuml/algorithms/knn_result.hpp>
#include <gpuml/backend_choice.hpp>
#include <gpuml/core/backend.hpp>
#include <gpuml/core/checks.hpp>
#include <gpuml/core/compiled.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpuml {

namespace kernels {
template <class T>
class KnnDatabase;          // kernels/knn.hpp: the database kept on a device
struct knn_default_policy;  // policy/knn.hpp
}  // namespace kernels

template <class T>
using KnnResult = algorithms::KnnResult<T>;
/// What a search did on a device, and where its time went (KnnResult::stats).
using KnnSearchStats = algorithms::KnnSearchStats;
template <class T>
using RadiusResult = algorithms::RadiusResult<T>;

struct NeighborsParams {
  int n_neighbors = 5;
  std::string metric = "euclidean";  ///< see parse_metric
  std::string weights = "uniform";   ///< or "distance"; used by the classifier and the regressor only
  double radius = 1.0;               ///< radius_neighbors' default radius
  /// Called between parts of each k-NN search (progress bars, cancellation): return false to stop the search,
  /// which then throws gpuml::cancelled.
  ProgressCallback on_progress;
};

namespace detail {

/// Whether a search's values can overflow T: sums over d features of products (or differences) of values up to
/// `max_abs` in magnitude. scikit-learn computes float32 distances in float64 blocks, so such data still gets
/// finite, correct neighbours there.
template <class T>
bool values_may_overflow(double max_abs, Eigen::Index d, Metric metric) {
  const double limit = static_cast<double>(std::numeric_limits<T>::max());
  const double m = max_abs, dd = static_cast<double>(d);
  switch (metric) {
    case Metric::manhattan: return 2 * dd * m > limit;
    case Metric::chebyshev: return 2 * m > limit;
    default: return 4 * dd * m * m > limit;  // |q|^2 + |x|^2 - 2 <q, x>, and the products of cosine / inner product
  }
}

template <class T>
double max_abs(MatrixView<T> X) {
  return X.size() ? static_cast<double>(X.cwiseAbs().maxCoeff()) : 0.0;
}

inline void check_n_neighbors(int k, const char* name = "n_neighbors") {
  if (k < 1) throw invalid_input(std::string(name) + " must be at least 1, got " + std::to_string(k));
}

enum class Weights { uniform, distance };

inline Weights parse_weights(const std::string& w, Metric metric) {
  if (w == "uniform") return Weights::uniform;
  if (w == "distance") {
    if (metric == Metric::inner_product)
      throw invalid_input("weights='distance' needs a distance metric; metric 'inner_product' returns similarities");
    return Weights::distance;
  }
  throw invalid_input("unknown weights '" + w + "'; valid weights are 'uniform' and 'distance'");
}

/// scikit-learn's _get_weights for one row of distances: 1/d, or, when any distance is 0, 1 for the zero
/// distances and 0 for the others.
template <class T>
void neighbor_weights(Weights weights, const T* dist, int k, std::vector<double>& w) {
  w.assign(static_cast<std::size_t>(k), 1.0);
  if (weights == Weights::uniform) return;
  bool any_zero = false;
  for (int c = 0; c < k; ++c) any_zero = any_zero || dist[c] == T(0);
  for (int c = 0; c < k; ++c) {
    const double dc = static_cast<double>(dist[c]);
    w[c] = any_zero ? (dc == 0.0 ? 1.0 : 0.0) : 1.0 / dc;
  }
}

/// The sorted distinct values of y (a classifier's classes()).
inline Labels distinct_labels(const Labels& y) {
  std::vector<std::int32_t> classes(y.data(), y.data() + y.size());
  std::sort(classes.begin(), classes.end());
  classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  return Eigen::Map<const Labels>(classes.data(), static_cast<Eigen::Index>(classes.size()));
}

/// Each label's index in `classes` (sorted, holding every label).
inline std::vector<std::int32_t> class_indices(const Labels& y, const Labels& classes) {
  std::vector<std::int32_t> encoded(static_cast<std::size_t>(y.size()));
  for (Eigen::Index i = 0; i < y.size(); ++i)
    encoded[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(
        std::lower_bound(classes.data(), classes.data() + classes.size(), y[i]) - classes.data());
  return encoded;
}

/// Unnormalised (weighted) votes per class of each query's neighbours; class_of(i, c) is the class index of query
/// i's neighbour c.
template <class T, class ClassOf>
Matrix<double> class_votes(const KnnResult<T>& r, Weights weights, Eigen::Index n_classes, ClassOf&& class_of) {
  const int k = static_cast<int>(r.indices.cols());
  Matrix<double> v = Matrix<double>::Zero(r.indices.rows(), n_classes);
  std::vector<double> w;
  for (Eigen::Index i = 0; i < r.indices.rows(); ++i) {
    neighbor_weights<T>(weights, r.distances.row(i).data(), k, w);
    for (int c = 0; c < k; ++c) v(i, class_of(i, c)) += w[static_cast<std::size_t>(c)];
  }
  return v;
}

/// predict_proba from votes: each row divided by its sum (a row without votes stays zero).
inline Matrix<double> vote_shares(Matrix<double> v) {
  for (Eigen::Index i = 0; i < v.rows(); ++i) {
    double total = v.row(i).sum();
    if (total == 0.0) total = 1.0;
    v.row(i) /= total;
  }
  return v;
}

/// predict from votes: the class with the largest vote; ties go to the smallest class label.
inline Labels vote_winners(const Matrix<double>& v, const Labels& classes) {
  Labels out(v.rows());
  for (Eigen::Index i = 0; i < v.rows(); ++i) {
    Eigen::Index best = 0;
    for (Eigen::Index c = 1; c < v.cols(); ++c)
      if (v(i, c) > v(i, best)) best = c;
    out[i] = classes[best];
  }
  return out;
}

/// The (weighted) mean of each query's neighbours' targets; target(i, c) is query i's neighbour c's target row.
template <class T, class Target>
Matrix<T> neighbor_mean(const KnnResult<T>& r, Weights weights, Eigen::Index outputs, Target&& target) {
  const int k = static_cast<int>(r.indices.cols());
  Matrix<T> out(r.indices.rows(), outputs);
  std::vector<double> w;
  Eigen::Matrix<double, 1, Eigen::Dynamic> acc(outputs);
  for (Eigen::Index i = 0; i < r.indices.rows(); ++i) {
    neighbor_weights<T>(weights, r.distances.row(i).data(), k, w);
    acc.setZero();
    double total = 0;
    for (int c = 0; c < k; ++c) {
      acc += w[static_cast<std::size_t>(c)] * target(i, c).template cast<double>();
      total += w[static_cast<std::size_t>(c)];
    }
    out.row(i) = (acc / total).template cast<T>();
  }
  return out;
}

}  // namespace detail

/// Unsupervised neighbour search (sklearn.neighbors.NearestNeighbors, algorithm="brute"). `Policy`: the k-NN
/// kernel's tile policy (policy/knn.hpp: kernels::knn_default_policy, or a fixed kernels::KnnTile<...>).
template <class T, class Policy = kernels::knn_default_policy>
class NearestNeighbors {
  static_assert(is_supported_scalar<T>, "gpuml supports float and double");

 public:
  explicit NearestNeighbors(NeighborsParams p = {}, Backend backend = default_backend())
      : params_(std::move(p)), backend_(std::move(backend)) {}

  /// Stores X as the database; on a Vulkan backend also keeps it on the device, so searches read it in place
  /// (where it does not fit, or the device cannot run the kernel, searches fall back as run_knn documents).
  /// Validates everything first, so a failed fit leaves an earlier fit untouched.
  NearestNeighbors& fit(MatrixView<T> X);


  /// kneighbors(X=None): the neighbours of every training sample, each sample itself excluded.
  KnnResult<T> kneighbors() const { return kneighbors_self(params_.n_neighbors); }

  /// kneighbors(X, n_neighbors): n_neighbors = 0 means params().n_neighbors. Sorted by distance ascending
  /// (inner product descending for metric "inner_product"); ties of the returned values go to the lower index, so
  /// the first j columns are kneighbors(X, j).
  KnnResult<T> kneighbors(MatrixView<T> X, int n_neighbors = 0) const;


  /// kneighbors(X=None, n_neighbors): as sklearn, queries k+1 neighbours of each training sample and removes the
  /// sample's own index; when duplicates push the sample out of its k+1 neighbours, removes the first column (a
  /// duplicate of the sample at distance zero), as sklearn masks it. Under metric "inner_product" a sample is
  /// rarely its own best match, so one missing from its k+1 was pushed out by more similar rows: the last column
  /// goes instead, leaving the k most similar other rows.
  KnnResult<T> kneighbors_self(int n_neighbors) const;


  /// radius_neighbors(X, radius, sort_results): every training sample within distance `radius` (a negative radius
  /// means params().radius) of each row of X, in index order or sorted by (distance, index). On a Vulkan backend
  /// the device decides every pair clear of the radius by more than float rounding and the host's exact function
  /// the rest, so the result is the host engine's bit for bit (sharded over the backend's devices, each part's
  /// lists concatenated in index order); float32 data whose distances could overflow is scanned in float64 on the
  /// host, as k-NN does.
  RadiusResult<T> radius_neighbors(MatrixView<T> X, double radius = -1, bool sort_results = false) const;


  /// radius_neighbors(X=None, ...): the neighbours of every training sample, the sample itself excluded.
  RadiusResult<T> radius_neighbors_self(double radius = -1, bool sort_results = false) const;


  /// The radius graph of the training set for DBSCAN: every training sample's neighbours within `radius`
  /// INCLUDING the sample itself, in index order, without distances (`distances` is empty). `sorted_feature` >= 0:
  /// the training rows are sorted (ascending) by that feature, and each sample scans only the rows within the
  /// radius's reach in it (the same graph, a fraction of the pairs where the data is spread along that feature).
  RadiusResult<T> radius_graph_self(double radius, Eigen::Index sorted_feature = -1) const;


  /// The distances gpuml's Python estimators return for float32 data (host/float64_distances.hpp: float64 from the
  /// features' differences in a fixed order) from each row i of X to the training samples indices(i, j), e.g.
  /// kneighbors(X).indices. euclidean and sqeuclidean are formed on the device where the database is kept on one
  /// device with float64 arithmetic (bit for bit the host's values; pairs with subnormal values on the host), the
  /// rest on the host threads. float32 databases only.
  ///
  ///   gpuml::NearestNeighbors<float> nn({.n_neighbors = 10});
  ///   nn.fit(X);
  ///   gpuml::Matrix<double> d = nn.float64_distances(Q, nn.kneighbors(Q).indices);
  Matrix<double> float64_distances(MatrixView<T> X, Eigen::Ref<const IndexMatrix> indices) const;

  /// float64_distances from the training samples themselves: row i of `indices` holds sample i's neighbours (e.g.
  /// kneighbors().indices).
  Matrix<double> float64_distances_self(Eigen::Ref<const IndexMatrix> indices) const;

  /// float64_distances of ragged lists, e.g. radius_neighbors(X, ...)'s: the distance of each pair of `lists`
  /// (offsets and indices; its distances are not read), in its order.
  std::vector<double> float64_distances(MatrixView<T> X, const RadiusResult<T>& lists) const;

  /// The same from the training samples themselves, e.g. for radius_neighbors_self's lists.
  std::vector<double> float64_distances_self(const RadiusResult<T>& lists) const;

  /// return_distance=False variants.
  IndexMatrix kneighbors_indices() const { return kneighbors().indices; }
  IndexMatrix kneighbors_indices(MatrixView<T> X, int n_neighbors = 0) const {
    return kneighbors(X, n_neighbors).indices;
  }

  bool fitted() const noexcept { return fitted_; }
  Eigen::Index n_samples_fit() const {
    require_fitted();
    return X_.rows();
  }
  Eigen::Index n_features_in() const {
    require_fitted();
    return X_.cols();
  }
  Metric metric() const {
    require_fitted();
    return metric_;
  }
  const NeighborsParams& params() const noexcept { return params_; }
  const Backend& backend() const noexcept { return backend_; }

 private:
  void require_fitted() const {
    if (!fitted_) throw not_fitted("This NearestNeighbors instance is not fitted yet; call fit() first");
  }

  /// The k nearest database rows of each query: on the backend's one device (or the host), or on every shard at
  /// once (one thread per device) with the shards' lists merged by (returned value, global index). Each engine
  /// returns the first k of its rows in that order, so the merge is one device's list. Sharded searches report no
  /// progress.
  KnnResult<T> search(MatrixView<T> queries, int k) const;


  /// The radius search on the backend's one device (or the host), or on every shard at once (one thread per
  /// device): each shard's lists in index order with global indices, concatenated per query in shard order (so in
  /// index order), then sorted where asked; the same lists as one device's.
  RadiusResult<T> radius_search(MatrixView<T> queries, double radius, bool sort, bool exclude_self, bool distances = true,
                                Eigen::Index sorted_feature = -1) const;


  /// float64_distances of the queries' rows (null: the training samples) to `indices`, or to ragged lists.
  Matrix<double> float64_distances_of(const MatrixView<T>* queries, Eigen::Ref<const IndexMatrix> indices) const;
  std::vector<double> float64_distances_of(const MatrixView<T>* queries, const RadiusResult<T>& lists) const;
  /// Their pairs: query i's are pairs[p] for p from offsets(i) to offsets(i + 1), where offsets(i) is i * k or,
  /// with `list_offsets`, list_offsets[i]; the distances go to out[p]. On the device where it can form them.
  void pair_distances(const MatrixView<T>* queries, Eigen::Index k, const std::int64_t* list_offsets,
                      const std::int64_t* pairs, double* out) const;

  NeighborsParams params_;
  Backend backend_;
  Matrix<T> X_;
  double max_abs_ = 0;  // the database's largest magnitude: whether float32 values may overflow (run_knn)
  std::shared_ptr<const kernels::KnnDatabase<T>> device_X_;  // X_ on the device (Vulkan backends), shared by copies
  struct Shard {
    Eigen::Index first = 0, rows = 0;
    Backend backend = Backend::host();
    std::shared_ptr<const kernels::KnnDatabase<T>> resident;
  };
  std::vector<Shard> shards_;  // several devices: one contiguous part of X_ on each
  Metric metric_ = Metric::euclidean;
  bool fitted_ = false;
};

/// sklearn.neighbors.KNeighborsClassifier (brute force). Labels are any int32 values; classes() is sorted.
/// `Policy`: the k-NN kernel's tile policy, as NearestNeighbors'.
template <class T, class Policy = kernels::knn_default_policy>
class KNeighborsClassifier {
 public:
  explicit KNeighborsClassifier(NeighborsParams p = {}, Backend backend = default_backend())
      : params_(std::move(p)), backend_(std::move(backend)) {}

  KNeighborsClassifier& fit(MatrixView<T> X, const Labels& y) {
    NearestNeighbors<T, Policy> nn(params_, backend_);
    const detail::Weights weights = detail::parse_weights(params_.weights, parse_metric(params_.metric));
    checks::data(X, "X");
    checks::same_length(X.rows(), y.size(), "y");
    Labels classes = detail::distinct_labels(y);
    std::vector<std::int32_t> encoded = detail::class_indices(y, classes);
    nn.fit(X);
    nn_ = std::move(nn);
    weights_ = weights;
    classes_ = std::move(classes);
    encoded_ = std::move(encoded);
    return *this;
  }

  /// Normalised (weighted) votes, one column per class in classes() order.
  Matrix<double> predict_proba(MatrixView<T> X) const { return detail::vote_shares(votes(X)); }

  /// The class with the largest (weighted) vote; ties go to the smallest class label.
  Labels predict(MatrixView<T> X) const { return detail::vote_winners(votes(X), classes_); }

  const Labels& classes() const {
    require_fitted();
    return classes_;
  }
  const NearestNeighbors<T, Policy>& neighbors() const noexcept { return nn_; }
  const NeighborsParams& params() const noexcept { return params_; }

 private:
  void require_fitted() const {
    if (!nn_.fitted()) throw not_fitted("This KNeighborsClassifier instance is not fitted yet; call fit() first");
  }

  /// Unnormalised (weighted) votes per class.
  Matrix<double> votes(MatrixView<T> X) const {
    require_fitted();
    const KnnResult<T> r = nn_.kneighbors(X, params_.n_neighbors);
    return detail::class_votes<T>(r, weights_, classes_.size(), [&](Eigen::Index i, int c) {
      return encoded_[static_cast<std::size_t>(r.indices(i, c))];
    });
  }

  NeighborsParams params_;
  Backend backend_;
  NearestNeighbors<T, Policy> nn_{params_, backend_};
  detail::Weights weights_ = detail::Weights::uniform;
  Labels classes_;
  std::vector<std::int32_t> encoded_;
};

/// sklearn.neighbors.KNeighborsRegressor (brute force): mean or inverse-distance weighted mean of the
/// neighbours' targets, for one or several outputs.
/// `Policy`: the k-NN kernel's tile policy, as NearestNeighbors'.
template <class T, class Policy = kernels::knn_default_policy>
class KNeighborsRegressor {
 public:
  explicit KNeighborsRegressor(NeighborsParams p = {}, Backend backend = default_backend())
      : params_(std::move(p)), backend_(std::move(backend)) {}

  KNeighborsRegressor& fit(MatrixView<T> X, const Matrix<T>& y) {
    NearestNeighbors<T, Policy> nn(params_, backend_);
    const detail::Weights weights = detail::parse_weights(params_.weights, parse_metric(params_.metric));
    checks::data(X, "X");
    checks::data(y, "y");
    checks::same_length(X.rows(), y.rows(), "y");
    Matrix<T> y_copy = y;
    nn.fit(X);
    nn_ = std::move(nn);
    weights_ = weights;
    y_.swap(y_copy);
    return *this;
  }
  KNeighborsRegressor& fit(MatrixView<T> X, const Vector<T>& y) {
    const Matrix<T> y2 = Eigen::Map<const Matrix<T>>(y.data(), y.size(), 1);
    return fit(X, y2);
  }

  /// n_queries x n_outputs (one column for a single output).
  Matrix<T> predict(MatrixView<T> X) const {
    require_fitted();
    const KnnResult<T> r = nn_.kneighbors(X, params_.n_neighbors);
    return detail::neighbor_mean<T>(r, weights_, y_.cols(), [&](Eigen::Index i, int c) { return y_.row(r.indices(i, c)); });
  }

  const NearestNeighbors<T, Policy>& neighbors() const noexcept { return nn_; }
  const NeighborsParams& params() const noexcept { return params_; }

 private:
  void require_fitted() const {
    if (!nn_.fitted()) throw not_fitted("This KNeighborsRegressor instance is not fitted yet; call fit() first");
  }

  NeighborsParams params_;
  Backend backend_;
  NearestNeighbors<T, Policy> nn_{params_, backend_};
  detail::Weights weights_ = detail::Weights::uniform;
  Matrix<T> y_;
};

}  // namespace gpuml

#if GPUML_DEFINES_LIBRARY
#include <gpuml/estimators/neighbors_impl.hpp>
#endif
#if defined(GPUML_COMPILED)
namespace gpuml {
extern template class NearestNeighbors<float>;
extern template class NearestNeighbors<double>;
}  // namespace gpuml
#endif
