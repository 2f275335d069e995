// gpuml._gpuml's nearest-neighbour database (gpuml::NearestNeighbors), kept on the device between searches, and
// what the Python estimators do with its neighbours: scikit-learn's float64 distances of float32 data, its weights,
// votes and means, computed on the host threads without the GIL and in scikit-learn's (numpy's) order of
// operations, so the results are the ones scikit-learn's own code gives from the same neighbours.
#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace gpuml_python {
namespace {

using Index = std::int64_t;
using IndexIn = nb::ndarray<const std::int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using LabelsIn = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

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
      gpuml::host::float64_distances<float>(queries, database, indices, offsets, metric, float32.data());
    } else {
      float64.resize(rows, cols);
      gpuml::host::float64_distances<double>(queries, database, indices, offsets, metric, float64.data());
    }
  }

  nb::object to_python() && {
    return narrow ? nb::cast(to_numpy(std::move(float32))) : nb::cast(to_numpy(std::move(float64)));
  }
};

/// Puts each row of (distances, indices) in (distance, index) order where it is not, on the host threads.
void sort_rows(gpuml::Matrix<double>& distances, gpuml::IndexMatrix& indices) {
  const Index k = indices.cols();
  gpuml::parallel_chunks(indices.rows(), 256, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
    std::vector<std::pair<double, std::int64_t>> row;
    for (Index i = begin; i < end; ++i) {
      bool sorted = true;
      for (Index j = 1; j < k && sorted; ++j)
        sorted = std::pair(distances(i, j - 1), indices(i, j - 1)) < std::pair(distances(i, j), indices(i, j));
      if (sorted) continue;
      row.clear();
      for (Index j = 0; j < k; ++j) row.emplace_back(distances(i, j), indices(i, j));
      std::sort(row.begin(), row.end());
      for (Index j = 0; j < k; ++j) std::tie(distances(i, j), indices(i, j)) = row[std::size_t(j)];
    }
  });
}

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
        if (return_distance) {
          distances_of(queries, found.indices, exact);
          // The search ranked float32 values; two neighbours within float32 rounding of each other can come back
          // against the order of their float64 distances (cosine: the Python side recomputes and orders them).
          if (!exact.narrow) sort_rows(exact.float64, found.indices);
        }
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

  /// scikit-learn's distances from each query (None: the database's own rows) to the database rows named by
  /// `indices` (n_queries x k), as kneighbors returns them for float32 data.
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
      ExactDistances<gpuml::Matrix> exact;
      std::vector<std::string> warnings;
      released(warnings, [&] {
        distances_of(queries, Eigen::Map<const gpuml::IndexMatrix>(indices.data(), Index(indices.shape(0)),
                                                                    Index(indices.shape(1))),
                     exact);
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
        if (exact && metric_ == gpuml::Metric::cosine) {
          exact_distances.compute(queries ? view(*queries) : view(X_), view(X_), found.indices.data(),
                                  Index(found.indices.size()), 1,
                                  [&found](Index i) { return found.offsets[static_cast<std::size_t>(i)]; }, metric_);
        } else if (exact) {  // the estimator's float64_distances: on the device where it can
          const std::vector<double> d =
              queries ? nn_->float64_distances(view(*queries), found) : nn_->float64_distances_self(found);
          exact_distances.narrow = false;
          exact_distances.float64 = Eigen::Map<const Column<double>>(d.data(), Eigen::Index(d.size()));
        }
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

  /// scikit-learn's distances of float32 data (ExactDistances) from each query (None: the database's rows) to the
  /// database rows `indices` (a row per query): the estimator's float64_distances (on the device where it can), or
  /// cosine's float32 values on the host.
  void distances_of(const std::optional<In2<T>>& queries, Eigen::Ref<const gpuml::IndexMatrix> indices,
                    ExactDistances<gpuml::Matrix>& exact) const {
    if (metric_ == gpuml::Metric::cosine) {
      const Index k = indices.cols();
      const gpuml::IndexMatrix dense = indices;
      exact.compute(queries ? view(*queries) : view(X_), view(X_), dense.data(), indices.rows(), k,
                    [k](Index i) { return i * k; }, metric_);
      return;
    }
    exact.narrow = false;
    exact.float64 = queries ? nn_->float64_distances(view(*queries), indices) : nn_->float64_distances_self(indices);
  }
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

/// numpy's pairwise summation of a[0], ..., a[n - 1] in Acc: the order of np.sum along a contiguous axis (numpy's
/// pairwise_sum: below 8 values in turn, up to 128 in eight interleaved partial sums, above that the two halves,
/// split at a multiple of 8), so sums here equal the ones scikit-learn's numpy code computes.
template <class Acc>
Acc numpy_pairwise_sum(const Acc* a, Index n) {
  if (n < 8) {
    Acc res = 0;
    for (Index i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    Acc r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    Index i = 8;
    for (; i < n - n % 8; i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    Acc res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  Index half = n / 2;
  half -= half % 8;
  return numpy_pairwise_sum(a, half) + numpy_pairwise_sum(a + half, n - half);
}

/// np.sum(rows, axis=1) of one row of a C-contiguous 2-D array: the reduction starts from 0 and adds the pairwise
/// sum.
template <class Acc>
Acc numpy_row_sum(const Acc* a, Index n) {
  return Acc(0) + numpy_pairwise_sum(a, n);
}

template <class W>
using Weights = nb::ndarray<const W, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

/// The class indices of the neighbours of query i (k of them), each checked, as it is looked up, to be in range.
struct NeighbourLabels {
  const std::int64_t* indices;
  const std::int64_t* labels;
  Index n_queries, k, n_samples, n_classes;

  NeighbourLabels(const IndexIn& ind, const LabelsIn& lab, Index classes)
      : indices(ind.data()), labels(lab.data()), n_queries(Index(ind.shape(0))), k(Index(ind.shape(1))),
        n_samples(Index(lab.shape(0))), n_classes(classes) {
    if (n_classes < 1) throw gpuml::invalid_input("n_classes must be at least 1");
  }

  void of(Index i, std::int64_t* out) const {
#if defined(__GNUC__) || defined(__clang__)
    // The next query's labels are fetched meanwhile: they lie scattered over an array the size of the database.
    if (i + 1 < n_queries)
      for (Index c = 0; c < k; ++c) {
        const std::int64_t sample = indices[(i + 1) * k + c];
        if (sample >= 0 && sample < n_samples) __builtin_prefetch(labels + sample);
      }
#endif
    for (Index c = 0; c < k; ++c) {
      const std::int64_t sample = indices[i * k + c];
      if (sample < 0 || sample >= n_samples)
        throw gpuml::invalid_input("indices hold " + std::to_string(sample) + ", outside [0, " +
                                   std::to_string(n_samples) + ")");
      out[c] = labels[sample];
      if (out[c] < 0 || out[c] >= n_classes)
        throw gpuml::invalid_input("labels hold " + std::to_string(out[c]) + ", outside [0, " +
                                   std::to_string(n_classes) + ")");
    }
  }
};

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
        const W* d = distances.data() + i * k;
        W* w = out.data() + i * k;
        bool any_infinite = false;
        for (Index c = 0; c < k; ++c) {
          w[c] = W(1) / d[c];
          any_infinite = any_infinite || std::isinf(w[c]);
        }
        if (any_infinite)
          for (Index c = 0; c < k; ++c) w[c] = std::isinf(w[c]) ? W(1) : W(0);
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
  const NeighbourLabels neighbour_labels(indices, labels, n_classes);
  check_weights(indices, weights);
  std::vector<std::string> warnings;
  const Index n = Index(indices.shape(0)), k = Index(indices.shape(1));
  const W* w = weights ? weights->data() : nullptr;
  auto votes = released(warnings, [&] {
    gpuml::Matrix<double> v = gpuml::Matrix<double>::Zero(n, n_classes);
    gpuml::parallel_chunks(n, 1024, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
      std::vector<std::int64_t> row(static_cast<std::size_t>(k));
      for (Index i = begin; i < end; ++i) {
        neighbour_labels.of(i, row.data());
        double* totals = v.data() + i * n_classes;
        if (w) {
          for (Index c = 0; c < k; ++c) totals[row[c]] += static_cast<double>(w[i * k + c]);
        } else {
          for (Index c = 0; c < k; ++c) totals[row[c]] += 1.0;
        }
      }
    });
    return v;
  });
  return nb::make_tuple(to_numpy(std::move(votes)), warnings);
}

/// For each class m in [0, classes) of the entries a[0..n) (entry i of class of[i]): numpy's pairwise sum of the
/// row with the other classes' entries zeroed (np.sum of weighted_mode's masked row), into totals[m], in one pass
/// over the entries. Adding a zero changes no partial sum (at most a zero's sign), so each class's partial sums are
/// numpy's with its own entries alone: per lane in order, the same tree over the lanes, the same tail, the same
/// halves.
void class_pairwise_sums(const double* a, const std::int32_t* of, Index n, Index classes, double* totals,
                         std::vector<double>& lanes) {
  std::fill(totals, totals + classes, 0.0);
  if (n < 8) {
    for (Index i = 0; i < n; ++i) totals[of[i]] += a[i];
    return;
  }
  if (n <= 128) {
    lanes.assign(static_cast<std::size_t>(classes * 8), 0.0);
    const Index body = n - n % 8;
    for (Index i = 0; i < body; ++i) lanes[of[i] * 8 + i % 8] += a[i];
    for (Index m = 0; m < classes; ++m) {
      const double* r = lanes.data() + m * 8;
      totals[m] = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    }
    for (Index i = body; i < n; ++i) totals[of[i]] += a[i];
    return;
  }
  Index half = n / 2;
  half -= half % 8;
  std::vector<double> second(static_cast<std::size_t>(classes));
  class_pairwise_sums(a, of, half, classes, totals, lanes);
  class_pairwise_sums(a + half, of + half, n - half, classes, second.data(), lanes);
  for (Index m = 0; m < classes; ++m) totals[m] += second[m];
}

/// scikit-learn's weighted_mode(labels[indices], weights, axis=1)'s modes: per query, each class's total is np.sum
/// of the row of weights with the other classes' entries zeroed (numpy's pairwise order); classes are visited in
/// ascending order and a class wins only with a total above the best so far (which starts at 0 for class 0 and,
/// as np.maximum, stays NaN once NaN). Classes absent from a row total 0 and never win.
template <class W>
nb::tuple weighted_modes(IndexIn indices, LabelsIn labels, Index n_classes, Weights<W> weights) {
  const NeighbourLabels neighbour_labels(indices, labels, n_classes);
  check_weights(indices, std::optional<Weights<W>>(weights));
  std::vector<std::string> warnings;
  const Index n = Index(indices.shape(0)), k = Index(indices.shape(1));
  auto modes = released(warnings, [&] {
    Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1> out(n);
    gpuml::parallel_chunks(n, 2048, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
      std::vector<std::int64_t> row(static_cast<std::size_t>(k)), present;
      std::vector<std::int32_t> local(static_cast<std::size_t>(k));
      std::vector<std::int32_t> local_of(static_cast<std::size_t>(n_classes), -1);  // a class's place in `present`
      std::vector<double> values(static_cast<std::size_t>(k)), totals, lanes;
      for (Index i = begin; i < end; ++i) {
        neighbour_labels.of(i, row.data());
        present.clear();
        for (Index c = 0; c < k; ++c)
          if (local_of[row[c]] < 0) {
            local_of[row[c]] = 0;
            present.push_back(row[c]);
          }
        std::sort(present.begin(), present.end());
        for (std::size_t m = 0; m < present.size(); ++m) local_of[present[m]] = std::int32_t(m);
        const W* w = weights.data() + i * k;
        for (Index c = 0; c < k; ++c) {
          local[c] = local_of[row[c]];
          values[c] = double(w[c]);
        }
        for (const std::int64_t label : present) local_of[label] = -1;
        totals.resize(present.size());
        class_pairwise_sums(values.data(), local.data(), k, Index(present.size()), totals.data(), lanes);
        std::int64_t mode = 0;
        double best = 0;
        for (std::size_t m = 0; m < present.size(); ++m) {
          const double total = 0.0 + totals[m];  // np.sum's reduction starts from 0
          if (total > best) mode = present[m];
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
    gpuml::Matrix<double> means_out(n, outputs);
    double* out = means_out.data();
    gpuml::parallel_chunks(n, 512, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
      std::vector<double> terms(static_cast<std::size_t>(k));
      for (Index i = begin; i < end; ++i) {
        const std::int64_t* row = ind + i * k;
#if defined(__GNUC__) || defined(__clang__)
        // The next query's targets are fetched meanwhile: they lie scattered over an array the size of the database.
        if (i + 1 < n)
          for (Index c = 0; c < k; ++c) __builtin_prefetch(targets + row[k + c] * outputs);
#endif
        if (!weights) {
          for (Index j = 0; j < outputs; ++j) {
            double sum = 0;
            if (outputs == 1) {
              for (Index c = 0; c < k; ++c) terms[c] = targets[row[c]];
              sum = numpy_row_sum(terms.data(), k);
            } else {
              for (Index c = 0; c < k; ++c) sum += targets[row[c] * outputs + j];
            }
            out[i * outputs + j] = sum / double(k);
          }
        } else {
          const W* w = weights->data() + i * k;
          const W denominator = numpy_row_sum(w, k);
          for (Index j = 0; j < outputs; ++j) {
            for (Index c = 0; c < k; ++c) terms[c] = targets[row[c] * outputs + j] * double(w[c]);
            out[i * outputs + j] = numpy_row_sum(terms.data(), k) / double(denominator);
          }
        }
      }
    });
    return means_out;
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
