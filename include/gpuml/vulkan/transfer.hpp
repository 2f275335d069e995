// Moving bytes between host memory and buffers: a memcpy where the buffer is mapped (unified memory),
// otherwise through a staging buffer in bounded chunks.
#pragma once

#include <gpuml/core/matrix.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/vulkan/commands.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

namespace gpuml::vulkan {

inline constexpr VkDeviceSize kStagingChunk = VkDeviceSize(64) << 20;

namespace transfer_detail {
/// memcpy across the worker threads: one thread cannot saturate a PCIe link writing to host-visible memory.
inline void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  constexpr std::int64_t kPiece = std::int64_t(4) << 20;
  const std::int64_t pieces = static_cast<std::int64_t>((bytes + kPiece - 1) / kPiece);
  parallel_chunks(pieces, 1, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    const std::size_t lo = static_cast<std::size_t>(b * kPiece), hi = std::min(bytes, static_cast<std::size_t>(e * kPiece));
    std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
  });
}
}  // namespace transfer_detail

/// Host to buffer. Through two staging buffers in turn, so filling one overlaps the device's copy of the other.
inline void upload(Device& device, const Buffer& dst, VkDeviceSize offset, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (offset + bytes > dst.size()) throw error("upload past the end of a buffer");
  if (void* p = dst.mapped()) {
    transfer_detail::copy_bytes(static_cast<char*>(p) + offset, src, bytes);
    return;
  }
  const VkDeviceSize chunk = std::min<VkDeviceSize>(bytes, kStagingChunk);
  const int slots = bytes > chunk ? 2 : 1;
  std::vector<Buffer> staging;
  std::vector<std::unique_ptr<Commands>> cmds;
  for (int i = 0; i < slots; ++i) {
    staging.push_back(device.buffer(chunk, MemoryUse::upload));
    cmds.push_back(std::make_unique<Commands>(device));
  }
  int slot = 0;
  for (std::size_t done = 0; done < bytes; done += chunk, slot = (slot + 1) % slots) {
    const std::size_t n = std::min<std::size_t>(chunk, bytes - done);
    cmds[slot]->wait();
    cmds[slot]->reset();
    transfer_detail::copy_bytes(staging[slot].mapped(), static_cast<const char*>(src) + done, n);
    cmds[slot]->copy(staging[slot], 0, dst, offset + done, n);
    cmds[slot]->submit();
  }
  for (auto& c : cmds) c->wait();
}

/// Buffer to host, through two staging buffers in turn (the device fills one while the host reads the other).
inline void download(Device& device, const Buffer& src, VkDeviceSize offset, void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  if (offset + bytes > src.size()) throw error("download past the end of a buffer");
  if (const void* p = src.mapped()) {
    transfer_detail::copy_bytes(dst, static_cast<const char*>(p) + offset, bytes);
    return;
  }
  const VkDeviceSize chunk = std::min<VkDeviceSize>(bytes, kStagingChunk);
  const std::size_t pieces = (bytes + chunk - 1) / chunk;
  const int slots = pieces > 1 ? 2 : 1;
  std::vector<Buffer> staging;
  std::vector<std::unique_ptr<Commands>> cmds;
  for (int i = 0; i < slots; ++i) {
    staging.push_back(device.buffer(chunk, MemoryUse::readback));
    cmds.push_back(std::make_unique<Commands>(device));
  }
  auto start = [&](std::size_t piece) {
    const int slot = static_cast<int>(piece % slots);
    const std::size_t done = piece * chunk, n = std::min<std::size_t>(chunk, bytes - done);
    cmds[slot]->reset();
    cmds[slot]->copy(src, offset + done, staging[slot], 0, n);
    cmds[slot]->submit();
  };
  start(0);
  for (std::size_t piece = 0; piece < pieces; ++piece) {
    if (piece + 1 < pieces) start(piece + 1);
    const int slot = static_cast<int>(piece % slots);
    const std::size_t done = piece * chunk, n = std::min<std::size_t>(chunk, bytes - done);
    cmds[slot]->wait();
    transfer_detail::copy_bytes(static_cast<char*>(dst) + done, staging[slot].mapped(), n);
  }
}

/// Rows [row_begin, row_end) of a row-major view, packed contiguously at `dst` in the scalar type Scalar (one
/// memcpy where the view already is contiguous in that type).
template <class Scalar, class View>
void pack_rows(const View& X, Eigen::Index row_begin, Eigen::Index row_end, Scalar* dst) {
  const Eigen::Index rows = row_end - row_begin, cols = X.cols();
  using Source = std::remove_cv_t<typename View::Scalar>;
  const bool contiguous = X.innerStride() == 1 && (X.outerStride() == cols || rows == 1);
  if constexpr (std::is_same_v<Source, Scalar>) {
    if (contiguous) {
      transfer_detail::copy_bytes(dst, X.data() + row_begin * X.outerStride(), sizeof(Scalar) * rows * cols);
      return;
    }
  }
  parallel_chunks(rows, 1024, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (Eigen::Index i = b; i < e; ++i)
      for (Eigen::Index j = 0; j < cols; ++j) dst[i * cols + j] = static_cast<Scalar>(X(row_begin + i, j));
  });
}

/// Copies rows [row_begin, row_end) of a row-major view into a buffer, contiguously, in the buffer's scalar type.
template <class Scalar, class View>
void upload_rows(Device& device, const Buffer& dst, VkDeviceSize offset, const View& X, Eigen::Index row_begin,
                 Eigen::Index row_end) {
  const Eigen::Index rows = row_end - row_begin, cols = X.cols();
  using Source = std::remove_cv_t<typename View::Scalar>;
  const bool contiguous = X.innerStride() == 1 && (X.outerStride() == cols || rows == 1);
  if (std::is_same_v<Source, Scalar> && contiguous) {
    upload(device, dst, offset, X.data() + row_begin * X.outerStride(), sizeof(Scalar) * rows * cols);
    return;
  }
  std::vector<Scalar> packed(static_cast<std::size_t>(rows * cols));
  pack_rows<Scalar>(X, row_begin, row_end, packed.data());
  upload(device, dst, offset, packed.data(), packed.size() * sizeof(Scalar));
}

}  // namespace gpuml::vulkan
