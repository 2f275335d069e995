// What gpuml's command-line programs share: CLI11 parsing and exit codes, errors on stderr, wall-clock timing,
// gpuml's warnings printed and kept for --json, the device choice as reported, and the scalar type of the input.
#pragma once

#include <gpuml/gpuml.hpp>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace gpuml_program {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Parses argv into `app`, then returns body(). --help exits 0 and a bad flag 2 (CLI11 prints why); an exception
/// from body is printed as "<name>: error: <what>" on stderr, after whatever stdout holds, with exit status 2.
template <class Body>
int run(const char* name, CLI::App& app, int argc, char** argv, Body&& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    return body();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 2;
  }
}

/// From now on gpuml's warnings go to stderr and are appended to `into` (for the JSON output).
inline void collect_warnings(std::vector<std::string>& into) {
  gpuml::set_warning_handler([&into](const std::string& m) {
    into.push_back(m);
    std::fprintf(stderr, "gpuml warning: %s\n", m.c_str());
  });
}

/// How the backend was chosen, as the JSON output reports it: --device's value, else GPUML_DEVICE's, else "auto".
inline std::string device_choice(const std::string& device_flag) {
  if (!device_flag.empty()) return device_flag;
  const char* env = std::getenv("GPUML_DEVICE");
  return env && *env ? std::string(env) + " (GPUML_DEVICE)" : "auto";
}

/// Whether to compute in float32: --float32 / --float64 when given, else float32 for embedded data (no path) and a
/// float32 .npy file, float64 for any other file (CSV is read as float64).
inline bool use_float32(bool float32_flag, bool float64_flag, const std::string& path) {
  if (float32_flag) return true;
  if (float64_flag) return false;
  if (path.empty()) return true;
  return gpuml::file_format(path) == gpuml::FileFormat::npy && gpuml::read_npy_header(path).dtype == gpuml::NpyDtype::f4;
}

}  // namespace gpuml_program
