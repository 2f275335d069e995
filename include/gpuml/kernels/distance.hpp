// Pairwise squared-Euclidean distances and row norms on a Vulkan device, with operands larger than one
// binding (maxStorageBufferRange) or one allocation split into row blocks.
#pragma once

#include <gpuml/core/matrix.hpp>
#include <gpuml/policy/distance.hpp>
#include <gpuml/policy/limits.hpp>
#include <gpuml/policy/tile.hpp>
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
  const LinearGrid grid = linear_grid(device.info(), ceil_div(rows, kNormThreads), "row_sq_norms");
  const shader::Push push{.rows = rows, .cols = cols};
  cmds.dispatch(k, {{shader::kBindingRows, x}, {shader::kBindingNorms, out}}, push, grid.x, grid.y);
}

/// Splits `rows` rows of `row_bytes` each into blocks no larger than `max_bytes` (at least one row per block).
inline std::uint64_t rows_per_block(std::uint64_t rows, std::uint64_t row_bytes, std::uint64_t max_bytes, const char* what) {
  if (row_bytes > max_bytes)
    throw unsupported(std::string("one row of ") + what + " (" + std::to_string(row_bytes) +
                      " bytes) exceeds the device's largest buffer binding (" + std::to_string(max_bytes) + " bytes)");
  return std::max<std::uint64_t>(1, std::min(rows, max_bytes / row_bytes));
}

template <class T>
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

/// D = squared distances between the rows of X and of Y, computed block by block on `device`. `fixed_tile`: the
/// tile (a compile-time policy's); none: the resolver's.
template <class T>
Matrix<T> pairwise_sq_distances(vulkan::Device& device, MatrixView<T> X, MatrixView<T> Y,
                                const std::optional<DistanceTileParams>& fixed_tile = {}) {
  require_scalar_support<T>(device);
  const std::uint64_t n = X.rows(), m = Y.rows(), d = X.cols(), s = sizeof(T);
  const auto& info = device.info();
  const DistanceTileParams tile = choose_tile<DistanceTileTraits, T>(fixed_tile, info, {0, static_cast<std::uint32_t>(d)});
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
