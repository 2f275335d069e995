// gpuml._gpuml's DBSCAN (see common.hpp): the whole fit in gpuml::DBSCAN, or, where the caller decided the
// neighbourhoods itself (float32 data, decided in float64 as scikit-learn decides), the algorithm layer's core
// samples and components on those neighbourhoods.
#include "common.hpp"

#include <gpuml/algorithms/dbscan.hpp>
#include <gpuml/estimators/dbscan.hpp>

namespace gpuml_python {

namespace {

using I64 = Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>;
using IndexIn = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

/// (labels int64, core_sample_indices int64) as scikit-learn's attributes hold them.
nb::tuple labels_and_core(const gpuml::Labels& labels, const I64& core, std::vector<std::string>& warnings) {
  return nb::make_tuple(to_numpy(I64(labels.cast<std::int64_t>())), to_numpy(I64(core)), warnings);
}

/// A fit's stats as a dict: seconds per phase under "times", the graph's size, where the components ran.
nb::dict fit_stats(const gpuml::DBSCANFitStats& s) {
  nb::dict times;
  times["setup"] = s.times.setup;
  times["neighbourhoods"] = s.times.neighbourhoods;
  times["core_samples"] = s.times.core_samples;
  times["components"] = s.times.components;
  times["labels"] = s.times.labels;
  times["total"] = s.times.total;
  nb::dict stats;
  stats["times"] = times;
  stats["n_edges"] = s.n_edges;
  stats["graph_on"] = s.graph_on_device ? "device" : "host";
  stats["graph_on_host_because"] = s.graph_on_host_because;
  stats["graph_setup_seconds"] = s.search.setup_seconds;
  stats["graph_count_seconds"] = s.search.count_seconds;
  stats["graph_fill_seconds"] = s.search.fill_seconds;
  stats["graph_resolve_seconds"] = s.search.finish_seconds;
  stats["components_on"] = s.components_on_device ? "device" : "host";
  stats["component_rounds"] = s.components.rounds;
  stats["component_submits"] = s.components.submits;
  stats["component_pieces"] = s.components.pieces;
  stats["component_upload_seconds"] = s.components.upload_seconds;
  stats["component_rounds_seconds"] = s.components.rounds_seconds;
  return stats;
}

/// gpuml::DBSCAN<T> on X: (labels, core_sample_indices, warnings, stats).
template <class T>
nb::tuple fit(In2<T> X, std::optional<In1<T>> sample_weight, double eps, int min_samples, const std::string& metric,
              double p, const std::string& device) {
  std::vector<std::string> warnings;
  auto model = released(warnings, [&] {
    gpuml::DBSCANParams params;
    params.set_eps(eps).set_min_samples(min_samples).set_metric(metric).set_p(p);
    params.on_progress = no_pending_signal_progress;
    gpuml::DBSCAN<T> m(params, backend_for(device));
    if (sample_weight) m.fit(view(X), view(*sample_weight));
    else m.fit(view(X));
    return m;
  });
  nb::tuple out = labels_and_core(model.labels(), model.core_sample_indices(), warnings);
  return nb::make_tuple(out[0], out[1], out[2], fit_stats(model.fit_stats()));
}

/// The algorithm layer on neighbourhoods given as compressed rows (offsets, indices: each row increasing, the
/// sample itself included where it is its own neighbour), weights in the data's type: (labels, core, warnings).
template <class W>
nb::tuple from_neighbourhoods(IndexIn offsets, IndexIn indices, std::optional<In1<W>> sample_weight, int min_samples) {
  if (offsets.shape(0) < 1) throw gpuml::invalid_input("DBSCAN: the neighbourhoods need at least one offset");
  const std::int64_t n = std::int64_t(offsets.shape(0)) - 1;
  if (sample_weight && std::int64_t(sample_weight->shape(0)) != n)
    throw gpuml::invalid_input("sample_weight has length " + std::to_string(sample_weight->shape(0)) + ", but " +
                               std::to_string(n) + " was expected");
  std::vector<std::string> warnings;
  auto r = released(warnings, [&] {
    gpuml::algorithms::check_dbscan(1.0, min_samples);
    gpuml::algorithms::RadiusResult<W> hood;
    hood.offsets.assign(offsets.data(), offsets.data() + offsets.shape(0));
    hood.indices.assign(indices.data(), indices.data() + indices.shape(0));
    gpuml::algorithms::check_neighbourhoods(hood, n);
    const auto core = gpuml::algorithms::core_samples(hood, sample_weight ? sample_weight->data() : nullptr, min_samples);
    return gpuml::algorithms::label_components(hood, core);
  });
  const I64 labels = Eigen::Map<const I64>(r.labels.data(), Eigen::Index(r.labels.size()));
  const I64 core = Eigen::Map<const I64>(r.core_sample_indices.data(), Eigen::Index(r.core_sample_indices.size()));
  return nb::make_tuple(to_numpy(I64(labels)), to_numpy(I64(core)), warnings);
}

template <class T>
void bind_scalar(nb::module_& m, const char* suffix) {
  m.def((std::string("dbscan_fit_") + suffix).c_str(), &fit<T>, nb::arg("X"), nb::arg("sample_weight").none(),
        nb::arg("eps"), nb::arg("min_samples"), nb::arg("metric"), nb::arg("p"), nb::arg("device"));
  m.def((std::string("dbscan_from_neighbourhoods_") + suffix).c_str(), &from_neighbourhoods<T>, nb::arg("offsets"),
        nb::arg("indices"), nb::arg("sample_weight").none(), nb::arg("min_samples"));
}

}  // namespace

void bind_dbscan(nb::module_& m) {
  bind_scalar<float>(m, "float32");
  bind_scalar<double>(m, "float64");
}

}  // namespace gpuml_python
