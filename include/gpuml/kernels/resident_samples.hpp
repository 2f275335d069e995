// The samples and sample weights of one k-means fit on a device, uploaded once and read by every engine of the fit:
// the k-means++ seeding, the Lloyd runs and the restarts of n_init. Without it each engine uploads X itself.
#pragma once

#include <gpuml/core/matrix.hpp>
#include <gpuml/vulkan/device.hpp>
#include <gpuml/vulkan/transfer.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace gpuml::kernels {

/// One chunk of rows of X (less its shift) and of the weights, in device memory.
struct ResidentChunk {
  std::uint64_t first = 0, rows = 0;
  std::shared_ptr<const vulkan::Buffer> x, w;
};

/// The chunks an engine placed in device memory, for the fit's next engine on the same device with the same chunk
/// rows (engines whose samples stay in pinned host memory neither keep nor take them). Owned by the fit; the buffers
/// live while an engine or this holds them.
template <class T>
class ResidentSamples {
 public:
  /// The chunks of `chunk_rows` rows of n samples on `device`, where this holds them; else empty.
  std::vector<ResidentChunk> take(const vulkan::Device& device, std::uint64_t n, std::uint64_t chunk_rows) const {
    if (device_ != &device || n_ != n || chunk_rows_ != chunk_rows) return {};
    return chunks_;
  }
  /// The chunks held (empty before an engine left any).
  const std::vector<ResidentChunk>& chunks() const { return chunks_; }
  /// How many times the samples were uploaded for the engines this served (the fit's statistics).
  int uploads() const noexcept { return uploads_; }
  void count_upload() noexcept { ++uploads_; }
  void keep(const vulkan::Device& device, std::uint64_t n, std::uint64_t chunk_rows, std::vector<ResidentChunk> chunks) {
    device_ = &device;
    n_ = n;
    chunk_rows_ = chunk_rows;
    chunks_ = std::move(chunks);
  }

 private:
  const vulkan::Device* device_ = nullptr;
  std::uint64_t n_ = 0, chunk_rows_ = 0;
  std::vector<ResidentChunk> chunks_;
  int uploads_ = 0;
};

/// The chunks of X (less its shift) and w for an engine: those `resident` holds for this layout, or new ones
/// uploaded (and handed to `resident` where the memory is the device's). `w` may be null (an engine that reads no
/// weights: the buffers are left unwritten). `shared`: also used by the transfer queue (a streamed engine's).
template <class T>
std::vector<ResidentChunk> place_samples(vulkan::Device& device, const ShiftedView<T>& X, const T* w, std::uint64_t chunk_rows,
                                         vulkan::MemoryUse memory, bool shared, ResidentSamples<T>* resident) {
  const std::uint64_t n = X.rows(), d = X.cols(), s = sizeof(T);
  const bool keepable = resident && w && memory == vulkan::MemoryUse::device && !shared;
  if (keepable)
    if (auto chunks = resident->take(device, n, chunk_rows); !chunks.empty()) return chunks;
  // Samples in another layout or place are not used again: their device memory goes before new buffers come.
  if (resident) {
    resident->keep(device, 0, 0, {});
    resident->count_upload();
  }
  std::vector<ResidentChunk> chunks;
  for (std::uint64_t r0 = 0; r0 < n; r0 += chunk_rows) {
    ResidentChunk c;
    c.first = r0;
    c.rows = std::min(chunk_rows, n - r0);
    auto x = std::make_shared<vulkan::Buffer>(device.buffer(c.rows * d * s, memory, shared));
    auto wb = std::make_shared<vulkan::Buffer>(device.buffer(c.rows * s, memory, shared));
    vulkan::upload_shifted_rows<T>(device, *x, 0, X, static_cast<Eigen::Index>(r0), static_cast<Eigen::Index>(r0 + c.rows));
    if (w) vulkan::upload(device, *wb, 0, w + r0, c.rows * s);
    c.x = std::move(x);
    c.w = std::move(wb);
    chunks.push_back(std::move(c));
  }
  if (keepable) resident->keep(device, n, chunk_rows, chunks);
  return chunks;
}

}  // namespace gpuml::kernels
