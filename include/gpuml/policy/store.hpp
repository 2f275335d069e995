// The tuning store: the tuner's winners (gpuml::tuning::tune) in one small JSON file next to the pipeline cache,
// <cache dir>/tuning.json (GPUML_CACHE_DIR, else XDG_CACHE_HOME/gpuml, else ~/.cache/gpuml). Each entry is for one
// device and driver (device UUID, driverVersion, driverInfo, name), one kernel, one problem-shape class and one
// scalar type, and holds the kernel's parameters as a short list of integers that the kernel decodes itself.
// The file is read once per process; GPUML_TUNING=0 ignores it. A corrupt file, or an entry that is not
// understood, is ignored with a warning, never an error. The reader below handles plain JSON, which keeps this
// header cheap to include (no JSON library).
#pragma once

#include <gpuml/core/warnings.hpp>
#include <gpuml/vulkan/instance.hpp>
#include <gpuml/vulkan/pipeline_cache.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace gpuml::tuning {

inline constexpr const char* kStoreFormat = "gpuml-tuning-1";

template <class T>
constexpr const char* scalar_name() {
  return std::is_same_v<T, float> ? "f32" : "f64";
}

/// What a stored winner is for.
struct TuneKey {
  std::string kernel;  // e.g. "kmeans_lloyd"
  std::string shape;   // the kernel's problem-shape class, e.g. "d<=32,k<=128"
  std::string scalar;  // "f32" or "f64"
  bool operator==(const TuneKey&) const = default;
};

/// One winner and the device and driver it was measured on.
struct TunedEntry {
  std::string device_name, device_uuid, driver_info;
  std::uint32_t driver_version = 0;
  TuneKey key;
  std::vector<std::uint32_t> params;
  double ms = 0;  // its time per call when it won

  bool is_for(const vulkan::DeviceInfo& d) const;
};

inline std::string uuid_hex(const std::array<std::uint8_t, VK_UUID_SIZE>& uuid) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (auto b : uuid) {
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

inline bool TunedEntry::is_for(const vulkan::DeviceInfo& d) const {
  return device_uuid == uuid_hex(d.device_uuid) && driver_version == d.driver_version && driver_info == d.driver_info &&
         device_name == d.name;
}

namespace store_detail {

/// A parsed JSON value. Object members are items carrying their key.
struct Json {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool flag = false;
  double number = 0;
  std::string text, key;
  std::vector<Json> items;

  const Json* member(std::string_view name) const {
    if (kind != Kind::object) return nullptr;
    for (const auto& m : items)
      if (m.key == name) return &m;
    return nullptr;
  }
};

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : s_(text) {}

  /// The document, or nullopt with error() saying what is wrong and where.
  std::optional<Json> document() {
    Json v;
    if (!value(v, 0)) return std::nullopt;
    skip_space();
    if (pos_ != s_.size()) {
      fail("unexpected text after the document");
      return std::nullopt;
    }
    return v;
  }
  const std::string& error() const { return error_; }

 private:
  bool fail(const char* what) {
    if (error_.empty()) error_ = std::string(what) + " at byte " + std::to_string(pos_);
    return false;
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool take(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool value(Json& v, int depth) {
    if (depth > 16) return fail("nested too deeply");
    skip_space();
    if (pos_ >= s_.size()) return fail("unexpected end");
    const char c = s_[pos_];
    if (c == '{') return object(v, depth);
    if (c == '[') return array(v, depth);
    if (c == '"') {
      v.kind = Json::Kind::string;
      return string(v.text);
    }
    for (const bool b : {true, false})
      if (literal(b ? "true" : "false")) {
        v.kind = Json::Kind::boolean;
        v.flag = b;
        return true;
      }
    if (literal("null")) return true;
    return number(v);
  }

  bool object(Json& v, int depth) {
    v.kind = Json::Kind::object;
    ++pos_;
    if (take('}')) return true;
    do {
      Json m;
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != '"' || !string(m.key)) return fail("expected a member name");
      if (!take(':')) return fail("expected ':'");
      if (!value(m, depth + 1)) return false;
      v.items.push_back(std::move(m));
    } while (take(','));
    return take('}') || fail("expected ',' or '}'");
  }

  bool array(Json& v, int depth) {
    v.kind = Json::Kind::array;
    ++pos_;
    if (take(']')) return true;
    do {
      Json item;
      if (!value(item, depth + 1)) return false;
      v.items.push_back(std::move(item));
    } while (take(','));
    return take(']') || fail("expected ',' or ']'");
  }

  bool string(std::string& out) {
    ++pos_;  // the opening quote
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return fail("short \\u escape");
          unsigned code = 0;
          for (int i = 0; i < 4; ++i) {
            const char h = s_[pos_++];
            const int digit = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (digit < 0) return fail("bad \\u escape");
            code = code * 16 + static_cast<unsigned>(digit);
          }
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default: return fail("bad escape");
      }
    }
    return fail("unterminated string");
  }

  bool number(Json& v) {
    const std::size_t start = pos_;
    while (pos_ < s_.size() && std::string_view("+-0123456789.eE").find(s_[pos_]) != std::string_view::npos) ++pos_;
    if (pos_ == start) return fail("unexpected character");
    const std::string token(s_.substr(start, pos_ - start));
    char* end = nullptr;
    v.number = std::strtod(token.c_str(), &end);
    if (end != token.c_str() + token.size() || !std::isfinite(v.number)) return fail("bad number");
    v.kind = Json::Kind::number;
    return true;
  }

  std::string_view s_;
  std::size_t pos_ = 0;
  std::string error_;
};

inline std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

/// One entry from its JSON object, or why it cannot be one.
inline std::optional<TunedEntry> entry_from_json(const Json& j, std::string& why) {
  auto text = [&](const char* name, std::string& out) {
    const Json* m = j.member(name);
    if (m && m->kind == Json::Kind::string) {
      out = m->text;
      return true;
    }
    why = std::string("no text field '") + name + "'";
    return false;
  };
  auto whole = [](const Json* m, double limit) {
    return m && m->kind == Json::Kind::number && m->number >= 0 && m->number <= limit && m->number == std::floor(m->number);
  };
  TunedEntry e;
  if (j.kind != Json::Kind::object) {
    why = "not an object";
    return std::nullopt;
  }
  if (!text("device", e.device_name) || !text("device_uuid", e.device_uuid) || !text("driver_info", e.driver_info) ||
      !text("kernel", e.key.kernel) || !text("shape", e.key.shape) || !text("scalar", e.key.scalar))
    return std::nullopt;
  const Json* version = j.member("driver_version");
  if (!whole(version, 4294967295.0)) {
    why = "no integer 'driver_version'";
    return std::nullopt;
  }
  e.driver_version = static_cast<std::uint32_t>(version->number);
  const Json* params = j.member("params");
  if (!params || params->kind != Json::Kind::array || params->items.empty()) {
    why = "no list 'params'";
    return std::nullopt;
  }
  for (const auto& p : params->items) {
    if (!whole(&p, 4294967295.0)) {
      why = "'params' holds something other than 32-bit unsigned integers";
      return std::nullopt;
    }
    e.params.push_back(static_cast<std::uint32_t>(p.number));
  }
  if (const Json* ms = j.member("ms"); ms && ms->kind == Json::Kind::number) e.ms = ms->number;
  return e;
}

}  // namespace store_detail

class TuningStore {
 public:
  /// <cache dir>/tuning.json, or empty when there is no cache directory.
  static std::string default_path() {
    const std::string dir = vulkan::cache_directory();
    return dir.empty() ? std::string() : dir + "/tuning.json";
  }

  /// The entries in `path`: none when it does not exist; what can be understood, with a warning, when it is corrupt.
  static TuningStore load(const std::string& path) {
    TuningStore store;
    const std::vector<char> bytes = vulkan::read_file_bytes(path);
    if (bytes.empty()) return store;
    store_detail::JsonReader reader(std::string_view(bytes.data(), bytes.size()));
    const auto doc = reader.document();
    const store_detail::Json* format = doc ? doc->member("format") : nullptr;
    const store_detail::Json* entries = doc ? doc->member("entries") : nullptr;
    std::string why;
    if (!doc) why = "not JSON (" + reader.error() + ")";
    else if (!format || format->kind != store_detail::Json::Kind::string || format->text != kStoreFormat)
      why = std::string("not a ") + kStoreFormat + " file";
    else if (!entries || entries->kind != store_detail::Json::Kind::array) why = "no list 'entries'";
    if (!why.empty()) {
      warn("ignoring the tuning store " + path + ": " + why);
      return store;
    }
    for (std::size_t i = 0; i < entries->items.size(); ++i) {
      if (auto e = store_detail::entry_from_json(entries->items[i], why)) store.entries_.push_back(std::move(*e));
      else warn("ignoring entry " + std::to_string(i) + " of the tuning store " + path + ": " + why);
    }
    return store;
  }

  /// Writes the store to `path` (through a temporary file and a rename); false when it could not.
  bool save(const std::string& path) const {
    if (path.empty()) return false;
    std::string out = std::string("{\n  \"format\": \"") + kStoreFormat + "\",\n  \"entries\": [";
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const TunedEntry& e = entries_[i];
      using store_detail::quoted;
      out += i ? ",\n    {" : "\n    {";
      out += "\"device\": " + quoted(e.device_name) + ", \"device_uuid\": " + quoted(e.device_uuid) +
             ", \"driver_version\": " + std::to_string(e.driver_version) + ", \"driver_info\": " + quoted(e.driver_info) +
             ", \"kernel\": " + quoted(e.key.kernel) + ", \"shape\": " + quoted(e.key.shape) +
             ", \"scalar\": " + quoted(e.key.scalar) + ", \"params\": [";
      for (std::size_t p = 0; p < e.params.size(); ++p) out += (p ? ", " : "") + std::to_string(e.params[p]);
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.6g", std::isfinite(e.ms) ? e.ms : 0.0);
      out += "], \"ms\": " + std::string(ms) + "}";
    }
    out += entries_.empty() ? "]\n}\n" : "\n  ]\n}\n";
    vulkan::write_file_bytes(path, std::vector<char>(out.begin(), out.end()));
    return vulkan::read_file_bytes(path).size() == out.size();
  }

  const TunedEntry* find(const vulkan::DeviceInfo& device, const TuneKey& key) const {
    for (const auto& e : entries_)
      if (e.key == key && e.is_for(device)) return &e;
    return nullptr;
  }

  /// Adds the winner for (device, key), replacing an earlier one.
  void put(const vulkan::DeviceInfo& device, const TuneKey& key, std::vector<std::uint32_t> params, double ms) {
    TunedEntry e{device.name, uuid_hex(device.device_uuid), device.driver_info, device.driver_version, key, std::move(params), ms};
    for (auto& old : entries_)
      if (old.key == key && old.is_for(device)) {
        old = std::move(e);
        return;
      }
    entries_.push_back(std::move(e));
  }

  const std::vector<TunedEntry>& entries() const noexcept { return entries_; }

 private:
  std::vector<TunedEntry> entries_;
};


/// "a,b,c": the comma-separated unsigned integers of a tile override (GPUML_KMEANS_TILE, GPUML_KNN_TILE), each at
/// most `max_value`; nullopt when the text is not of that form.
inline std::optional<std::vector<std::uint32_t>> parse_tile_list(const char* text, unsigned long max_value) {
  std::vector<std::uint32_t> values;
  for (const char* p = text;;) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(p, &end, 10);
    if (end == p || v > max_value || (*end && *end != ',')) return std::nullopt;
    values.push_back(static_cast<std::uint32_t>(v));
    if (!*end) return values;
    p = end + 1;
  }
}

/// Config::set_tuning(false) (GPUML_TUNING=0) makes gpuml ignore the store and use the catalogue defaults.
inline bool store_enabled() { return config().tuning(); }

namespace store_detail {
struct ProcessStore {
  std::mutex mutex;
  bool loaded = false;
  TuningStore store;
  std::set<std::string> warned;
};
inline ProcessStore& process_store() {
  static ProcessStore p;
  return p;
}
}  // namespace store_detail

/// The stored parameters for (device, key) in the process's store, read from TuningStore::default_path() on
/// first use.
inline std::optional<std::vector<std::uint32_t>> stored_params(const vulkan::DeviceInfo& device, const TuneKey& key) {
  if (!store_enabled()) return std::nullopt;
  auto& p = store_detail::process_store();
  std::lock_guard lock(p.mutex);
  if (!p.loaded) {
    p.store = TuningStore::load(TuningStore::default_path());
    p.loaded = true;
  }
  if (const TunedEntry* e = p.store.find(device, key)) return e->params;
  return std::nullopt;
}

/// Makes the next lookup read the file again (after tuning, or when GPUML_CACHE_DIR changed).
inline void reload_store() {
  auto& p = store_detail::process_store();
  std::lock_guard lock(p.mutex);
  p.loaded = false;
  p.warned.clear();
}

/// A warning given once per process (kernels that cannot use a stored entry say so once, not at every call).
inline void warn_once(const std::string& message) {
  auto& p = store_detail::process_store();
  {
    std::lock_guard lock(p.mutex);
    if (!p.warned.insert(message).second) return;
  }
  warn(message);
}

}  // namespace gpuml::tuning
