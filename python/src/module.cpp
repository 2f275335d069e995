// gpuml._gpuml: the compute behind the Python estimators. Arrays come in as C-contiguous float32/float64 numpy
// arrays without copies and go out as numpy arrays that own their memory. Every call releases the GIL; verbose
// lines go to Python's sys.stdout as they happen; warnings are returned to the caller, which raises them as
// Python warnings of the right category; Ctrl-C stops a fit at the end of the current Lloyd iteration and a k-NN
// search at the end of the current part.
#include <gpuml/gpuml.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nb = nanobind;

namespace {

template <class T>
using In2 = nb::ndarray<const T, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
template <class T>
using In1 = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <class T>
gpuml::MatrixView<T> view(const In2<T>& a) {
  return Eigen::Map<const gpuml::Matrix<T>>(a.data(), Eigen::Index(a.shape(0)), Eigen::Index(a.shape(1)));
}
template <class T>
gpuml::VectorView<T> view(const In1<T>& a) {
  return Eigen::Map<const gpuml::Vector<T>>(a.data(), Eigen::Index(a.shape(0)));
}

/// A numpy array that owns `m` (moved to the heap; freed with the array).
template <class M>
auto to_numpy(M&& m) {
  using Plain = std::decay_t<M>;
  using S = typename Plain::Scalar;
  auto* heap = new Plain(std::forward<M>(m));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<Plain*>(p); });
  if constexpr (Plain::ColsAtCompileTime == 1)
    return nb::ndarray<nb::numpy, S, nb::ndim<1>>(heap->data(), {std::size_t(heap->size())}, owner);
  else
    return nb::ndarray<nb::numpy, S, nb::ndim<2>>(heap->data(), {std::size_t(heap->rows()), std::size_t(heap->cols())},
                                                  owner);
}

/// Runs `work` without the GIL, with this thread's warnings collected for the caller and its verbose lines written
/// to sys.stdout. A cancelled fit whose cause is a pending Python signal (Ctrl-C) re-raises that signal's exception.
template <class Work>
auto released(std::vector<std::string>& warnings, Work&& work) {
  const gpuml::WarningHandler collect = [&warnings](const std::string& m) { warnings.push_back(m); };
  const gpuml::WarningHandler to_stdout = [](const std::string& line) {
    nb::gil_scoped_acquire gil;
    nb::module_::import_("sys").attr("stdout").attr("write")(line + "\n");
  };
  try {
    nb::gil_scoped_release no_gil;
    gpuml::ScopedThreadMessages scope(collect, to_stdout);
    return work();
  } catch (const gpuml::cancelled&) {
    if (PyErr_Occurred()) throw nb::python_error();
    throw;
  }
}

/// Stops a fit or a search when Python has a pending signal (Ctrl-C): checked once per Lloyd iteration, between the
/// parts of a long E-step, and per search part, with the GIL.
bool no_pending_signal() {
  nb::gil_scoped_acquire gil;
  return PyErr_CheckSignals() == 0;
}
bool no_pending_signal_iteration(const gpuml::LloydIteration&) { return no_pending_signal(); }
bool no_pending_signal_progress(const gpuml::WorkProgress&) { return no_pending_signal(); }

gpuml::Backend backend_for(const std::string& device) {
  return device.empty() || device == "default" ? gpuml::default_backend() : gpuml::select_backend(device);
}

std::string backend_name(const gpuml::Backend& b) {
  return b.is_vulkan() ? b.device_info().name : std::string("host");
}

/// scikit-learn's _kmeans_single_lloyd on centred data: (labels, inertia, centers, n_iter, warnings).
template <class T>
nb::tuple lloyd(In2<T> X, In1<T> sample_weight, In2<T> centers_init, int max_iter, double tol, bool verbose,
                const std::string& device) {
  std::vector<std::string> warnings;
  auto r = released(warnings, [&] {
    const gpuml::Backend backend = backend_for(device);
    const gpuml::Matrix<T> init = view(centers_init);
    gpuml::checks::data(view(X), "X");
    return gpuml::detail::run_lloyd<T, gpuml::kmeans_default_policy>(backend, view(X), view(sample_weight), init,
                                                                     max_iter, tol, verbose, no_pending_signal_iteration,
                                                                     no_pending_signal);
  });
  return nb::make_tuple(to_numpy(std::move(r.labels)), r.inertia, to_numpy(std::move(r.centers)), r.n_iter, warnings);
}

/// Labels of X's rows by nearest centre: (labels, warnings).
template <class T>
nb::tuple predict(In2<T> X, In2<T> centers, const std::string& device) {
  std::vector<std::string> warnings;
  auto labels = released(warnings, [&] {
    const gpuml::Matrix<T> c = view(centers);
    gpuml::checks::data(view(X), "X");
    return gpuml::detail::run_assign<T, gpuml::kmeans_default_policy>(backend_for(device), view(X), c);
  });
  return nb::make_tuple(to_numpy(std::move(labels)), warnings);
}

/// A fitted nearest-neighbour database (gpuml::NearestNeighbors): kept on the device between searches.
template <class T>
class Neighbors {
 public:
  Neighbors(In2<T> X, const std::string& metric, const std::string& device) {
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
  /// database itself, each row excluded from its own neighbours.
  nb::tuple kneighbors(std::optional<In2<T>> queries, int k) const {
    std::vector<std::string> warnings;
    auto r = released(warnings, [&] { return queries ? nn_->kneighbors(view(*queries), k) : nn_->kneighbors_self(k); });
    return nb::make_tuple(to_numpy(std::move(r.distances)), to_numpy(std::move(r.indices)), warnings);
  }

  /// (offsets, indices, distances, warnings): the database rows within `radius` of each query, as compressed rows;
  /// queries = None searches the database itself, each row left out of its own list.
  nb::tuple radius_neighbors(std::optional<In2<T>> queries, double radius, bool sort) const {
    std::vector<std::string> warnings;
    auto r = released(warnings, [&] {
      return queries ? nn_->radius_neighbors(view(*queries), radius, sort) : nn_->radius_neighbors_self(radius, sort);
    });
    using I64 = Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>;
    using Values = Eigen::Matrix<T, Eigen::Dynamic, 1>;
    return nb::make_tuple(to_numpy(I64(Eigen::Map<const I64>(r.offsets.data(), Eigen::Index(r.offsets.size())))),
                          to_numpy(I64(Eigen::Map<const I64>(r.indices.data(), Eigen::Index(r.indices.size())))),
                          to_numpy(Values(Eigen::Map<const Values>(r.distances.data(), Eigen::Index(r.distances.size())))),
                          warnings);
  }

  std::vector<std::string> fit_warnings() const { return warnings_; }
  std::string device() const { return backend_name(nn_->backend()); }

 private:
  std::unique_ptr<gpuml::NearestNeighbors<T>> nn_;
  std::vector<std::string> warnings_;
};

template <class T>
void bind_scalar(nb::module_& m, const char* suffix) {
  m.def((std::string("lloyd_") + suffix).c_str(), &lloyd<T>, nb::arg("X"), nb::arg("sample_weight"),
        nb::arg("centers_init"), nb::arg("max_iter"), nb::arg("tol"), nb::arg("verbose"), nb::arg("device"));
  m.def((std::string("predict_") + suffix).c_str(), &predict<T>, nb::arg("X"), nb::arg("centers"), nb::arg("device"));
  nb::class_<Neighbors<T>>(m, (std::string("Neighbors_") + suffix).c_str())
      .def(nb::init<In2<T>, const std::string&, const std::string&>(), nb::arg("X"), nb::arg("metric"),
           nb::arg("device"))
      .def("kneighbors", &Neighbors<T>::kneighbors, nb::arg("queries").none(), nb::arg("k"))
      .def("radius_neighbors", &Neighbors<T>::radius_neighbors, nb::arg("queries").none(), nb::arg("radius"),
           nb::arg("sort"))
      .def("fit_warnings", &Neighbors<T>::fit_warnings)
      .def_prop_ro("device", &Neighbors<T>::device);
}

}  // namespace

NB_MODULE(_gpuml, m) {
  m.doc() = "gpuml's compute kernels (Vulkan devices and the Eigen host backend) for the gpuml Python estimators";
  // Translators are tried newest first: the general gpuml::error is registered before its subclasses.
  nb::exception<gpuml::error>(m, "Error", PyExc_RuntimeError);
  nb::exception<gpuml::invalid_input>(m, "InvalidInput", PyExc_ValueError);
  nb::exception<gpuml::not_fitted>(m, "NotFitted", PyExc_ValueError);
  nb::exception<gpuml::unsupported>(m, "Unsupported", PyExc_RuntimeError);
  nb::exception<gpuml::out_of_memory>(m, "OutOfMemory", PyExc_MemoryError);
  bind_scalar<float>(m, "float32");
  bind_scalar<double>(m, "float64");

  m.def("devices", [] {
    std::vector<nb::dict> out;
    for (const auto& info : gpuml::vulkan_devices()) {
      nb::dict d;
      d["index"] = info.index;
      d["name"] = info.name;
      d["type"] = std::string(gpuml::vulkan::device_type_name(info.type));
      d["float64"] = info.float64;
      out.push_back(std::move(d));
    }
    return out;
  }, "The Vulkan devices gpuml sees (empty without a Vulkan loader or driver).");
  m.def("backend_name", [](const std::string& device) { return backend_name(backend_for(device)); },
        nb::arg("device"), "Where work for this device choice runs: a Vulkan device's name, or \"host\".");
  m.def("set_num_threads", [](int n) { gpuml::configure(gpuml::config().set_num_threads(n)); }, nb::arg("n"));
}
