// gpuml-tune: finds the fastest tile of each tunable kernel, for each problem-shape class, on this device, and
// stores the winners where gpuml looks first: <cache dir>/tuning.json, next to the pipeline cache (GPUML_CACHE_DIR,
// else XDG_CACHE_HOME/gpuml, else ~/.cache/gpuml), keyed by device UUID, driver version and driver info. Later
// fits on this device and driver use them without being asked.
//
//   gpuml-tune                                  the default device (GPUML_DEVICE, else auto), within 45 s
//   gpuml-tune --device cpu                     lavapipe (for testing: the automatic choice never picks it)
//   gpuml-tune --device gpu --json              one JSON object with every candidate's time
//   gpuml-tune --kernel kmeans --shape 'd<=32,k<=128' --budget-seconds 20 --no-store
//   gpuml-tune --dry-run                        the candidates and which ones the device can run; times nothing
//   gpuml-tune --device cpu --min-gain 0        store the fastest even where it ties the default
//
// For each kernel and shape class it prints each candidate's time per call (for k-means: one E-step with the
// partial sums and their read-back), then the catalogue default, the winner and the worst; with --json the same
// numbers as default_ms, winner_ms and worst_ms (for k-NN: one search of a database kept on the device, select and
// merge kernels, GPU time where the device has timestamps). The winner is the fastest candidate if it beats the
// default by --min-gain per cent (default: 5 on CPU devices, 0 on GPUs) in best times and, with a margin, in the
// median ratio of back-to-back pairs of calls (paired_ratio), else the default; the report names the fastest too
// (fastest, fastest_ms). To compare whole fits afterwards:
//   gpuml-kmeans --device gpu --json                    uses the stored winner
//   GPUML_TUNING=0 gpuml-kmeans --device gpu --json     ignores the store: the catalogue default
//   GPUML_KMEANS_TILE=64,2,8,16,128 gpuml-kmeans ...     one given tile (e.g. the worst)
//   GPUML_KNN_TILE=16,16,8,8,16,2048 gpuml-knn ...       likewise for k-NN (wx,wy,tm,tn,bk[,groups])
// Delete tuning.json to forget the winners. Errors go to stderr with exit status 2.
#include <gpuml/gpuml.hpp>
#include <gpuml/tuning/tuner.hpp>

#include "program.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string device, kernel = "all";
  std::vector<std::string> shapes;
  double budget_seconds = 45;
  double min_gain_percent = -1;  // negative: the device's default
  bool json = false, float64 = false, no_store = false, dry_run = false, verbose = false;
};

double ms_of(const gpuml::tuning::ShapeResult& r, int i) { return i >= 0 ? r.candidates[i].ms : -1; }

nlohmann::json to_json(const gpuml::tuning::TuneReport& report, const gpuml::vulkan::DeviceInfo& info) {
  nlohmann::json j;
  j["program"] = "gpuml-tune";
  j["gpuml_version"] = GPUML_VERSION_STRING;
  j["device"] = report.device;
  j["device_class"] = report.device_class;
  j["driver"] = report.driver;
  j["device_uuid"] = gpuml::tuning::uuid_hex(info.device_uuid);
  j["driver_version"] = info.driver_version;
  j["seconds"] = report.seconds;
  j["store"] = report.store_path.empty() ? nlohmann::json() : nlohmann::json(report.store_path);
  j["stored"] = report.stored;
  j["shapes"] = nlohmann::json::array();
  for (const auto& r : report.shapes) {
    nlohmann::json s;
    s["kernel"] = r.kernel;
    s["shape"] = r.shape;
    s["scalar"] = r.scalar;
    s["problem"] = r.problem;
    s["seconds"] = r.seconds;
    s["default"] = r.candidates.empty() ? "" : r.candidates[0].text;
    s["default_ms"] = r.candidates.empty() || !r.candidates[0].timed() ? nlohmann::json() : nlohmann::json(r.candidates[0].ms);
    s["winner"] = r.winner >= 0 ? nlohmann::json(r.candidates[r.winner].text) : nlohmann::json();
    s["winner_ms"] = r.winner >= 0 ? nlohmann::json(ms_of(r, r.winner)) : nlohmann::json();
    s["fastest"] = r.fastest >= 0 ? nlohmann::json(r.candidates[r.fastest].text) : nlohmann::json();
    s["fastest_ms"] = r.fastest >= 0 ? nlohmann::json(ms_of(r, r.fastest)) : nlohmann::json();
    s["min_gain"] = r.min_gain;
    s["paired_ratio"] = r.paired_ratio >= 0 ? nlohmann::json(r.paired_ratio) : nlohmann::json();
    s["worst"] = r.worst >= 0 ? nlohmann::json(r.candidates[r.worst].text) : nlohmann::json();
    s["worst_ms"] = r.worst >= 0 ? nlohmann::json(ms_of(r, r.worst)) : nlohmann::json();
    s["stored"] = r.stored;
    s["candidates"] = nlohmann::json::array();
    for (const auto& c : r.candidates)
      s["candidates"].push_back({{"tile", c.text}, {"params", c.params}, {"status", c.status},
                                 {"ms", c.timed() ? nlohmann::json(c.ms) : nlohmann::json()}});
    j["shapes"].push_back(std::move(s));
  }
  return j;
}

void print_text(const gpuml::tuning::TuneReport& report) {
  std::printf("device: %s, class %s, driver %s\n", report.device.c_str(), report.device_class.c_str(), report.driver.c_str());
  for (const auto& r : report.shapes) {
    std::printf("\n%s  %s  %s  (%s, %.1f s)\n", r.kernel.c_str(), r.shape.c_str(), r.scalar.c_str(),
                r.problem.empty() ? "not run" : r.problem.c_str(), r.seconds);
    const double base = r.candidates.empty() ? -1 : r.candidates[0].ms;
    std::printf("  %-22s %10s %10s\n", "tile", "ms/call", "/default");
    for (std::size_t i = 0; i < r.candidates.size(); ++i) {
      const auto& c = r.candidates[i];
      std::string marks = i == 0 ? " default" : "";
      if (static_cast<int>(i) == r.winner) marks += " winner";
      if (static_cast<int>(i) == r.fastest && r.fastest != r.winner) marks += " fastest";
      if (static_cast<int>(i) == r.worst) marks += " worst";
      if (c.timed() && base > 0) std::printf("  %-22s %10.3f %10.3f%s\n", c.text.c_str(), c.ms, c.ms / base, marks.c_str());
      else if (c.timed()) std::printf("  %-22s %10.3f %10s%s\n", c.text.c_str(), c.ms, "-", marks.c_str());
      else std::printf("  %-22s %10s %10s  %s%s\n", c.text.c_str(), "-", "-", c.status.c_str(), marks.c_str());
    }
    if (r.winner >= 0 && base > 0)
      std::printf("  default %s: %.3f ms; winner %s: %.3f ms; worst %s: %.3f ms%s\n", r.candidates[0].text.c_str(), base,
                  r.candidates[r.winner].text.c_str(), ms_of(r, r.winner), r.candidates[r.worst].text.c_str(),
                  ms_of(r, r.worst), r.stored ? " (winner stored)" : "");
    if (r.fastest >= 0 && r.fastest != r.winner)
      std::printf("  kept the default: %s is not faster by %g%%%s\n", r.candidates[r.fastest].text.c_str(),
                  100 * r.min_gain, r.paired_ratio >= 0 ? " in back-to-back pairs" : "");
    if (r.paired_ratio >= 0)
      std::printf("  %s / default in back-to-back pairs: %.3f (median)\n", r.candidates[r.fastest].text.c_str(),
                  r.paired_ratio);
  }
  if (report.store_path.empty()) std::printf("\nnothing stored\n");
  else std::printf("\nstored %d winner(s) in %s\n", report.stored, report.store_path.c_str());
  std::printf("%.1f s\n", report.seconds);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"gpuml-tune: times each kernel's candidate tiles on this device, per problem-shape class, and stores "
               "the fastest next to the pipeline cache, where gpuml uses them from then on."};
  gpuml_program::add_version(app, "gpuml-tune");
  app.add_option("--device", o.device, "auto | gpu | discrete | integrated | cpu | N | name (default: $GPUML_DEVICE, else auto)");
  app.add_option("--kernel", o.kernel, "kmeans | knn | all (default all)")->check(CLI::IsMember({"kmeans", "knn", "all"}));
  app.add_option("--shape", o.shapes, "shape class(es) to tune, e.g. 'd<=32,k<=128' (default: all)");
  app.add_option("--budget-seconds", o.budget_seconds, "time for the whole run (default 45)")->check(gpuml_program::at_least(0.001));
  app.add_option("--min-gain", o.min_gain_percent,
                 "per cent by which a candidate must beat the default to win (default: 5 on CPU devices, 0 on GPUs)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_flag("--float64", o.float64, "also tune float64 (on devices with shaderFloat64)");
  app.add_flag("--no-store", o.no_store, "time the candidates but store nothing");
  app.add_flag("--dry-run", o.dry_run, "list the candidates and the device's verdict on each; time nothing, store nothing");
  app.add_flag("--json", o.json, "print one JSON object");
  app.add_flag("--verbose", o.verbose, "progress on stderr, one line per candidate");
  return gpuml_program::run("gpuml-tune", app, argc, argv, [&] {
    const gpuml::Backend backend = gpuml_program::backend_for(o.device);
    if (!backend.is_vulkan())
      throw gpuml::unsupported("no Vulkan device to tune (the host backend has no tiles; --device cpu tunes lavapipe)");
    gpuml::tuning::TuneOptions options;
    options.budget_seconds = o.budget_seconds;
    if (o.min_gain_percent >= 0) options.min_gain = o.min_gain_percent / 100;
    if (o.kernel == "kmeans") options.kernels = {gpuml::kKMeansKernel};
    if (o.kernel == "knn") options.kernels = {gpuml::kernels::KnnTileTraits::kernel};
    options.shapes = o.shapes;
    options.float64 = o.float64;
    options.store = !o.no_store;
    options.dry_run = o.dry_run;
    if (o.verbose) options.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    const auto report = gpuml::tuning::tune(*backend.device(), options);
    if (o.json) std::printf("%s\n", to_json(report, backend.device()->info()).dump().c_str());
    else print_text(report);
    return 0;
  });
}
