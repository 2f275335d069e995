// gpuml-dbscan: scikit-learn's DBSCAN on a .npy/.csv file or on embedded synthetic data, on any backend.
//
//   gpuml-dbscan                                   embedded data: 20,000 x 2 float32, eight blobs and uniform noise,
//                                                  eps 0.02, min_samples 10
//   gpuml-dbscan --input X.npy --eps 0.3 --min-samples 10 --labels-out labels.npy
//   gpuml-dbscan --input X.csv --eps 2 --metric manhattan --json --device gpu
//
// Human-readable output by default; --json prints one JSON object (n_clusters, n_noise, core samples, the fit's
// time and each phase's: neighbourhoods, core samples, components, labels).
// Errors go to stderr, with exit status 2 for a usage error and 1 for a run-time error; a progress bar goes to
// stderr on a terminal (or with --progress).
#include <gpuml/gpuml.hpp>

#include "program.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace {

using gpuml_program::Clock;
using gpuml_program::seconds_since;

struct Options {
  std::string input, metric = "euclidean", device, labels_out, core_out;
  double eps = 0.5, p = 2;
  int min_samples = 5;
  bool json = false, float32 = false, float64 = false, progress = false, no_progress = false;
  gpuml_program::CsvFlags csv;
  std::int64_t n_samples = 20'000;
  std::uint64_t data_seed = 20260311;
};

/// Counter-based data (SplitMix64 per row, the same bytes with every compiler): 90% of the rows in eight blobs of
/// spread 0.02 in the unit square, the rest uniform noise.
template <class T>
gpuml::Matrix<T> synthetic_blobs(std::int64_t n, std::uint64_t seed) {
  if (n < 1) throw gpuml::invalid_input("the synthetic data need at least one row");
  gpuml::Matrix<T> X(n, 2);
  auto uniform = [](std::uint64_t& state) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  };
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint64_t state = seed ^ (0xD1B54A32D192ED03ull * static_cast<std::uint64_t>(i + 1));
    if (i % 10 == 9) {
      X(i, 0) = static_cast<T>(uniform(state));
      X(i, 1) = static_cast<T>(uniform(state));
      continue;
    }
    const int blob = static_cast<int>(i % 8);
    const double cx = 0.15 + 0.7 * (blob % 4) / 3.0, cy = blob < 4 ? 0.3 : 0.7;
    // Box-Muller: a normal pair from two uniforms.
    const double u1 = std::max(uniform(state), 1e-300), u2 = uniform(state);
    const double r = 0.02 * std::sqrt(-2 * std::log(u1));
    X(i, 0) = static_cast<T>(cx + r * std::cos(6.283185307179586 * u2));
    X(i, 1) = static_cast<T>(cy + r * std::sin(6.283185307179586 * u2));
  }
  return X;
}

template <class T>
int run(const Options& o, const gpuml::Backend& backend, const std::string& device_choice) {
  constexpr bool is_f32 = std::is_same_v<T, float>;
  const bool synthetic = o.input.empty();
  gpuml_program::Outputs outputs;  // checked before any data is read
  outputs.add("--labels-out", o.labels_out);
  outputs.add("--core-out", o.core_out);
  if (outputs.to_stdout() && o.json) throw gpuml_program::usage_error("--json and an output to stdout (-) exclude each other");
  const gpuml::CsvOptions csv = o.csv.options();
  auto t0 = Clock::now();
  const gpuml::Matrix<T> X = synthetic ? synthetic_blobs<T>(o.n_samples, o.data_seed) : gpuml::read_matrix<T>(o.input, csv);
  const double load_seconds = seconds_since(t0);

  std::vector<std::string> warnings;
  gpuml_program::collect_warnings(warnings);
  const bool chatty = !o.json && !outputs.to_stdout();
  if (chatty) {
    if (synthetic)
      std::printf("data: embedded blobs and noise, %lld x 2, %s\n", static_cast<long long>(X.rows()),
                  is_f32 ? "float32" : "float64");
    else
      std::printf("data: %s (%lld x %lld), %s (read in %.2f s)\n", o.input.c_str(), static_cast<long long>(X.rows()),
                  static_cast<long long>(X.cols()), is_f32 ? "float32" : "float64", load_seconds);
    std::printf("backend: %s\n", gpuml::describe(backend).c_str());
    std::printf("DBSCAN(eps=%g, min_samples=%d, metric=%s)\n", o.eps, o.min_samples, o.metric.c_str());
    std::fflush(stdout);
  }

  gpuml::DBSCANParams params;
  params.set_eps(o.eps).set_min_samples(o.min_samples).set_metric(o.metric).set_p(o.p);
  gpuml_program::ProgressBar bar(gpuml_program::ProgressBar::wanted(o.progress, o.no_progress), o.progress ? 0.0 : 1.0);
  params.on_progress = [&bar](const gpuml::WorkProgress& w) {
    static const char* const stage[] = {"", "neighbourhoods", "core samples", "clusters"};
    bar.update(static_cast<std::int64_t>(w.done), static_cast<std::int64_t>(w.total), stage[w.done < 4 ? w.done : 0]);
    return true;
  };
  gpuml::DBSCAN<T> model(params, backend);
  t0 = Clock::now();
  model.fit(X);
  const double fit_seconds = seconds_since(t0);
  bar.finish();

  const auto& labels = model.labels();
  std::int64_t n_noise = 0;
  for (Eigen::Index i = 0; i < labels.size(); ++i) n_noise += labels[i] == -1;
  const std::int64_t n_core = model.core_sample_indices().size();

  outputs.set("--labels-out", [&](const std::string& path) {
    gpuml::write_matrix(path, labels);
  });
  outputs.set("--core-out", [&](const std::string& path) {
    const auto& core = model.core_sample_indices();
    gpuml::write_matrix(path, gpuml::IndexMatrix(Eigen::Map<const gpuml::IndexMatrix>(core.data(), core.size(), 1)));
  });
  outputs.commit();

  if (o.json) {
    nlohmann::json j;
    j["program"] = "gpuml-dbscan";
    j["gpuml_version"] = GPUML_VERSION_STRING;
    j["backend"] = gpuml::describe(backend);
    j["backend_kind"] = backend.is_host() ? "host" : "vulkan";
    j["device"] = backend.is_host() ? std::string("host") : backend.device_info().name;
    j["device_choice"] = device_choice;
    j["data"] = synthetic ? std::string("synthetic") : o.input;
    j["n"] = X.rows();
    j["d"] = X.cols();
    j["dtype"] = is_f32 ? "float32" : "float64";
    j["eps"] = o.eps;
    j["min_samples"] = o.min_samples;
    j["metric"] = o.metric;
    j["n_clusters"] = model.n_clusters();
    j["n_noise"] = n_noise;
    j["n_core"] = n_core;
    j["fit_seconds"] = fit_seconds;
    const auto& stats = model.fit_stats();
    j["times"] = {{"setup", stats.times.setup}, {"neighbourhoods", stats.times.neighbourhoods}, {"core_samples", stats.times.core_samples},
                  {"components", stats.times.components}, {"labels", stats.times.labels}};
    j["n_edges"] = stats.n_edges;
    j["graph_on"] = stats.graph_on_device ? "device" : "host";
    if (!stats.graph_on_host_because.empty()) j["graph_on_host_because"] = stats.graph_on_host_because;
    if (stats.graph_on_device)
      j["graph_kernel"] = {{"certain", stats.search.certain}, {"uncertain", stats.search.uncertain},
                           {"setup_seconds", stats.search.setup_seconds}, {"count_seconds", stats.search.count_seconds}, {"fill_seconds", stats.search.fill_seconds},
                           {"resolve_seconds", stats.search.finish_seconds}};
    j["components_on"] = stats.components_on_device ? "device" : "host";
    if (stats.components_on_device)
      j["components_kernel"] = {{"pieces", stats.components.pieces}, {"rounds", stats.components.rounds},
                                {"submits", stats.components.submits}, {"upload_seconds", stats.components.upload_seconds},
                                {"rounds_seconds", stats.components.rounds_seconds},
                                {"finish_seconds", stats.components.finish_seconds}};
    j["load_seconds"] = load_seconds;
    j["host_threads"] = gpuml::host_threads();
    j["warnings"] = warnings;
    std::printf("%s\n", j.dump().c_str());
  } else if (chatty) {
    const auto& t = model.fit_stats().times;
    std::printf("fit: %.3f s (setup %.3f, neighbourhoods %.3f, core samples %.3f, components %.3f on the %s, "
                "labels %.3f)\n",
                fit_seconds, t.setup, t.neighbourhoods, t.core_samples, t.components,
                model.fit_stats().components_on_device ? "device" : "host", t.labels);
    std::printf("clusters: %lld, core samples: %lld, noise: %lld of %lld\n", static_cast<long long>(model.n_clusters()),
                static_cast<long long>(n_core), static_cast<long long>(n_noise), static_cast<long long>(X.rows()));
    if (!o.labels_out.empty()) std::printf("labels written to %s\n", o.labels_out.c_str());
    if (!o.core_out.empty()) std::printf("core sample indices written to %s\n", o.core_out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"gpuml-dbscan: scikit-learn's DBSCAN on a Vulkan GPU or the host.\nWithout --input it clusters "
               "embedded data: 20,000 x 2 float32 blobs with noise, eps 0.02, min_samples 10."};
  gpuml_program::add_version(app, "gpuml-dbscan");
  app.add_option("--input", o.input, "data file (.npy float32/float64 or .csv); omit for embedded data");
  app.add_option("--eps", o.eps, "neighbourhood radius (default 0.5; 0.02 for the embedded data)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end != '\0') return "must be a number, got '" + v + "'";
            return x > 0 ? std::string() : "must be > 0, got " + v;
          },
          "> 0"));
  app.add_option("--min-samples", o.min_samples,
                 "neighbours (the sample itself included) that make a core sample (default 5; 10 for the embedded data)")
      ->check(gpuml_program::at_least(1));
  app.add_option("--metric", o.metric,
                 "euclidean | sqeuclidean | manhattan | cosine | chebyshev | minkowski (scikit-learn's names; "
                 "default euclidean)");
  app.add_option("--p", o.p, "the Minkowski power for --metric minkowski: 1, 2 or inf (default 2)");
  app.add_option("--device", o.device,
                 "auto | gpu | discrete | integrated | cpu | host | N | name (default: $GPUML_DEVICE, else auto)");
  app.add_option("--labels-out", o.labels_out, "write the labels (int32, -1 for noise; .npy or .csv; - for stdout)");
  app.add_option("--core-out", o.core_out, "write the core samples' indices (int64; .npy or .csv; - for stdout)");
  o.csv.add_to(app);
  app.add_flag("--json", o.json, "print one JSON object with the results and timings");
  app.add_flag("--progress", o.progress, "draw a progress bar on stderr (default: when stderr is a terminal)");
  app.add_flag("--no-progress", o.no_progress, "never draw the progress bar");
  auto* f32 = app.add_flag("--float32", o.float32, "compute in float32 (default: the .npy dtype; float64 for CSV)");
  app.add_flag("--float64", o.float64, "compute in float64 (the embedded data are float32 otherwise)")->excludes(f32);
  app.add_option("--n-samples", o.n_samples, "rows of the embedded data (default 20,000)")->check(gpuml_program::at_least(1));
  app.add_option("--data-seed", o.data_seed, "seed of the embedded data's generator");
  return gpuml_program::run("gpuml-dbscan", app, argc, argv, [&] {
    if (o.input.empty()) {
      if (!app.count("--eps")) o.eps = 0.02;
      if (!app.count("--min-samples")) o.min_samples = 10;
    }
    try {
      gpuml::DBSCANParams check;
      check.set_metric(o.metric).set_p(o.p);
      (void)gpuml::detail::dbscan_metric(check);  // an unknown metric or p fails before any data is read
    } catch (const gpuml::invalid_input& e) {
      throw gpuml_program::usage_error(std::string("--metric: ") + e.what());
    }
    const bool use_float = gpuml_program::use_float32(o.float32, o.float64, o.input);
    const std::string choice = gpuml_program::device_choice(o.device);
    const gpuml::Backend backend = gpuml_program::backend_for(o.device);
    return use_float ? run<float>(o, backend, choice) : run<double>(o, backend, choice);
  });
}
