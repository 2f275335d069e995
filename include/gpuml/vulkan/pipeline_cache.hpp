// On-disk VkPipelineCache data, one file per device and driver (keyed by pipelineCacheUUID), so a second
// process does not compile the shaders again. GPUML_PIPELINE_CACHE=0 turns it off; GPUML_CACHE_DIR moves it.
#pragma once

#include <gpuml/core/config.hpp>
#include <gpuml/vulkan/instance.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace gpuml::vulkan {

inline std::string cache_directory() { return config().cache_dir(); }

inline std::string device_key(const DeviceInfo& info) {
  static const char* hex = "0123456789abcdef";
  std::string key;
  for (auto b : info.pipeline_cache_uuid) {
    key += hex[b >> 4];
    key += hex[b & 15];
  }
  return key + "-" + std::to_string(info.vendor_id) + "-" + std::to_string(info.device_id) + "-" +
         std::to_string(info.driver_version);
}

inline bool pipeline_cache_enabled() { return config().pipeline_cache(); }

inline std::string pipeline_cache_path(const DeviceInfo& info) {
  const std::string dir = cache_directory();
  return dir.empty() ? std::string() : dir + "/pipelines-" + device_key(info) + ".bin";
}

inline std::vector<char> read_file_bytes(const std::string& path) {
  std::vector<char> data;
  if (path.empty()) return data;
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fseek(f, 0, SEEK_END);
    const long n = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    if (n > 0) {
      data.resize(static_cast<std::size_t>(n));
      if (std::fread(data.data(), 1, data.size(), f) != data.size()) data.clear();
    }
    std::fclose(f);
  }
  return data;
}

inline void make_directories(const std::string& dir) {
  for (std::size_t pos = 1; pos <= dir.size(); ++pos)
    if (pos == dir.size() || dir[pos] == '/') ::mkdir(dir.substr(0, pos).c_str(), 0755);
}

/// Writes through a temporary file and a rename, so a concurrent reader never sees half a file.
inline void write_file_bytes(const std::string& path, const std::vector<char>& data) {
  if (path.empty() || data.empty()) return;
  make_directories(path.substr(0, path.rfind('/')));
  // Named by process and call: processes sharing a cache directory (test passes run at once) never share one.
  const std::string tmp =
      path + ".tmp" + std::to_string(::getpid()) + "." + std::to_string(reinterpret_cast<std::uintptr_t>(&data));
  if (std::FILE* f = std::fopen(tmp.c_str(), "wb")) {
    const bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
    if (std::fclose(f) == 0 && ok) std::rename(tmp.c_str(), path.c_str());
    else std::remove(tmp.c_str());
  }
}

}  // namespace gpuml::vulkan
