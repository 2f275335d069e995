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
  constexpr std::int64_t kPiece = std::int64_t(1) << 20;  // a batch of queries (a few MiB) on several threads too
  const std::int64_t pieces = static_cast<std::int64_t>((bytes + kPiece - 1) / kPiece);
  parallel_chunks(pieces, 1, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    const std::size_t lo = static_cast<std::size_t>(b * kPiece), hi = std::min(bytes, static_cast<std::size_t>(e * kPiece));
    std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
  });
}
}  // namespace transfer_detail

/// Host to buffer, where `fill(to, begin, count)` writes the source's bytes [begin, begin + count) at `to` (on the
/// host threads, as it likes): a fill of the mapped buffer where it is mapped (unified memory), otherwise of two
/// staging buffers in turn, so filling one overlaps the device's copy of the other. Every fill but the last covers a
/// whole number of `granule` bytes (a row, for fills that compute what they write).
template <class Fill>
void upload_filled(Device& device, const Buffer& dst, VkDeviceSize offset, std::size_t bytes, std::size_t granule,
                   Fill&& fill) {
  if (bytes == 0) return;
  if (offset + bytes > dst.size()) throw error("upload past the end of a buffer");
  if (void* p = dst.mapped()) {
    fill(static_cast<char*>(p) + offset, std::size_t{0}, bytes);
    return;
  }
  granule = std::max<std::size_t>(granule, 1);
  const VkDeviceSize chunk = std::min<VkDeviceSize>(bytes, std::max<VkDeviceSize>(kStagingChunk / granule, 1) * granule);
  const int slots = bytes > chunk ? 2 : 1;
  std::vector<Device::StagingLease> staging;
  std::vector<std::unique_ptr<Commands>> cmds;
  for (int i = 0; i < slots; ++i) {
    staging.push_back(device.staging(chunk, MemoryUse::upload));
    cmds.push_back(std::make_unique<Commands>(device));
  }
  int slot = 0;
  for (std::size_t done = 0; done < bytes; done += chunk, slot = (slot + 1) % slots) {
    const std::size_t n = std::min<std::size_t>(chunk, bytes - done);
    cmds[slot]->wait();
    cmds[slot]->reset();
    fill(staging[slot].mapped(), done, n);
    cmds[slot]->copy(staging[slot].buffer(), 0, dst, offset + done, n);
    cmds[slot]->submit();
  }
  for (auto& c : cmds) c->wait();
}

/// Host memory is imported a piece at a time, the next piece pinned while the device copies the last.
inline constexpr std::size_t kImportPiece = std::size_t(256) << 20;

/// Whether uploads to `device` read the host memory in place (Config::upload, the device's import).
inline bool uploads_in_place(const Device& device) {
  return device.info().host_memory_import && config().upload() == Upload::imported;
}

/// Host to buffer by the device's own reads of the host memory (Device::import_host): no copy on the host, and the
/// host's memory is read once. Pieces the driver will not import are staged. False where uploads_in_place is.
inline bool upload_in_place(Device& device, const Buffer& dst, VkDeviceSize offset, const void* src, std::size_t bytes) {
  if (bytes == 0 || !uploads_in_place(device)) return false;
  if (offset + bytes > dst.size()) throw error("upload past the end of a buffer");
  const auto* from = static_cast<const char*>(src);
  struct Slot {  // the import outlives the commands that read it (members go in reverse order)
    Device::HostImport import;
    std::unique_ptr<Commands> cmds;
  };
  Slot slots[2] = {{{}, std::make_unique<Commands>(device)}, {{}, std::make_unique<Commands>(device)}};
  int slot = 0;
  for (std::size_t done = 0; done < bytes; done += kImportPiece, slot ^= 1) {
    const std::size_t n = std::min(kImportPiece, bytes - done);
    Slot& s = slots[slot];
    s.cmds->wait();
    s.cmds->reset();
    s.import = device.import_host(from + done, n);
    if (!s.import.buffer) {
      slots[slot ^ 1].cmds->wait();
      upload_filled(device, dst, offset + done, bytes - done, 1, [&](void* to, std::size_t begin, std::size_t count) {
        transfer_detail::copy_bytes(to, from + done + begin, count);
      });
      return true;
    }
    s.cmds->copy(s.import.buffer, s.import.offset, dst, offset + done, n);
    s.cmds->submit();
  }
  for (auto& s : slots) s.cmds->wait();
  return true;
}

/// Host to buffer: `bytes` bytes from `src`.
inline void upload(Device& device, const Buffer& dst, VkDeviceSize offset, const void* src, std::size_t bytes) {
  if (upload_in_place(device, dst, offset, src, bytes)) return;
  upload_filled(device, dst, offset, bytes, 1, [&](void* to, std::size_t begin, std::size_t count) {
    transfer_detail::copy_bytes(to, static_cast<const char*>(src) + begin, count);
  });
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
  std::vector<Device::StagingLease> staging;
  std::vector<std::unique_ptr<Commands>> cmds;
  for (int i = 0; i < slots; ++i) {
    staging.push_back(device.staging(chunk, MemoryUse::readback));
    cmds.push_back(std::make_unique<Commands>(device));
  }
  auto start = [&](std::size_t piece) {
    const int slot = static_cast<int>(piece % slots);
    const std::size_t done = piece * chunk, n = std::min<std::size_t>(chunk, bytes - done);
    cmds[slot]->reset();
    cmds[slot]->copy(src, offset + done, staging[slot].buffer(), 0, n);
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
  const std::size_t row_bytes = sizeof(Scalar) * static_cast<std::size_t>(cols);
  upload_filled(device, dst, offset, row_bytes * static_cast<std::size_t>(rows), row_bytes,
                [&](void* to, std::size_t begin, std::size_t count) {
                  const auto first = row_begin + static_cast<Eigen::Index>(begin / row_bytes);
                  pack_rows<Scalar>(X, first, first + static_cast<Eigen::Index>(count / row_bytes), static_cast<Scalar*>(to));
                });
}

/// Rows [row_begin, row_end) of X less its shift (ShiftedView), into a buffer of T: the subtraction happens as the
/// rows are written, rounded as X.rowwise() - shift would be, so the device holds the centred rows without a centred
/// copy of X on the host.
template <class T>
void upload_shifted_rows(Device& device, const Buffer& dst, VkDeviceSize offset, const ShiftedView<T>& X,
                         Eigen::Index row_begin, Eigen::Index row_end) {
  if (!X.shift) {
    upload_rows<T>(device, dst, offset, X.X, row_begin, row_end);
    return;
  }
  const std::size_t row_bytes = sizeof(T) * static_cast<std::size_t>(X.cols());
  upload_filled(device, dst, offset, row_bytes * static_cast<std::size_t>(row_end - row_begin), row_bytes,
                [&](void* to, std::size_t begin, std::size_t count) {
                  X.copy_rows(row_begin + static_cast<Eigen::Index>(begin / row_bytes),
                              static_cast<Eigen::Index>(count / row_bytes), static_cast<T*>(to));
                });
}

}  // namespace gpuml::vulkan
