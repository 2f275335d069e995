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
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <system_error>
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
/// writable, not a directory itself), then written together at the end, all or none as far as files allow. A
/// symbolic link is written through (gpuml::OutputFile): its target is replaced, the link stays. Regular files go to
/// a temporary file beside their target, renamed into place only when every output was written, so a failure leaves
/// none half-written or alone. A device or a FIFO is written directly, before the renames (what it took cannot be
/// taken back), and a failed write there is an error naming it; without a .npy or .csv extension it gets CSV.
/// "-" writes CSV to stdout (after the files).
class Outputs {
 public:
  /// Registers `path` under `flag` (empty: not asked for) and checks it now.
  void add(const std::string& flag, const std::string& path) {
    if (path.empty()) return;
    Output out{flag, path};
    if (path != "-") {
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw usage_error(flag + " " + path + " is a directory");
      try {
        out.target = gpuml::resolve_output(path);
      } catch (const gpuml::error& e) {
        throw usage_error(flag + " " + path + ": " + e.what());
      }
      bool named_format = true;
      try {
        (void)gpuml::file_format(path);
      } catch (const gpuml::invalid_input&) {
        named_format = false;
      }
      if (out.target.in_place) {
        out.csv_copy = !named_format;
      } else {
        if (!named_format) throw usage_error(flag + " " + path + ": expected a .npy or .csv extension (or - for stdout)");
        const auto slash = out.target.path.find_last_of('/');
        const std::string& t = out.target.path;
        const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : t.substr(0, slash));
        const std::string where = t == path ? "" : " (where the link leads)";
        if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
          throw usage_error(flag + " " + path + ": the directory " + dir + where + " does not exist");
        if (::access(dir.c_str(), W_OK) != 0)
          throw usage_error(flag + " " + path + ": the directory " + dir + where + " is not writable");
      }
    }
    for (const auto& o : pending_) {
      // Two renames onto one file would keep only the last; a device or FIFO simply takes both in turn.
      const bool both_renamed = path != "-" && o.path != "-" && !out.target.in_place && !o.target.in_place;
      if (both_renamed && same_file(o.target.path, out.target.path))
        throw usage_error(flag + " and " + o.flag + " name the same file " + path);
    }
    pending_.push_back(std::move(out));
  }

  /// The writer for `flag`'s file: called with the path to write (a temporary .npy or .csv path, or a device's).
  void set(const std::string& flag, std::function<void(const std::string&)> write) {
    for (auto& o : pending_)
      if (o.flag == flag) o.write = std::move(write);
  }

  /// Writes every output, all or none; returns the paths written.
  std::vector<std::string> commit() {
    for (const auto& o : pending_)
      if (!o.write) throw std::logic_error("no writer for " + o.flag);
    std::vector<gpuml::OutputFile> staged;  // destroyed uncommitted on a failure: the temporary files go
    std::vector<const Output*> staged_for;
    for (const auto& o : pending_) {
      if (o.path == "-" || o.target.in_place) continue;
      naming(o, [&] { staged.emplace_back(o.path); });
      staged_for.push_back(&o);
      naming(o, [&] { o.write(staged.back().write_path()); });
    }
    for (const auto& o : pending_) {
      if (o.path == "-" || !o.target.in_place) continue;
      if (o.csv_copy) copy_csv(o, o.path.c_str());
      else naming(o, [&] { o.write(o.path); });
    }
    for (std::size_t s = 0; s < staged.size(); ++s) naming(*staged_for[s], [&] { staged[s].commit(); });
    std::vector<std::string> written;
    for (const auto& o : pending_) {
      if (o.path == "-") copy_csv(o, nullptr);
      else written.push_back(o.path);
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
    gpuml::OutputTarget target;
    bool csv_copy = false;  // a device or FIFO without a .npy or .csv extension: CSV, copied to it
    std::function<void(const std::string&)> write;
  };

  /// Runs `step` of writing `o`; a failure becomes an error naming the flag and the path.
  template <class Step>
  static void naming(const Output& o, Step&& step) {
    try {
      step();
    } catch (const std::exception& e) {
      throw gpuml::error(o.flag + " " + o.path + ": " + e.what());
    }
  }

  static bool same_file(const std::string& a, const std::string& b) {
    std::error_code ec_a, ec_b;
    const auto ca = std::filesystem::weakly_canonical(a, ec_a), cb = std::filesystem::weakly_canonical(b, ec_b);
    return ec_a || ec_b ? a == b : ca == cb;
  }

  /// Writes `o` as CSV into a temporary file, then copies it to `device` (nullptr: stdout), checking every write.
  static void copy_csv(const Output& o, const char* device) {
    const std::string shown = device ? o.path : std::string("stdout");
    std::string csv = (std::filesystem::temp_directory_path() / "gpuml-output-XXXXXX.csv").string();
    const int fd = ::mkstemps(csv.data(), 4);
    if (fd < 0) throw gpuml::error(o.flag + " " + o.path + ": cannot create a temporary file");
    ::close(fd);
    struct RemoveAtExit {
      const std::string& path;
      ~RemoveAtExit() { std::remove(path.c_str()); }
    } remove_csv{csv};
    naming(o, [&] { o.write(csv); });
    std::fflush(stdout);
    std::FILE* in = std::fopen(csv.c_str(), "rb");
    std::FILE* out = device ? std::fopen(device, "wb") : stdout;
    if (!in || !out) {
      if (in) std::fclose(in);
      if (device && out) std::fclose(out);
      throw gpuml::error(o.flag + " " + o.path + ": cannot open " + (in ? shown : csv) + " for " +
                         (in ? "writing" : "reading"));
    }
    bool ok = true;
    char buf[1 << 16];
    std::size_t n;
    while (ok && (n = std::fread(buf, 1, sizeof buf, in)) > 0) ok = std::fwrite(buf, 1, n, out) == n;
    ok = ok && !std::ferror(in);
    std::fclose(in);
    ok = (device ? std::fclose(out) == 0 : std::fflush(out) == 0) && ok;
    if (!ok) throw gpuml::error(o.flag + " " + o.path + ": writing to " + shown + " failed (disk full or I/O error)");
  }

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

/// A fingerprint of a result's bytes (FNV-1a, 64 bits, as 16 hex digits): fits compared bit for bit without their
/// files.
inline std::string fingerprint(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return std::string(text);
}

}  // namespace gpuml_program
