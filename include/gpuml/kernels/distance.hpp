// Pairwise squared-Euclidean distances and row norms on a Vulkan device, with operands larger than one
// binding (maxStorageBufferRange) or one allocation split into row blocks.
#pragma once

#include <gpuml/core/matrix.hpp>
#include <gpuml/kernels/policy.hpp>
#include <gpuml/kernels/tile_policy.hpp>
#include <gpuml/shaders/pairwise_sq_distances_kernel.hpp>
#include <gpuml/shaders/row_sq_norms_kernel.hpp>
#include <gpuml/vulkan/transfer.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace gpuml::kernels {

/// Tile shape of the distance kernel on one device: a workgroup of wx x wy threads, each computing tm x tn
/// distances, with bk features staged in shared memory per step (shaders/tile_product.glsl; tm and tn multiples
/// of 4).
struct DistanceTileParams {
  std::uint32_t wx = 16, wy = 16, tm = 8, tn = 8, bk = 16;

  constexpr std::uint32_t block_rows() const { return wy * tm; }
  constexpr std::uint32_t block_cols() const { return wx * tn; }
  constexpr std::uint32_t threads() const { return wx * wy; }
  template <class T>
  constexpr std::uint64_t shared_bytes() const {
    return sizeof(T) * std::uint64_t(bk) * (block_rows() + 4 + block_cols() + 4);
  }
  /// Why the device cannot run this tile (empty: it can).
  template <class T>
  std::string misfit(const vulkan::DeviceInfo& d) const {
    if (!wx || !wy || !tm || !tn || !bk || tm % 4 || tn % 4 || tm * tn > 256)
      return "tm and tn must be multiples of 4 with at most 256 values per thread, the rest positive";
    return workgroup_misfit(d, wx, wy, shared_bytes<T>());
  }
  std::vector<std::uint32_t> constants() const {
    namespace shader = shader_interface::pairwise_sq_distances;
    return spec_constants(shader::kSpecCount, {{shader::kSpecWX, wx}, {shader::kSpecWY, wy}, {shader::kSpecTM, tm},
                                               {shader::kSpecTN, tn}, {shader::kSpecBK, bk}});
  }
};

/// The distance kernel's tiles in the tile-policy system (kernels/tile_policy.hpp). No override and nothing tuned
/// yet: the resolver gives the catalogue's tile, 128 x 128 output blocks, with half the features per step for
/// double (shared memory within lavapipe's 32 KiB).
struct DistanceTileTraits {
  using Params = DistanceTileParams;
  static constexpr const char* kernel = "pairwise_sq_distances";
  static constexpr const char* override_syntax = "wx,wy,tm,tn,bk";
  static std::vector<std::uint32_t> encode(const Params& t) { return {t.wx, t.wy, t.tm, t.tn, t.bk}; }
  static std::optional<Params> decode(const std::vector<std::uint32_t>& p) {
    if (p.size() != 5) return std::nullopt;
    return Params{p[0], p[1], p[2], p[3], p[4]};
  }
  static std::string text(const Params& t) {
    std::string s;
    for (auto v : encode(t)) s += (s.empty() ? "" : ",") + std::to_string(v);
    return s;
  }
  static std::string override_value() { return {}; }
  static std::optional<Params> parse_override(const std::string&) { return std::nullopt; }
  static std::string shape_class(const TileProblem& p) { return p.d <= 32 ? "d<=32" : "d>32"; }
  template <class T>
  static Params catalogue(const vulkan::DeviceInfo&, const TileProblem& = {}) {
    return {16, 16, 8, 8, sizeof(T) == 4 ? 16u : 8u};
  }
  template <class T>
  static std::string shape_misfit(const vulkan::DeviceInfo& device, const Params& t) {
    return t.misfit<T>(device);
  }
  template <class T>
  static std::string misfit(const vulkan::DeviceInfo& device, const Params& t, const TileProblem&) {
    return t.misfit<T>(device);  // the driver splits any problem to fit the tile
  }
};

/// A fixed tile as a compile-time policy.
template <std::uint32_t WX = 16, std::uint32_t WY = 16, std::uint32_t TM = 8, std::uint32_t TN = 8, std::uint32_t BK = 16>
struct DistanceTile {
  static_assert(WX > 0 && WY > 0 && TM > 0 && TN > 0 && BK > 0, "tile dimensions must be positive");
  static_assert(WX * WY <= 1024, "at most 1024 threads per workgroup");
  static_assert(TM * TN <= 256, "at most 256 accumulators per thread");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN are multiples of 4 (shared tiles are read as 4-vectors)");
  static constexpr DistanceTileParams tile{WX, WY, TM, TN, BK};
  template <class T>
  static DistanceTileParams params(const vulkan::DeviceInfo&, std::uint32_t /*k*/, std::uint32_t /*d*/) {
    return tile;
  }
};

/// The default policy (kernels::resolve_tile over DistanceTileTraits).
template <class T>
using default_distance_policy = DefaultTile<DistanceTileTraits>;

/// A device's float64 support, checked before any double kernel is built.
template <class T>
void require_scalar_support(const vulkan::Device& device) {
  if (std::is_same_v<T, double> && !device.info().float64)
    throw unsupported(device.info().name + " has no shaderFloat64: float64 data needs the host backend or float32");
}

inline constexpr std::uint32_t kNormThreads = 128;

/// Records norms of `rows` rows of `x` into `out`.
template <class T>
void record_row_sq_norms(vulkan::Device& device, vulkan::Commands& cmds, vulkan::BufferSlice x, vulkan::BufferSlice out,
                         std::uint32_t rows, std::uint32_t cols) {
  namespace shader = shader_interface::row_sq_norms;
  const auto& k =
      device.kernel(shaders::row_sq_norms_kernel::spec<T>(spec_constants(shader::kSpecCount, {{shader::kSpecThreads, kNormThreads}})));
  const auto groups = static_cast<std::uint32_t>(ceil_div(rows, kNormThreads));
  const std::uint32_t gx = std::min(groups, device.info().max_workgroup_count[0]);
  const auto gy = static_cast<std::uint32_t>(ceil_div(groups, gx));
  const shader::Push push{.rows = rows, .cols = cols};
  cmds.dispatch(k, {{shader::kBindingRows, x}, {shader::kBindingNorms, out}}, push, gx, gy);
}

/// Splits `rows` rows of `row_bytes` each into blocks no larger than `max_bytes` (at least one row per block).
inline std::uint64_t rows_per_block(std::uint64_t rows, std::uint64_t row_bytes, std::uint64_t max_bytes, const char* what) {
  if (row_bytes > max_bytes)
    throw unsupported(std::string("one row of ") + what + " (" + std::to_string(row_bytes) +
                      " bytes) exceeds the device's largest buffer binding (" + std::to_string(max_bytes) + " bytes)");
  return std::max<std::uint64_t>(1, std::min(rows, max_bytes / row_bytes));
}

template <class T, class Policy = default_distance_policy<T>>
Vector<T> row_sq_norms(vulkan::Device& device, MatrixView<T> X) {
  require_scalar_support<T>(device);
  const std::uint64_t n = X.rows(), d = X.cols();
  const std::uint64_t max_bytes = std::min<std::uint64_t>(device.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
  const std::uint64_t block = rows_per_block(n, d * sizeof(T), max_bytes, "X");
  auto xbuf = device.buffer(block * d * sizeof(T));
  auto nbuf = device.buffer(block * sizeof(T));
  Vector<T> out(X.rows());
  for (std::uint64_t r0 = 0; r0 < n; r0 += block) {
    const std::uint64_t rows = std::min(block, n - r0);
    vulkan::upload_rows<T>(device, xbuf, 0, X, r0, r0 + rows);
    vulkan::Commands cmds(device);
    record_row_sq_norms<T>(device, cmds, xbuf, nbuf, rows, d);
    cmds.submit_and_wait();
    vulkan::download(device, nbuf, 0, out.data() + r0, rows * sizeof(T));
  }
  return out;
}

/// D = squared distances between the rows of X and of Y, computed block by block on `device`.
template <class T, class Policy = default_distance_policy<T>>
Matrix<T> pairwise_sq_distances(vulkan::Device& device, MatrixView<T> X, MatrixView<T> Y) {
  require_scalar_support<T>(device);
  const std::uint64_t n = X.rows(), m = Y.rows(), d = X.cols(), s = sizeof(T);
  const auto& info = device.info();
  const DistanceTileParams tile = Policy::template params<T>(info, 0, static_cast<std::uint32_t>(d));
  if (std::string why; !can_implement<DistanceTileTraits, T>(info, tile, {0, static_cast<std::uint32_t>(d)}, &why))
    throw unsupported("distance tile " + DistanceTileTraits::text(tile) + " cannot run on " + info.name + ": " + why);
  const std::uint64_t max_bytes = std::min<std::uint64_t>(device.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
  // Block rows so every operand and the output block fit one binding and the grid fits the dispatch limits.
  std::uint64_t bx = rows_per_block(n, d * s, max_bytes, "X");
  std::uint64_t by = rows_per_block(m, d * s, max_bytes, "Y");
  bx = std::min<std::uint64_t>(bx, std::uint64_t(info.max_workgroup_count[1]) * tile.block_rows());
  by = std::min<std::uint64_t>(by, std::uint64_t(info.max_workgroup_count[0]) * tile.block_cols());
  const std::uint64_t max_out = max_bytes / s;
  if (bx * by > max_out) {
    by = std::min<std::uint64_t>(by, std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::sqrt(double(max_out)))));
    bx = std::min<std::uint64_t>(bx, std::max<std::uint64_t>(1, max_out / by));
  }
  auto xbuf = device.buffer(bx * d * s), ybuf = device.buffer(by * d * s);
  auto xn = device.buffer(bx * s), yn = device.buffer(by * s);
  auto dbuf = device.buffer(bx * by * s);
  namespace shader = shader_interface::pairwise_sq_distances;
  const auto& kernel = device.kernel(shaders::pairwise_sq_distances_kernel::spec<T>(tile.constants()));

  Matrix<T> D(X.rows(), Y.rows());
  std::vector<T> block_out;
  for (std::uint64_t r0 = 0; r0 < n; r0 += bx) {
    const std::uint64_t rows = std::min(bx, n - r0);
    vulkan::upload_rows<T>(device, xbuf, 0, X, r0, r0 + rows);
    for (std::uint64_t c0 = 0; c0 < m; c0 += by) {
      const std::uint64_t cols = std::min(by, m - c0);
      if (c0 == 0 || by < m) vulkan::upload_rows<T>(device, ybuf, 0, Y, c0, c0 + cols);
      vulkan::Commands cmds(device);
      record_row_sq_norms<T>(device, cmds, xbuf, xn, rows, d);
      record_row_sq_norms<T>(device, cmds, ybuf, yn, cols, d);
      cmds.barrier();
      const shader::Push push{.n = std::uint32_t(rows), .m = std::uint32_t(cols), .d = std::uint32_t(d), .ldd = std::uint32_t(cols)};
      cmds.dispatch(kernel,
                    {{shader::kBindingX, xbuf}, {shader::kBindingY, ybuf}, {shader::kBindingXNorms, xn},
                     {shader::kBindingYNorms, yn}, {shader::kBindingDistances, dbuf}},
                    push,
                    static_cast<std::uint32_t>(ceil_div(cols, tile.block_cols())),
                    static_cast<std::uint32_t>(ceil_div(rows, tile.block_rows())));
      cmds.submit_and_wait();
      if (cols == m) {
        vulkan::download(device, dbuf, 0, D.data() + r0 * m, rows * cols * s);
      } else {
        block_out.resize(rows * cols);
        vulkan::download(device, dbuf, 0, block_out.data(), rows * cols * s);
        for (std::uint64_t i = 0; i < rows; ++i)
          std::copy_n(block_out.data() + i * cols, cols, D.data() + (r0 + i) * m + c0);
      }
    }
  }
  return D;
}

}  // namespace gpuml::kernels
