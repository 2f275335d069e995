// gpuml._gpuml_mpi: the compute behind gpuml.mpi.KMeans, gpuml::mpi::KMeans (include/gpuml/mpi/kmeans.hpp) over an
// mpi4py communicator. Built only where CMake finds MPI. The communicator comes as its Fortran handle (mpi4py's
// comm.py2f()), turned back with MPI_Comm_f2c, so this module needs no mpi4py headers; mpi4py has initialised MPI.
// Its errors are raised as Python's own exceptions (ValueError for bad input), not as _gpuml's classes, so that the
// two modules register no exception translators over each other.
#include "common.hpp"

#include <gpuml/mpi/kmeans.hpp>

using namespace gpuml_python;

namespace {

/// Runs `work`, raising the library's errors as Python exceptions of their kind (the GIL held, as after released()).
template <class Work>
auto raising(Work&& work) {
  try {
    return work();
  } catch (const gpuml::invalid_input& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const gpuml::not_fitted& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const gpuml::out_of_memory& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
  } catch (const gpuml::error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  throw nb::python_error();
}

/// Collective: gpuml::mpi::KMeans on this rank's rows, drawing k-means++'s starting centers from numpy's stream in
/// the given state (the same on every rank): (labels of this rank's rows, inertia, centers, n_iter,
/// iteration_seconds, key, pos, warnings), key and pos the stream's state after the fit. Warnings and verbose lines
/// come from rank 0 only.
template <class T>
nb::tuple fit(In2<T> X, std::optional<In1<T>> sample_weight, int n_clusters, std::optional<In2<T>> init_centers,
              int n_init, int max_iter, double tol, bool verbose, Key key, int pos, const std::string& device,
              std::int64_t comm_handle) {
  std::vector<std::string> warnings;
  gpuml::algorithms::NumpyRandomState random = random_state_of(key, pos);
  auto r = raising([&] {
    return released(warnings, [&] {
      const gpuml::KMeansParams p =
          kmeans_params<T>(n_clusters, "k-means++", init_centers, n_init, max_iter, tol, verbose);
      gpuml::mpi::KMeans<T> km(p, MPI_Comm_f2c(static_cast<MPI_Fint>(comm_handle)), backend_for(device));
      if (sample_weight) {
        km.fit(view(X), view(*sample_weight), random);
      } else {
        const gpuml::Vector<T> ones = gpuml::Vector<T>::Ones(Eigen::Index(X.shape(0)));
        km.fit(view(X), ones, random);
      }
      return std::make_tuple(km.labels(), km.inertia(), km.cluster_centers(), km.n_iter(), km.iteration_seconds());
    });
  });
  auto& [labels, inertia, centers, n_iter, seconds] = r;
  return nb::make_tuple(to_numpy(std::move(labels)), inertia, to_numpy(std::move(centers)), n_iter, seconds,
                        key_of(random), random.pos(), warnings);
}

template <class T>
void bind_scalar(nb::module_& m, const char* suffix) {
  m.def((std::string("fit_") + suffix).c_str(), &fit<T>, nb::arg("X"), nb::arg("sample_weight").none(),
        nb::arg("n_clusters"), nb::arg("init_centers").none(), nb::arg("n_init"), nb::arg("max_iter"), nb::arg("tol"),
        nb::arg("verbose"), nb::arg("key"), nb::arg("pos"), nb::arg("device"), nb::arg("comm"));
}

}  // namespace

NB_MODULE(_gpuml_mpi, m) {
  m.doc() = "gpuml::mpi::KMeans (distributed k-means over an MPI communicator) for gpuml.mpi.KMeans";
  bind_scalar<float>(m, "float32");
  bind_scalar<double>(m, "float64");
}
