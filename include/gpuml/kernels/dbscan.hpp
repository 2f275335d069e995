// DBSCAN's connected components of core samples on a Vulkan device (shaders/dbscan.comp), the same roots as the
// algorithm layer's union-find (algorithms::union_find_roots) on every device and for every order of the atomics:
// a core sample's root is the smallest core index of its component, a border sample's the smallest root among the
// cores whose neighbourhood holds it.
//
// The neighbourhood graph goes to the device as it is (indices as uint32, converted while they are uploaded), cut
// into pieces of at most one binding's edges, each with offsets local to it (so a row may span pieces). Labels start
// as each core sample's own index; rounds of HOOK over every piece then JUMP twice run until a submission changes
// nothing (several rounds per submission, so a typical graph needs two or three round trips); then BORDER. Limits:
// fewer than 2^31 samples, the labels and one piece's offsets within one binding, the whole graph within the
// device memory budget; beyond them gpuml::unsupported (the caller then runs the host's union-find).
#pragma once

#include <gpuml/algorithms/dbscan.hpp>
#include <gpuml/algorithms/knn.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/kernels/policy.hpp>
#include <gpuml/shaders/dbscan.h>
#include <gpuml/shaders/dbscan_f32.hpp>
#include <gpuml/vulkan/transfer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace gpuml::kernels {

/// How the graph is cut and the rounds batched (tests force pieces with max_piece_edges).
struct DbscanComponentsOptions {
  std::uint64_t max_piece_edges = 0;    ///< 0: as many as one binding holds
  std::uint32_t rounds_per_submit = 4;  ///< HOOK + 2 JUMP rounds recorded per submission
};

/// What one run did, and where its time went (seconds: the graph and labels written to the device, the rounds,
/// the border pass and the labels read back).
struct DbscanComponentsStats {
  std::uint64_t pieces = 0, rounds = 0, submits = 0;
  double upload_seconds = 0, rounds_seconds = 0, finish_seconds = 0;
};

namespace dbscan_detail {

inline constexpr std::uint32_t kThreads = 256;

inline vulkan::KernelRef make_kernel(vulkan::Device& device, std::uint32_t mode) {
  namespace shader = shader_interface::dbscan;
  return device.kernel({vulkan::ShaderCode{shaders::dbscan_f32, std::size(shaders::dbscan_f32), "dbscan_f32"},
                        shader::kBindingCount, sizeof(shader::Push),
                        spec_constants(shader::kSpecCount, {{shader::kSpecThreads, kThreads}, {shader::kSpecMode, mode}})});
}

/// One piece of the graph on the device: edges [first_edge, first_edge + edges) of rows [row0, row0 + rows).
struct Piece {
  std::uint64_t row0 = 0, rows = 0, edges = 0;
  vulkan::Buffer offsets, indices;
};

}  // namespace dbscan_detail

/// Component roots (algorithms::union_find_roots' contract) of the core samples `core` over the neighbourhoods
/// `hood` (checked by the caller: n rows of increasing indices in [0, n)), computed on `device`.
template <class T>
std::vector<std::int64_t> dbscan_components(vulkan::Device& device, const algorithms::RadiusResult<T>& hood,
                                            const std::vector<std::uint8_t>& core,
                                            const DbscanComponentsOptions& options = {},
                                            DbscanComponentsStats* stats = nullptr) {
  namespace shader = shader_interface::dbscan;
  using detail_piece = dbscan_detail::Piece;
  DbscanComponentsStats local_stats;
  DbscanComponentsStats& st = stats ? *stats : local_stats;
  st = DbscanComponentsStats{};
  using Clock = std::chrono::steady_clock;
  auto phase = Clock::now();
  auto lap = [&phase] {
    const auto now = Clock::now();
    const double s = std::chrono::duration<double>(now - phase).count();
    phase = now;
    return s;
  };
  const std::int64_t n = std::int64_t(core.size());
  if (std::int64_t(hood.offsets.size()) != n + 1) throw invalid_input("DBSCAN components: offsets do not match the samples");
  std::vector<std::int64_t> roots(std::size_t(n), -1);
  if (n == 0 || std::none_of(core.begin(), core.end(), [](std::uint8_t c) { return c != 0; })) return roots;
  if (std::uint64_t(n) >= shader::kNotCore)
    throw unsupported("DBSCAN's components on a Vulkan device support at most 2^31 - 1 samples");

  const auto& info = device.info();
  const std::uint64_t max_bytes = std::min<std::uint64_t>(device.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
  if (std::uint64_t(n + 1) * 4 > max_bytes)
    throw unsupported("DBSCAN's components: the labels of " + std::to_string(n) + " samples exceed one device binding");
  const std::uint64_t total_edges = std::uint64_t(hood.offsets.back());
  if (const std::uint64_t budget = device_memory_budget(info); budget && 4 * total_edges + 12 * std::uint64_t(n) > budget)
    throw unsupported("DBSCAN's components: the neighbourhood graph (" + std::to_string(total_edges) +
                      " edges) exceeds the device memory budget");
  std::uint64_t piece_edges = max_bytes / 4;
  if (options.max_piece_edges) piece_edges = std::min(piece_edges, options.max_piece_edges);

  // The pieces: offsets local to each, indices converted to uint32 as they are written to the device.
  std::vector<detail_piece> pieces;
  for (std::uint64_t e0 = 0; e0 < total_edges; e0 += piece_edges) {
    const std::uint64_t e1 = std::min(total_edges, e0 + piece_edges);
    auto row_holding = [&](std::uint64_t e) {  // the last row whose offset is <= e
      return std::uint64_t(std::upper_bound(hood.offsets.begin(), hood.offsets.end(), std::int64_t(e)) - hood.offsets.begin()) - 1;
    };
    detail_piece piece;
    piece.row0 = row_holding(e0);
    piece.rows = row_holding(e1 - 1) - piece.row0 + 1;
    piece.edges = e1 - e0;
    piece.offsets = device.buffer((piece.rows + 1) * 4);
    piece.indices = device.buffer(piece.edges * 4);
    vulkan::upload_filled(device, piece.offsets, 0, (piece.rows + 1) * 4, 4, [&](void* to, std::size_t begin, std::size_t bytes) {
      auto* out = static_cast<std::uint32_t*>(to);
      parallel_chunks(std::int64_t(bytes / 4), 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
        for (std::int64_t k = b; k < e; ++k) {
          const std::int64_t off = hood.offsets[std::size_t(piece.row0 + begin / 4 + std::uint64_t(k))];
          out[k] = std::uint32_t(std::clamp<std::int64_t>(off - std::int64_t(e0), 0, std::int64_t(e1 - e0)));
        }
      });
    });
    vulkan::upload_filled(device, piece.indices, 0, piece.edges * 4, 4, [&](void* to, std::size_t begin, std::size_t bytes) {
      auto* out = static_cast<std::uint32_t*>(to);
      const std::int64_t* from = hood.indices.data() + e0 + begin / 4;
      parallel_chunks(std::int64_t(bytes / 4), 1 << 18, [&](std::int64_t, std::int64_t b, std::int64_t e) {
        for (std::int64_t k = b; k < e; ++k) out[k] = std::uint32_t(from[k]);
      });
    });
    pieces.push_back(std::move(piece));
  }
  st.pieces = pieces.size();

  vulkan::Buffer labels = device.buffer(std::uint64_t(n) * 4);
  vulkan::upload_filled(device, labels, 0, std::uint64_t(n) * 4, 4, [&](void* to, std::size_t begin, std::size_t bytes) {
    auto* out = static_cast<std::uint32_t*>(to);
    const std::int64_t first = std::int64_t(begin / 4);
    parallel_chunks(std::int64_t(bytes / 4), 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (std::int64_t k = b; k < e; ++k)
        out[k] = core[std::size_t(first + k)] ? std::uint32_t(first + k) : shader::kNoRoot;
    });
  });
  vulkan::Buffer changed = device.buffer(16, vulkan::MemoryUse::readback);
  const vulkan::KernelRef hook = dbscan_detail::make_kernel(device, shader::kModeHook);
  const vulkan::KernelRef jump = dbscan_detail::make_kernel(device, shader::kModeJump);
  const vulkan::KernelRef border = dbscan_detail::make_kernel(device, shader::kModeBorder);
  st.upload_seconds = lap();

  auto record = [&](vulkan::Commands& cmds, const vulkan::KernelRef& kernel, const detail_piece* piece) {
    const std::uint64_t items = piece ? piece->edges : std::uint64_t(n);
    const std::uint64_t groups = ceil_div(items, dbscan_detail::kThreads);
    const std::uint64_t gx = std::min<std::uint64_t>(groups, info.max_workgroup_count[0]);
    const std::uint64_t gy = ceil_div(groups, gx);
    if (gy > info.max_workgroup_count[1]) throw unsupported("DBSCAN's components: a piece exceeds the dispatch grid");
    const detail_piece& bound = piece ? *piece : pieces.front();
    const shader::Push push{.n = std::uint32_t(n), .row0 = std::uint32_t(bound.row0), .rows = std::uint32_t(bound.rows),
                            .edges = std::uint32_t(bound.edges)};
    cmds.dispatch(kernel,
                  {{shader::kBindingLabels, labels}, {shader::kBindingOffsets, bound.offsets},
                   {shader::kBindingIndices, bound.indices}, {shader::kBindingChanged, changed}},
                  push, std::uint32_t(gx), std::uint32_t(gy));
    cmds.barrier();
  };

  // Rounds until one submission changes no label. Each changing round lowers at least one label, so this ends;
  // the bound only guards against a defect.
  const std::uint32_t per_submit = std::max<std::uint32_t>(1, options.rounds_per_submit);
  for (;;) {
    if (st.rounds > std::uint64_t(n) + 2 * per_submit) throw error("DBSCAN's components did not converge on " + info.name);
    vulkan::Commands cmds(device);
    cmds.fill(changed, 0, 16, 0u);
    cmds.barrier();
    for (std::uint32_t r = 0; r < per_submit; ++r) {
      for (const auto& piece : pieces) record(cmds, hook, &piece);
      record(cmds, jump, nullptr);
      record(cmds, jump, nullptr);
    }
    cmds.submit_and_wait();
    st.rounds += per_submit;
    ++st.submits;
    if (*static_cast<const std::uint32_t*>(changed.mapped()) == 0) break;
  }
  st.rounds_seconds = lap();
  {
    vulkan::Commands cmds(device);
    for (const auto& piece : pieces) record(cmds, border, &piece);
    cmds.submit_and_wait();
  }
  std::vector<std::uint32_t> found(static_cast<std::size_t>(n));
  vulkan::download(device, labels, 0, found.data(), std::size_t(n) * 4);
  parallel_chunks(n, 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const std::uint32_t l = found[std::size_t(i)];
      roots[std::size_t(i)] = l == shader::kNoRoot ? -1 : std::int64_t(l & ~shader::kNotCore);
    }
  });
  st.finish_seconds = lap();
  return roots;
}

}  // namespace gpuml::kernels
