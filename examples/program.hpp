// What gpuml's command-line programs share: CLI11 parsing, --version and exit codes (2: usage, 1: run time), errors
// on stderr, validators that name their bound, outputs checked first and written all-or-nothing, a progress bar,
// the CSV flags, wall-clock timing, gpuml's warnings printed and kept for --json, the device choice as reported,
// and the scalar type of the input.
#pragma once

#include <gpuml/gpuml.hpp>

#include <CLI/CLI.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpuml_program {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// A mistake in how the program was called (a flag's value, a combination of flags): exit status 2, as a bad flag.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Adds --version ("NAME VERSION") to `app`.
inline void add_version(CLI::App& app, const char* name) {
  app.set_version_flag("--version", std::string(name) + " " + GPUML_VERSION_STRING, "print the version and exit");
}

/// Parses argv into `app`, then returns body(). --help and --version exit 0; a usage error (a bad flag or value,
/// CLI11's or a usage_error) exits 2 and a run-time error (a file that cannot be read, a device failure) exits 1,
/// each printed as "<name>: error: <what>" on stderr after whatever stdout holds.
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
  } catch (const usage_error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  }
}

/// Validators whose message names the bound ("--tol: must be >= 0"), not CLI11's range of the type.
inline CLI::Validator at_least(double bound) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", bound);
  return CLI::Validator(
      [bound, b = std::string(text)](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (end == value.c_str() || *end != '\0') return "must be a number, got '" + value + "'";
        return v >= bound ? std::string() : "must be >= " + b + ", got " + value;
      },
      ">= " + std::string(text));
}

/// The backend --device names; a choice that matches nothing is a usage error naming the flag.
inline gpuml::Backend backend_for(const std::string& device_flag) {
  if (device_flag.empty()) return gpuml::default_backend();
  try {
    return gpuml::select_backend(device_flag);
  } catch (const gpuml::unsupported& e) {
    std::string why = e.what();
    if (const auto at = why.find("no Vulkan device"); at != std::string::npos) why = why.substr(at);
    throw usage_error("--device " + device_flag + ": " + why);
  } catch (const gpuml::invalid_input& e) {  // a malformed device list
    throw usage_error("--device " + device_flag + ": " + e.what());
  }
}

/// The output files of one run: checked before the work starts (a known format, a directory that exists and is
/// writable, not a directory itself), then written together at the end: each to a temporary file beside it,
/// renamed into place only when every one was written, so a failure leaves no output half-written or alone.
/// "-" writes CSV to stdout (after the files).
class Outputs {
 public:
  /// Registers `path` under `flag` (empty: not asked for) and checks it now.
  void add(const std::string& flag, const std::string& path) {
    if (path.empty()) return;
    if (path != "-") {
      try {
        (void)gpuml::file_format(path);
      } catch (const gpuml::invalid_input&) {
        throw usage_error(flag + " " + path + ": expected a .npy or .csv extension (or - for stdout)");
      }
      const auto slash = path.find_last_of('/');
      const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
      struct stat st {};
      if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw usage_error(flag + " " + path + ": the directory " + dir + " does not exist");
      if (::access(dir.c_str(), W_OK) != 0) throw usage_error(flag + " " + path + ": the directory " + dir + " is not writable");
      if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw usage_error(flag + " " + path + " is a directory");
    }
    for (const auto& o : pending_)
      if (o.path == path && path != "-") throw usage_error(flag + " and " + o.flag + " name the same file " + path);
    pending_.push_back({flag, path, {}});
  }

  /// The writer for `flag`'s file: called with the path to write (a temporary .npy or .csv path).
  void set(const std::string& flag, std::function<void(const std::string&)> write) {
    for (auto& o : pending_)
      if (o.flag == flag) o.write = std::move(write);
  }

  /// Writes every output, all or none; returns the paths written.
  std::vector<std::string> commit() {
    std::vector<std::string> temps;
    auto discard = [&] {
      for (const auto& t : temps) std::remove(t.c_str());
    };
    try {
      for (const auto& o : pending_) {
        if (!o.write) throw std::logic_error("no writer for " + o.flag);
        if (o.path == "-") continue;
        const auto slash = o.path.find_last_of('/');
        const std::string dir = slash == std::string::npos ? "" : o.path.substr(0, slash + 1);
        const std::string base = slash == std::string::npos ? o.path : o.path.substr(slash + 1);
        const std::string ext = gpuml::file_format(o.path) == gpuml::FileFormat::npy ? ".npy" : ".csv";
        temps.push_back(dir + "." + base + ".part-" + std::to_string(::getpid()) + ext);
        o.write(temps.back());
      }
    } catch (...) {
      discard();
      throw;
    }
    std::vector<std::string> written;
    std::size_t t = 0;
    for (const auto& o : pending_) {
      if (o.path == "-") continue;
      if (std::rename(temps[t].c_str(), o.path.c_str()) != 0) {
        for (std::size_t r = t; r < temps.size(); ++r) std::remove(temps[r].c_str());
        throw gpuml::error(o.flag + " " + o.path + ": cannot move the finished file into place");
      }
      written.push_back(o.path);
      ++t;
    }
    for (const auto& o : pending_) {
      if (o.path != "-") continue;
      char name[] = "/tmp/gpuml-stdout-XXXXXX";
      const int fd = ::mkstemp(name);
      if (fd < 0) throw gpuml::error(o.flag + " -: cannot create a temporary file");
      ::close(fd);
      const std::string csv = std::string(name) + ".csv";
      std::rename(name, csv.c_str());
      try {
        o.write(csv);
      } catch (...) {
        std::remove(csv.c_str());
        throw;
      }
      std::fflush(stdout);
      if (std::FILE* f = std::fopen(csv.c_str(), "rb")) {
        char buf[1 << 16];
        std::size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) std::fwrite(buf, 1, n, stdout);
        std::fclose(f);
      }
      std::fflush(stdout);
      std::remove(csv.c_str());
    }
    return written;
  }

  bool to_stdout() const {
    for (const auto& o : pending_)
      if (o.path == "-") return true;
    return false;
  }

 private:
  struct Output {
    std::string flag, path;
    std::function<void(const std::string&)> write;
  };
  std::vector<Output> pending_;
};

/// A progress bar on stderr for long fits: drawn once the work has run for `delay` seconds, redrawn at most ten
/// times a second, on a terminal by default (--progress / --no-progress force it).
class ProgressBar {
 public:
  ProgressBar(bool enabled, double delay = 1.0) : enabled_(enabled), delay_(delay), start_(Clock::now()) {}
  ~ProgressBar() { finish(); }

  /// `done` of `total` steps, and a short status text.
  void update(std::int64_t done, std::int64_t total, const std::string& status) {
    if (!enabled_) return;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    if (elapsed < delay_ || (drawn_ && elapsed - last_ < 0.1 && done < total)) return;
    last_ = elapsed;
    drawn_ = true;
    const int width = 30;
    const int filled = total > 0 ? static_cast<int>(std::min<std::int64_t>(width, done * width / total)) : 0;
    const double remaining = done > 0 ? elapsed * double(total - done) / double(done) : 0.0;
    std::fprintf(stderr, "\r[%s%s] %lld/%lld %s  %s elapsed, %s left (at most)  ", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), static_cast<long long>(done), static_cast<long long>(total),
                 status.c_str(), clock_text(elapsed).c_str(), clock_text(remaining).c_str());
    std::fflush(stderr);
  }

  void finish() {
    if (drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

  /// Whether to draw: --progress / --no-progress, else whether stderr is a terminal.
  static bool wanted(bool progress_flag, bool no_progress_flag) {
    if (progress_flag) return true;
    if (no_progress_flag) return false;
    return ::isatty(2) != 0;
  }

 private:
  static std::string clock_text(double s) {
    char buf[32];
    const long t = static_cast<long>(s + 0.5);
    if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
    return buf;
  }
  bool enabled_;
  double delay_;
  Clock::time_point start_;
  bool drawn_ = false;
  double last_ = 0;
};

/// The CSV reading flags every program takes (--delimiter, --header / --no-header, --columns).
struct CsvFlags {
  std::string delimiter = ",";
  bool header = false, no_header = false;
  std::vector<std::string> columns;

  void add_to(CLI::App& app) {
    app.add_option("--delimiter", delimiter, "CSV field delimiter (default ','; 'tab' for tabs)");
    auto* h = app.add_flag("--header", header, "the CSV's first line is a header (default: detected)");
    app.add_flag("--no-header", no_header, "the CSV's first line is data")->excludes(h);
    app.add_option("--columns", columns, "CSV columns to use, by header name or 0-based position (default all)")
        ->delimiter(',');
  }
  gpuml::CsvOptions options() const {
    gpuml::CsvOptions o;
    const std::string d = delimiter == "tab" ? std::string("\t") : delimiter;
    if (d.size() != 1) throw usage_error("--delimiter must be one character (or 'tab'), got '" + delimiter + "'");
    o.delimiter = d[0];
    o.header = header ? gpuml::CsvOptions::Header::yes
                      : (no_header ? gpuml::CsvOptions::Header::no : gpuml::CsvOptions::Header::detect);
    o.columns = columns;
    return o;
  }
};

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
