// Moving bytes between host memory and buffers: a memcpy where the buffer is mapped (unified memory),
// otherwise through a staging buffer in bounded chunks.
#pragma once

#include <gpuml/core/matrix.hpp>
#include <gpuml/vulkan/commands.hpp>

#include <algorithm>
#include <cstring>

namespace gpuml::vulkan {

inline constexpr VkDeviceSize kStagingChunk = VkDeviceSize(64) << 20;

inline void upload(Device& device, const Buffer& dst, VkDeviceSize offset, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (offset + bytes > dst.size()) throw error("upload past the end of a buffer");
  if (void* p = dst.mapped()) {
    std::memcpy(static_cast<char*>(p) + offset, src, bytes);
    return;
  }
  const VkDeviceSize chunk = std::min<VkDeviceSize>(bytes, kStagingChunk);
  Buffer staging = device.buffer(chunk, MemoryUse::upload);
  Commands cmds(device);
  for (std::size_t done = 0; done < bytes; done += chunk) {
    const std::size_t n = std::min<std::size_t>(chunk, bytes - done);
    std::memcpy(staging.mapped(), static_cast<const char*>(src) + done, n);
    cmds.copy(staging, 0, dst, offset + done, n);
    cmds.submit_wait_and_reset();
  }
}

inline void download(Device& device, const Buffer& src, VkDeviceSize offset, void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  if (offset + bytes > src.size()) throw error("download past the end of a buffer");
  if (const void* p = src.mapped()) {
    std::memcpy(dst, static_cast<const char*>(p) + offset, bytes);
    return;
  }
  const VkDeviceSize chunk = std::min<VkDeviceSize>(bytes, kStagingChunk);
  Buffer staging = device.buffer(chunk, MemoryUse::readback);
  Commands cmds(device);
  for (std::size_t done = 0; done < bytes; done += chunk) {
    const std::size_t n = std::min<std::size_t>(chunk, bytes - done);
    cmds.copy(src, offset + done, staging, 0, n);
    cmds.submit_wait_and_reset();
    std::memcpy(static_cast<char*>(dst) + done, staging.mapped(), n);
  }
}

/// Copies rows [row_begin, row_end) of a row-major view into a buffer, contiguously, in the buffer's scalar type.
template <class Scalar, class View>
void upload_rows(Device& device, const Buffer& dst, VkDeviceSize offset, const View& X, Eigen::Index row_begin,
                 Eigen::Index row_end) {
  const Eigen::Index rows = row_end - row_begin, cols = X.cols();
  const bool contiguous = X.innerStride() == 1 && (X.outerStride() == cols || rows == 1);
  if (contiguous) {
    upload(device, dst, offset, X.data() + row_begin * X.outerStride(), sizeof(Scalar) * rows * cols);
    return;
  }
  std::vector<Scalar> packed(static_cast<std::size_t>(rows * cols));
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) packed[i * cols + j] = X(row_begin + i, j);
  upload(device, dst, offset, packed.data(), packed.size() * sizeof(Scalar));
}

}  // namespace gpuml::vulkan
