// The tuner: for each kernel, shape class and scalar type, times the candidate parameter sets on the user's
// device and stores the fastest in the tuning store (policy/store.hpp), where the kernels' default policies find
// it from then on, in this process and later ones.
//
//   #include <gpuml/tuning/tuner.hpp>   (not part of <gpuml/gpuml.hpp>: it instantiates every kernel's bench)
//   auto report = gpuml::tuning::tune(*gpuml::select_backend("gpu").device(), {.budget_seconds = 45});
//
// Per shape class: the representative problem is sized on the device (a probe with the catalogue's default,
// then scaled until one call takes a few milliseconds, within the kernel's memory bound; a kernel whose size range
// is one size skips the probe on CPU devices); every candidate that the kernel's misfit check accepts is timed
// (median of a few calls after a warm-up); the default and the three fastest are then timed again in turn and keep
// their best time, so the winner has beaten the default under the same conditions. The winner must beat the
// default by TuneOptions::min_gain (5% on CPU devices, none on GPUs), both in best times and in the median ratio of
// back-to-back pairs of calls, else the default is kept: on a few shared CPU cores timings vary by several per
// cent and with the machine's other load, and a near tie on the representative problem can go either way on
// other problems of the class. A time budget bounds the whole run: each shape class gets an equal share of what is
// left, and candidates past it are reported as skipped.
//
// Adding a kernel: describe it as a TunableKernel (tuning/tunable.hpp; tuning/kmeans.hpp and tuning/knn.hpp are
// the examples), add it to tunable_kernels() below, and have its default policy look up
// stored_params(device, {name, shape_class(problem), scalar_name<T>()}) before its catalogue default, checking
// the stored parameters with the same misfit function before use.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/policy/device_class.hpp>
#include <gpuml/tuning/kmeans.hpp>
#include <gpuml/tuning/knn.hpp>
#include <gpuml/policy/store.hpp>
#include <gpuml/tuning/tunable.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace gpuml::tuning {

/// Every kernel the tuner knows.
inline std::vector<TunableKernel> tunable_kernels() { return {kmeans_tunable(), knn_tunable()}; }

struct TuneOptions {
  double budget_seconds = 45;         // the whole run; each shape class gets an equal share of what is left
  std::vector<std::string> kernels;   // kernels to tune by name (empty: all)
  std::vector<std::string> shapes;    // shape classes to tune (empty: all of each kernel's)
  bool float64 = false;               // also tune float64, on devices with shaderFloat64
  bool store = true;                  // write the winners to the tuning store
  std::string store_path;             // empty: TuningStore::default_path()
  bool dry_run = false;               // check and list the candidates, time nothing
  double min_gain = -1;               // a candidate replaces the default only when this much faster (0.05: 5%);
                                      // negative: the device's default, 5% on CPU devices and 0 on GPUs
  std::function<void(const std::string&)> progress;  // one line per step, as it happens
};

struct CandidateResult {
  Params params;
  std::string text;    // the kernel's description of params
  std::string status;  // "timed", "rejected: <why>", "skipped: time budget", "failed: <what>", "not timed (dry run)"
  double ms = -1;      // milliseconds per call, when timed
  bool timed() const { return ms >= 0; }
};

struct ShapeResult {
  std::string kernel, shape, scalar, problem;
  std::vector<CandidateResult> candidates;  // [0]: the catalogue's default
  int winner = -1, worst = -1;              // indices into candidates; -1 when nothing was timed
  int fastest = -1;                         // the fastest timed candidate: the winner, unless it did not beat the
                                            // default by min_gain and the default was kept
  double min_gain = 0;                      // the margin applied
  double paired_ratio = -1;                 // the fastest's median time ratio to the default in back-to-back pairs,
                                            // where that check ran (a margin, and the fastest not the default)
  bool stored = false;
  double seconds = 0;
};

struct TuneReport {
  std::string device, device_class, driver;
  std::vector<ShapeResult> shapes;
  std::string store_path;  // where the winners were written; empty when nothing was
  int stored = 0;          // entries written
  double seconds = 0;
};

namespace tuner_detail {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

template <class C>
bool selected(const C& chosen, const std::string& name) {
  return chosen.empty() || std::find(chosen.begin(), chosen.end(), name) != chosen.end();
}

/// The margin a candidate needs over the default on this device (TuneOptions::min_gain).
inline double min_gain(const vulkan::DeviceInfo& info, const TuneOptions& options) {
  if (options.min_gain >= 0) return options.min_gain;
  return info.type == vulkan::DeviceType::cpu ? 0.05 : 0.0;
}

/// Times one candidate into `c`; a failure is recorded, not thrown.
inline void time_candidate(ShapeBench& bench, CandidateResult& c, int reps, int warmups = 1) {
  try {
    const double ms = bench.time_ms(c.params, warmups, reps);
    c.ms = c.timed() ? std::min(c.ms, ms) : ms;
    c.status = "timed";
  } catch (const std::exception& e) {
    c.status = std::string("failed: ") + e.what();
    c.ms = -1;
  }
}

inline void tune_shape(vulkan::Device& device, const TunableKernel& kernel, ShapeResult& r, double budget_s,
                       const TuneOptions& options) {
  const auto& info = device.info();
  const auto t0 = Clock::now();
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(kernel.name + " " + r.shape + " " + r.scalar + ": " + line);
  };
  std::vector<std::size_t> runnable;
  for (auto& p : kernel.candidates(info, r.shape)) {
    CandidateResult c{p, kernel.describe(p), "", -1};
    const std::string why = kernel.misfit(info, p, r.shape, r.scalar);
    c.status = why.empty() ? "not timed (dry run)" : "rejected: " + why;
    if (why.empty()) runnable.push_back(r.candidates.size());
    r.candidates.push_back(std::move(c));
  }
  if (options.dry_run || runnable.empty()) return;

  // Size the problem: a probe with the first runnable candidate (the default, normally), then scale so one call
  // takes about `target` ms, less when the budget is tight for this many candidates.
  const bool cpu = info.type == vulkan::DeviceType::cpu;
  const int reps = cpu ? 3 : 5;
  const double target = std::min(cpu ? 20.0 : 4.0, 1e3 * budget_s / (4.0 * runnable.size() * (reps + 1)));
  const RowRange range = kernel.rows(info, r.shape, r.scalar);
  std::uint64_t rows = range.probe;
  std::unique_ptr<ShapeBench> bench;
  try {
    bench = kernel.bench(device, r.shape, r.scalar, rows);
    // A range of one size has nothing to scale: on CPU devices, where such a call can take 100 ms, the probe is
    // skipped; on GPUs it still runs (it also warms the device up before the first candidate).
    const bool probe = !(cpu && range.probe >= range.max);
    const double probe_ms = probe ? bench->time_ms(r.candidates[runnable[0]].params, 1, reps) : 0;
    const auto wanted = static_cast<std::uint64_t>(static_cast<double>(rows) * target / std::max(probe_ms, 1e-3));
    if (probe && wanted > rows + rows / 4) {
      rows = std::max(rows, std::min(wanted, range.max) / 1024 * 1024);
      bench.reset();  // free the probe's data first
      bench = kernel.bench(device, r.shape, r.scalar, rows);
    }
  } catch (const std::exception& e) {
    for (auto i : runnable) r.candidates[i].status = std::string("failed: ") + e.what();
    return;
  }
  r.problem = bench->problem();
  say(r.problem + ", " + std::to_string(runnable.size()) + " candidates");

  for (auto i : runnable) {
    auto& c = r.candidates[i];
    if (seconds_since(t0) > budget_s && i != 0) {
      c.status = "skipped: time budget";
      continue;
    }
    time_candidate(*bench, c, reps);
    say(c.text + ": " + (c.timed() ? std::to_string(c.ms) + " ms" : c.status));
  }

  // Confirm: the default and the three fastest others, timed again in turn; each keeps its best time. On CPU
  // devices without a warm-up (each candidate's pipeline is built by now, and a call can take 100 ms).
  std::vector<std::size_t> order;
  for (std::size_t i = 1; i < r.candidates.size(); ++i)
    if (r.candidates[i].timed()) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return r.candidates[a].ms < r.candidates[b].ms; });
  order.resize(std::min<std::size_t>(order.size(), 3));
  if (r.candidates[0].timed()) order.insert(order.begin(), 0);
  for (int round = 0; round < 2 && order.size() > 1 && seconds_since(t0) < 1.25 * budget_s; ++round)
    for (auto i : order) time_candidate(*bench, r.candidates[i], reps, cpu ? 0 : 1);

  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const auto& c = r.candidates[i];
    if (!c.timed()) continue;
    if (r.fastest < 0 || c.ms < r.candidates[r.fastest].ms) r.fastest = static_cast<int>(i);
    if (r.worst < 0 || c.ms > r.candidates[r.worst].ms) r.worst = static_cast<int>(i);
  }
  // The winner: the fastest, if it beats the default by the margin; else the default. With a margin, the lead is
  // also checked in pairs: single calls of the default and the fastest back to back (in alternating order), whose
  // median time ratio must show the same gain. Best times can favour whichever candidate ran while the machine
  // was quiet; a pair shares the machine's load.
  r.min_gain = min_gain(info, options);
  r.winner = r.fastest;
  if (r.fastest > 0 && r.candidates[0].timed()) {
    const Params &def = r.candidates[0].params, &fast = r.candidates[r.fastest].params;
    bool wins = r.candidates[r.fastest].ms <= (1 - r.min_gain) * r.candidates[0].ms;
    if (wins && r.min_gain > 0) {
      std::vector<double> ratios;
      try {
        for (int pair = 0; pair < 6; ++pair) {
          const bool default_first = pair % 2 == 0;
          const double first = bench->time_ms(default_first ? def : fast, 0, 1);
          const double second = bench->time_ms(default_first ? fast : def, 0, 1);
          ratios.push_back(default_first ? second / first : first / second);
        }
        std::sort(ratios.begin(), ratios.end());
        r.paired_ratio = (ratios[2] + ratios[3]) / 2;
        wins = r.paired_ratio <= 1 - r.min_gain;
      } catch (const std::exception& e) {
        say(std::string("paired check failed: ") + e.what());
        wins = false;
      }
    }
    if (!wins) r.winner = 0;
  }
  if (r.winner != r.fastest || r.paired_ratio >= 0) {
    char line[200], pairs[64] = "";
    if (r.paired_ratio >= 0) std::snprintf(pairs, sizeof pairs, ", %.3f in pairs", r.paired_ratio);
    std::snprintf(line, sizeof line, "%s %s: %.3f of the default's best time%s; margin %g%%",
                  r.winner == r.fastest ? "winner" : "kept the default, fastest", r.candidates[r.fastest].text.c_str(),
                  r.candidates[r.fastest].ms / r.candidates[0].ms, pairs, 100 * r.min_gain);
    say(line);
  }
  r.seconds = seconds_since(t0);
}

}  // namespace tuner_detail

/// Tunes `kernels` (default: all) on `device`; see the top of this file.
inline TuneReport tune(vulkan::Device& device, const TuneOptions& options = {},
                       const std::vector<TunableKernel>& kernels = tunable_kernels()) {
  using namespace tuner_detail;
  if (!(options.budget_seconds > 0) || !std::isfinite(options.budget_seconds))
    throw invalid_input("tune: budget_seconds must be a positive number of seconds");
  if (std::isnan(options.min_gain) || options.min_gain >= 1)
    throw invalid_input("tune: min_gain must be below 1 (0.05 for 5%), or negative for the device's default");
  const auto t0 = Clock::now();
  const auto& info = device.info();
  TuneReport report;
  report.device = info.name;
  report.device_class = device_class_name(device_class(info));
  report.driver = info.driver_info.empty() ? std::to_string(info.driver_version) : info.driver_info;

  auto known = [&](const std::string& name, bool shape) {
    for (const auto& k : kernels)
      if (shape ? std::find(k.shapes.begin(), k.shapes.end(), name) != k.shapes.end() : k.name == name) return true;
    return false;
  };
  for (const auto& name : options.kernels)
    if (!known(name, false)) throw invalid_input("tune: no tunable kernel is called '" + name + "'");
  for (const auto& name : options.shapes)
    if (!known(name, true)) throw invalid_input("tune: no tunable kernel has a shape class '" + name + "'");

  for (const auto& kernel : kernels) {
    if (!selected(options.kernels, kernel.name)) continue;
    for (const char* scalar : {"f32", "f64"}) {
      if (std::string(scalar) == "f64" && !(options.float64 && info.float64)) continue;
      for (const auto& shape : kernel.shapes)
        if (selected(options.shapes, shape)) report.shapes.push_back({kernel.name, shape, scalar});
    }
  }
  for (std::size_t i = 0; i < report.shapes.size(); ++i) {
    auto& r = report.shapes[i];
    const auto& kernel = *std::find_if(kernels.begin(), kernels.end(), [&](auto& k) { return k.name == r.kernel; });
    const double left = std::max(0.0, options.budget_seconds - seconds_since(t0));
    tune_shape(device, kernel, r, left / static_cast<double>(report.shapes.size() - i), options);
  }

  if (options.store && !options.dry_run) {
    const std::string path = options.store_path.empty() ? TuningStore::default_path() : options.store_path;
    TuningStore store = TuningStore::load(path);  // keep other devices' and kernels' entries
    for (auto& r : report.shapes)
      if (r.winner >= 0) {
        store.put(info, {r.kernel, r.shape, r.scalar}, r.candidates[r.winner].params, r.candidates[r.winner].ms);
        r.stored = true;
        ++report.stored;
      }
    if (report.stored > 0) {
      if (!store.save(path)) throw error("could not write the tuning store " + (path.empty() ? "(no cache directory)" : path));
      report.store_path = path;
      reload_store();
    }
  }
  report.seconds = seconds_since(t0);
  return report;
}

}  // namespace gpuml::tuning
