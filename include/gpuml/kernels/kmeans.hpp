// The Vulkan k-means engine: scikit-learn's Lloyd loop with the E-step and the partial M-step fused in one
// dispatch per chunk (shaders/kmeans_lloyd.comp; the bounded E-step in three, with the same result), a fixed-order
// reduction of the partials, and the rest of the M-step (averaging, empty-cluster relocation, convergence) on the
// host from k x (d + 1) numbers per iteration. Results are bitwise identical from run to run on the same device and
// input.
#pragma once

#include <gpuml/algorithms/kmeans.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/policy/kmeans.hpp>
#include <gpuml/kernels/distance.hpp>
#include <gpuml/kernels/resident_samples.hpp>
#include <gpuml/shaders/kmeans_inertia_kernel.hpp>
#include <gpuml/shaders/kmeans_lloyd_kernel.hpp>
#include <gpuml/shaders/kmeans_reduce_kernel.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

namespace gpuml::kernels {

// The three k-means shaders' interfaces (push constants, bindings, specialisation constants).
namespace lloyd_interface = shader_interface::kmeans_lloyd;
namespace reduce_interface = shader_interface::kmeans_reduce;
namespace inertia_interface = shader_interface::kmeans_inertia;

/// `value` rounded up to T (for the bounded E-step's drifts and radius).
template <class T>
T round_up_to(double value) {
  T r = static_cast<T>(value);
  return static_cast<double>(r) < value ? std::nextafter(r, std::numeric_limits<T>::infinity()) : r;
}

/// Whether KMeansEStep::automatic runs the bounded E-step on `info`: on GPUs, where it was faster at every shape
/// measured (README, "The bounded E-step"); on CPU devices the plain one (llvmpipe's barriers and gathers cost more).
inline bool bounded_e_step_pays(const vulkan::DeviceInfo& info) {
  return info.type != vulkan::DeviceType::cpu;
}

/// Device-resident data of one fit: X, weights and labels in chunks that each fit one binding. `e_step`: the
/// bounded E-step (kmeans_lloyd.comp) where asked for (or where it pays, for automatic), the device can run it and
/// its bounds fit the device's memory (bounded_e_step() tells); its steps return the plain E-step's results bit
/// for bit.
template <class T>
class LloydEngine {
 public:
  /// `resident`: where the fit keeps its samples on the device (taken from there when an earlier engine of the fit
  /// left them in this layout, else uploaded and left there); null: this engine's own upload. `fixed_tile`: the
  /// kernel's tile (a compile-time policy's, the tuner's candidate); none: the resolver's (kernels::choose_tile).
  /// `frame`: the whole fit's bounds for its exact sums (algorithms::SumFrame; every shard of a fit gets the same);
  /// none: a fit over exactly these rows (one pass over them on the host finds it).
  LloydEngine(vulkan::Device& device, ShiftedView<T> X, const T* weights, std::uint32_t k,
              KMeansEStep e_step = KMeansEStep::plain, ResidentSamples<T>* resident = nullptr,
              const std::optional<KMeansTileParams>& fixed_tile = {},
              const std::optional<algorithms::SumFrame>& frame = {})
      : dev_(device), n_(X.rows()), d_(X.cols()), k_(k) {
    require_scalar_support<T>(device);
    const auto& info = device.info();
    if (!info.int64)
      throw unsupported(info.name + " has no shaderInt64: k-means adds its sums exactly in 64-bit integers");
    if (frame) {
      frame_ = *frame;
    } else if (weights) {
      frame_ = algorithms::SumFrame::of<T>(X, Eigen::Map<const Vector<T>>(weights, X.rows()));
    }  // else an engine without weights, which only assigns labels (predict)
    const Layout layout = plan_layout(device, n_, static_cast<std::uint32_t>(d_), k, e_step, fixed_tile);
    if (!layout.why.empty()) throw unsupported(layout.why);
    const KMeansTileParams& tile_params = layout.tile_params;
    plan_ = layout.plan;
    const std::uint64_t s = sizeof(T), tile = plan_.tile(), chunk = layout.chunk_rows;
    const std::uint64_t max_bytes = std::min<std::uint64_t>(device.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
    const std::uint64_t n_chunks = ceil_div(n_, chunk);
    // Workgroups: enough to fill a large GPU, while all partials (k x (d+1) exact sums each) stay within one binding.
    const std::uint64_t row = std::uint64_t(k) * (d_ + 1);
    const std::uint64_t partial_budget = std::min<std::uint64_t>(max_bytes, std::uint64_t(256) << 20) / (row * kExact);
    // On CPU devices one sample tile per workgroup: llvmpipe stops an invocation after 65,535 loop iterations in
    // all (silently), so workgroups must not loop over tiles there.
    // Elsewhere at least 4096, and at most 8 tiles each: the bounded step adds again only the partial sums of
    // workgroups where a label changed, so smaller workgroups leave more of them as they were.
    const std::uint64_t tiles = ceil_div(chunk, tile);
    const std::uint64_t wanted = info.type == vulkan::DeviceType::cpu ? tiles : std::max<std::uint64_t>(4096, ceil_div(tiles, 8));
    const std::uint64_t per_chunk = std::max<std::uint64_t>(1, std::min<std::uint64_t>(wanted, partial_budget / n_chunks));
    // Device memory to plan with: what the device reports, capped by Config::device_memory_limit. Samples and
    // weights beyond it stay in pinned host memory; every E-step copies them through two slice buffers
    // (record_streamed_step); labels, centers and partial sums stay on the device.
    auto chunk_groups = [&](std::uint64_t rows) {
      return static_cast<std::uint32_t>(std::min<std::uint64_t>({per_chunk, ceil_div(rows, tile), info.max_workgroup_count[0]}));
    };
    std::uint64_t all_groups = 0;
    for (std::uint64_t r0 = 0; r0 < n_; r0 += chunk) all_groups += chunk_groups(std::min(chunk, n_ - r0));
    const std::uint64_t rest = n_ * 4 + all_groups * (row + 1) * kExact + 4 * row * s;
    const std::uint64_t needed = n_ * (d_ + 1) * s + rest;  // samples and weights (allocated either way)
    const std::uint64_t budget = device_memory_budget(info);
    streamed_ = budget && needed > budget;
    // The bounds (four numbers per sample) and the list of uncertain samples stay on the device, beside samples
    // that do: where they do not fit, or the samples are streamed, the plain E-step runs.
    const std::uint64_t bounds_bytes = n_ * 4 * s + (n_ + n_chunks + all_groups) * 4;
    if (plan_.bounds && (streamed_ || (budget && needed + bounds_bytes > budget) || chunk * 4 * s > max_bytes))
      plan_lloyd<T>(info, tile_params, k, static_cast<std::uint32_t>(d_), false, plan_);  // fits: the bounded plan did
    if (streamed_ && rest > budget)
      throw unsupported("k-means on " + info.name + " needs " + std::to_string(rest >> 20) + " MiB of device memory " +
                        "besides the samples; it has " + std::to_string(budget >> 20) + " MiB (use the host backend)");
    const vulkan::MemoryUse samples = streamed_ ? vulkan::MemoryUse::host : vulkan::MemoryUse::device;
    if (streamed_) {
      // Two device buffers for slices of whole sample tiles: while the E-step reads one, the next slice is copied
      // into the other from pinned memory. As large as the budget left allows (fewer, larger copies).
      const std::uint64_t slice_bytes_per_row = (d_ + 1) * s;
      slice_rows_ = std::min<std::uint64_t>((budget - rest) / 2 / slice_bytes_per_row / tile * tile, ceil_div(chunk, tile) * tile);
      slice_rows_ = std::min<std::uint64_t>(slice_rows_, max_bytes / (d_ * s) / tile * tile);
      if (slice_rows_ == 0)
        throw unsupported("k-means on " + info.name + " cannot stream its samples through " +
                          std::to_string(budget >> 20) + " MiB of device memory (use the host backend)");
      // Used by the transfer queue too, where the device has one (the copies run there, beside the E-step).
      for (auto& b : slice_x_) b = device.buffer(slice_rows_ * d_ * s, vulkan::MemoryUse::device, true);
      for (auto& b : slice_w_) b = device.buffer(slice_rows_ * s, vulkan::MemoryUse::device, true);
    }
    for (ResidentChunk& placed : place_samples<T>(device, X, weights, chunk, samples, streamed_, resident)) {
      Chunk c;
      c.first = placed.first;
      c.rows = placed.rows;
      c.groups = chunk_groups(c.rows);
      c.partial_base = parts_;
      parts_ += c.groups;
      c.x = std::move(placed.x);
      c.w = std::move(placed.w);
      c.labels = device.buffer(c.rows * 4);
      if (plan_.bounds) {
        c.bounds = device.buffer(c.rows * 4 * s);
        c.list = device.buffer((c.rows + 1) * 4);  // a count, then the rows listed for the search
        c.dirty = device.buffer(std::uint64_t(c.groups) * 4);
      }
      chunks_.push_back(std::move(c));
    }
    centers_ = device.buffer(std::uint64_t(k) * d_ * s);
    norms_ = device.buffer(std::uint64_t(k) * s);
    // The centers, their norms, and the bounded E-step's drift buffer (kmeans_lloyd.comp).
    centers_staging_ = device.buffer((row + drift_elements()) * s, vulkan::MemoryUse::upload);
    drift_ = device.buffer(plan_.bounds ? drift_elements() * s : 16);
    unbound_ = device.buffer(16);  // the bounds and list bindings of the plain E-step, which reads nothing there
    partials_ = device.buffer(std::uint64_t(parts_) * row * kExact);
    sums_ = device.buffer(row * kExact);
    status_ = device.buffer(16);
    readback_ = device.buffer(std::max<std::uint64_t>(row, parts_) * kExact + 16, vulkan::MemoryUse::readback);
    inertia_parts_ = device.buffer(std::uint64_t(parts_) * kExact);
    auto lloyd_stage = [&](std::uint32_t stage) {
      return device.kernel(shaders::kmeans_lloyd_kernel::spec<T>(plan_.constants(stage), tile_params.subgroup_size));
    };
    lloyd_ = lloyd_stage(lloyd_interface::kStageFull);
    if (plan_.bounds) {
      check_kernel_ = lloyd_stage(lloyd_interface::kStageCheck);
      search_kernel_ = lloyd_stage(lloyd_interface::kStageSearch);
      sums_kernel_ = lloyd_stage(lloyd_interface::kStageSums);
    }
    reduce_ = device.kernel(shaders::kmeans_reduce_kernel::spec<T>(
        spec_constants(reduce_interface::kSpecCount, {{reduce_interface::kSpecLanes, reduce_lanes()}})));
    inertia_ = device.kernel(shaders::kmeans_inertia_kernel::spec<T>(
        spec_constants(inertia_interface::kSpecCount, {{inertia_interface::kSpecThreads, kInertiaThreads},
                                                       {inertia_interface::kSpecFeatures, static_cast<std::uint32_t>(d_)},
                                                       {inertia_interface::kSpecMode, inertia_interface::kModeInertia}})));
  }

  /// The rows per chunk of samples (one binding each) an engine for n rows of d features and k centers would place
  /// on `device` (kernels::place_samples), so that device memory can be reserved for them ahead of the engine
  /// (reserve_samples); 0 where no engine could run there.
  static std::uint64_t sample_chunk_rows(const vulkan::Device& device, std::uint64_t n, std::uint32_t d, std::uint32_t k,
                                         KMeansEStep e_step = KMeansEStep::plain,
                                         const std::optional<KMeansTileParams>& fixed_tile = {}) {
    return chunk_rows_or_zero<T>(device, [&] {
      const Layout layout = plan_layout(device, n, d, k, e_step, fixed_tile);
      return layout.why.empty() ? layout.chunk_rows : 0;
    });
  }

  /// The engine's per-sample device memory (labels, bounds, search lists: 24 bytes a sample for float, gigabytes
  /// at 10^8 samples) and its partial sums are freed off the caller's thread (Device::release_later_all), as the
  /// samples' are: a fit returns without waiting for the driver to free them. Its commands are waited for first.
  ~LloydEngine() {
    commands_.reset();
    stream_compute_.clear();
    stream_copies_.clear();
    dev_.release_later_all(std::move(chunks_), std::move(partials_), std::move(inertia_parts_));
  }
  LloydEngine(const LloydEngine&) = delete;
  LloydEngine& operator=(const LloydEngine&) = delete;

  const LloydPlan& plan() const { return plan_; }
  /// Whether this engine's E-steps are the bounded ones.
  bool bounded_e_step() const { return plan_.bounds != 0; }
  /// Whether the samples live in pinned host memory (they did not fit the device's memory, or its configured limit).
  bool streamed() const { return streamed_; }

  /// Marks every label as unknown, so the first E-step counts as a change (scikit-learn's labels_old = -1).
  void reset_labels() {
    bounds_valid_ = false;
    totals_valid_ = false;
    vulkan::Commands cmds(dev_);
    for (auto& c : chunks_) cmds.fill(c.labels, 0, c.rows * 4, 0xFFFFFFFFu);
    cmds.submit_and_wait();
  }

  /// One E-step with centers C (and, with `update`, the exact weighted sums and weights per cluster).
  /// Returns whether any label changed.
  bool step(const Matrix<T>& C, bool update, algorithms::ClusterSums* sums) {
    const std::uint64_t s = sizeof(T), kd = std::uint64_t(k_) * d_;
    T* staged = static_cast<T*>(centers_staging_.mapped());
    std::copy_n(C.data(), kd, staged);
    for (std::uint32_t j = 0; j < k_; ++j) staged[kd + j] = C.row(j).squaredNorm();
    // The bounded E-step: how far each center moved since the bounds were last set (they hold for those centers).
    const std::uint32_t bounds_mode = !plan_.bounds   ? 0u
                                      : !bounds_valid_ ? lloyd_interface::kBoundsSet
                                                       : lloyd_interface::kBoundsUse;
    if (plan_.bounds) stage_drift(C, staged + kd + k_);
    bounds_valid_ = false;  // until this step has set them all
    // Where the last step searched few samples, this one's search moves the terms of each sample whose label
    // changes between the running totals (exact integers: the same sums as adding them all again) instead of a
    // sums stage and a reduction. Either way gives the same sums, bit for bit; only the time differs.
    const bool move_totals = plan_.bounds && update && totals_valid_ && bounds_mode == lloyd_interface::kBoundsUse &&
                             last_searched_ * kMoveTotalsShare <= n_;
    totals_valid_ = false;  // until this step has left them right
    // One command buffer (and its descriptor pool, fence, queries) for every step of the fit: creating them per
    // iteration costs the driver more than the small steps of a short fit take.
    if (!commands_) commands_.emplace(dev_, 8);
    else commands_->reset();
    vulkan::Commands& cmds = *commands_;
    // In parts when someone polls for cancellation and the last step ran longer than a slice: each part dispatches
    // a range of every chunk's workgroups and is submitted on its own, with a poll after it. Every workgroup still
    // covers the same sample tiles and writes its own partials, so the result is the same bit for bit.
    const auto parts = streamed_ ? 1u : static_cast<std::uint32_t>(pacer_.parts(kMaxParts));
    const auto started = KeepGoingPacer::Clock::now();
    double e_step_ms = 0;  // summed over the parts; negative where the device has no timestamps
    auto add_e_step_ms = [&e_step_ms](double ms) { add_device_ms(e_step_ms, ms); };
    auto record_start = [&](vulkan::Commands& into) {
      into.copy(centers_staging_, 0, centers_, 0, kd * s);
      into.copy(centers_staging_, kd * s, norms_, 0, k_ * s);
      if (plan_.bounds) into.copy(centers_staging_, (kd + k_) * s, drift_, 0, drift_elements() * s);
      // A step that sets the bounds adds every workgroup's sums; so do later steps until each has.
      if (bounds_mode == lloyd_interface::kBoundsSet)
        for (auto& c : chunks_) into.fill(c.dirty, 0, std::uint64_t(c.groups) * 4, 1u);
      if (plan_.bounds)
        for (auto& c : chunks_) into.fill(c.list, 0, 4, 0u);  // the list's count
      into.fill(status_, 0, 16, 0u);
      into.barrier();
    };
    const bool two_queues = streamed_ && dev_.transfer_queue() != VK_NULL_HANDLE;
    if (!two_queues) {
      record_start(cmds);
      cmds.timestamp(0);
    }
    const std::uint64_t tile = plan_.tile();
    auto push_for = [&](const Chunk& c, std::uint32_t group_base, std::uint64_t row0, std::uint64_t tile_begin,
                        std::uint64_t tile_end) {
      return lloyd_interface::Push{.rows = std::uint32_t(c.rows),
                                   .groups = c.groups,
                                   .partial_base = c.partial_base,
                                   .update = update ? 1u : 0u,
                                   .group_base = group_base,
                                   .x_row0 = std::uint32_t(row0),
                                   .tile_begin = std::uint32_t(tile_begin),
                                   .tile_end = std::uint32_t(tile_end),
                                   .bounds_mode = bounds_mode,
                                   .value_exponent = frame_.value_exponent<T>(),
                                   .weight_exponent = frame_.weight_exponent<T>(),
                                   .move_totals = move_totals ? 1u : 0u};
    };
    if (two_queues) {
      run_streamed_on_two_queues(record_start, push_for);
      cmds.barrier();   // after every slice's E-step, submitted before this on the same queue
      cmds.timestamp(0);
      e_step_ms = -1;  // the slices ran in submissions of their own: no device time for the whole E-step
    } else if (streamed_) {
      record_streamed_step(cmds, push_for);
    } else {
      // The plain step is one dispatch per chunk. The bounded step is three: check every sample's bounds and list
      // the uncertain ones (every sample in the step that sets them), search those, then add the partial sums from
      // the labels.
      std::vector<const vulkan::Kernel*> stages{lloyd_.get()};
      if (plan_.bounds) {
        stages = {check_kernel_.get(), search_kernel_.get()};
        if (update && !move_totals) stages.push_back(sums_kernel_.get());
      }
      for (std::uint32_t stage = 0, steps = static_cast<std::uint32_t>(stages.size()) * parts, done = 0;
           stage < stages.size(); ++stage)
        for (std::uint32_t part = 0; part < parts; ++part) {
          if (part == 0 && plan_.bounds) cmds.barrier();  // after the last stage, in this or an earlier submission
          for (auto& c : chunks_) {
            const auto first = static_cast<std::uint32_t>(std::uint64_t(c.groups) * part / parts);
            const auto last = static_cast<std::uint32_t>(std::uint64_t(c.groups) * (part + 1) / parts);
            dispatch_stage(cmds, *stages[stage], c, *c.x, *c.w, push_for(c, first, 0, 0, ceil_div(c.rows, tile)), last - first);
          }
          if (parts == 1 && plan_.bounds) cmds.timestamp(3 + stage);  // the bounded step's stages, timed
          if (++done < steps && parts > 1) {
            cmds.timestamp(1);
            cmds.submit_and_wait();
            add_e_step_ms(cmds.elapsed_ms(0, 1));
            pacer_.poll();
            cmds.reset();
            cmds.timestamp(0);
          }
        }
    }
    cmds.barrier();
    cmds.timestamp(1);
    const std::uint32_t elements = static_cast<std::uint32_t>(std::uint64_t(k_) * (d_ + 1));
    if (update && !move_totals) {
      const reduce_interface::Push push{.elements = elements, .parts = parts_};
      cmds.dispatch(*reduce_, {{reduce_interface::kBindingPartials, partials_}, {reduce_interface::kBindingSums, sums_}}, push,
                    static_cast<std::uint32_t>(ceil_div(elements, reduce_interface::kElementsPerGroup)));
      cmds.barrier();
      cmds.timestamp(2);
    }
    if (update) cmds.copy(sums_, 0, readback_, 0, std::uint64_t(elements) * kExact);
    cmds.copy(status_, 0, readback_, std::uint64_t(elements) * kExact, 8);
    cmds.submit_and_wait();
    pacer_.step_done(started);
    add_e_step_ms(cmds.elapsed_ms(0, 1));
    if (parts == 1 && plan_.bounds && update && !move_totals && !two_queues && !streamed_) {
      add_device_ms(times_.check_ms, cmds.elapsed_ms(0, 3));
      add_device_ms(times_.search_ms, cmds.elapsed_ms(3, 4));
      add_device_ms(times_.sums_ms, cmds.elapsed_ms(4, 5));
      ++times_.stage_timed_steps;
    }
    auto& time = times_;
    if (update) {
      time.e_step_each_ms.push_back(e_step_ms);
      add_device_ms(time.e_step_ms, e_step_ms);
      if (!move_totals) add_device_ms(time.reduce_ms, cmds.elapsed_ms(1, 2));
      ++time.e_steps;
    } else {
      add_device_ms(time.labels_ms, e_step_ms);
      ++time.label_steps;
    }
    const auto* out = static_cast<const std::int64_t*>(readback_.mapped());
    if (update) {
      sums->template reset<T>(k_, d_, frame_);
      for (std::uint32_t j = 0; j < k_; ++j) {
        std::copy_n(out + std::uint64_t(j) * (d_ + 1), d_, sums->values.row(j).data());
        sums->weights[j] = out[std::uint64_t(j) * (d_ + 1) + d_];
      }
    }
    std::uint32_t status = 0, searched = 0;
    std::memcpy(&status, reinterpret_cast<const char*>(readback_.mapped()) + std::uint64_t(elements) * kExact, 4);
    std::memcpy(&searched, reinterpret_cast<const char*>(readback_.mapped()) + std::uint64_t(elements) * kExact + 4, 4);
    if (update && plan_.bounds) times_.e_step_searched.push_back(searched);
    last_searched_ = searched;
    totals_valid_ = update;
    if (move_totals) ++times_.moved_steps;
    if (status & lloyd_interface::kStatusLoopLimit)
      throw unsupported(dev_.info().name + " cut the k-means kernel short (llvmpipe's limit of 65535 loop iterations per "
                        "invocation) for k=" + std::to_string(k_) + ", d=" + std::to_string(d_));
    if (plan_.bounds) {
      bound_centers_ = C;
      bounds_valid_ = true;
    }
    return (status & lloyd_interface::kStatusLabelChanged) != 0;
  }

  /// Polls `keep_going` between the parts of an E-step that ran longer than `slice_ms` the last time (the first
  /// step runs whole): see KeepGoing.
  void set_keep_going(KeepGoing keep_going, double slice_ms = kKeepGoingSliceMs) {
    pacer_.set(std::move(keep_going), slice_ms);
  }

  /// GPU time of this engine's steps so far (lloyd_loop returns it with the fit).
  const algorithms::StepTimes& step_times() const { return times_; }

  /// lloyd_loop's engine interface.
  bool e_step(const Matrix<T>& C, algorithms::ClusterSums& sums) { return step(C, true, &sums); }
  void assign(const Matrix<T>& C) { step(C, false, nullptr); }

  /// sum_i w_i ||x_i - c_{l_i}||^2 with the current labels, from differences, exact (the frame's fixed point).
  algorithms::ExactSum inertia(const Matrix<T>& C) {
    const int exponent = frame_.inertia_exponent(C);
    const std::uint64_t s = sizeof(T);
    std::copy_n(C.data(), std::uint64_t(k_) * d_, static_cast<T*>(centers_staging_.mapped()));
    vulkan::Commands cmds(dev_);
    cmds.copy(centers_staging_, 0, centers_, 0, std::uint64_t(k_) * d_ * s);
    cmds.barrier();
    std::uint32_t groups_total = 0;
    for (auto& c : chunks_) {
      const inertia_interface::Push push{.rows = std::uint32_t(c.rows),
                                         .groups = c.groups,
                                         .partial_base = groups_total,
                                         .centers = k_,
                                         .exponent = exponent};
      namespace shader = inertia_interface;
      cmds.dispatch(*inertia_,
                    {{shader::kBindingX, *c.x}, {shader::kBindingWeights, *c.w}, {shader::kBindingLabels, c.labels},
                     {shader::kBindingCenters, centers_}, {shader::kBindingPartials, inertia_parts_},
                     {shader::kBindingDistances, unbound_}},
                    push, c.groups);
      groups_total += c.groups;
    }
    cmds.barrier();
    cmds.copy(inertia_parts_, 0, readback_, 0, groups_total * kExact);
    cmds.submit_and_wait();
    const auto* parts = static_cast<const std::int64_t*>(readback_.mapped());
    algorithms::ExactSum total{0, exponent};
    for (std::uint32_t g = 0; g < groups_total; ++g) total.value += parts[g];
    return total;
  }

  /// The current labels, downloaded (n values: only for relocation, which is rare, and the end of a fit).
  const Labels& labels() {
    labels_ = take_labels();
    return labels_;
  }
  /// The current labels, downloaded into a vector of the caller's (the end of a fit: no copy of n labels after).
  Labels take_labels() const {
    Labels out(static_cast<Eigen::Index>(n_));
    copy_labels(out.data());
    return out;
  }
  /// The current labels, downloaded to out[0, n) (a sharded fit's engines each into their range, at once).
  void copy_labels(std::int32_t* out) const {
    for (auto& c : chunks_) vulkan::download(dev_, c.labels, 0, out + c.first, c.rows * 4);
  }

 private:
  static constexpr std::uint32_t kInertiaThreads = 128, kMaxParts = 64;
  static constexpr std::uint64_t kExact = sizeof(std::int64_t);  // bytes of an exact sum
  /// Partials the reduction sums at once per element (a fixed choice per engine, so its order is too): more where
  /// there are many, so that the reduction's few workgroups still read them at the memory's pace.
  std::uint32_t reduce_lanes() const {
    const std::uint32_t lanes = parts_ >= 2048 ? 32 : 8;
    return std::min<std::uint32_t>(lanes, dev_.info().max_workgroup_invocations / reduce_interface::kElementsPerGroup);
  }
  struct Chunk {
    std::uint64_t first = 0, rows = 0;
    std::uint32_t groups = 0, partial_base = 0;
    std::shared_ptr<const vulkan::Buffer> x, w;  // the samples, shared with the fit's other engines
    vulkan::Buffer labels, bounds, list;
    vulkan::Buffer dirty;  // bounded E-step: per workgroup, whether its partial sums must be added again
  };

  /// The slices of a streamed E-step (every chunk's, in slices of whole sample tiles).
  struct Slice {
    const Chunk* chunk;
    std::uint64_t row0, rows, tile_begin, tile_end;
  };
  std::vector<Slice> streamed_slices() const {
    const std::uint64_t tile = plan_.tile(), tiles_per_slice = slice_rows_ / tile;
    std::vector<Slice> slices;
    for (const auto& c : chunks_)
      for (std::uint64_t t0 = 0, tiles = ceil_div(c.rows, tile); t0 < tiles; t0 += tiles_per_slice) {
        const std::uint64_t t1 = std::min(tiles, t0 + tiles_per_slice), r0 = t0 * tile;
        slices.push_back({&c, r0, std::min(c.rows, t1 * tile) - r0, t0, t1});
      }
    return slices;
  }
  void copy_slice(vulkan::Commands& cmds, const Slice& sl, std::size_t buffer) const {
    const std::uint64_t s = sizeof(T);
    cmds.copy(*sl.chunk->x, sl.row0 * d_ * s, slice_x_[buffer], 0, sl.rows * d_ * s);
    cmds.copy(*sl.chunk->w, sl.row0 * s, slice_w_[buffer], 0, sl.rows * s);
  }
  /// The E-step of one slice, read from slice buffer `buffer`.
  template <class PushFor>
  void dispatch_slice(vulkan::Commands& cmds, const Slice& sl, std::size_t buffer, PushFor&& push_for) {
    const Chunk& c = *sl.chunk;
    dispatch_stage(cmds, *lloyd_, c, slice_x_[buffer], slice_w_[buffer],
                   push_for(c, 0u, sl.row0, sl.tile_begin, sl.tile_end), c.groups);
  }

  /// One kmeans_lloyd dispatch (`kernel`: the plain step or a stage of the bounded one) on chunk c, its samples and
  /// weights read from x and w.
  void dispatch_stage(vulkan::Commands& cmds, const vulkan::Kernel& kernel, const Chunk& c, const vulkan::Buffer& x,
                      const vulkan::Buffer& w, const lloyd_interface::Push& push, std::uint32_t groups) const {
    namespace shader = lloyd_interface;
    const vulkan::Buffer& unbound = unbound_;  // the plain E-step reads none of the bounded step's buffers
    cmds.dispatch(kernel,
                  {{shader::kBindingX, x}, {shader::kBindingWeights, w}, {shader::kBindingLabels, c.labels},
                   {shader::kBindingCenters, centers_}, {shader::kBindingCenterNorms, norms_},
                   {shader::kBindingPartials, partials_}, {shader::kBindingStatus, status_},
                   {shader::kBindingBounds, plan_.bounds ? c.bounds : unbound}, {shader::kBindingDrift, drift_},
                   {shader::kBindingList, plan_.bounds ? c.list : unbound},
                   {shader::kBindingDirty, plan_.bounds ? c.dirty : unbound}, {shader::kBindingTotals, sums_}},
                  push, groups);
  }

  /// The drift buffer: k moves, k moves of the others, the radius, the centers transposed (k x d).
  std::uint64_t drift_elements() const { return 2 * std::uint64_t(k_) + 1 + std::uint64_t(k_) * d_; }

  /// The drift buffer for centers C against those the bounds hold for: each center's move, the largest move of the
  /// others, and the largest center norm, each from float64 and rounded up; then C transposed.
  void stage_drift(const Matrix<T>& C, T* out) const {
    std::vector<double> move(k_, 0.0);
    if (bounds_valid_)
      for (std::uint32_t j = 0; j < k_; ++j)
        move[j] = std::sqrt((C.row(j).template cast<double>() - bound_centers_.row(j).template cast<double>()).squaredNorm());
    std::uint32_t first = 0;
    double largest = -1, next = 0;
    for (std::uint32_t j = 0; j < k_; ++j) {
      if (move[j] > largest) next = std::max(next, largest), largest = move[j], first = j;
      else next = std::max(next, move[j]);
    }
    double radius = 0;
    for (std::uint32_t j = 0; j < k_; ++j) radius = std::max(radius, C.row(j).template cast<double>().norm());
    constexpr double up = 1 + 1e-12;  // float64's own rounding of these sums, with room to spare
    for (std::uint32_t j = 0; j < k_; ++j) {
      out[j] = round_up_to<T>(move[j] * up);
      out[k_ + j] = round_up_to<T>((j == first ? next : largest) * up);
    }
    out[2 * k_] = round_up_to<T>(radius * up);
    T* transposed = out + 2 * k_ + 1;
    for (std::uint32_t j = 0; j < k_; ++j)
      for (std::uint64_t f = 0; f < d_; ++f) transposed[f * k_ + j] = C(j, static_cast<Eigen::Index>(f));
  }

  /// A streamed E-step on a device with a transfer-only queue: slice j is copied there (into buffer j % 2) while
  /// the compute queue runs slice j - 1's E-step; semaphores order each copy after the E-step that last read its
  /// buffer (j - 2) and each E-step after its copy. Every slice is one submission on each queue, recorded into
  /// command buffers kept for the next step; `record_start` (the centers' upload) goes first on the compute queue.
  template <class RecordStart, class PushFor>
  void run_streamed_on_two_queues(RecordStart&& record_start, PushFor&& push_for) {
    const std::vector<Slice> slices = streamed_slices();
    const std::size_t n = slices.size();
    while (stream_compute_.size() < n) stream_compute_.push_back(std::make_unique<vulkan::Commands>(dev_));
    while (stream_copies_.size() < n)
      stream_copies_.push_back(std::make_unique<vulkan::Commands>(dev_, 0, vulkan::QueueKind::transfer));
    while (copied_.size() < n) copied_.push_back(std::make_unique<vulkan::Semaphore>(dev_));
    while (read_.size() < n) read_.push_back(std::make_unique<vulkan::Semaphore>(dev_));
    for (std::size_t j = 0; j < n; ++j) {
      stream_compute_[j]->reset();  // waits for the last step's use
      stream_copies_[j]->reset();
    }
    record_start(*stream_compute_[0]);
    for (std::size_t j = 0; j < n; ++j) {
      copy_slice(*stream_copies_[j], slices[j], j % 2);
      dispatch_slice(*stream_compute_[j], slices[j], j % 2, push_for);
      stream_compute_[j]->barrier();  // the next slice's E-step adds to these partial sums
    }
    // In submission order, each wait after its signal: copies 0 and 1, then E-step j and copy j + 2.
    auto submit_copy = [&](std::size_t j) {
      if (j < 2) stream_copies_[j]->submit({}, {copied_[j].get()});
      else stream_copies_[j]->submit({read_[j - 2].get()}, {copied_[j].get()});
    };
    for (std::size_t j = 0; j < std::min<std::size_t>(2, n); ++j) submit_copy(j);
    for (std::size_t j = 0; j < n; ++j) {
      if (j + 2 < n) stream_compute_[j]->submit({copied_[j].get()}, {read_[j].get()});
      else stream_compute_[j]->submit({copied_[j].get()}, {});
      if (j + 2 < n) submit_copy(j + 2);
    }
  }

  /// A streamed E-step: every chunk in slices of whole sample tiles, copied from pinned memory into the two slice
  /// buffers in turn; slice j is read while slice j + 1 is copied (no barrier between them), and every workgroup
  /// runs in every slice, adding its tiles there to its partial sums (the same order as one dispatch). Cancellation
  /// is polled between steps only.
  template <class PushFor>
  void record_streamed_step(vulkan::Commands& cmds, PushFor&& push_for) {
    const std::vector<Slice> slices = streamed_slices();
    copy_slice(cmds, slices.front(), 0);
    cmds.barrier();
    for (std::size_t j = 0; j < slices.size(); ++j) {
      dispatch_slice(cmds, slices[j], j % 2, push_for);
      if (j + 1 < slices.size()) copy_slice(cmds, slices[j + 1], (j + 1) % 2);
      cmds.barrier();
    }
  }
  /// The tile, the plan and the rows per chunk of samples of an engine (`why`: why none can run, else empty).
  struct Layout {
    KMeansTileParams tile_params;
    LloydPlan plan;
    std::uint64_t chunk_rows = 0;
    std::string why;
  };
  static Layout plan_layout(const vulkan::Device& device, std::uint64_t n, std::uint32_t d, std::uint32_t k,
                            KMeansEStep e_step, const std::optional<KMeansTileParams>& fixed_tile) {
    const auto& info = device.info();
    Layout out;
    const bool bounded = e_step == KMeansEStep::bounded ||
                         (e_step == KMeansEStep::automatic && bounded_e_step_pays(info));
    out.tile_params = choose_tile<KMeansTileTraits, T>(fixed_tile, info, {k, d});
    // Nothing is dispatched with a tile that misfits the device or the problem (a compile-time policy's tile, a
    // pinned subgroup size the device cannot run; on CPU devices llvmpipe's loop limit above all: it crashed at
    // times on kernels it cut short); the catalogue may still return its least bad tile there.
    if (auto why = kmeans_tile_misfit<T>(info, out.tile_params, k, d); !why.empty()) {
      out.why = "k-means on " + info.name + " for k=" + std::to_string(k) + ", d=" + std::to_string(d) + " with tile " +
                out.tile_params.text() + ": " + why;
      return out;
    }
    if (auto why = plan_lloyd<T>(info, out.tile_params, k, d, bounded, out.plan); !why.empty()) {
      out.why = "k-means tile " + out.tile_params.text() + " cannot run on " + info.name + ": " + why;
      return out;
    }
    const std::uint64_t tile = out.plan.tile();
    const std::uint64_t max_bytes = std::min<std::uint64_t>(device.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
    out.chunk_rows = rows_per_block(n, std::uint64_t(d) * sizeof(T), max_bytes, "X");
    if (out.chunk_rows < n) out.chunk_rows = std::max<std::uint64_t>(tile, out.chunk_rows / tile * tile);
    return out;
  }

  vulkan::Device& dev_;
  std::uint64_t n_, d_;
  std::uint32_t k_;
  LloydPlan plan_;
  std::vector<Chunk> chunks_;
  std::uint32_t parts_ = 0;
  Labels labels_;
  vulkan::Buffer centers_, norms_, centers_staging_, partials_, sums_, status_, readback_, inertia_parts_;
  vulkan::Buffer drift_, unbound_;  // the bounded E-step's drifts; a stand-in for the plain one's bounds binding
  Matrix<T> bound_centers_;         // the centers the bounds hold for, when bounds_valid_
  bool bounds_valid_ = false;
  bool totals_valid_ = false;        // sums_ holds the exact sums of the current labels
  std::uint64_t last_searched_ = 0;  // samples the last step searched
  /// Moving the terms of changed labels replaces the sums stage where the last step searched at most 1/this of the
  /// samples (the moves are two atomics per term; the sums stage reads every sample of a changed workgroup).
  static constexpr std::uint64_t kMoveTotalsShare = 32;
  algorithms::StepTimes times_;
  bool streamed_ = false;
  std::uint64_t slice_rows_ = 0;                   // streamed: sample rows per slice (whole tiles)
  vulkan::Buffer slice_x_[2], slice_w_[2];         // streamed: the slices on the device, in turn
  // Streamed on two queues: per slice, the semaphores between its copy and its E-step, and their command buffers
  // (declared after the semaphores: destroyed first, each waiting for its submission).
  std::vector<std::unique_ptr<vulkan::Semaphore>> copied_, read_;
  std::vector<std::unique_ptr<vulkan::Commands>> stream_compute_, stream_copies_;
  KeepGoingPacer pacer_;
  std::optional<vulkan::Commands> commands_;  // declared after the buffers it records: destroyed (waited) first
  vulkan::KernelRef lloyd_, reduce_, inertia_;
  algorithms::SumFrame frame_;
  vulkan::KernelRef check_kernel_, search_kernel_, sums_kernel_;  // the bounded step's stages (kmeans_lloyd.comp)
};

/// scikit-learn's _kmeans_single_lloyd on centred data, with the E-step and the partial sums on `device`
/// (algorithms::lloyd_loop holds the rest of the algorithm, shared with the host engine). `e_step`: which E-step
/// (LloydEngine says; every choice gives the same result bit for bit).
template <class T>
algorithms::LloydResult<T> lloyd(vulkan::Device& device, ShiftedView<T> X, VectorView<T> w, const Matrix<T>& init_centers,
                                 int max_iter, double tol_absolute, bool verbose,
                                 const IterationCallback& on_iteration = {}, const KeepGoing& keep_going = {},
                                 KMeansEStep e_step = KMeansEStep::automatic, ResidentSamples<T>* resident = nullptr,
                                 const std::optional<KMeansTileParams>& tile = {},
                                 const std::optional<algorithms::SumFrame>& frame = {}) {
  const auto start = std::chrono::steady_clock::now();
  LloydEngine<T> engine(device, X, w.data(), static_cast<std::uint32_t>(init_centers.rows()), e_step, resident, tile,
                        frame);
  engine.reset_labels();
  engine.set_keep_going(keep_going);
  const double setup = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto r = algorithms::lloyd_loop<T>(engine, X, w, init_centers, max_iter, tol_absolute, verbose, on_iteration);
  r.setup_seconds = setup;
  return r;
}

/// lloyd with the rows sharded across several devices: contiguous ranges of about n / devices rows, one
/// LloydEngine each, run at once (algorithms::ShardedLloydEngine says how the sums combine: exactly, so the result
/// is one device's, bit for bit). The engines are set up at once too: each device reads, centres and uploads its own
/// rows on a thread of its own. `frame`: the fit's bounds where the caller knows them (none: a pass over X).
/// `keep_going` is asked on the calling thread while the shards work (ShardedLloydEngine::set_keep_going).
/// `resident`: one per device, where the fit keeps each shard's samples for its other engines.
template <class T>
algorithms::LloydResult<T> lloyd_sharded(const std::vector<vulkan::Device*>& devices, ShiftedView<T> X, VectorView<T> w,
                                         const Matrix<T>& init_centers, int max_iter, double tol_absolute, bool verbose,
                                         const IterationCallback& on_iteration = {}, const KeepGoing& keep_going = {},
                                         KMeansEStep e_step = KMeansEStep::automatic,
                                         const std::optional<KMeansTileParams>& tile = {},
                                         std::optional<algorithms::SumFrame> frame = {},
                                         std::vector<ResidentSamples<T>>* resident = nullptr) {
  const std::int64_t n = X.rows();
  const auto count = static_cast<std::int64_t>(std::min<std::size_t>(devices.size(), static_cast<std::size_t>(n)));
  if (count < 1) throw invalid_input("lloyd_sharded needs at least one device");
  const auto start = std::chrono::steady_clock::now();
  if (!frame) frame = algorithms::SumFrame::of<T>(X, w);  // over every shard's rows
  std::vector<std::unique_ptr<LloydEngine<T>>> shards(static_cast<std::size_t>(count));
  std::vector<std::int64_t> first(static_cast<std::size_t>(count));
  concurrently(static_cast<std::size_t>(count), [&](std::size_t s) {
    const auto [r0, r1] = shard_rows(n, count, static_cast<std::int64_t>(s));
    shards[s] = std::make_unique<LloydEngine<T>>(*devices[s], X.middleRows(r0, r1 - r0), w.data() + r0,
                                                 static_cast<std::uint32_t>(init_centers.rows()), e_step,
                                                 resident ? &(*resident)[s] : nullptr, tile, frame);
    shards[s]->reset_labels();
    first[s] = r0;
  });
  algorithms::ShardedLloydEngine<LloydEngine<T>, T> engine(std::move(shards), std::move(first), n);
  engine.set_keep_going(keep_going);
  const double setup = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto r = algorithms::lloyd_loop<T>(engine, X, w, init_centers, max_iter, tol_absolute, verbose, on_iteration);
  r.setup_seconds = setup;
  return r;
}

/// Nearest center of each row (predict), on `device`.
template <class T>
Labels assign(vulkan::Device& device, MatrixView<T> X, const Matrix<T>& centers,
              const std::optional<KMeansTileParams>& tile = {}) {
  LloydEngine<T> engine(device, X, nullptr, static_cast<std::uint32_t>(centers.rows()), KMeansEStep::plain, nullptr, tile);
  engine.assign(centers);
  return engine.take_labels();
}

/// assign on several devices, each labelling its shard of the rows: the labels of one device, since each is the
/// nearest center of its own row.
template <class T>
Labels assign_sharded(const std::vector<vulkan::Device*>& devices, MatrixView<T> X, const Matrix<T>& centers,
                      const std::optional<KMeansTileParams>& tile = {}) {
  Labels out(X.rows());
  on_shards(devices, X.rows(), [&](std::size_t, vulkan::Device& device, std::int64_t first, std::int64_t rows) {
    out.segment(first, rows) = assign<T>(device, X.middleRows(first, rows), centers, tile);
  });
  return out;
}

/// Euclidean distances of every row of X to every center (KMeans.transform), from differences (exactly 0 where a
/// row equals a center), on `device`: rows in blocks whose data and distances each fit one binding. On CPU devices
/// each invocation computes one distance (llvmpipe's loop limit), and rows of more than kCpuMaxLoopFeatures
/// features are refused with gpuml::unsupported.
inline constexpr std::uint64_t kCpuMaxLoopFeatures = 32768;

template <class T>
Matrix<T> transform(vulkan::Device& device, MatrixView<T> X, const Matrix<T>& centers) {
  require_scalar_support<T>(device);
  const auto& info = device.info();
  if (!info.int64)  // kmeans_inertia.comp also holds the inertia's int64 sums
    throw unsupported(info.name + " has no shaderInt64, which the k-means kernels need");
  const bool cpu = info.type == vulkan::DeviceType::cpu;
  const std::uint64_t n = X.rows(), d = X.cols(), k = centers.rows(), s = sizeof(T);
  constexpr std::uint32_t threads = 128;
  if (cpu && d > kCpuMaxLoopFeatures)
    throw unsupported("KMeans.transform on " + info.name + " takes at most " + std::to_string(kCpuMaxLoopFeatures) +
                      " features (llvmpipe's loop limit), got " + std::to_string(d));
  const std::uint64_t max_bytes = std::min<std::uint64_t>(device.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
  if (k * d * s > max_bytes) throw unsupported("the cluster centers exceed one storage-buffer binding of " + info.name);
  const std::uint64_t max_groups = info.max_workgroup_count[0];
  std::uint64_t block = std::min<std::uint64_t>({rows_per_block(n, d * s, max_bytes, "X"),
                                                 std::max<std::uint64_t>(1, max_bytes / (k * s)), UINT32_MAX / k});
  if (cpu) block = std::min<std::uint64_t>(block, std::max<std::uint64_t>(1, max_groups * threads / k));
  if (block * k * s > max_bytes) throw unsupported("one row's distances exceed a storage-buffer binding of " + info.name);
  namespace shader = inertia_interface;
  const auto kernel = device.kernel(shaders::kmeans_inertia_kernel::spec<T>(
      spec_constants(shader::kSpecCount, {{shader::kSpecThreads, threads},
                                          {shader::kSpecFeatures, static_cast<std::uint32_t>(d)},
                                          {shader::kSpecMode, shader::kModeDistances}})));
  auto xbuf = device.buffer(block * d * s), cbuf = device.buffer(k * d * s), out = device.buffer(block * k * s);
  auto unused = device.buffer(16);  // the weights, labels and partial sums bindings, not read in this mode
  vulkan::upload(device, cbuf, 0, centers.data(), k * d * s);
  Matrix<T> D(X.rows(), centers.rows());
  for (std::uint64_t r0 = 0; r0 < n; r0 += block) {
    const std::uint64_t rows = std::min(block, n - r0);
    vulkan::upload_rows<T>(device, xbuf, 0, X, r0, r0 + rows);
    const auto groups = static_cast<std::uint32_t>(std::min<std::uint64_t>(ceil_div(rows * k, threads), max_groups));
    const shader::Push push{.rows = std::uint32_t(rows), .groups = groups, .partial_base = 0, .centers = std::uint32_t(k), .exponent = 0};
    vulkan::Commands cmds(device);
    cmds.dispatch(*kernel,
                  {{shader::kBindingX, xbuf}, {shader::kBindingWeights, unused}, {shader::kBindingLabels, unused},
                   {shader::kBindingCenters, cbuf}, {shader::kBindingPartials, unused}, {shader::kBindingDistances, out}},
                  push, groups);
    cmds.submit_and_wait();
    vulkan::download(device, out, 0, D.data() + r0 * k, rows * k * s);
  }
  return D;
}

/// transform on several devices, each its shard of the rows (every distance is one device's).
template <class T>
Matrix<T> transform_sharded(const std::vector<vulkan::Device*>& devices, MatrixView<T> X, const Matrix<T>& centers) {
  Matrix<T> out(X.rows(), centers.rows());
  on_shards(devices, X.rows(), [&](std::size_t, vulkan::Device& device, std::int64_t first, std::int64_t rows) {
    out.middleRows(first, rows) = transform<T>(device, X.middleRows(first, rows), centers);
  });
  return out;
}

/// Nearest center of each row and sum_i w_i ||x_i - c_{l_i}||^2 (KMeans.score), on `device`, exactly (the fixed
/// point of `frame`, the bounds of every row where X is one shard of them; none: X's own).
template <class T>
algorithms::ExactSum labels_inertia_exact(vulkan::Device& device, MatrixView<T> X, VectorView<T> w,
                                          const Matrix<T>& centers, const std::optional<KMeansTileParams>& tile = {},
                                          const std::optional<algorithms::SumFrame>& frame = {}) {
  LloydEngine<T> engine(device, X, w.data(), static_cast<std::uint32_t>(centers.rows()), KMeansEStep::plain, nullptr,
                        tile, frame);
  engine.assign(centers);
  return engine.inertia(centers);
}

template <class T>
double labels_inertia(vulkan::Device& device, MatrixView<T> X, VectorView<T> w, const Matrix<T>& centers,
                      const std::optional<KMeansTileParams>& tile = {}) {
  return labels_inertia_exact<T>(device, X, w, centers, tile).to_double();
}

/// labels_inertia on several devices, each its shard of the rows, the shards' exact sums added in one fixed point
/// (the bounds of every row): one device's result bit for bit.
template <class T>
double labels_inertia_sharded(const std::vector<vulkan::Device*>& devices, MatrixView<T> X, VectorView<T> w,
                              const Matrix<T>& centers, const std::optional<KMeansTileParams>& tile = {}) {
  const auto frame = algorithms::SumFrame::of<T>(ShiftedView<T>(X), w);
  std::vector<algorithms::ExactSum> parts(shard_count(devices, X.rows()));
  on_shards(devices, X.rows(), [&](std::size_t s, vulkan::Device& device, std::int64_t first, std::int64_t rows) {
    parts[s] = labels_inertia_exact<T>(device, X.middleRows(first, rows), w.segment(first, rows), centers, tile, frame);
  });
  algorithms::ExactSum total = parts[0];
  for (std::size_t s = 1; s < parts.size(); ++s) total += parts[s];
  return total.to_double();
}

}  // namespace gpuml::kernels
