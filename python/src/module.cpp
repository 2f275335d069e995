// gpuml._gpuml: the compute behind the Python estimators (see common.hpp). This file: k-means and the module;
// neighbors.cpp: the nearest-neighbour database; dbscan.cpp: DBSCAN.
#include "common.hpp"

namespace gpuml_python {
void bind_neighbors(nb::module_& m);
void bind_dbscan(nb::module_& m);
}

using namespace gpuml_python;

namespace {

/// gpuml::fit_kmeans, the library's one k-means fit, on X as it is (no copy, no centred copy), drawing the starting
/// centers from numpy's stream in the given state: (labels, inertia, centers, n_iter, statistics, key, pos,
/// warnings), key and pos the stream's state after the fit.
template <class T>
nb::tuple fit(In2<T> X, std::optional<In1<T>> sample_weight, int n_clusters, const std::string& init,
              std::optional<In2<T>> init_centers, int n_init, int max_iter, double tol, bool verbose, Key key, int pos,
              const std::string& device) {
  std::vector<std::string> warnings;
  gpuml::algorithms::NumpyRandomState random = random_state_of(key, pos);
  auto r = released(warnings, [&] {
    const gpuml::KMeansParams p = kmeans_params<T>(n_clusters, init, init_centers, n_init, max_iter, tol, verbose);
    std::optional<gpuml::VectorView<T>> w;
    if (sample_weight) w.emplace(view(*sample_weight));
    return gpuml::fit_kmeans<T>(backend_for(device), view(X), w ? &*w : nullptr, p, random);
  });
  nb::dict stats;
  stats["n_init"] = r.n_init;
  stats["best_run"] = r.best_run;
  stats["uploads"] = r.uploads;
  stats["reserved_uploads"] = r.reserved_uploads;
  stats["checks_on_device"] = r.checks_on_device;
  stats["tol"] = r.tol_absolute;
  stats["iteration_seconds"] = r.iteration_seconds;
  nb::dict times;
  times["checks"] = r.times.checks;
  times["reserve"] = r.times.reserve;
  times["seeding"] = r.times.seeding;
  times["lloyd"] = r.times.lloyd;
  times["setup"] = r.times.setup;
  times["upload"] = r.times.upload;
  times["iterations"] = r.times.iterations;
  times["finish"] = r.times.finish;
  times["total"] = r.times.total;
  stats["times"] = times;
  return nb::make_tuple(to_numpy(std::move(r.labels)), r.inertia, to_numpy(std::move(r.cluster_centers)), r.n_iter,
                        stats, key_of(random), random.pos(), warnings);
}

/// gpuml::kmeans_starting_samples: the indices of the samples a fit's first run starts from, (indices, key, pos,
/// warnings).
template <class T>
nb::tuple starting_samples(In2<T> X, std::optional<In1<T>> sample_weight, int n_clusters, const std::string& init,
                           Key key, int pos, const std::string& device) {
  std::vector<std::string> warnings;
  gpuml::algorithms::NumpyRandomState random = random_state_of(key, pos);
  auto ids = released(warnings, [&] {
    const gpuml::KMeansParams p = kmeans_params<T>(n_clusters, init, std::nullopt, 1, 1, 0.0, false);
    std::optional<gpuml::VectorView<T>> w;
    if (sample_weight) w.emplace(view(*sample_weight));
    return gpuml::kmeans_starting_samples<T>(backend_for(device), view(X), w ? &*w : nullptr, p, random);
  });
  using I64 = Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>;
  return nb::make_tuple(to_numpy(I64(Eigen::Map<const I64>(ids.data(), Eigen::Index(ids.size())))), key_of(random),
                        random.pos(), warnings);
}

/// Labels of X's rows by nearest center: (labels, warnings).
template <class T>
nb::tuple predict(In2<T> X, In2<T> centers, const std::string& device) {
  std::vector<std::string> warnings;
  auto labels = released(warnings, [&] {
    const gpuml::Matrix<T> c = view(centers);
    gpuml::checks::data(view(X), "X");
    return gpuml::detail::run_assign<T>(backend_for(device), view(X), c);
  });
  return nb::make_tuple(to_numpy(std::move(labels)), warnings);
}

template <class T>
void bind_scalar(nb::module_& m, const char* suffix) {
  m.def((std::string("fit_") + suffix).c_str(), &fit<T>, nb::arg("X"), nb::arg("sample_weight").none(),
        nb::arg("n_clusters"), nb::arg("init"), nb::arg("init_centers").none(), nb::arg("n_init"), nb::arg("max_iter"),
        nb::arg("tol"), nb::arg("verbose"), nb::arg("key"), nb::arg("pos"), nb::arg("device"));
  m.def((std::string("starting_samples_") + suffix).c_str(), &starting_samples<T>, nb::arg("X"),
        nb::arg("sample_weight").none(), nb::arg("n_clusters"), nb::arg("init"), nb::arg("key"), nb::arg("pos"),
        nb::arg("device"));
  m.def((std::string("predict_") + suffix).c_str(), &predict<T>, nb::arg("X"), nb::arg("centers"), nb::arg("device"));
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
  bind_neighbors(m);
  bind_dbscan(m);

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
  m.def("random_sample", [](Key key, int pos, int count) {
    gpuml::algorithms::NumpyRandomState random = random_state_of(key, pos);
    gpuml::Vector<double> out(count);
    for (int i = 0; i < count; ++i) out[i] = random.random_sample();
    return nb::make_tuple(to_numpy(std::move(out)), key_of(random), random.pos());
  }, nb::arg("key"), nb::arg("pos"), nb::arg("count"),
        "count draws of numpy's RandomState.random_sample from the given state: (values, key, pos) (for tests).");
  m.def("set_num_threads", [](int n) { gpuml::configure(gpuml::config().set_num_threads(n)); }, nb::arg("n"));
}
