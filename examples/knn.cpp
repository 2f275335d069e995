// gpuml-knn: brute-force k nearest neighbours (scikit-learn's NearestNeighbors, algorithm="brute") on any backend.
//
//   gpuml-knn                                           embedded data: database 100,000 x 128, 1,000 queries, k = 10
//   gpuml-knn --database db.npy --queries q.npy --k 10 --indices-out idx.npy --distances-out dist.npy
//   gpuml-knn --database db.npy --k 5                   each training point's neighbours, the point itself dropped
//   gpuml-knn --database db.npy --queries q.npy --k 100 --json --repeat 3 --device gpu
//
// Distances are those of the metric (Euclidean, not squared, by default, as scikit-learn). Human-readable output
// by default; --json prints one JSON object. Errors go to stderr with exit status 2.
#include <gpuml/gpuml.hpp>

#include "program.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace {

using gpuml_program::Clock;
using gpuml_program::seconds_since;

struct Options {
  std::string database, queries, metric = "euclidean", device, indices_out, distances_out;
  int k = 5;
  bool json = false, float32 = false, float64 = false, warmup = false, progress = false, no_progress = false;
  gpuml_program::CsvFlags csv;
  int repeat = 1;
  std::int64_t n_database = 100'000, n_queries = 1'000;
  int n_features = 128;
  std::uint64_t data_seed = 20260127;
};

/// Counter-based uniform [0, 1) data (SplitMix64 per row): the same bytes with every compiler and library.
template <class T>
gpuml::Matrix<T> synthetic_uniform(std::int64_t n, int d, std::uint64_t seed) {
  if (n < 1 || d < 1) throw gpuml::invalid_input("the synthetic data need at least one row and one feature");
  gpuml::Matrix<T> X(n, d);
  gpuml::parallel_chunks(n, 1 << 12, [&](std::int64_t, std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      std::uint64_t state = seed ^ (0xD1B54A32D192ED03ull * static_cast<std::uint64_t>(i + 1));
      for (int j = 0; j < d; ++j) {
        std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        X(i, j) = static_cast<T>(static_cast<double>(z >> 11) * 0x1.0p-53);
      }
    }
  });
  return X;
}

template <class T>
int run(const Options& o, const gpuml::Backend& backend, const std::string& device_choice) {
  constexpr bool is_f32 = std::is_same_v<T, float>;
  const bool synthetic = o.database.empty();
  gpuml_program::Outputs outputs;  // checked before any data is read
  outputs.add("--indices-out", o.indices_out);
  outputs.add("--distances-out", o.distances_out);
  if (outputs.to_stdout() && o.json) throw gpuml_program::usage_error("--json and an output to stdout (-) exclude each other");
  const gpuml::CsvOptions csv = o.csv.options();
  auto t0 = Clock::now();
  const gpuml::Matrix<T> db = synthetic ? synthetic_uniform<T>(o.n_database, o.n_features, o.data_seed)
                                        : gpuml::read_matrix<T>(o.database, csv);
  std::optional<gpuml::Matrix<T>> queries;
  if (synthetic) queries = synthetic_uniform<T>(o.n_queries, o.n_features, o.data_seed + 1);
  else if (!o.queries.empty()) queries = gpuml::read_matrix<T>(o.queries, csv);
  const double load_seconds = seconds_since(t0);
  const bool self = !queries.has_value();
  const std::int64_t n_db = db.rows(), d = db.cols(), n_q = self ? n_db : queries->rows();

  std::vector<std::string> warnings;
  gpuml_program::collect_warnings(warnings);

  if (!o.json && !outputs.to_stdout()) {
    if (synthetic)
      std::printf("data: embedded uniform [0, 1), database %lld x %lld, %lld queries, %s\n", static_cast<long long>(n_db),
                  static_cast<long long>(d), static_cast<long long>(n_q), is_f32 ? "float32" : "float64");
    else
      std::printf("data: database %s (%lld x %lld), queries %s (%lld), %s (read in %.2f s)\n", o.database.c_str(),
                  static_cast<long long>(n_db), static_cast<long long>(d),
                  self ? "= the database, each point itself dropped" : o.queries.c_str(), static_cast<long long>(n_q),
                  is_f32 ? "float32" : "float64", load_seconds);
    std::printf("backend: %s\n", gpuml::describe(backend).c_str());
    std::printf("NearestNeighbors(n_neighbors=%d, metric=%s, algorithm=brute)\n", o.k, o.metric.c_str());
    std::fflush(stdout);
  }

  gpuml::NeighborsParams p;
  p.n_neighbors = o.k;
  p.metric = o.metric;
  // The progress bar: query rows times database blocks searched, on stderr (a terminal, or --progress).
  gpuml_program::ProgressBar bar(gpuml_program::ProgressBar::wanted(o.progress, o.no_progress), o.progress ? 0.0 : 1.0);
  p.on_progress = [&bar](const gpuml::WorkProgress& w) {
    bar.update(static_cast<std::int64_t>(w.done), static_cast<std::int64_t>(w.total), "of the search");
    return true;
  };
  gpuml::NearestNeighbors<T> nn(p, backend);
  t0 = Clock::now();
  nn.fit(db);
  const double fit_seconds = seconds_since(t0);
  auto search = [&] { return self ? nn.kneighbors() : nn.kneighbors(*queries); };

  double warmup_seconds = -1;
  if (o.warmup) {
    t0 = Clock::now();
    if (self) (void)nn.kneighbors_self(o.k);
    else (void)nn.kneighbors(queries->topRows(std::min<std::int64_t>(n_q, 256)));
    warmup_seconds = seconds_since(t0);
  }
  std::vector<double> times, device_ms;
  std::vector<gpuml::KnnSearchStats::Phases> phases;
  std::uint64_t list_batches = 0, list_overflows = 0;
  std::optional<gpuml::KnnResult<T>> result;
  for (int r = 0; r < o.repeat; ++r) {
    t0 = Clock::now();
    auto res = search();
    times.push_back(seconds_since(t0));
    device_ms.push_back(res.stats.device_ms);
    phases.push_back(res.stats.ms);
    list_batches += res.stats.list_batches;
    list_overflows += res.stats.list_overflows;
    if (!result) result = std::move(res);
  }
  bar.finish();
  const double best = *std::min_element(times.begin(), times.end());
  const double qps = best > 0 ? double(n_q) / best : 0.0;
  // Distance work of brute force: 2 * n_db * n_queries * d flops (the inner products).
  const double tflops = best > 0 ? 2.0 * double(n_db) * double(n_q) * double(d) / best / 1e12 : 0.0;

  outputs.set("--indices-out", [&](const std::string& path) { gpuml::write_matrix(path, result->indices); });
  outputs.set("--distances-out", [&](const std::string& path) { gpuml::write_matrix(path, result->distances); });
  outputs.commit();

  if (o.json) {
    nlohmann::json j;
    j["program"] = "gpuml-knn";
    j["gpuml_version"] = GPUML_VERSION_STRING;
    j["backend"] = gpuml::describe(backend);
    j["backend_kind"] = backend.is_host() ? "host" : "vulkan";
    j["device"] = backend.is_host() ? std::string("host") : backend.device_info().name;
    j["device_choice"] = device_choice;
    j["database"] = synthetic ? std::string("synthetic") : o.database;
    j["queries"] = synthetic ? std::string("synthetic") : (self ? std::string("self") : o.queries);
    j["n_db"] = n_db;
    j["n_queries"] = n_q;
    j["d"] = d;
    j["k"] = o.k;
    j["metric"] = o.metric;
    j["dtype"] = is_f32 ? "float32" : "float64";
    j["fit_seconds"] = fit_seconds;  // on a Vulkan backend: includes the upload of the database
    j["search_seconds"] = best;
    j["search_seconds_all"] = times;
    // GPU time of the search kernels alone (timestamps), per repeat; null on the host backend.
    j["device_ms_all"] = backend.is_host() ? nlohmann::json() : nlohmann::json(device_ms);
    // Where the fastest repeat's time went (KnnSearchStats::Phases), milliseconds; null where it did not run on a
    // device (the host backend, or a search the device could not run).
    const std::size_t fastest = static_cast<std::size_t>(std::min_element(times.begin(), times.end()) - times.begin());
    if (device_ms[fastest] < 0 && phases[fastest].total == 0) {
      j["phases_ms"] = nullptr;
    } else {
      const auto& ph = phases[fastest];
      nlohmann::json on_device, on_host;
      for (auto [name, v] : {std::pair{"load", ph.load}, {"sample", ph.sample}, {"bound", ph.bound}, {"scan", ph.scan},
                             {"gather", ph.gather}, {"read", ph.read}})
        on_device[name] = v;
      for (auto [name, v] : {std::pair{"setup", ph.setup}, {"pack", ph.pack}, {"wait", ph.wait}, {"merge", ph.merge},
                             {"finish", ph.finish}, {"total", ph.total}})
        on_host[name] = v;
      j["phases_ms"] = {{"device", on_device}, {"host", on_host}};
    }
    // (block, query batch) searches finished from candidate lists, and those whose lists overflowed (all repeats).
    j["list_batches"] = list_batches;
    j["list_overflows"] = list_overflows;
    j["seconds"] = best;
    j["queries_per_second"] = qps;
    j["tflops"] = tflops;
    j["repeat"] = o.repeat;
    j["warmup_seconds"] = warmup_seconds < 0 ? nlohmann::json() : nlohmann::json(warmup_seconds);
    j["load_seconds"] = load_seconds;
    j["host_threads"] = gpuml::host_threads();
    j["warnings"] = warnings;
    std::printf("%s\n", j.dump().c_str());
  } else if (!outputs.to_stdout()) {
    std::printf("search: %.3f s (%.0f queries/s, %.3f TFLOP/s counting 2 * n_db * n_queries * d)", best, qps, tflops);
    if (o.repeat > 1) std::printf(", best of %d", o.repeat);
    std::printf("\nfit (stores the database%s): %.3f s\n", backend.is_host() ? "" : " on the device", fit_seconds);
    const int show = static_cast<int>(std::min<std::int64_t>(result->indices.cols(), 5));
    std::printf("query 0, nearest %d:", show);
    for (int c = 0; c < show; ++c)
      std::printf(" %lld (%.4g)", static_cast<long long>(result->indices(0, c)), double(result->distances(0, c)));
    std::printf("\n");
    if (!o.indices_out.empty()) std::printf("indices written to %s\n", o.indices_out.c_str());
    if (!o.distances_out.empty()) std::printf("distances written to %s\n", o.distances_out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"gpuml-knn: brute-force k nearest neighbours (scikit-learn's NearestNeighbors) on a Vulkan GPU or the "
               "host.\nWithout --database it searches embedded uniform data: database 100,000 x 128, 1,000 queries, "
               "k=10."};
  gpuml_program::add_version(app, "gpuml-knn");
  app.add_option("--database", o.database, "database file (.npy float32/float64 or .csv); omit for embedded data");
  app.add_option("--queries", o.queries,
                 "query file (.npy/.csv); omit to query the database itself, each point dropped from its own list");
  app.add_option("--k", o.k, "neighbours per query (default 5; 10 for the embedded data)")->check(gpuml_program::at_least(1));
  app.add_option("--metric", o.metric,
                 "euclidean | sqeuclidean | manhattan | cosine | ... (scikit-learn's names; default euclidean)");
  app.add_option("--device", o.device,
                 "auto | gpu | discrete | integrated | cpu | host | N | name (default: $GPUML_DEVICE, else auto)");
  app.add_option("--indices-out", o.indices_out, "write the neighbour indices (int64; .npy or .csv; - for CSV on stdout)");
  app.add_option("--distances-out", o.distances_out, "write the neighbour distances (.npy or .csv; - for CSV on stdout)");
  o.csv.add_to(app);
  app.add_flag("--json", o.json, "print one JSON object with the results and timings");
  app.add_option("--repeat", o.repeat, "search N times and report the best time (default 1)")->check(gpuml_program::at_least(1));
  app.add_flag("--progress", o.progress, "draw a progress bar on stderr (default: when stderr is a terminal)");
  app.add_flag("--no-progress", o.no_progress, "never draw the progress bar");
  app.add_flag("--warmup", o.warmup, "run an untimed search of a few queries first (builds GPU pipelines)");
  auto* f32 = app.add_flag("--float32", o.float32, "compute in float32 (default: the .npy dtype; float64 for CSV)");
  app.add_flag("--float64", o.float64, "compute in float64 (the embedded data are float32 otherwise)")->excludes(f32);
  app.add_option("--n-database", o.n_database, "rows of the embedded database (default 100,000)")
      ->check(gpuml_program::at_least(1));
  app.add_option("--n-queries", o.n_queries, "embedded queries (default 1,000)")->check(gpuml_program::at_least(1));
  app.add_option("--n-features", o.n_features, "features of the embedded data (default 128)")->check(gpuml_program::at_least(1));
  app.add_option("--data-seed", o.data_seed, "seed of the embedded data's generator");
  return gpuml_program::run("gpuml-knn", app, argc, argv, [&] {
    const bool synthetic = o.database.empty();
    if (synthetic && !o.queries.empty()) throw gpuml_program::usage_error("--queries needs --database");
    if (synthetic && !app.count("--k")) o.k = 10;
    try {
      (void)gpuml::parse_metric(o.metric);  // an unknown metric fails before any data is read
    } catch (const gpuml::invalid_input& e) {
      throw gpuml_program::usage_error(std::string("--metric: ") + e.what());
    }

    const bool use_float = gpuml_program::use_float32(o.float32, o.float64, o.database);
    const std::string choice = gpuml_program::device_choice(o.device);
    const gpuml::Backend backend = gpuml_program::backend_for(o.device);
    return use_float ? run<float>(o, backend, choice) : run<double>(o, backend, choice);
  });
}
