// What gpuml's extension sources share (_gpuml: module.cpp, neighbors.cpp, dbscan.cpp; _gpuml_mpi: mpi.cpp). Arrays
// come in as C-contiguous float32/float64 numpy arrays without copies and go out as numpy arrays that own their memory.
// Every call releases the GIL; verbose lines go to Python's sys.stdout as they happen; warnings are returned to the
// caller, which raises them as Python warnings of the right category; Ctrl-C stops a fit at the end of the current
// Lloyd iteration and a k-NN search at the end of the current part.
#pragma once

#include <gpuml/gpuml.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nb = nanobind;

namespace gpuml_python {

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
inline bool no_pending_signal() {
  nb::gil_scoped_acquire gil;
  return PyErr_CheckSignals() == 0;
}
inline bool no_pending_signal_iteration(const gpuml::LloydIteration&) { return no_pending_signal(); }
inline bool no_pending_signal_progress(const gpuml::WorkProgress&) { return no_pending_signal(); }

/// A numpy RandomState's key words (get_state()[1]), as the k-means fits take them.
using Key = nb::ndarray<const std::uint32_t, nb::shape<gpuml::algorithms::NumpyRandomState::kStateWords>, nb::c_contig,
                        nb::device::cpu>;

/// numpy's RandomState in the state get_state() gave (its key words and position).
inline gpuml::algorithms::NumpyRandomState random_state_of(const Key& key, int pos) {
  gpuml::algorithms::NumpyRandomState::Key words;
  std::copy_n(key.data(), words.size(), words.begin());
  return gpuml::algorithms::NumpyRandomState(words, pos);
}

/// The key words of a stream, as a numpy uint32 array for RandomState.set_state.
inline auto key_of(const gpuml::algorithms::NumpyRandomState& random) {
  using Words = Eigen::Matrix<std::uint32_t, Eigen::Dynamic, 1>;
  return to_numpy(Words(Eigen::Map<const Words>(random.key().data(), Eigen::Index(random.key().size()))));
}

/// KMeans parameters as scikit-learn validated them; an array init arrives in X's dtype, already checked for shape.
template <class T>
gpuml::KMeansParams kmeans_params(int n_clusters, const std::string& init, const std::optional<In2<T>>& init_centers,
                                  int n_init, int max_iter, double tol, bool verbose) {
  gpuml::KMeansParams p;
  p.n_clusters = n_clusters;
  p.init = init_centers ? std::string("k-means++") : init;
  if (init_centers) p.init_centers = view(*init_centers).template cast<double>();
  p.n_init = n_init;
  p.max_iter = max_iter;
  p.tol = tol;
  p.verbose = verbose;
  p.on_iteration = no_pending_signal_iteration;
  p.keep_going = no_pending_signal;
  return p;
}

/// The backend of an estimator's device choice, one per choice for the life of the process: a Vulkan device (and
/// its pipelines) opened by one call serves the next, as a C++ program's backend serves all its calls, instead of
/// being closed when the call's backend goes and opened again by the next call.
inline gpuml::Backend backend_for(const std::string& device) {
  if (device.empty() || device == "default") return gpuml::default_backend();
  static std::mutex mutex;
  static std::map<std::string, gpuml::Backend> opened;
  std::lock_guard lock(mutex);
  auto it = opened.find(device);
  if (it == opened.end()) it = opened.emplace(device, gpuml::select_backend(device)).first;
  return it->second;
}

inline std::string backend_name(const gpuml::Backend& b) {
  return b.is_vulkan() ? b.device_info().name : std::string("host");
}

}  // namespace gpuml_python
