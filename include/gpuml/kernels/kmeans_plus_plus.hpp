// The Vulkan engine of greedy k-means++: the candidates' potentials and the kept center's distance update run on
// the device (shaders/kmeans_plus_plus.comp); scikit-learn's algorithm is algorithms::plus_plus_loop,
// shared with the host engine. Samples are split in chunks that each fit one binding, as LloydEngine does. Per
// round the host downloads one exact mass sum (w * closest, int64 fixed point) per sampling block of 1024 samples,
// and then only the distances of the blocks its draws land in; float32 data of at most
// algorithms::kNumpyFloatCumsumSamples samples instead downloads every distance in one copy (prefetch_all), as the
// replay of numpy's float32 cumulative sum reads every mass. The candidates' potentials come back as one exact
// partial per workgroup, added as integers.
//
// Every block sum and potential is the exact sum of its terms (w_i times a distance, rounded in T) in the fixed
// point of algorithms::SumFrame::plus_plus_exponent, as on the host engine: the same integers for any cut of the rows
// into chunks, workgroups or MPI ranks. Against the host engine only the distances may differ (the device
// accumulates them with fma).
#pragma once

#include <gpuml/algorithms/kmeans.hpp>
#include <gpuml/kernels/distance.hpp>
#include <gpuml/kernels/resident_samples.hpp>
#include <gpuml/shaders/kmeans_plus_plus_kernel.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

namespace gpuml::kernels {

namespace plus_plus_interface = shader_interface::kmeans_plus_plus;

/// Device-resident data of one k-means++ seeding: X, weights and the distances to the nearest center so far, in
/// chunks of whole sampling blocks; plus_plus_loop's engine interface.
template <class T>
class PlusPlusEngine {
 public:
  // 128 threads and 1 KiB of shared memory (double) fit every Vulkan device's guaranteed limits.
  static constexpr std::uint32_t kThreads = 128, kSamplesPerThread = 8, kMaxGroups = 1024;
  static constexpr std::uint64_t kBlock = kThreads * kSamplesPerThread;  // one shader tile per sampling block
  static_assert(kBlock == algorithms::kPlusPlusBlock, "the host and device engines sample the same blocks");

  /// The rows per chunk of samples an engine for n rows of d features places on `device` (kernels::place_samples),
  /// so that device memory can be reserved for them ahead of the engine (reserve_samples).
  static std::uint64_t sample_chunk_rows(const vulkan::Device& device, std::uint64_t n, std::uint64_t d) {
    return chunk_rows_or_zero<T>(device, [&] { return chunk_rows_for(device, n, d, 0); });
  }

  /// `max_chunk_bytes` caps one chunk of X below the device's binding limit (0: no cap; tests split small data).
  /// `resident`: where the fit keeps its samples on the device (see LloydEngine). `frame`: the fit's bounds for the
  /// exact sums (none: those of exactly these rows). `block_offset`: the first row's place in its sampling block
  /// (an MPI rank's shard; 0 in one process).
  PlusPlusEngine(vulkan::Device& device, ShiftedView<T> X, VectorView<T> w, int n_trials, std::uint64_t max_chunk_bytes = 0,
                 ResidentSamples<T>* resident = nullptr, const std::optional<algorithms::SumFrame>& frame = {},
                 std::int64_t block_offset = 0)
      : dev_(device), w_(w), n_(X.rows()), d_(X.cols()), trials_(static_cast<std::uint32_t>(n_trials)),
        blocks_{X.rows(), block_offset} {
    require_scalar_support<T>(device);
    if (!device.info().int64)
      throw unsupported(device.info().name + " has no shaderInt64: k-means++ adds its sums exactly in 64-bit integers");
    exponent_ = (frame ? *frame : algorithms::SumFrame::of<T>(X, w)).template plus_plus_exponent<T>(X.cols());
    sums_.exponent = exponent_;
    const std::uint64_t s = sizeof(T);
    chunk_rows_ = chunk_rows_for(device, n_, d_, max_chunk_bytes);
    // Samples and weights that do not fit the device's memory (or its configured limit) stay in pinned host
    // memory, read in place by every pass (the Lloyd E-step copies slices instead: LloydEngine).
    const std::uint64_t budget = device_memory_budget(device.info());
    streamed_ = budget && n_ * (d_ + 2) * s > budget;
    const vulkan::MemoryUse samples = streamed_ ? vulkan::MemoryUse::host : vulkan::MemoryUse::device;
    for (ResidentChunk& placed : place_samples<T>(device, X, w.data(), chunk_rows_, samples, false, resident)) {
      Chunk c;
      c.first = placed.first;
      c.rows = placed.rows;
      c.groups = static_cast<std::uint32_t>(
          std::min<std::uint64_t>({kMaxGroups, ceil_div(c.rows, kBlock), device.info().max_workgroup_count[0]}));
      c.partial_base = parts_;
      parts_ += c.groups;
      // The chunk's sampling blocks: one mass slot each (a block split between two chunks has a slot in both).
      c.offset = (std::uint64_t(block_offset) + c.first) % kBlock;
      c.first_block = (std::uint64_t(block_offset) + c.first) / kBlock;
      c.mass_base = slots_;
      slots_ += static_cast<std::uint32_t>(ceil_div(c.offset + c.rows, kBlock));
      c.x = std::move(placed.x);
      c.w = std::move(placed.w);
      c.closest = device.buffer(c.rows * s);
      chunks_.push_back(std::move(c));
    }
    sums_.exact.assign(std::size_t(blocks_.count()), 0);
    sums_.values.assign(std::size_t(blocks_.count()), 0.0);
    cand_ = device.buffer(trials_ * d_ * s);
    cand_staging_ = device.buffer(trials_ * d_ * s, vulkan::MemoryUse::upload);
    partials_ = device.buffer(std::max<std::uint64_t>(1, std::uint64_t(parts_) * trials_) * kExact);
    block_mass_ = device.buffer(std::max<std::uint64_t>(1, slots_) * kExact);
    readback_ = device.buffer(std::max<std::uint64_t>({std::uint64_t(slots_) * kExact, std::uint64_t(parts_) * trials_ * kExact,
                                                       trials_ * kBlock * s, 8}),
                              vulkan::MemoryUse::readback);
    const std::uint32_t d = static_cast<std::uint32_t>(d_);
    namespace shader = plus_plus_interface;
    auto kernel = [&](std::uint32_t mode) {
      return device.kernel(shaders::kmeans_plus_plus_kernel::spec<T>(
          spec_constants(shader::kSpecCount, {{shader::kSpecThreads, kThreads}, {shader::kSpecSamplesPerThread, kSamplesPerThread},
                                              {shader::kSpecFeatures, d}, {shader::kSpecTrials, trials_}, {shader::kSpecMode, mode}})));
    };
    potentials_ = kernel(shader::kModePotentials);
    commit_ = kernel(shader::kModeCommit);
  }

  /// How many chunks X was split into.
  std::uint64_t chunks() const { return chunks_.size(); }
  /// Whether the samples live in pinned host memory (beyond the device's memory or its configured limit).
  bool streamed() const { return streamed_; }

  void start(const Matrix<T>& center) { commit(&center, 0); }

  std::vector<algorithms::ExactSum> potentials(const Matrix<T>& cand) {
    vulkan::Commands& cmds = commands();
    stage_candidates(cmds, cand);
    for (auto& c : chunks_) {
      const plus_plus_interface::Push push{.rows = std::uint32_t(c.rows), .groups = c.groups, .out_base = c.partial_base,
                                           .candidate = 0, .first = 0, .offset = 0, .exponent = exponent_};
      namespace shader = plus_plus_interface;
      cmds.dispatch(*potentials_,
                    {{shader::kBindingX, *c.x}, {shader::kBindingWeights, *c.w}, {shader::kBindingClosest, c.closest},
                     {shader::kBindingCandidates, cand_}, {shader::kBindingOut, partials_}},
                    push, c.groups);
    }
    cmds.barrier();
    if (parts_) cmds.copy(partials_, 0, readback_, 0, std::uint64_t(parts_) * trials_ * kExact);
    cmds.submit_and_wait();
    const auto* part = static_cast<const std::int64_t*>(readback_.mapped());
    std::vector<algorithms::ExactSum> total(trials_, algorithms::ExactSum{0, exponent_});
    for (std::uint32_t g = 0; g < parts_; ++g)
      for (std::uint32_t t = 0; t < trials_; ++t) total[t].value += part[std::uint64_t(g) * trials_ + t];
    return total;
  }

  void keep(int t) { commit(nullptr, static_cast<std::uint32_t>(t)); }

  // The sampling masses, as algorithms::draw reads them.
  std::int64_t block_rows() const { return static_cast<std::int64_t>(kBlock); }
  const std::vector<double>& block_sums() const { return sums_.values; }
  const algorithms::BlockSums& exact_block_sums() const { return sums_; }

  /// Downloads the distances of the blocks not yet read this round, in one submission.
  void prefetch(const std::vector<std::int64_t>& blocks) {
    std::vector<std::int64_t> todo;
    for (std::int64_t b : blocks)
      if (!masses_.count(b) && std::find(todo.begin(), todo.end(), b) == todo.end()) todo.push_back(b);
    if (todo.empty()) return;
    const std::uint64_t s = sizeof(T);
    for (std::size_t begin = 0; begin < todo.size(); begin += trials_) {  // the readback buffer holds trials_ blocks
      const std::size_t end = std::min<std::size_t>(todo.size(), begin + trials_);
      vulkan::Commands& cmds = commands();
      for (std::size_t j = begin; j < end; ++j) {
        // The block's rows, from every chunk they lie in.
        const std::uint64_t b0 = std::uint64_t(blocks_.begin(todo[j])), b1 = std::uint64_t(blocks_.end(todo[j]));
        for (const Chunk& c : chunks_) {
          const std::uint64_t r0 = std::max(b0, c.first), r1 = std::min(b1, c.first + c.rows);
          if (r0 < r1) cmds.copy(c.closest, (r0 - c.first) * s, readback_, ((j - begin) * kBlock + r0 - b0) * s, (r1 - r0) * s);
        }
      }
      cmds.submit_and_wait();
      for (std::size_t j = begin; j < end; ++j) {
        const std::int64_t first = blocks_.begin(todo[j]), rows = blocks_.end(todo[j]) - first;
        const T* closest = static_cast<const T*>(readback_.mapped()) + (j - begin) * kBlock;
        masses_[todo[j]] = algorithms::sampling_masses<T>(w_.data() + first, closest, rows);
      }
    }
  }

  /// Downloads every sample's distance in one submission (a draw that replays numpy's float32 cumulative sum reads
  /// every block).
  void prefetch_all() {
    const std::uint64_t s = sizeof(T);
    if (readback_all_.handle() == VK_NULL_HANDLE) readback_all_ = dev_.buffer(n_ * s, vulkan::MemoryUse::readback);
    vulkan::Commands& cmds = commands();
    for (const Chunk& c : chunks_) cmds.copy(c.closest, 0, readback_all_, c.first * s, c.rows * s);
    cmds.submit_and_wait();
    const T* closest = static_cast<const T*>(readback_all_.mapped());
    for (std::int64_t b = 0; b < blocks_.count(); ++b) {
      const std::int64_t first = blocks_.begin(b), rows = blocks_.end(b) - first;
      masses_[b] = algorithms::sampling_masses<T>(w_.data() + first, closest + first, rows);
    }
  }

  std::vector<double> block(std::int64_t b) {
    prefetch({b});
    return masses_.at(b);
  }

  /// The per-sample distances (`closest`) and the partial sums are freed off the caller's thread
  /// (Device::release_later_all), as the Lloyd engine's are, once the engine's commands are done.
  ~PlusPlusEngine() {
    commands_.reset();
    dev_.release_later_all(std::move(chunks_), std::move(partials_));
  }
  PlusPlusEngine(const PlusPlusEngine&) = delete;
  PlusPlusEngine& operator=(const PlusPlusEngine&) = delete;

 private:
  struct Chunk {
    std::uint64_t first = 0, rows = 0;
    std::uint32_t groups = 0, partial_base = 0;
    std::uint64_t offset = 0, first_block = 0;  // the first row's place in its sampling block, and that block
    std::uint32_t mass_base = 0;                // the mass slot of that block
    std::shared_ptr<const vulkan::Buffer> x, w;  // the samples, shared with the fit's other engines
    vulkan::Buffer closest;
  };

  static constexpr std::uint64_t kExact = sizeof(std::int64_t);  // bytes of an exact sum

  /// The engine's one command buffer, ready to record: a round makes three short round trips, and a command pool,
  /// fence and descriptor pools of their own for each would cost more than the copies they carry.
  vulkan::Commands& commands() {
    if (!commands_) commands_ = std::make_unique<vulkan::Commands>(dev_);
    else commands_->reset();
    return *commands_;
  }

  void stage_candidates(vulkan::Commands& cmds, const Matrix<T>& cand) {
    std::copy_n(cand.data(), cand.size(), static_cast<T*>(cand_staging_.mapped()));
    cmds.copy(cand_staging_, 0, cand_, 0, std::uint64_t(cand.size()) * sizeof(T));
    cmds.barrier();
  }

  /// closest = min(closest, ||x - cand_t||^2), or with `first` the distances to that single center; then the
  /// blocks' mass sums come back and the blocks read in the last round are forgotten.
  void commit(const Matrix<T>* first, std::uint32_t t) {
    vulkan::Commands& cmds = commands();
    if (first) stage_candidates(cmds, *first);
    else cmds.barrier();  // after the last round's reads of closest
    for (auto& c : chunks_) {
      const plus_plus_interface::Push push{.rows = std::uint32_t(c.rows), .groups = c.groups, .out_base = c.mass_base,
                                           .candidate = t, .first = first ? 1u : 0u,
                                           .offset = std::uint32_t(c.offset), .exponent = exponent_};
      namespace shader = plus_plus_interface;
      cmds.dispatch(*commit_,
                    {{shader::kBindingX, *c.x}, {shader::kBindingWeights, *c.w}, {shader::kBindingClosest, c.closest},
                     {shader::kBindingCandidates, cand_}, {shader::kBindingOut, block_mass_}},
                    push, c.groups);
    }
    cmds.barrier();
    if (slots_) cmds.copy(block_mass_, 0, readback_, 0, std::uint64_t(slots_) * kExact);
    cmds.submit_and_wait();
    const auto* slot = static_cast<const std::int64_t*>(readback_.mapped());
    std::fill(sums_.exact.begin(), sums_.exact.end(), 0);
    for (const Chunk& c : chunks_)
      for (std::uint64_t j = 0; j < ceil_div(c.offset + c.rows, kBlock); ++j) sums_.exact[c.first_block + j] += slot[c.mass_base + j];
    sums_.round();
    masses_.clear();
  }

  static std::uint64_t chunk_rows_for(const vulkan::Device& device, std::uint64_t n, std::uint64_t d,
                                      std::uint64_t max_chunk_bytes) {
    std::uint64_t max_bytes = std::min<std::uint64_t>(device.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
    if (max_chunk_bytes) max_bytes = std::min(max_bytes, max_chunk_bytes);
    const std::uint64_t rows = rows_per_block(n, d * sizeof(T), max_bytes, "X");
    return rows < n ? std::max(kBlock, rows / kBlock * kBlock) : rows;
  }

  vulkan::Device& dev_;
  VectorView<T> w_;
  std::uint64_t n_, d_, chunk_rows_ = 0;
  bool streamed_ = false;
  std::uint32_t trials_, parts_ = 0, slots_ = 0;
  algorithms::SamplingBlocks blocks_;
  int exponent_ = 0;
  std::vector<Chunk> chunks_;
  algorithms::BlockSums sums_;
  std::map<std::int64_t, std::vector<double>> masses_;  // per-sample masses of the blocks read this round
  vulkan::Buffer cand_, cand_staging_, partials_, block_mass_, readback_, readback_all_;
  vulkan::KernelRef potentials_, commit_;
  std::unique_ptr<vulkan::Commands> commands_;
};

/// Greedy k-means++ (scikit-learn's _kmeans_plusplus) on centred data, with the distance work on `device`.
/// `frame`: the fit's bounds for the exact sums (none: those of exactly these rows).
template <class T>
Matrix<T> kmeans_plus_plus(vulkan::Device& device, ShiftedView<T> X, VectorView<T> w, int k,
                           algorithms::NumpyRandomState& random, std::uint64_t max_chunk_bytes = 0,
                           ResidentSamples<T>* resident = nullptr, std::vector<std::int64_t>* chosen = nullptr,
                           const std::optional<algorithms::SumFrame>& frame = {}) {
  const algorithms::SumFrame f = frame ? *frame : algorithms::SumFrame::of<T>(X, w);
  PlusPlusEngine<T> engine(device, X, w, algorithms::plus_plus_trials(k), max_chunk_bytes, resident, f);
  return algorithms::plus_plus_loop<T>(engine, X, w, f, k, random, chosen);
}

/// kmeans_plus_plus on several devices, each over its shard of the rows (shard_rows, as lloyd_sharded cuts them), set
/// up at once (algorithms::ShardedPlusPlusEngine: the same seeds as one device, bit for bit). `resident`: one per
/// device, where the fit keeps each shard's samples for its Lloyd runs.
template <class T>
Matrix<T> kmeans_plus_plus_sharded(const std::vector<vulkan::Device*>& devices, ShiftedView<T> X, VectorView<T> w,
                                   int k, algorithms::NumpyRandomState& random,
                                   std::vector<std::int64_t>* chosen = nullptr,
                                   const std::optional<algorithms::SumFrame>& frame = {},
                                   std::vector<ResidentSamples<T>>* resident = nullptr) {
  const algorithms::SumFrame f = frame ? *frame : algorithms::SumFrame::of<T>(X, w);
  const std::int64_t n = X.rows();
  const std::size_t count = shard_count(devices, n);
  std::vector<std::unique_ptr<PlusPlusEngine<T>>> shards(count);
  std::vector<std::int64_t> first(count);
  on_shards(devices, n, [&](std::size_t s, vulkan::Device& device, std::int64_t r0, std::int64_t rows) {
    shards[s] = std::make_unique<PlusPlusEngine<T>>(device, X.middleRows(r0, rows), w.segment(r0, rows),
                                                    algorithms::plus_plus_trials(k), 0,
                                                    resident ? &(*resident)[s] : nullptr, f,
                                                    r0 % algorithms::kPlusPlusBlock);
    first[s] = r0;
  });
  algorithms::ShardedPlusPlusEngine<PlusPlusEngine<T>, T> engine(std::move(shards), std::move(first), n);
  return algorithms::plus_plus_loop<T>(engine, X, w, f, k, random, chosen);
}

}  // namespace gpuml::kernels
