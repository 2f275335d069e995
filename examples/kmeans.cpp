// gpuml-kmeans: scikit-learn's KMeans on a .npy/.csv file or on the embedded benchmark workload, on any backend.
//
//   gpuml-kmeans                                   the benchmark workload: 1,000,000 x 14 float32 blobs, k = 127,
//                                                  init = the first 127 samples, max_iter 100, tol 0, n_init 1
//   gpuml-kmeans --input X.npy --n-clusters 20 --labels-out labels.npy --centers-out centers.csv
//   gpuml-kmeans --input X.npy --init init.npy --max-iter 100 --tol 0 --json --repeat 3 --device gpu
//   gpuml-kmeans --write-synthetic data/X.npy      saves the workload (data/X.npy, data/X_init.npy) for peers
//   gpuml-kmeans --input new.csv --predict-with centers.npy --labels-out - --distances-out d.npy
//                                                  applies saved centers to new data (no fit)
//
// Human-readable output by default; --json prints one JSON object (as the last line of stdout). Errors go to
// stderr, with exit status 2 for a usage error and 1 for a run-time error. Output files are checked before the
// work and written together at its end (none is left half-written); a progress bar goes to stderr on a terminal.
#include <gpuml/gpuml.hpp>

#include "program.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using gpuml_program::Clock;
using gpuml_program::seconds_since;

struct Options {
  std::string input;
  std::string init = "k-means++";
  std::string n_init = "auto";
  std::string algorithm = "lloyd", e_step = "auto";
  std::string device;
  std::string labels_out, centers_out, distances_out, write_synthetic, predict_with;
  gpuml_program::CsvFlags csv;
  bool progress = false, no_progress = false;
  int n_clusters = 8;
  int max_iter = 300;
  double tol = 1e-4;
  std::uint64_t seed = 0;
  bool verbose = false, json = false, float32 = false, float64 = false, warmup = false;
  int repeat = 1;
  std::int64_t n_samples = 1'000'000;
  int n_features = 14;
  std::uint64_t data_seed = 20260127;
};

// ---- The embedded workload ----------------------------------------------------------------------------------
// Counter-based (SplitMix64 per sample, Box-Muller normals), so the bytes are the same with every compiler and
// standard library: k centers uniform in [-10, 10]^d, each sample a uniformly chosen center plus N(0, 1) noise.

struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

template <class T>
gpuml::Matrix<T> synthetic_blobs(std::int64_t n, int d, int k, std::uint64_t seed) {
  if (n < 1 || d < 1 || k < 1) throw gpuml::invalid_input("the synthetic workload needs n, d and k >= 1");
  SplitMix64 center_rng{seed};
  std::vector<double> centers(static_cast<std::size_t>(k) * d);
  for (double& c : centers) c = -10.0 + 20.0 * center_rng.uniform();
  gpuml::Matrix<T> X(n, d);
  constexpr double two_pi = 6.283185307179586;
  gpuml::parallel_chunks(n, 1 << 14, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      SplitMix64 rng{seed ^ (0xD1B54A32D192ED03ull * static_cast<std::uint64_t>(i + 1))};
      const std::size_t label = static_cast<std::size_t>(rng.next() % static_cast<std::uint64_t>(k));
      for (int j = 0; j < d; j += 2) {
        const double r = std::sqrt(-2.0 * std::log(1.0 - rng.uniform())), a = two_pi * rng.uniform();
        X(i, j) = static_cast<T>(centers[label * d + j] + r * std::cos(a));
        if (j + 1 < d) X(i, j + 1) = static_cast<T>(centers[label * d + j + 1] + r * std::sin(a));
      }
    }
  });
  return X;
}

// ---- Helpers ---------------------------------------------------------------------------------------------------

/// PATH without a .npy/.csv extension, plus `suffix` and that extension ("X.npy" -> "X_init.npy").
std::string sibling_path(const std::string& path, const std::string& suffix) {
  const std::size_t dot = path.find_last_of('.'), slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + suffix + ".npy";
  return path.substr(0, dot) + suffix + path.substr(dot);
}

const char* dtype_name(bool is_float) { return is_float ? "float32" : "float64"; }

std::string backend_device_name(const gpuml::Backend& b) {
  return b.is_host() ? std::string("host") : b.device_info().name;
}

template <class T>
int run(const Options& o, const gpuml::Backend& backend, double backend_seconds, const std::string& device_choice) {
  constexpr bool is_f32 = std::is_same_v<T, float>;
  const bool synthetic = o.input.empty();

  // Outputs first: a bad path is found before the data is read or any work done.
  gpuml_program::Outputs outputs;
  outputs.add("--labels-out", o.labels_out);
  outputs.add("--centers-out", o.centers_out);
  outputs.add("--distances-out", o.distances_out);
  if (outputs.to_stdout() && o.json) throw gpuml_program::usage_error("--json and an output to stdout (-) exclude each other");
  if (!o.distances_out.empty() && o.predict_with.empty())
    throw gpuml_program::usage_error("--distances-out needs --predict-with (distances to saved centers)");

  // Data.
  auto t0 = Clock::now();
  const gpuml::CsvOptions csv = o.csv.options();
  gpuml::Matrix<T> X = synthetic ? synthetic_blobs<T>(o.n_samples, o.n_features, o.n_clusters, o.data_seed)
                                 : gpuml::read_matrix<T>(o.input, csv);
  const double load_seconds = seconds_since(t0);
  const std::int64_t n = X.rows(), d = X.cols();
  const int k = o.n_clusters;

  if (!o.write_synthetic.empty()) {
    if (n < k) throw gpuml::invalid_input("--n-samples must be at least --n-clusters");
    const std::string init_path = sibling_path(o.write_synthetic, "_init");
    gpuml::write_matrix(o.write_synthetic, X);
    gpuml::write_matrix(init_path, gpuml::Matrix<T>(X.topRows(k)));
    if (o.json) {
      std::printf("%s\n", nlohmann::json{{"X", o.write_synthetic}, {"init", init_path}, {"n", n}, {"d", d}, {"k", k},
                                         {"dtype", dtype_name(is_f32)}, {"data_seed", o.data_seed}}
                              .dump()
                              .c_str());
    } else {
      std::printf("wrote %s (%lld x %lld %s) and %s (the first %d rows: the initial centers)\n", o.write_synthetic.c_str(),
                  static_cast<long long>(n), static_cast<long long>(d), dtype_name(is_f32), init_path.c_str(), k);
    }
    return 0;
  }

  std::vector<std::string> warnings;
  gpuml_program::collect_warnings(warnings);

  if (!o.predict_with.empty()) {  // apply saved centers: labels and, on request, the distances to every center
    if (!o.centers_out.empty()) throw gpuml_program::usage_error("--centers-out does not apply to --predict-with");
    gpuml::KMeans<T> km(gpuml::KMeansParams{}, backend);
    km.set_cluster_centers(gpuml::read_matrix<T>(o.predict_with));  // as gpuml wrote them: the CSV flags are for --input
    t0 = Clock::now();
    const gpuml::Labels labels = km.predict(X);
    const double predict_seconds = seconds_since(t0);
    outputs.set("--labels-out", [&](const std::string& path) { gpuml::write_matrix(path, labels); });
    outputs.set("--distances-out", [&](const std::string& path) { gpuml::write_matrix(path, km.transform(X)); });
    const auto written = outputs.commit();
    if (o.json) {
      std::printf("%s\n", nlohmann::json{{"program", "gpuml-kmeans"}, {"mode", "predict"}, {"centers", o.predict_with},
                                         {"n", n}, {"d", d}, {"k", km.cluster_centers().rows()},
                                         {"backend", gpuml::describe(backend)}, {"predict_seconds", predict_seconds},
                                         {"written", written}, {"warnings", warnings}}
                              .dump()
                              .c_str());
    } else if (!outputs.to_stdout()) {
      std::printf("predicted %lld labels with %lld centers from %s in %.3f s\n", static_cast<long long>(n),
                  static_cast<long long>(km.cluster_centers().rows()), o.predict_with.c_str(), predict_seconds);
      for (const auto& w : written) std::printf("written: %s\n", w.c_str());
    }
    return 0;
  }

  // Parameters.
  gpuml::KMeansParams p;
  p.n_clusters = k;
  p.max_iter = o.max_iter;
  p.tol = o.tol;
  p.random_state = o.seed;
  p.verbose = o.verbose;
  p.algorithm = o.algorithm;
  p.e_step = o.e_step == "plain"     ? gpuml::KMeansEStep::plain
             : o.e_step == "bounded" ? gpuml::KMeansEStep::bounded
                                     : gpuml::KMeansEStep::automatic;
  std::string init_desc = o.init;
  if (o.init == "first") {
    if (n < k) throw gpuml::invalid_input("--init first needs at least n_clusters samples");
    p.init_centers = X.topRows(k).template cast<double>();
    init_desc = "first " + std::to_string(k) + " samples";
  } else if (o.init == "k-means++" || o.init == "random") {
    p.init = o.init;
  } else {
    p.init_centers = gpuml::read_matrix<double>(o.init);
    init_desc = o.init;
  }
  if (o.n_init == "auto") {
    p.n_init = 0;
  } else {
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(o.n_init, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != o.n_init.size() || v < 1)
      throw gpuml_program::usage_error("--n-init must be 'auto' or a positive integer, got '" + o.n_init + "'");
    p.n_init = v;
  }
  // The progress bar: iterations of the current initialisation and its center shift.
  gpuml_program::ProgressBar bar(gpuml_program::ProgressBar::wanted(o.progress, o.no_progress) && !o.verbose,
                                 o.progress ? 0.0 : 1.0);  // asked for: from the start; on a terminal: long fits only
  p.on_iteration = [&bar](const gpuml::LloydIteration& it) {
    char status[64];
    std::snprintf(status, sizeof status, "iterations, center shift %.3g", it.center_shift);
    bar.update(it.iteration + 1, it.max_iter, status);
    return true;
  };

  if (!o.json && !outputs.to_stdout()) {
    if (synthetic)
      std::printf("data: embedded synthetic blobs, n=%lld d=%lld k=%d %s (generated in %.2f s)\n",
                  static_cast<long long>(n), static_cast<long long>(d), k, dtype_name(is_f32), load_seconds);
    else
      std::printf("data: %s, n=%lld d=%lld %s (read in %.2f s)\n", o.input.c_str(), static_cast<long long>(n),
                  static_cast<long long>(d), dtype_name(is_f32), load_seconds);
    std::printf("backend: %s\n", gpuml::describe(backend).c_str());
    std::printf("KMeans(n_clusters=%d, init=%s, n_init=%s, max_iter=%d, tol=%g, random_state=%llu)\n", k,
                init_desc.c_str(), o.n_init.c_str(), o.max_iter, o.tol, static_cast<unsigned long long>(o.seed));
    std::fflush(stdout);
  }

  gpuml::KMeans<T> km(p, backend);
  double warmup_seconds = -1;
  if (o.warmup) {
    gpuml::KMeansParams wp = p;
    wp.max_iter = 1;
    wp.verbose = false;
    gpuml::KMeans<T> w(wp, backend);
    t0 = Clock::now();
    w.fit(X);
    warmup_seconds = seconds_since(t0);
  }
  std::vector<double> times;
  std::vector<std::string> centers_each;  // every repeat's centers' fingerprint: a repeat must give the same fit
  double best_loop = 0;
  for (int r = 0; r < o.repeat; ++r) {
    t0 = Clock::now();
    km.fit(X);
    times.push_back(seconds_since(t0));
    centers_each.push_back(gpuml_program::fingerprint(
        km.cluster_centers().data(), static_cast<std::size_t>(km.cluster_centers().size()) * sizeof(T)));
    if (r == 0 || km.iteration_seconds() < best_loop) best_loop = km.iteration_seconds();
  }
  bar.finish();
  const double best = *std::min_element(times.begin(), times.end());
  const int n_iter = km.n_iter();
  // Per iteration: the Lloyd loop alone (the fit also uploads the data and runs a final E-step and the inertia).
  const double per_iter = best_loop / std::max(n_iter, 1);
  const double flops_per_iter = 2.0 * double(n) * double(k) * double(d);
  const double tflops = per_iter > 0 ? flops_per_iter / per_iter / 1e12 : 0.0;

  t0 = Clock::now();
  outputs.set("--labels-out", [&](const std::string& path) { gpuml::write_matrix(path, km.labels()); });
  outputs.set("--centers-out", [&](const std::string& path) { gpuml::write_matrix(path, km.cluster_centers()); });
  outputs.commit();
  const double write_seconds = seconds_since(t0);

  if (o.json) {
    nlohmann::json j;
    j["program"] = "gpuml-kmeans";
    j["gpuml_version"] = GPUML_VERSION_STRING;
    j["backend"] = gpuml::describe(backend);
    j["backend_kind"] = backend.is_host() ? "host" : "vulkan";
    j["device"] = backend_device_name(backend);
    j["device_choice"] = device_choice;
    j["data"] = synthetic ? std::string("synthetic") : o.input;
    j["n"] = n;
    j["d"] = d;
    j["k"] = k;
    j["dtype"] = dtype_name(is_f32);
    j["init"] = init_desc;
    j["n_init"] = o.n_init;
    j["max_iter"] = o.max_iter;
    j["tol"] = o.tol;
    j["seed"] = o.seed;
    j["n_iter"] = n_iter;
    j["inertia"] = km.inertia();
    j["e_step"] = o.e_step;
    using gpuml_program::fingerprint;
    j["labels_fnv"] = fingerprint(km.labels().data(), static_cast<std::size_t>(km.labels().size()) * sizeof(km.labels()[0]));
    j["centers_fnv"] = fingerprint(km.cluster_centers().data(), static_cast<std::size_t>(km.cluster_centers().size()) * sizeof(T));
    j["centers_fnv_each_repeat"] = centers_each;
    j["fit_seconds"] = best;
    j["iteration_seconds"] = best_loop;
    j["fit_seconds_all"] = times;
    const auto& ft = km.fit_times();  // the last fit's phases
    j["fit_times"] = {{"checks", ft.checks}, {"reserve", ft.reserve}, {"seeding", ft.seeding},       {"lloyd", ft.lloyd}, {"setup", ft.setup}, {"upload", ft.upload},
                      {"iterations", ft.iterations}, {"finish", ft.finish}, {"total", ft.total}};
    j["seconds_per_iter"] = per_iter;
    j["ms_per_iter"] = per_iter * 1e3;
    j["tflops"] = tflops;
    j["repeat"] = o.repeat;
    j["warmup_seconds"] = warmup_seconds < 0 ? nlohmann::json() : nlohmann::json(warmup_seconds);
    j["load_seconds"] = load_seconds;
    j["backend_seconds"] = backend_seconds;
    j["write_seconds"] = write_seconds;
    j["host_threads"] = gpuml::host_threads();
    j["warnings"] = warnings;
    if (backend.is_vulkan()) {  // GPU time per E-step (with partial sums), per reduction, per labelling step
      const auto& dt = km.step_times();
      if (dt.e_steps > 0 && dt.e_step_ms >= 0) {
        j["device_e_step_ms"] = dt.e_step_ms / dt.e_steps;
        j["device_reduce_ms"] = dt.reduce_ms / dt.e_steps;
        if (dt.stage_timed_steps > 0 && dt.check_ms >= 0) {  // the bounded step's dispatches, per E-step
          const double steps = dt.stage_timed_steps;
          j["device_stage_ms"] = {{"check", dt.check_ms / steps}, {"search", dt.search_ms / steps}, {"sums", dt.sums_ms / steps}};
        }
        j["device_e_step_each_ms"] = dt.e_step_each_ms;
        j["device_searched_each"] = dt.e_step_searched;
        j["device_moved_steps"] = dt.moved_steps;  // steps whose search moved the changed labels' terms
        if (!dt.shard_e_step_ms.empty()) j["device_shard_e_step_ms"] = dt.shard_e_step_ms;  // each device's total
      }
      if (dt.label_steps > 0 && dt.labels_ms >= 0) j["device_labels_ms"] = dt.labels_ms / dt.label_steps;
    }
    if (backend.is_vulkan()) {  // pipeline creation in this process (the on-disk cache makes later runs cheaper)
      j["pipelines_built"] = backend.device()->pipelines_built();
      j["pipeline_seconds"] = backend.device()->pipeline_seconds();
    }
    std::printf("%s\n", j.dump().c_str());
  } else if (!outputs.to_stdout()) {
    std::printf("n_iter: %d\ninertia: %.10g\n", n_iter, km.inertia());
    std::printf("fit: %.3f s, %.3f ms per iteration, %.3f TFLOP/s (2nkd per iteration)", best, per_iter * 1e3, tflops);
    if (o.repeat > 1) std::printf(", best of %d", o.repeat);
    std::printf("\n");
    if (!o.labels_out.empty()) std::printf("labels written to %s\n", o.labels_out.c_str());
    if (!o.centers_out.empty()) std::printf("centers written to %s\n", o.centers_out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"gpuml-kmeans: scikit-learn's KMeans (Lloyd) on a Vulkan GPU or the host.\n"
               "Without --input it runs the benchmark workload: embedded synthetic blobs, n=1,000,000 (--n-samples), "
               "d=14, k=127, init = the first 127 samples, max_iter=100, tol=0, n_init=1, float32."};
  app.add_option("--input", o.input, "data file (.npy float32/float64 or .csv); omit for the embedded workload");
  gpuml_program::add_version(app, "gpuml-kmeans");
  app.add_option("--n-clusters", o.n_clusters, "number of clusters (default 8; 127 for the embedded workload)")
      ->check(gpuml_program::at_least(1));
  app.add_option("--init", o.init,
                 "k-means++ | random | first (the first n_clusters samples) | PATH to initial centers (.npy/.csv) "
                 "(default k-means++; first for the embedded workload)");
  app.add_option("--n-init", o.n_init, "auto | N (number of initialisations; default auto)");
  app.add_option("--max-iter", o.max_iter, "maximum Lloyd iterations (default 300; 100 for the embedded workload)")
      ->check(gpuml_program::at_least(1));
  app.add_option("--tol", o.tol, "relative tolerance on the center shift (default 1e-4; 0 for the embedded workload)")
      ->check(gpuml_program::at_least(0));
  app.add_option("--seed", o.seed, "random_state (default 0)");
  app.add_option("--algorithm", o.algorithm, "lloyd | elkan (both give Lloyd's iterations exactly; default lloyd)")
      ->check(CLI::IsMember({"lloyd", "elkan"}));
  app.add_option("--e-step", o.e_step,
                 "auto | plain | bounded: the device's E-step (the same result bit for bit; default auto: bounded "
                 "where it pays, unless GPUML_KMEANS_BOUNDS=0)")
      ->check(CLI::IsMember({"auto", "plain", "bounded"}));
  app.add_flag("--verbose", o.verbose, "print scikit-learn's per-iteration messages");
  app.add_option("--device", o.device,
                 "auto | gpu | discrete | integrated | cpu | host | N | name (default: $GPUML_DEVICE, else auto)");
  app.add_option("--labels-out", o.labels_out, "write the labels (.npy or .csv; - for CSV on stdout)");
  app.add_option("--centers-out", o.centers_out, "write the cluster centers (.npy or .csv; - for CSV on stdout)");
  app.add_option("--predict-with", o.predict_with,
                 "apply saved centers (.npy/.csv) to --input: write --labels-out (and --distances-out); no fit");
  app.add_option("--distances-out", o.distances_out,
                 "with --predict-with: write each sample's distances to every center (n x k; .npy or .csv)");
  app.add_flag("--progress", o.progress, "draw a progress bar on stderr (default: when stderr is a terminal)");
  app.add_flag("--no-progress", o.no_progress, "never draw the progress bar");
  o.csv.add_to(app);
  app.add_flag("--json", o.json, "print one JSON object with the results and timings");
  app.add_option("--repeat", o.repeat, "fit N times and report the best time (default 1)")->check(gpuml_program::at_least(1));
  app.add_flag("--warmup", o.warmup, "run an untimed 1-iteration fit first (builds GPU pipelines, warms caches)");
  auto* f32 = app.add_flag("--float32", o.float32, "compute in float32 (default: the .npy dtype; float64 for CSV)");
  app.add_flag("--float64", o.float64, "compute in float64 (the embedded workload is float32 otherwise)")->excludes(f32);
  app.add_option("--n-samples", o.n_samples, "samples in the embedded workload (default 1,000,000)")
      ->check(gpuml_program::at_least(1));
  app.add_option("--n-features", o.n_features, "features in the embedded workload (default 14)")
      ->check(gpuml_program::at_least(1));
  app.add_option("--data-seed", o.data_seed, "seed of the embedded workload's generator");
  app.add_option("--write-synthetic", o.write_synthetic,
                 "write the embedded workload to PATH (.npy/.csv) and its init (the first k rows) to PATH_init, "
                 "then exit");
  return gpuml_program::run("gpuml-kmeans", app, argc, argv, [&] {
    const bool synthetic = o.input.empty();
    if (synthetic) {  // the benchmark workload, unless a flag says otherwise
      if (!app.count("--n-clusters")) o.n_clusters = 127;
      if (!app.count("--init")) o.init = "first";
      if (!app.count("--max-iter")) o.max_iter = 100;
      if (!app.count("--tol")) o.tol = 0.0;
    } else if (!o.write_synthetic.empty()) {
      throw gpuml_program::usage_error("--write-synthetic writes the embedded workload; it does not take --input");
    }
    if (!o.predict_with.empty() && synthetic) throw gpuml_program::usage_error("--predict-with needs --input");

    const bool use_float = gpuml_program::use_float32(o.float32, o.float64, o.input);

    // The backend: --device names one (an absent device is an error); otherwise GPUML_DEVICE / automatic.
    const std::string choice = gpuml_program::device_choice(o.device);
    const auto t0 = Clock::now();
    gpuml::Backend backend = o.write_synthetic.empty() ? gpuml_program::backend_for(o.device) : gpuml::Backend::host();
    const double backend_seconds = seconds_since(t0);

    return use_float ? run<float>(o, backend, backend_seconds, choice) : run<double>(o, backend, backend_seconds, choice);
  });
}
