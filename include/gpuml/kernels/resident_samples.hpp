// The samples and sample weights of one k-means fit on a device, uploaded once and read by every engine of the fit:
// the k-means++ seeding, the Lloyd runs and the restarts of n_init. Without it each engine uploads X itself. And the
// cut of the rows into one shard per device where a fit or a prediction spans several devices.
#pragma once

#include <gpuml/core/matrix.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/kernels/distance.hpp>
#include <gpuml/policy/limits.hpp>
#include <gpuml/shaders/shift_rows_kernel.hpp>
#include <gpuml/vulkan/commands.hpp>
#include <gpuml/vulkan/device.hpp>
#include <gpuml/vulkan/transfer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpuml::kernels {

/// Rows [first, end) of shard s when n rows are cut into `count` contiguous shards of about n / count rows (the cut
/// of lloyd_sharded, assign_sharded and the others on several devices).
inline std::pair<std::int64_t, std::int64_t> shard_rows(std::int64_t n, std::int64_t count, std::int64_t s) {
  return {n * s / count, n * (s + 1) / count};
}

/// Shards of n rows over `devices`: one per device, fewer where n is small (at least one).
inline std::size_t shard_count(const std::vector<vulkan::Device*>& devices, std::int64_t n) {
  return static_cast<std::size_t>(std::max<std::int64_t>(1, std::min<std::int64_t>(static_cast<std::int64_t>(devices.size()), n)));
}

/// Runs work(s, device, first, rows) for each shard s of n rows (shard_rows), on its device, all at once (one thread
/// each).
template <class Work>
void on_shards(const std::vector<vulkan::Device*>& devices, std::int64_t n, Work&& work) {
  const std::size_t count = shard_count(devices, n);
  concurrently(count, [&](std::size_t s) {
    const auto [first, end] = shard_rows(n, static_cast<std::int64_t>(count), static_cast<std::int64_t>(s));
    work(s, *devices[s], first, end - first);
  });
}

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
  ResidentSamples() = default;
  ResidentSamples(ResidentSamples&&) noexcept = default;
  ResidentSamples& operator=(ResidentSamples&&) = delete;
  /// The samples' device memory is freed off the caller's thread (Device::release_later): a fit returns without
  /// waiting for gigabytes to be released.
  ~ResidentSamples() {
    kept_.release_later();
    reserved_.release_later();
  }
  /// The chunks of `chunk_rows` rows of n samples on `device`, where this holds them; else empty.
  std::vector<ResidentChunk> take(const vulkan::Device& device, std::uint64_t n, std::uint64_t chunk_rows) const {
    return kept_.holds(device, n, chunk_rows) ? kept_.chunks : std::vector<ResidentChunk>{};
  }
  /// The chunks held (empty before an engine left any).
  const std::vector<ResidentChunk>& chunks() const { return kept_.chunks; }
  /// How many times the samples were uploaded for the engines this served (the fit's statistics).
  int uploads() const noexcept { return uploads_; }
  void count_upload(bool into_reserved = false) noexcept {
    ++uploads_;
    if (into_reserved) ++reserved_uploads_;
  }
  /// Uploads that filled memory reserved ahead (reserve_samples), and the seconds the reservation took.
  int reserved_uploads() const noexcept { return reserved_uploads_; }
  double reserve_seconds() const noexcept { return reserve_seconds_; }
  /// Seconds spent copying samples and weights to the device (centring included), over every upload.
  double upload_seconds() const noexcept { return upload_seconds_; }
  void add_upload_seconds(double seconds) noexcept { upload_seconds_ += seconds; }
  void keep(const vulkan::Device& device, std::uint64_t n, std::uint64_t chunk_rows, std::vector<ResidentChunk> chunks) {
    kept_ = Held{&device, n, chunk_rows, std::move(chunks)};
  }
  /// Holds device memory allocated ahead for the first chunks of `chunk_rows` rows of n samples on `device` (all, or
  /// those allocated in time), not yet written (reserve_samples): the next place_samples in that layout fills them
  /// instead of allocating.
  /// `rows_written`: the chunks hold the rows as they are (not less any shift), the weights unwritten.
  void reserve(const vulkan::Device& device, std::uint64_t n, std::uint64_t chunk_rows, std::vector<ResidentChunk> chunks,
               double seconds = 0, bool rows_written = false) {
    reserve_seconds_ += seconds;
    reserved_ = Held{&device, n, chunk_rows, std::move(chunks), rows_written};
  }
  /// The reserved chunks where they are for this layout on `device`, else none; the reservation ends either way (an
  /// engine in another layout or place frees it before allocating its own). `rows_written` receives whether the
  /// chunks taken hold the rows as they are.
  std::vector<ResidentChunk> take_reserved(const vulkan::Device& device, std::uint64_t n, std::uint64_t chunk_rows,
                                           bool* rows_written = nullptr) {
    Held taken = std::exchange(reserved_, Held{});
    const bool holds = taken.holds(device, n, chunk_rows);
    if (rows_written) *rows_written = holds && taken.rows_written;
    return holds ? std::move(taken.chunks) : std::vector<ResidentChunk>{};
  }
  /// The reserved chunks where they hold the rows as they are (the device's input checks read them), else none.
  const std::vector<ResidentChunk>& reserved_rows() const {
    static const std::vector<ResidentChunk> none;
    return reserved_.rows_written ? reserved_.chunks : none;
  }
  /// Ends the reservation, its memory freed off the caller's thread.
  void drop_reserved() noexcept {
    reserved_.release_later();
    reserved_ = Held{};
  }
  /// Whether device memory is reserved (for the statistics and tests).
  bool reserved() const noexcept { return !reserved_.chunks.empty(); }

 private:
  /// Chunks in one layout (n rows in chunks of chunk_rows) on one device.
  struct Held {
    const vulkan::Device* device = nullptr;
    std::uint64_t n = 0, chunk_rows = 0;
    std::vector<ResidentChunk> chunks;
    bool rows_written = false;

    bool holds(const vulkan::Device& on, std::uint64_t rows, std::uint64_t per_chunk) const {
      return device == &on && n == rows && chunk_rows == per_chunk;
    }
    /// The chunks' device memory is freed off the caller's thread (Device::release_later_all; where it cannot
    /// take them, they go with this).
    void release_later() noexcept {
      if (device && !chunks.empty()) device->release_later_all(std::move(chunks));
    }
  };

  Held kept_, reserved_;
  int uploads_ = 0, reserved_uploads_ = 0;
  double upload_seconds_ = 0, reserve_seconds_ = 0;
};

inline constexpr std::uint32_t kShiftThreads = 256;

/// Records x[i, j] -= shift[j] for `rows` rows of `cols` values in place (rows * cols below 2^32).
template <class T>
void record_shift_rows(vulkan::Device& device, vulkan::Commands& cmds, vulkan::BufferSlice x, vulkan::BufferSlice shift,
                       std::uint64_t rows, std::uint32_t cols) {
  namespace shader = shader_interface::shift_rows;
  const std::uint64_t elements = rows * cols;
  if (elements > UINT32_MAX) throw error("shift_rows: a block of more than 2^32 values");
  const auto& k = device.kernel(
      shaders::shift_rows_kernel::spec<T>(spec_constants(shader::kSpecCount, {{shader::kSpecThreads, kShiftThreads}})));
  const LinearGrid grid = linear_grid(device.info(), ceil_div(elements, kShiftThreads), "shift_rows");
  const shader::Push push{.elements = static_cast<std::uint32_t>(elements), .cols = cols};
  cmds.dispatch(k, {{shader::kBindingRows, x}, {shader::kBindingShift, shift}}, push, grid.x, grid.y);
}

/// Whether `device` may subtract X's shift from its rows in place (record_shift_rows): X holds no subnormal (Config::
/// may_centre_on_device holds, which is where the checks look for them), its rows are contiguous, and the device
/// computes in T. Its subtraction then rounds as the host's.
template <class T>
bool shifts_on_device(const vulkan::Device& device, const ShiftedView<T>& X) {
  const bool contiguous = X.X.innerStride() == 1 && (X.X.outerStride() == X.cols() || X.rows() <= 1);
  return X.shift && X.subnormal_free && contiguous && (!std::is_same_v<T, double> || device.info().float64);
}

/// Whether rows of X go to `device` as they are and are centred there (record_shift_rows): where shifts_on_device
/// holds and the device reads the host memory in place, or the host stages into memory it cannot map and
/// Config::device_centring is on. The host then only copies (or not even that).
template <class T>
bool centres_on_device(const vulkan::Device& device, const ShiftedView<T>& X, const vulkan::Buffer& dst) {
  const bool raw_copy = vulkan::uploads_in_place(device) || (!dst.mapped() && config().device_centring());
  return raw_copy && shifts_on_device(device, X);
}

/// Rows [r0, r0 + rows) of X less its shift into `dst`: centred on the device where centres_on_device says so
/// (`shift` then holds the shift on the device), else on the host as they are written.
template <class T>
void upload_centred_rows(vulkan::Device& device, const vulkan::Buffer& dst, const ShiftedView<T>& X, std::uint64_t r0,
                         std::uint64_t rows, const vulkan::Buffer* shift) {
  const auto first = static_cast<Eigen::Index>(r0), end = static_cast<Eigen::Index>(r0 + rows);
  if (!shift) {
    vulkan::upload_shifted_rows<T>(device, dst, 0, X, first, end);
    return;
  }
  vulkan::upload_rows<T>(device, dst, 0, X.X, first, end);
  vulkan::Commands cmds(device);
  cmds.barrier();  // the copies of earlier submissions, visible to the shader
  record_shift_rows<T>(device, cmds, dst, *shift, rows, static_cast<std::uint32_t>(X.cols()));
  cmds.submit_and_wait();
}

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
  // Samples in another layout or place are not used again: their device memory goes before new buffers come, and
  // memory reserved for this layout is filled instead of allocated.
  std::vector<ResidentChunk> reserved;
  bool rows_written = false;  // the reserved chunks hold X as it is: only the shift is left to do
  if (resident) {
    reserved = resident->take_reserved(device, keepable ? n : 0, keepable ? chunk_rows : 0, &rows_written);
    resident->keep(device, 0, 0, {});
    resident->count_upload(!reserved.empty());
  }
  std::vector<ResidentChunk> chunks;
  std::optional<vulkan::Buffer> shift;  // the shift on the device, where the device centres the rows
  for (std::uint64_t r0 = 0; r0 < n; r0 += chunk_rows) {
    ResidentChunk c;
    c.first = r0;
    c.rows = std::min(chunk_rows, n - r0);
    const std::size_t i = chunks.size();
    auto x = i < reserved.size() ? reserved[i].x : std::make_shared<vulkan::Buffer>(device.buffer(c.rows * d * s, memory, shared));
    auto wb = i < reserved.size() ? reserved[i].w : std::make_shared<vulkan::Buffer>(device.buffer(c.rows * s, memory, shared));
    // Rows already there as they are (rows_written) are centred in place wherever the device may.
    const bool written = i < reserved.size() && rows_written;
    if (!shift && (written ? shifts_on_device<T>(device, X) : centres_on_device<T>(device, X, *x))) {
      shift.emplace(device.buffer(d * s));
      vulkan::upload(device, *shift, 0, X.shift, d * s);
    }
    const auto copy_start = std::chrono::steady_clock::now();
    if (written && (shift || !X.shift)) {
      if (shift) {
        vulkan::Commands cmds(device);
        cmds.barrier();  // the reservation's copies, visible to the shader
        record_shift_rows<T>(device, cmds, *x, *shift, c.rows, static_cast<std::uint32_t>(d));
        cmds.submit_and_wait();
      }
    } else {
      upload_centred_rows<T>(device, *x, X, r0, c.rows, shift ? &*shift : nullptr);
    }
    if (w) vulkan::upload(device, *wb, 0, w + r0, c.rows * s);
    if (resident)
      resident->add_upload_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - copy_start).count());
    c.x = std::move(x);
    c.w = std::move(wb);
    chunks.push_back(std::move(c));
  }
  if (keepable) resident->keep(device, n, chunk_rows, chunks);
  return chunks;
}

/// `chunk_rows()`, an engine's rows per chunk of samples on `device` (its sample_chunk_rows), or 0 where the engine
/// would refuse the device or the problem: it says why itself when it runs.
template <class T, class ChunkRows>
std::uint64_t chunk_rows_or_zero(const vulkan::Device& device, ChunkRows&& chunk_rows) noexcept {
  try {
    require_scalar_support<T>(device);
    if (!device.info().int64) return 0;  // the k-means engines add their sums in 64-bit integers
    return chunk_rows();
  } catch (...) {
    return 0;
  }
}

/// Allocates the device memory of the chunks of n samples of d features, `chunk_rows` rows each, that the fit's next
/// engine on `device` will fill (place_samples in that layout), and leaves it in `resident`. Allocating gigabytes of
/// device memory takes about as long as a fit's input checks on the host and needs nothing from them, so a fit
/// reserves on a thread of its own while it checks. `enough`, where given, ends the reservation after the chunk in
/// hand once it is true (the first chunk is always reserved): the checks are done, and the engine allocates the rest
/// itself rather than wait. Not where the samples might not stay in device memory (more than half of its budget):
/// engines would stream them instead.
///
/// `rows`, where given (the n rows, contiguous), is copied into the chunks as it is once all are allocated, and every
/// chunk is reserved (`enough` then only abandons a failed fit's reservation): the device's input checks read the
/// rows there (kernels/column_checks.hpp), and the engine only centres them. (Allocating device memory and copying
/// both load the host's memory: a copy beside the next chunk's allocation ran at half its speed.)
template <class T>
void reserve_samples(vulkan::Device& device, std::uint64_t n, std::uint64_t d, std::uint64_t chunk_rows,
                     ResidentSamples<T>& resident, const std::atomic<bool>* enough = nullptr,
                     const MatrixView<T>* rows = nullptr) {
  const std::uint64_t s = sizeof(T), budget = device_memory_budget(device.info());
  if (n == 0 || chunk_rows == 0 || (budget && 2 * n * (d + 1) * s > budget)) return;
  const auto start = std::chrono::steady_clock::now();
  std::vector<ResidentChunk> chunks;
  for (std::uint64_t r0 = 0; r0 < n && !(r0 > 0 && enough && enough->load()); r0 += chunk_rows) {
    ResidentChunk c;
    c.first = r0;
    c.rows = std::min(chunk_rows, n - r0);
    c.x = std::make_shared<vulkan::Buffer>(device.buffer(c.rows * d * s));
    c.w = std::make_shared<vulkan::Buffer>(device.buffer(c.rows * s));
    chunks.push_back(std::move(c));
  }
  const bool written = rows && chunks.size() * chunk_rows >= n;
  if (written) {
    const auto copy_start = std::chrono::steady_clock::now();
    for (const ResidentChunk& c : chunks) {
      if (enough && enough->load()) return;
      vulkan::upload_rows<T>(device, *c.x, 0, *rows, static_cast<Eigen::Index>(c.first), static_cast<Eigen::Index>(c.first + c.rows));
    }
    resident.add_upload_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - copy_start).count());
  }
  resident.reserve(device, n, chunk_rows, std::move(chunks),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), written);
}

}  // namespace gpuml::kernels
