// The process's configuration: one object with a C++ setter per knob. The GPUML_* environment variables only feed
// it: they are read once, when the configuration is first used; after that only gpuml::configure changes it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <gpuml/core/warnings.hpp>

namespace gpuml {

/// The one on/off grammar of every switch: "1", "on", "true", "yes" and "0", "off", "false", "no" (any case).
/// Anything else is not a switch value (std::nullopt), and the switch keeps its default.
inline std::optional<bool> parse_switch(std::string_view text) {
  std::string v(text);
  for (char& c : v) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (v == "1" || v == "on" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "off" || v == "false" || v == "no") return false;
  return std::nullopt;
}

/// Whether the Khronos validation layer is enabled, and whether any message fails the process.
enum class Validation { off, on, strict };

/// How uploads read ordinary host memory (Config::upload). The bytes on the device are the same either way.
enum class Upload {
  staged,    ///< copied by the host into staging buffers the device copies from (or into mapped device memory)
  imported,  ///< read by the device in place where it can import the memory (VK_EXT_external_memory_host), mapped
             ///< device memory too: no host copy, but pinning the pages costs more than the copy on the drivers
             ///< measured (docs/performance.md), so it is not the default
};

/// Every knob of gpuml. Defaults are gpuml's; Config::from_environment() applies the GPUML_* variables on top.
class Config {
 public:
  /// The device choice of the process default backend (see select.hpp): "auto", "gpu", "host", "N", a name.
  const std::string& device() const { return device_; }
  Config& set_device(std::string choice) { return device_ = std::move(choice), *this; }

  /// Host threads (0: one per hardware thread).
  int num_threads() const { return num_threads_; }
  Config& set_num_threads(int n) { return num_threads_ = n > 0 ? n : 0, *this; }

  /// Read when the Vulkan instance is created (the first use of Vulkan); `strict` is checked at every device release.
  Validation validation() const { return validation_; }
  Config& set_validation(Validation v) { return validation_ = v, *this; }

  /// Where the pipeline cache and the tuning store live (empty: nowhere).
  const std::string& cache_dir() const { return cache_dir_; }
  Config& set_cache_dir(std::string dir) { return cache_dir_ = std::move(dir), *this; }

  /// The on-disk pipeline cache.
  bool pipeline_cache() const { return pipeline_cache_; }
  Config& set_pipeline_cache(bool on) { return pipeline_cache_ = on, *this; }

  /// The tuner's stored winners (off: catalogue tiles only).
  bool tuning() const { return tuning_; }
  Config& set_tuning(bool on) { return tuning_ = on, *this; }

  /// One tile for every k-means problem, "threads,spt,kt,ds,ks[,subgroup]" (empty: none), for sweeps.
  const std::string& kmeans_tile() const { return kmeans_tile_; }
  Config& set_kmeans_tile(std::string tile) { return kmeans_tile_ = std::move(tile), *this; }

  /// One tile for every k-NN search, "wx,wy,tm,tn,bk[,groups]" (empty: none), for sweeps.
  const std::string& knn_tile() const { return knn_tile_; }
  Config& set_knn_tile(std::string tile) { return knn_tile_ = std::move(tile), *this; }

  /// The k-NN bounding pass samples 1/F of the database (0: no bounding pass; otherwise at least 2).
  std::uint64_t knn_sample() const { return knn_sample_; }
  Config& set_knn_sample(std::uint64_t fraction) { return knn_sample_ = fraction == 1 ? 2 : fraction, *this; }

  /// k-NN candidate lists (off: heaps always).
  bool knn_append() const { return knn_append_; }
  Config& set_knn_append(bool on) { return knn_append_ = on, *this; }

  /// k-NN list passes on cooperative matrices where the device has them (off: float32 kernels).
  bool knn_coop() const { return knn_coop_; }
  Config& set_knn_coop(bool on) { return knn_coop_ = on, *this; }

  /// The most device memory gpuml plans to use on a device, in bytes (0: what the device reports). Data that does
  /// not fit stays in pinned host memory, which the kernels read directly (k-means streams it every iteration);
  /// a small limit forces that on any device, for tests and benchmarks.
  std::uint64_t device_memory_limit() const { return device_memory_limit_; }
  Config& set_device_memory_limit(std::uint64_t bytes) { return device_memory_limit_ = bytes, *this; }

  /// The bounded k-means E-step where it pays (KMeansEStep::automatic; off: the plain E-step, every distance of
  /// every iteration). The results are the same bit for bit either way: this is for comparisons.
  bool kmeans_bounds() const { return kmeans_bounds_; }
  Config& set_kmeans_bounds(bool on) { return kmeans_bounds_ = on, *this; }

  /// How uploads read host memory (GPUML_UPLOAD=staged|imported).
  Upload upload() const { return upload_; }
  Config& set_upload(Upload u) { return upload_ = u, *this; }

  /// k-means' X centred on the device after a plain upload, where the host cannot write device memory directly
  /// (on by default; GPUML_DEVICE_CENTRING=0 centres on the host while staging): the same rows bit for bit, the
  /// host only copying. Uploads read in place (Upload::imported) always centre on the device.
  bool device_centring() const { return device_centring_; }
  Config& set_device_centring(bool on) { return device_centring_ = on, *this; }
  /// Whether any upload may centre k-means' rows on a device (device_centring, or uploads read in place).
  bool may_centre_on_device() const { return device_centring_ || upload_ == Upload::imported; }

  /// k-means' input checks (each column's range, the exact sums behind the mean) computed by the devices over the
  /// rows as they are, copied there while device memory is allocated, where the fit centres on the devices (on by
  /// default; GPUML_DEVICE_CHECKS=0 checks on the host): the same results bit for bit, without the host's passes
  /// over X.
  bool device_checks() const { return device_checks_; }
  Config& set_device_checks(bool on) { return device_checks_ = on, *this; }
  /// The smallest X, in bytes, whose checks run on the devices: below it the host's passes cost less than the
  /// devices' round trips (0: any X, as tests ask).
  std::uint64_t device_checks_min_bytes() const { return device_checks_min_bytes_; }
  Config& set_device_checks_min_bytes(std::uint64_t bytes) { return device_checks_min_bytes_ = bytes, *this; }

  static constexpr std::uint64_t kDefaultKnnSample = 16;

  /// "123", "64K", "512M", "2G" (binary units) as a byte count, or nothing for anything else.
  static std::optional<std::uint64_t> parse_bytes(std::string_view text) {
    if (text.empty()) return std::nullopt;
    std::uint64_t value = 0;
    std::size_t i = 0;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      if (value > (UINT64_MAX - 9) / 10) return std::nullopt;
      value = value * 10 + static_cast<std::uint64_t>(text[i] - '0');
    }
    if (i == 0) return std::nullopt;
    int shift = 0;
    if (i + 1 == text.size()) {
      switch (text[i]) {
        case 'K': case 'k': shift = 10; break;
        case 'M': case 'm': shift = 20; break;
        case 'G': case 'g': shift = 30; break;
        default: return std::nullopt;
      }
    } else if (i != text.size()) {
      return std::nullopt;
    }
    if (shift && value > (UINT64_MAX >> shift)) return std::nullopt;
    return value << shift;
  }

  /// gpuml's defaults with the GPUML_* variables applied; `warn` receives one line per value it cannot read.
  template <class Warn>
  static Config from_environment(Warn&& warn) {
    Config c;
    auto env = [](const char* name) -> const char* {
      const char* v = std::getenv(name);
      return v && *v ? v : nullptr;
    };
    auto flag = [&](const char* name, bool& field) {
      if (const char* v = env(name)) {
        if (auto on = parse_switch(v)) field = *on;
        else warn(std::string("ignoring ") + name + "=" + v + ": expected 1/on/true/yes or 0/off/false/no");
      }
    };
    if (const char* v = env("GPUML_DEVICE")) c.device_ = v;
    if (const char* v = env("GPUML_NUM_THREADS")) c.set_num_threads(std::atoi(v));
    if (const char* v = env("GPUML_VALIDATION")) {
      if (std::string_view(v) == "strict") c.validation_ = Validation::strict;
      else if (auto on = parse_switch(v)) c.validation_ = *on ? Validation::on : Validation::off;
      else warn(std::string("ignoring GPUML_VALIDATION=") + v + ": expected strict, 1/on/true/yes or 0/off/false/no");
    }
    if (const char* d = env("GPUML_CACHE_DIR")) c.cache_dir_ = d;
    else if (const char* x = env("XDG_CACHE_HOME")) c.cache_dir_ = std::string(x) + "/gpuml";
    else if (const char* h = env("HOME")) c.cache_dir_ = std::string(h) + "/.cache/gpuml";
    flag("GPUML_PIPELINE_CACHE", c.pipeline_cache_);
    flag("GPUML_TUNING", c.tuning_);
    if (const char* v = env("GPUML_KMEANS_TILE")) c.kmeans_tile_ = v;
    if (const char* v = env("GPUML_KNN_TILE")) c.knn_tile_ = v;
    if (const char* v = env("GPUML_KNN_SAMPLE")) {
      char* end = nullptr;
      const unsigned long long f = std::strtoull(v, &end, 10);
      if (*end || (f != 0 && f < 2)) warn(std::string("ignoring GPUML_KNN_SAMPLE=") + v + ": expected 0 or a fraction of at least 2");
      else c.knn_sample_ = f;
    }
    flag("GPUML_KNN_APPEND", c.knn_append_);
    flag("GPUML_KNN_COOP", c.knn_coop_);
    flag("GPUML_KMEANS_BOUNDS", c.kmeans_bounds_);
    flag("GPUML_DEVICE_CENTRING", c.device_centring_);
    flag("GPUML_DEVICE_CHECKS", c.device_checks_);
    if (const char* v = env("GPUML_UPLOAD")) {
      const std::string_view u(v);
      if (u == "staged") c.upload_ = Upload::staged;
      else if (u == "imported") c.upload_ = Upload::imported;
      else warn(std::string("ignoring GPUML_UPLOAD=") + v + ": expected staged or imported");
    }
    if (const char* v = env("GPUML_DEVICE_MEMORY_LIMIT")) {
      if (auto bytes = parse_bytes(v)) c.device_memory_limit_ = *bytes;
      else warn(std::string("ignoring GPUML_DEVICE_MEMORY_LIMIT=") + v + ": expected a byte count such as 1073741824, 512M or 2G");
    }
    return c;
  }

 private:
  std::string device_ = "auto";
  int num_threads_ = 0;
  Validation validation_ = Validation::off;
  std::string cache_dir_;
  bool pipeline_cache_ = true;
  bool tuning_ = true;
  std::string kmeans_tile_, knn_tile_;
  std::uint64_t knn_sample_ = kDefaultKnnSample;
  bool knn_append_ = true;
  bool knn_coop_ = true;
  bool kmeans_bounds_ = true;
  std::uint64_t device_memory_limit_ = 0;
  Upload upload_ = Upload::staged;
  bool device_centring_ = true;
  bool device_checks_ = true;
  std::uint64_t device_checks_min_bytes_ = std::uint64_t(32) << 20;
};

namespace config_detail {
struct ProcessConfig {
  std::mutex mutex;
  std::optional<Config> config;
};
inline ProcessConfig& process_config() {
  static ProcessConfig p;
  return p;
}
inline void warn_config(const std::string& message) { warn_once(message); }
}  // namespace config_detail

/// The process's configuration (a copy): the environment's on first call, then whatever configure() set.
inline Config config() {
  auto& p = config_detail::process_config();
  std::lock_guard lock(p.mutex);
  if (!p.config) p.config = Config::from_environment(config_detail::warn_config);
  return *p.config;
}

/// Replaces the process's configuration. Knobs are read where they are used, so a change applies to the next
/// fit, search or device; validation applies when the Vulkan instance is created, the device choice when the
/// default backend is first asked for, the cache directory when the tuning store is next read (tuning::reload_store).
inline void configure(Config c) {
  auto& p = config_detail::process_config();
  std::lock_guard lock(p.mutex);
  p.config = std::move(c);
}

/// Sets a configuration for one scope and restores the previous one after (tests, sweeps).
class ScopedConfig {
 public:
  explicit ScopedConfig(Config c) : previous_(config()) { configure(std::move(c)); }
  ~ScopedConfig() { configure(std::move(previous_)); }
  ScopedConfig(const ScopedConfig&) = delete;
  ScopedConfig& operator=(const ScopedConfig&) = delete;

 private:
  Config previous_;
};

}  // namespace gpuml
