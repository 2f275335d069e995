// DBSCAN's connected components of core samples on a Vulkan device (shaders/dbscan.comp), the same roots as the
// algorithm layer's union-find (algorithms::union_find_roots) on every device and for every order of the atomics:
// a core sample's root is the smallest core index of its component, a border sample's the smallest root among the
// cores whose neighbourhood holds it.
//
// The graph is either a host graph sent as it is (indices as uint32, converted while they are uploaded, cut into
// pieces of at most one binding's edges, each with offsets local to it, so a row may span pieces), or a radius graph
// already on the device (kernels::radius_self_graph, over rows in a sorted order: read in place, labels naming
// original indices). Labels start as each core sample's own index; rounds of HOOK over every piece then JUMP twice
// run until a submission changes nothing (several rounds per submission, so a typical graph needs two or three round
// trips); then BORDER. Limits: fewer than 2^31 samples, the labels and one piece's offsets within one binding, the
// whole graph within the device memory budget; beyond them gpuml::unsupported (the caller then runs the host's
// union-find).
#pragma once

#include <gpuml/algorithms/dbscan.hpp>
#include <gpuml/algorithms/knn.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/policy/limits.hpp>
#include <gpuml/kernels/radius.hpp>
#include <gpuml/shaders/dbscan_kernel.hpp>
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

inline vulkan::KernelRef make_kernel(vulkan::Device& device, std::uint32_t mode, bool permuted) {
  namespace shader = shader_interface::dbscan;
  return device.kernel(shaders::dbscan_kernel::spec(spec_constants(
      shader::kSpecCount, {{shader::kSpecThreads, kThreads}, {shader::kSpecMode, mode}, {shader::kSpecPermuted, permuted ? 1u : 0u}})));
}

/// One piece of the graph on the device: `edges` edges of rows [row0, row0 + rows), offsets local to the piece;
/// its buffers its own, or a device graph's (borrowed).
struct Piece {
  std::uint64_t row0 = 0, rows = 0, edges = 0;
  vulkan::Buffer owned_offsets, owned_indices;
  const vulkan::Buffer* borrowed_offsets = nullptr;
  const vulkan::Buffer* borrowed_indices = nullptr;
  const vulkan::Buffer& offsets() const { return borrowed_offsets ? *borrowed_offsets : owned_offsets; }
  const vulkan::Buffer& indices() const { return borrowed_indices ? *borrowed_indices : owned_indices; }
};

/// Pieces of at most `piece_edges` edges of the compressed rows (offsets[r], indices) whose row r is sample
/// row_of[r] (rows increasing; consecutive samples between them have no edges), converted to uint32 while written.
inline void add_pieces(vulkan::Device& device, std::vector<Piece>& pieces, const std::vector<std::int64_t>& offsets,
                       const std::vector<std::int64_t>& indices, const std::vector<std::int64_t>* row_of,
                       std::uint64_t piece_edges) {
  const std::uint64_t total_edges = std::uint64_t(offsets.back());
  auto sample = [&](std::uint64_t r) { return row_of ? std::uint64_t((*row_of)[r]) : r; };
  for (std::uint64_t e0 = 0; e0 < total_edges; e0 += piece_edges) {
    const std::uint64_t e1 = std::min(total_edges, e0 + piece_edges);
    auto row_holding = [&](std::uint64_t e) {  // the last row whose offset is <= e
      return std::uint64_t(std::upper_bound(offsets.begin(), offsets.end(), std::int64_t(e)) - offsets.begin()) - 1;
    };
    const std::uint64_t first = row_holding(e0), last = row_holding(e1 - 1);
    Piece piece;
    piece.row0 = sample(first);
    piece.rows = sample(last) - piece.row0 + 1;
    piece.edges = e1 - e0;
    piece.owned_offsets = device.buffer((piece.rows + 1) * 4);
    piece.owned_indices = device.buffer(piece.edges * 4);
    // The piece's offset of sample row0 + k: that of the first listed row at or after it.
    std::vector<std::uint32_t> local(std::size_t(piece.rows) + 1);
    std::uint64_t r = first;
    for (std::uint64_t k = 0; k <= piece.rows; ++k) {
      while (r <= last && sample(r) < piece.row0 + k) ++r;
      const std::int64_t off = r <= last ? offsets[std::size_t(r)] : std::int64_t(e1);
      local[std::size_t(k)] = std::uint32_t(std::clamp<std::int64_t>(off - std::int64_t(e0), 0, std::int64_t(e1 - e0)));
    }
    vulkan::upload(device, piece.owned_offsets, 0, local.data(), local.size() * 4);
    vulkan::upload_filled(device, piece.owned_indices, 0, piece.edges * 4, 4, [&](void* to, std::size_t begin, std::size_t bytes) {
      auto* out = static_cast<std::uint32_t*>(to);
      const std::int64_t* from = indices.data() + e0 + begin / 4;
      parallel_chunks(std::int64_t(bytes / 4), 1 << 18, [&](std::int64_t, std::int64_t b, std::int64_t e) {
        for (std::int64_t k = b; k < e; ++k) out[k] = std::uint32_t(from[k]);
      });
    });
    pieces.push_back(std::move(piece));
  }
}

/// HOOK and JUMP rounds over `pieces` until a submission changes nothing, then BORDER; returns the labels as the
/// kernel leaves them. `labels` holds the start (core: its own label, else kNoRoot); `position` (PERMUTED: labels
/// name original indices) or null.
inline std::vector<std::uint32_t> run_components(vulkan::Device& device, const std::vector<Piece>& pieces,
                                                 const vulkan::Buffer& labels, std::uint64_t n,
                                                 const vulkan::Buffer* position, const DbscanComponentsOptions& options,
                                                 DbscanComponentsStats& st) {
  namespace shader = shader_interface::dbscan;
  using Clock = std::chrono::steady_clock;
  auto phase = Clock::now();
  auto lap = [&phase] {
    const auto now = Clock::now();
    const double s = std::chrono::duration<double>(now - phase).count();
    phase = now;
    return s;
  };
  const auto& info = device.info();
  const bool permuted = position != nullptr;
  vulkan::Buffer changed = device.buffer(16, vulkan::MemoryUse::readback);
  vulkan::Buffer no_position = permuted ? vulkan::Buffer() : device.buffer(16);
  const vulkan::Buffer& positions = permuted ? *position : no_position;
  const vulkan::KernelRef hook = make_kernel(device, shader::kModeHook, permuted);
  const vulkan::KernelRef jump = make_kernel(device, shader::kModeJump, permuted);
  const vulkan::KernelRef border = make_kernel(device, shader::kModeBorder, permuted);
  st.pieces = pieces.size();

  auto record = [&](vulkan::Commands& cmds, const vulkan::KernelRef& kernel, const Piece* piece) {
    const std::uint64_t items = piece ? piece->edges : n;
    const LinearGrid grid = linear_grid(info, ceil_div(items, kThreads), "DBSCAN's components");
    const Piece& bound = piece ? *piece : pieces.front();
    const shader::Push push{.n = std::uint32_t(n), .row0 = std::uint32_t(bound.row0), .rows = std::uint32_t(bound.rows),
                            .edges = std::uint32_t(bound.edges)};
    cmds.dispatch(kernel,
                  {{shader::kBindingLabels, labels}, {shader::kBindingOffsets, bound.offsets()},
                   {shader::kBindingIndices, bound.indices()}, {shader::kBindingChanged, changed},
                   {shader::kBindingPosition, positions}},
                  push, grid.x, grid.y);
    cmds.barrier();
  };

  // Rounds until one submission changes no label. Each changing round lowers at least one label, so this ends;
  // the bound only guards against a defect.
  const std::uint32_t per_submit = std::max<std::uint32_t>(1, options.rounds_per_submit);
  for (;;) {
    if (st.rounds > n + 2 * per_submit) throw error("DBSCAN's components did not converge on " + info.name);
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
  st.finish_seconds = lap();
  return found;
}

/// The roots the kernel's labels give (kNoRoot: -1; a border sample's flag dropped), label s belonging to sample
/// sample_of(s).
template <class SampleOf>
std::vector<std::int64_t> roots_from_labels(const std::vector<std::uint32_t>& labels, SampleOf&& sample_of) {
  namespace shader = shader_interface::dbscan;
  std::vector<std::int64_t> roots(labels.size(), -1);
  parallel_chunks(std::int64_t(labels.size()), 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (std::int64_t s = b; s < e; ++s) {
      const std::uint32_t l = labels[std::size_t(s)];
      roots[std::size_t(sample_of(s))] = l == shader::kNoRoot ? -1 : std::int64_t(l & ~shader::kNotCore);
    }
  });
  return roots;
}

/// Limits every components run shares: fewer than 2^31 samples, their labels within one binding.
inline std::uint64_t max_piece_edges(const vulkan::Device& device, std::uint64_t n, const DbscanComponentsOptions& options) {
  const std::uint64_t max_bytes = std::min<std::uint64_t>(device.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
  if (n >= shader_interface::dbscan::kNotCore)
    throw unsupported("DBSCAN's components on a Vulkan device support at most 2^31 - 1 samples");
  if ((n + 1) * 4 > max_bytes)
    throw unsupported("DBSCAN's components: the labels of " + std::to_string(n) + " samples exceed one device binding");
  return options.max_piece_edges ? std::min(max_bytes / 4, options.max_piece_edges) : max_bytes / 4;
}

}  // namespace dbscan_detail

/// Component roots (algorithms::union_find_roots' contract) of the core samples `core` over the neighbourhoods
/// `hood` (checked by the caller: n rows of increasing indices in [0, n)), computed on `device`. The graph goes to
/// the device as it is, cut into pieces of at most one binding's edges.
template <class T>
std::vector<std::int64_t> dbscan_components(vulkan::Device& device, const algorithms::RadiusResult<T>& hood,
                                            const std::vector<std::uint8_t>& core,
                                            const DbscanComponentsOptions& options = {},
                                            DbscanComponentsStats* stats = nullptr) {
  namespace shader = shader_interface::dbscan;
  DbscanComponentsStats local_stats;
  DbscanComponentsStats& st = stats ? *stats : local_stats;
  st = DbscanComponentsStats{};
  const auto started = std::chrono::steady_clock::now();
  const std::int64_t n = std::int64_t(core.size());
  if (std::int64_t(hood.offsets.size()) != n + 1) throw invalid_input("DBSCAN components: offsets do not match the samples");
  if (n == 0 || std::none_of(core.begin(), core.end(), [](std::uint8_t c) { return c != 0; }))
    return std::vector<std::int64_t>(std::size_t(n), -1);
  const std::uint64_t piece_edges = dbscan_detail::max_piece_edges(device, std::uint64_t(n), options);
  const std::uint64_t total_edges = std::uint64_t(hood.offsets.back());
  if (const std::uint64_t budget = device_memory_budget(device.info()); budget && 4 * total_edges + 12 * std::uint64_t(n) > budget)
    throw unsupported("DBSCAN's components: the neighbourhood graph (" + std::to_string(total_edges) +
                      " edges) exceeds the device memory budget");
  std::vector<dbscan_detail::Piece> pieces;
  dbscan_detail::add_pieces(device, pieces, hood.offsets, hood.indices, nullptr, piece_edges);
  vulkan::Buffer labels = device.buffer(std::uint64_t(n) * 4);
  vulkan::upload_filled(device, labels, 0, std::uint64_t(n) * 4, 4, [&](void* to, std::size_t begin, std::size_t bytes) {
    auto* out = static_cast<std::uint32_t*>(to);
    const std::int64_t first = std::int64_t(begin / 4);
    parallel_chunks(std::int64_t(bytes / 4), 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (std::int64_t k = b; k < e; ++k)
        out[k] = core[std::size_t(first + k)] ? std::uint32_t(first + k) : shader::kNoRoot;
    });
  });
  st.upload_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return dbscan_detail::roots_from_labels(
      dbscan_detail::run_components(device, pieces, labels, std::uint64_t(n), nullptr, options, st),
      [](std::int64_t i) { return i; });
}

/// Component roots in X's order (algorithms::union_find_roots' contract) of a radius graph left on the device by
/// radius_self_graph over rows in a sorted order (`order[s]`: the original row at position s), whose core samples
/// are `core` (by position): the FILL output read in place (its uncertain pairs skipped), the rows that had them as
/// a piece of their own, labels naming original indices so that each component's root is its smallest original
/// index. Nothing but the labels goes back to the host.
inline std::vector<std::int64_t> dbscan_components(vulkan::Device& device, const RadiusDeviceGraph& graph,
                                                   const std::vector<std::uint8_t>& core,
                                                   const std::vector<std::int64_t>& order,
                                                   const DbscanComponentsOptions& options = {},
                                                   DbscanComponentsStats* stats = nullptr) {
  namespace shader = shader_interface::dbscan;
  DbscanComponentsStats local_stats;
  DbscanComponentsStats& st = stats ? *stats : local_stats;
  st = DbscanComponentsStats{};
  const auto started = std::chrono::steady_clock::now();
  const std::uint64_t n = graph.rows;
  if (core.size() != n || order.size() != n) throw invalid_input("DBSCAN components: core flags or order do not match the graph");
  if (n == 0 || std::none_of(core.begin(), core.end(), [](std::uint8_t c) { return c != 0; }))
    return std::vector<std::int64_t>(n, -1);
  const std::uint64_t piece_edges = dbscan_detail::max_piece_edges(device, n, options);
  if (graph.pairs > piece_edges) throw unsupported("DBSCAN's components: the device graph exceeds one piece");
  std::vector<dbscan_detail::Piece> pieces;
  if (graph.pairs > 0) {
    dbscan_detail::Piece whole;
    whole.row0 = 0;
    whole.rows = n;
    whole.edges = graph.pairs;
    whole.borrowed_offsets = &graph.row_offsets;
    whole.borrowed_indices = &graph.found;
    pieces.push_back(std::move(whole));
  }
  if (!graph.resolved_rows.empty())
    dbscan_detail::add_pieces(device, pieces, graph.resolved_offsets, graph.resolved_indices, &graph.resolved_rows, piece_edges);
  if (pieces.empty()) throw error("DBSCAN's components: core samples without neighbourhoods");  // each has itself
  vulkan::Buffer labels = device.buffer(n * 4), position = device.buffer(n * 4);
  vulkan::upload_filled(device, labels, 0, n * 4, 4, [&](void* to, std::size_t begin, std::size_t bytes) {
    auto* out = static_cast<std::uint32_t*>(to);
    const std::size_t first = begin / 4;
    parallel_chunks(std::int64_t(bytes / 4), 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (std::size_t k = std::size_t(b); k < std::size_t(e); ++k)
        out[k] = core[first + k] ? std::uint32_t(order[first + k]) : shader::kNoRoot;
    });
  });
  std::vector<std::uint32_t> at(n);
  parallel_chunks(std::int64_t(n), 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
    for (std::int64_t s = b; s < e; ++s) at[std::size_t(order[std::size_t(s)])] = std::uint32_t(s);
  });
  vulkan::upload(device, position, 0, at.data(), n * 4);
  st.upload_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return dbscan_detail::roots_from_labels(dbscan_detail::run_components(device, pieces, labels, n, &position, options, st),
                                         [&](std::int64_t s) { return order[std::size_t(s)]; });
}

}  // namespace gpuml::kernels
