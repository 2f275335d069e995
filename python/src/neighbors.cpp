// gpuml._gpuml's nearest-neighbour database (gpuml::NearestNeighbors), kept on the device between searches, and
// what the Python estimators do with its neighbours: scikit-learn's float64 distances of float32 data, its weights,
// votes and means, computed on the host threads without the GIL and in scikit-learn's (numpy's) order of
// operations, so the results are the ones scikit-learn's own code gives from the same neighbours.
#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace gpuml_python {
namespace {

using Index = std::int64_t;
using IndexIn = nb::ndarray<const std::int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using LabelsIn = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using IndexMatrix = gpuml::IndexMatrix;

// ---- Distances of chosen neighbours ----------------------------------------------------------------------------

/// Eight partial sums, lane j taking the features f = j (mod 8), combined in a fixed tree: the order does not
/// depend on the instruction set, and the lanes let compilers vectorise the loop without reassociating it.
constexpr int kLanes = 8;

inline double lane_sum(const double (&s)[kLanes]) {
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/// Brings a database row into cache before it is read: the neighbours' rows are scattered over a database that
/// is usually far larger than the caches.
inline void prefetch_row(const float* row, Index d) {
#if defined(__GNUC__) || defined(__clang__)
  for (Index f = 0; f < d; f += 64 / Index(sizeof(float))) __builtin_prefetch(row + f);
#else
  (void)row;
  (void)d;
#endif
}

/// The float64 distance between a query q (float32 values widened to double) and database row x, from
/// differences: what scikit-learn returns for float32 data. `q_squared_norm` is used by cosine only.
inline double exact_distance(const double* q, const float* x, Index d, gpuml::Metric metric, double q_squared_norm) {
  double s[kLanes] = {}, t[kLanes] = {};
  const Index body = d - d % kLanes;
  double tail = 0, tail_t = 0;
  switch (metric) {
    case gpuml::Metric::euclidean:
    case gpuml::Metric::sqeuclidean: {
      for (Index f = 0; f < body; f += kLanes)
        for (int j = 0; j < kLanes; ++j) {
          const double e = double(x[f + j]) - q[f + j];
          s[j] += e * e;
        }
      for (Index f = body; f < d; ++f) {
        const double e = double(x[f]) - q[f];
        tail += e * e;
      }
      const double squared = lane_sum(s) + tail;
      return metric == gpuml::Metric::euclidean ? std::sqrt(squared) : squared;
    }
    case gpuml::Metric::manhattan: {
      for (Index f = 0; f < body; f += kLanes)
        for (int j = 0; j < kLanes; ++j) s[j] += std::fabs(double(x[f + j]) - q[f + j]);
      for (Index f = body; f < d; ++f) tail += std::fabs(double(x[f]) - q[f]);
      return lane_sum(s) + tail;
    }
    case gpuml::Metric::chebyshev: {
      double m = 0;
      for (Index f = 0; f < d; ++f) m = std::max(m, std::fabs(double(x[f]) - q[f]));
      return m;
    }
    case gpuml::Metric::cosine: {
      for (Index f = 0; f < body; f += kLanes)
        for (int j = 0; j < kLanes; ++j) {
          const double v = x[f + j];
          s[j] += q[f + j] * v;
          t[j] += v * v;
        }
      for (Index f = body; f < d; ++f) {
        const double v = x[f];
        tail += q[f] * v;
        tail_t += v * v;
      }
      // scikit-learn: 1 - <q, x> / (|q| |x|), and a zero vector at distance 1 from everything.
      const double norms = std::sqrt(q_squared_norm) * std::sqrt(lane_sum(t) + tail_t);
      return norms == 0 ? 1.0 : 1.0 - (lane_sum(s) + tail) / norms;
    }
    case gpuml::Metric::inner_product: break;
  }
  throw gpuml::invalid_input("exact distances: no float64 recomputation for metric " +
                             std::string(gpuml::metric_name(metric)));
}

/// out[p] for the database rows indices[p], p in [offsets(i), offsets(i + 1)), the neighbours of query i: float64
/// distances from differences (cosine: their float32 rounding, as scikit-learn computes cosine distances of
/// float32 data in float32). Each value depends on its pair alone, so the thread count changes nothing.
template <class Out, class Offsets>
void exact_distances(gpuml::MatrixView<float> queries, gpuml::MatrixView<float> database, const std::int64_t* indices,
                     const Offsets& offsets, gpuml::Metric metric, Out* out) {
  const Index d = database.cols();
  gpuml::parallel_chunks(queries.rows(), 64, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
    std::vector<double> q(static_cast<std::size_t>(d));
    for (Index i = begin; i < end; ++i) {
      const float* query = queries.row(i).data();
      double lanes[kLanes] = {}, tail = 0;
      for (Index f = 0; f < d; ++f) q[f] = query[f];
      if (metric == gpuml::Metric::cosine) {
        const Index body = d - d % kLanes;
        for (Index f = 0; f < body; f += kLanes)
          for (int j = 0; j < kLanes; ++j) lanes[j] += q[f + j] * q[f + j];
        for (Index f = body; f < d; ++f) tail += q[f] * q[f];
      }
      const double q_squared_norm = lane_sum(lanes) + tail;
      const Index first = offsets(i), last = offsets(i + 1);
      constexpr Index kAhead = 2;
      for (Index p = first; p < std::min(last, first + kAhead); ++p) prefetch_row(database.row(indices[p]).data(), d);
      for (Index p = first; p < last; ++p) {
        if (p + kAhead < last) prefetch_row(database.row(indices[p + kAhead]).data(), d);
        out[p] = static_cast<Out>(exact_distance(q.data(), database.row(indices[p]).data(), d, metric, q_squared_norm));
      }
    }
  });
}

template <class S>
using Column = Eigen::Matrix<S, Eigen::Dynamic, 1>;

/// scikit-learn's distances of float32 data for the chosen neighbours, computed without the GIL: float64, or
/// float32 for cosine (scikit-learn computes cosine distances of float32 data in float32). Storage is gpuml::Matrix
/// (n_queries x k) or Column (ragged lists, one value per pair).
template <template <class> class Storage>
struct ExactDistances {
  bool narrow = false;
  Storage<double> float64;
  Storage<float> float32;

  template <class Offsets>
  void compute(gpuml::MatrixView<float> queries, gpuml::MatrixView<float> database, const std::int64_t* indices,
               Index rows, Index cols, const Offsets& offsets, gpuml::Metric metric) {
    narrow = metric == gpuml::Metric::cosine;
    if (narrow) {
      float32.resize(rows, cols);
      exact_distances<float>(queries, database, indices, offsets, metric, float32.data());
    } else {
      float64.resize(rows, cols);
      exact_distances<double>(queries, database, indices, offsets, metric, float64.data());
    }
  }

  nb::object to_python() && {
    return narrow ? nb::cast(to_numpy(std::move(float32))) : nb::cast(to_numpy(std::move(float64)));
  }
};

void check_indices(const std::int64_t* indices, std::size_t count, Index bound, const char* what) {
  for (std::size_t p = 0; p < count; ++p)
    if (indices[p] < 0 || indices[p] >= bound)
      throw gpuml::invalid_input(std::string(what) + " holds " + std::to_string(indices[p]) + ", outside [0, " +
                                 std::to_string(bound) + ")");
}

// ---- The database ----------------------------------------------------------------------------------------------

/// A fitted nearest-neighbour database (gpuml::NearestNeighbors): kept on the device between searches. Keeps the
/// caller's array too: float32 searches read the chosen neighbours' rows from it to return float64 distances.
template <class T>
class Neighbors {
 public:
  Neighbors(In2<T> X, const std::string& metric, const std::string& device) : X_(X), metric_(gpuml::parse_metric(metric)) {
    std::vector<std::string> warnings;
    released(warnings, [&] {
      gpuml::NeighborsParams params{1, metric};
      params.on_progress = no_pending_signal_progress;
      nn_ = std::make_unique<gpuml::NearestNeighbors<T>>(params, backend_for(device));
      nn_->fit(view(X));
      return 0;
    });
    warnings_ = std::move(warnings);
  }

  /// (distances, indices, warnings) of the k nearest database rows of each query; queries = None searches the
  /// database itself, each row excluded from its own neighbours. distances are scikit-learn's (for float32 data
  /// recomputed in float64 from differences, float32 for cosine), or None without return_distance.
  nb::tuple kneighbors(std::optional<In2<T>> queries, int k, bool return_distance) const {
    std::vector<std::string> warnings;
    ExactDistances<gpuml::Matrix> exact;
    auto r = released(warnings, [&] {
      auto found = queries ? nn_->kneighbors(view(*queries), k) : nn_->kneighbors_self(k);
      if constexpr (std::is_same_v<T, float>) {
        if (return_distance)
          exact.compute(queries ? view(*queries) : view(X_), view(X_), found.indices.data(), found.indices.rows(),
                        found.indices.cols(), [k](Index i) { return i * k; }, metric_);
      }
      return found;
    });
    nb::object distances = nb::none();
    if (return_distance) {
      if constexpr (std::is_same_v<T, float>) distances = std::move(exact).to_python();
      else distances = nb::cast(to_numpy(std::move(r.distances)));
    }
    return nb::make_tuple(distances, to_numpy(std::move(r.indices)), warnings);
  }

  /// scikit-learn's distances from each query (None: the database's own rows) to the database rows `indices`
  /// (n_queries x k) name, as kneighbors returns them for float32 data.
  nb::object distances_to(std::optional<In2<T>> queries, IndexIn indices) const {
    const auto queries_view = queries ? view(*queries) : view(X_);
    if (Index(indices.shape(0)) != queries_view.rows())
      throw gpuml::invalid_input("indices have " + std::to_string(indices.shape(0)) + " rows for " +
                                 std::to_string(queries_view.rows()) + " queries");
    if (queries_view.cols() != Index(X_.shape(1)))
      throw gpuml::invalid_input("queries have " + std::to_string(queries_view.cols()) + " features, the database " +
                                 std::to_string(X_.shape(1)));
    check_indices(indices.data(), indices.size(), Index(X_.shape(0)), "indices");
    if constexpr (std::is_same_v<T, float>) {
      const Index k = Index(indices.shape(1));
      ExactDistances<gpuml::Matrix> exact;
      std::vector<std::string> warnings;
      released(warnings, [&] {
        exact.compute(queries_view, view(X_), indices.data(), Index(indices.shape(0)), k,
                      [k](Index i) { return i * k; }, metric_);
        return 0;
      });
      return std::move(exact).to_python();
    } else {
      throw gpuml::invalid_input("distances_to: float64 databases return their search's distances");
    }
  }

  /// (offsets, indices, distances, warnings): the database rows within `radius` of each query, as compressed rows;
  /// queries = None searches the database itself, each row left out of its own list. distances are the search's,
  /// or with `exact` (float32 data) scikit-learn's, as kneighbors returns them.
  nb::tuple radius_neighbors(std::optional<In2<T>> queries, double radius, bool sort, bool exact) const {
    std::vector<std::string> warnings;
    ExactDistances<Column> exact_distances;
    auto r = released(warnings, [&] {
      auto found = queries ? nn_->radius_neighbors(view(*queries), radius, sort) : nn_->radius_neighbors_self(radius, sort);
      if constexpr (std::is_same_v<T, float>) {
        if (exact)
          exact_distances.compute(queries ? view(*queries) : view(X_), view(X_), found.indices.data(),
                                  Index(found.indices.size()), 1,
                                  [&found](Index i) { return found.offsets[static_cast<std::size_t>(i)]; }, metric_);
      }
      return found;
    });
    using I64 = Column<std::int64_t>;
    nb::object distances;
    if (std::is_same_v<T, float> && exact)
      distances = std::move(exact_distances).to_python();
    else
      distances = nb::cast(to_numpy(Column<T>(Eigen::Map<const Column<T>>(r.distances.data(), Eigen::Index(r.distances.size())))));
    return nb::make_tuple(to_numpy(I64(Eigen::Map<const I64>(r.offsets.data(), Eigen::Index(r.offsets.size())))),
                          to_numpy(I64(Eigen::Map<const I64>(r.indices.data(), Eigen::Index(r.indices.size())))),
                          distances, warnings);
  }

  std::vector<std::string> fit_warnings() const { return warnings_; }
  std::string device() const { return backend_name(nn_->backend()); }

 private:
  In2<T> X_;  // the caller's database, which float32 searches read their neighbours' float64 distances from
  gpuml::Metric metric_;
  std::unique_ptr<gpuml::NearestNeighbors<T>> nn_;
  std::vector<std::string> warnings_;
};

template <class T>
void bind_database(nb::module_& m, const char* suffix) {
  nb::class_<Neighbors<T>>(m, (std::string("Neighbors_") + suffix).c_str())
      .def(nb::init<In2<T>, const std::string&, const std::string&>(), nb::arg("X"), nb::arg("metric"),
           nb::arg("device"))
      .def("kneighbors", &Neighbors<T>::kneighbors, nb::arg("queries").none(), nb::arg("k"),
           nb::arg("return_distance") = true)
      .def("distances_to", &Neighbors<T>::distances_to, nb::arg("queries").none(), nb::arg("indices"))
      .def("radius_neighbors", &Neighbors<T>::radius_neighbors, nb::arg("queries").none(), nb::arg("radius"),
           nb::arg("sort"), nb::arg("exact") = false)
      .def("fit_warnings", &Neighbors<T>::fit_warnings)
      .def_prop_ro("device", &Neighbors<T>::device);
}

// ---- What the estimators do with the neighbours ---------------------------------------------------------------

/// numpy's pairwise summation of value(0), ..., value(n - 1) in Acc: the order of np.sum along a contiguous axis
/// (numpy's pairwise_sum: below 8 values in turn, up to 128 in eight interleaved partial sums, above that the two
/// halves, split at a multiple of 8), so sums here equal the ones scikit-learn's numpy code computes.
template <class Acc, class Value>
Acc numpy_pairwise_sum(Index n, const Value& value, Index first = 0) {
  if (n < 8) {
    Acc res = 0;
    for (Index i = 0; i < n; ++i) res += value(first + i);
    return res;
  }
  if (n <= 128) {
    Acc r[8];
    for (int j = 0; j < 8; ++j) r[j] = value(first + j);
    Index i = 8;
    for (; i < n - n % 8; i += 8)
      for (int j = 0; j < 8; ++j) r[j] += value(first + i + j);
    Acc res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += value(first + i);
    return res;
  }
  Index half = n / 2;
  half -= half % 8;
  return numpy_pairwise_sum<Acc>(half, value, first) + numpy_pairwise_sum<Acc>(n - half, value, first + half);
}

/// np.sum(row, axis=1) of a C-contiguous 2-D array: the reduction starts from 0 and adds the pairwise sum.
template <class Acc, class Value>
Acc numpy_row_sum(Index n, const Value& value) {
  return Acc(0) + numpy_pairwise_sum<Acc>(n, value);
}

template <class W>
using Weights = nb::ndarray<const W, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

void check_neighbours(const IndexIn& indices, const LabelsIn& labels, Index n_classes) {
  if (n_classes < 1) throw gpuml::invalid_input("n_classes must be at least 1");
  check_indices(indices.data(), indices.size(), Index(labels.shape(0)), "indices");
  check_indices(labels.data(), labels.size(), n_classes, "labels");
}

template <class W>
void check_weights(const IndexIn& indices, const std::optional<Weights<W>>& weights) {
  if (weights && (weights->shape(0) != indices.shape(0) || weights->shape(1) != indices.shape(1)))
    throw gpuml::invalid_input("weights and indices differ in shape");
}

/// scikit-learn's _get_weights(dist, "distance"): 1 / dist in the distances' precision; a row holding a zero
/// distance (an infinite inverse) weighs its infinite entries 1 and the others 0.
template <class W>
nb::tuple distance_weights(Weights<W> distances) {
  std::vector<std::string> warnings;
  const Index n = Index(distances.shape(0)), k = Index(distances.shape(1));
  auto w = released(warnings, [&] {
    gpuml::Matrix<W> out(n, k);
    gpuml::parallel_chunks(n, 1024, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
      for (Index i = begin; i < end; ++i) {
        bool any_infinite = false;
        for (Index c = 0; c < k; ++c) {
          out(i, c) = W(1) / distances.data()[i * k + c];
          any_infinite = any_infinite || std::isinf(out(i, c));
        }
        if (any_infinite)
          for (Index c = 0; c < k; ++c) out(i, c) = std::isinf(out(i, c)) ? W(1) : W(0);
      }
    });
    return out;
  });
  return nb::make_tuple(to_numpy(std::move(w)), warnings);
}

/// The unnormalised votes of scikit-learn's KNeighborsClassifier.predict_proba: per query, for each neighbour in
/// order, its weight (1 without weights) added to its class's float64 total.
template <class W>
nb::tuple class_votes(IndexIn indices, LabelsIn labels, Index n_classes, std::optional<Weights<W>> weights) {
  check_neighbours(indices, labels, n_classes);
  check_weights(indices, weights);
  std::vector<std::string> warnings;
  const Index n = Index(indices.shape(0)), k = Index(indices.shape(1));
  const W* w = weights ? weights->data() : nullptr;
  auto votes = released(warnings, [&] {
    gpuml::Matrix<double> v = gpuml::Matrix<double>::Zero(n, n_classes);
    gpuml::parallel_chunks(n, 1024, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
      for (Index i = begin; i < end; ++i)
        for (Index c = 0; c < k; ++c)
          v(i, labels.data()[indices.data()[i * k + c]]) += w ? static_cast<double>(w[i * k + c]) : 1.0;
    });
    return v;
  });
  return nb::make_tuple(to_numpy(std::move(votes)), warnings);
}

/// scikit-learn's weighted_mode(labels[indices], weights, axis=1)'s modes: per query, each class's total is
/// np.sum over the row of weights with the other classes' entries zeroed (numpy's pairwise order); classes are
/// visited in ascending order and a class wins only with a total above the best so far (which starts at 0 for
/// class 0 and, as np.maximum, stays NaN once NaN).
template <class W>
nb::tuple weighted_modes(IndexIn indices, LabelsIn labels, Index n_classes, Weights<W> weights) {
  check_neighbours(indices, labels, n_classes);
  check_weights(indices, std::optional<Weights<W>>(weights));
  std::vector<std::string> warnings;
  const Index n = Index(indices.shape(0)), k = Index(indices.shape(1));
  auto modes = released(warnings, [&] {
    Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1> out(n);
    gpuml::parallel_chunks(n, 256, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
      std::vector<std::int64_t> row(static_cast<std::size_t>(k)), present;
      for (Index i = begin; i < end; ++i) {
        for (Index c = 0; c < k; ++c) row[c] = labels.data()[indices.data()[i * k + c]];
        present.assign(row.begin(), row.end());
        std::sort(present.begin(), present.end());
        present.erase(std::unique(present.begin(), present.end()), present.end());
        const W* w = weights.data() + i * k;
        std::int64_t mode = 0;
        double best = 0;
        for (const std::int64_t label : present) {
          const double total = numpy_row_sum<double>(k, [&](Index c) { return row[c] == label ? double(w[c]) : 0.0; });
          if (total > best) mode = label;
          best = std::isnan(total) || std::isnan(best) ? std::numeric_limits<double>::quiet_NaN() : std::max(total, best);
        }
        out[i] = mode;
      }
    });
    return out;
  });
  return nb::make_tuple(to_numpy(std::move(modes)), warnings);
}

/// scikit-learn's KNeighborsRegressor.predict from the neighbours' float64 targets y (n_samples x n_outputs).
/// Without weights np.mean(y[indices], axis=1): the sum of each column over the neighbours, pairwise for one output
/// (a contiguous axis to numpy) and in neighbour order for several, divided by k. With weights, per output
/// np.sum(y[indices, j] * weights, axis=1) / np.sum(weights, axis=1), each sum pairwise, the denominator in the
/// weights' precision.
template <class W>
nb::tuple neighbour_means(IndexIn indices, nb::ndarray<const double, nb::ndim<2>, nb::c_contig, nb::device::cpu> y,
                          std::optional<Weights<W>> weights) {
  check_indices(indices.data(), indices.size(), Index(y.shape(0)), "indices");
  check_weights(indices, weights);
  std::vector<std::string> warnings;
  const Index n = Index(indices.shape(0)), k = Index(indices.shape(1)), outputs = Index(y.shape(1));
  const std::int64_t* ind = indices.data();
  const double* targets = y.data();
  auto means = released(warnings, [&] {
    gpuml::Matrix<double> out(n, outputs);
    gpuml::parallel_chunks(n, 512, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
      for (Index i = begin; i < end; ++i) {
        const std::int64_t* row = ind + i * k;
        if (!weights) {
          for (Index j = 0; j < outputs; ++j) {
            const auto value = [&](Index c) { return targets[row[c] * outputs + j]; };
            double sum;
            if (outputs == 1) {
              sum = numpy_row_sum<double>(k, value);
            } else {
              sum = 0;
              for (Index c = 0; c < k; ++c) sum += value(c);
            }
            out(i, j) = sum / double(k);
          }
        } else {
          const W* w = weights->data() + i * k;
          const W denominator = numpy_row_sum<W>(k, [&](Index c) { return w[c]; });
          for (Index j = 0; j < outputs; ++j)
            out(i, j) = numpy_row_sum<double>(k, [&](Index c) { return targets[row[c] * outputs + j] * double(w[c]); }) /
                        double(denominator);
        }
      }
    });
    return out;
  });
  return nb::make_tuple(to_numpy(std::move(means)), warnings);
}

template <class W>
void bind_weighted(nb::module_& m) {
  m.def("distance_weights", &distance_weights<W>, nb::arg("distances"));
  m.def("class_votes", &class_votes<W>, nb::arg("indices"), nb::arg("labels"), nb::arg("n_classes"),
        nb::arg("weights").none());
  m.def("weighted_modes", &weighted_modes<W>, nb::arg("indices"), nb::arg("labels"), nb::arg("n_classes"),
        nb::arg("weights"));
  m.def("neighbour_means", &neighbour_means<W>, nb::arg("indices"), nb::arg("y"), nb::arg("weights").none());
}

}  // namespace

void bind_neighbors(nb::module_& m) {
  bind_database<float>(m, "float32");
  bind_database<double>(m, "float64");
  // float64 first: without weights (None) the first overload answers, and float64 is the votes' precision.
  bind_weighted<double>(m);
  bind_weighted<float>(m);
}

}  // namespace gpuml_python
