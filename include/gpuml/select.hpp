// Device selection (provisional: host only until the Vulkan runtime lands).
#pragma once
#include <gpuml/core/backend.hpp>
namespace gpuml {
inline Backend default_backend() { return Backend::host(); }
}  // namespace gpuml
