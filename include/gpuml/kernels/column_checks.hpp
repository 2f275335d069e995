// The k-means fit's input checks on a device: algorithms::column_range and algorithms::exact_column_sums (of the
// values, and of their squared deviations from a center where the device has float64) over float32 rows already in
// device memory as the host holds them (the chunks a fit reserved and filled with its rows:
// kernels::reserve_samples), with the host's results bit for bit and without its passes over X.
#pragma once

#include <gpuml/algorithms/kmeans.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/kernels/resident_samples.hpp>
#include <gpuml/policy/limits.hpp>
#include <gpuml/shaders/column_checks_kernel.hpp>
#include <gpuml/vulkan/commands.hpp>
#include <gpuml/vulkan/device.hpp>
#include <gpuml/vulkan/transfer.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

namespace gpuml::kernels {

inline constexpr std::uint32_t kColumnCheckThreads = 256;
/// Values one workgroup reads: a few hundred per thread.
inline constexpr std::uint64_t kColumnCheckGroupValues = std::uint64_t(1) << 16;

/// Whether `device` can check chunks of `chunk_rows` rows of `cols` float32 columns (64-bit integers; each chunk's
/// value indices within 32 bits).
inline bool can_check_columns(const vulkan::Device& device, std::uint64_t chunk_rows, std::uint64_t cols) {
  return device.info().int64 && cols > 0 && chunk_rows * cols + cols + kColumnCheckThreads <= UINT32_MAX;
}

namespace column_checks_detail {

/// Rows of one row block: about kColumnCheckGroupValues values (a workgroup's, or each column block's).
inline std::uint64_t rows_per_group(std::uint64_t cols) {
  const std::uint64_t width = std::min<std::uint64_t>(cols, kColumnCheckThreads);
  return std::max<std::uint64_t>(1, kColumnCheckGroupValues / width);
}

/// The words of one partial (a row block's column) in shader mode `mode`.
inline std::uint32_t words_of(std::uint32_t mode) {
  namespace shader = shader_interface::column_checks;
  return mode == shader::kModeRange ? shader::kRangeWords : 2 * shader::kSumWords;
}

/// One pass (shader mode `mode`) over every chunk on `device`: the partial words of each chunk's row blocks, per
/// block and column words_of(mode) each, in chunk order.
inline std::vector<std::uint32_t> run_pass(vulkan::Device& device, const std::vector<ResidentChunk>& chunks,
                                           std::uint32_t cols, std::uint32_t mode,
                                           const std::vector<std::int32_t>& exponents = {},
                                           const std::vector<double>& centers = {}) {
  namespace shader = shader_interface::column_checks;
  for (const ResidentChunk& c : chunks)
    if (!can_check_columns(device, c.rows, cols))
      throw unsupported("column_checks: " + std::to_string(c.rows) + " rows of " + std::to_string(cols) +
                        " columns are beyond what " + device.info().name + " checks (can_check_columns)");
  const std::uint32_t words = words_of(mode);
  const std::uint64_t group_rows = rows_per_group(cols);
  const std::uint32_t column_blocks = cols <= kColumnCheckThreads ? 1 : static_cast<std::uint32_t>(ceil_div(cols, kColumnCheckThreads));
  const std::uint64_t align = std::max<std::uint64_t>(4, device.info().min_storage_buffer_offset_alignment);
  std::vector<std::uint64_t> offsets;  // bytes, per chunk
  std::uint64_t bytes = 0;
  for (const ResidentChunk& c : chunks) {
    offsets.push_back(bytes);
    bytes += ceil_div(ceil_div(c.rows, group_rows) * cols * words * 4, align) * align;
  }
  const vulkan::Buffer partials = device.buffer(std::max<std::uint64_t>(bytes, 4));
  const vulkan::Buffer exps = device.buffer(std::max<std::uint64_t>(cols, 1) * 4);
  if (mode != shader::kModeRange) vulkan::upload(device, exps, 0, exponents.data(), cols * 4);
  const bool squares = mode == shader::kModeSquares;  // the float64 build (the rows are float32 in both)
  const vulkan::Buffer center = device.buffer(squares ? cols * sizeof(double) : 8);
  if (squares) vulkan::upload(device, center, 0, centers.data(), cols * sizeof(double));
  const auto spec = spec_constants(shader::kSpecCount, {{shader::kSpecThreads, kColumnCheckThreads}, {shader::kSpecMode, mode}});
  const auto& k = device.kernel(squares ? shaders::column_checks_kernel::spec<double>(spec) : shaders::column_checks_kernel::spec<float>(spec));
  const std::uint64_t max_x = std::max<std::uint32_t>(1, device.info().max_workgroup_count[0]);
  if (column_blocks > device.info().max_workgroup_count[1])
    throw unsupported("column_checks: " + std::to_string(cols) + " columns exceed the device's workgroup grid");
  vulkan::Commands cmds(device);
  cmds.barrier();  // the rows' copies (earlier submissions), visible to the shader
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const std::uint64_t blocks = ceil_div(chunks[i].rows, group_rows), block_bytes = blocks * cols * words * 4;
    for (std::uint64_t first = 0; first < blocks; first += max_x) {
      const shader::Push push{.rows = static_cast<std::uint32_t>(chunks[i].rows), .cols = cols,
                              .rows_per_group = static_cast<std::uint32_t>(group_rows),
                              .first_group = static_cast<std::uint32_t>(first)};
      cmds.dispatch(k, {{shader::kBindingRows, *chunks[i].x}, {shader::kBindingExponents, exps},
                        {shader::kBindingPartials, vulkan::BufferSlice(partials, offsets[i], block_bytes)},
                        {shader::kBindingCenter, center}},
                    push, static_cast<std::uint32_t>(std::min(max_x, blocks - first)), column_blocks);
    }
  }
  cmds.submit_and_wait();
  // One download; the chunks' partials lie at aligned offsets, gathered here in chunk order.
  std::vector<std::uint32_t> all(bytes / 4), out;
  vulkan::download(device, partials, 0, all.data(), bytes);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const std::uint64_t at = offsets[i] / 4, values = ceil_div(chunks[i].rows, group_rows) * cols * words;
    out.insert(out.end(), all.begin() + static_cast<std::ptrdiff_t>(at), all.begin() + static_cast<std::ptrdiff_t>(at + values));
  }
  return out;
}

inline float float_of_key(std::uint32_t key) {
  return std::bit_cast<float>((key & 0x80000000u) ? key & 0x7FFFFFFFu : ~key);
}

}  // namespace column_checks_detail

/// algorithms::column_range(X, range, true) over the float32 rows of `chunks` (`cols` columns) on `device`, merged
/// into `range` (start from ColumnRange::empty): false where a value is not finite. The same
/// extremes as the host's (a -0 and a +0 may stand for each other: only their magnitudes are used).
inline bool column_range_on_device(vulkan::Device& device, const std::vector<ResidentChunk>& chunks, std::uint32_t cols,
                                   algorithms::ColumnRange& range) {
  namespace shader = shader_interface::column_checks;
  const std::vector<std::uint32_t> words = column_checks_detail::run_pass(device, chunks, cols, shader::kModeRange);
  std::vector<std::uint32_t> low(cols, 0xFFFFFFFFu), high(cols, 0u), small(cols, 0x7F800000u);
  bool finite = true;
  for (std::size_t o = 0; o < words.size(); o += shader::kRangeWords) {
    const std::size_t f = (o / shader::kRangeWords) % cols;
    low[f] = std::min(low[f], words[o]);
    high[f] = std::max(high[f], words[o + 1]);
    small[f] = std::min(small[f], words[o + 2]);
    finite = finite && words[o + 3] != 0;
  }
  algorithms::ColumnRange part = algorithms::ColumnRange::empty(cols);
  for (std::uint32_t f = 0; f < cols; ++f) {
    if (high[f] < low[f]) continue;  // no rows here
    part.lowest[f] = column_checks_detail::float_of_key(low[f]);
    part.highest[f] = column_checks_detail::float_of_key(high[f]);
    part.smallest[f] = std::bit_cast<float>(small[f]);
  }
  range.merge(part);
  return finite;
}

/// Whether exact_column_sums_on_device forms sums of squared deviations on `device` (float64 arithmetic).
inline bool can_sum_squares(const vulkan::Device& device) { return device.info().float64; }

/// algorithms::exact_column_sums(X, center, sums.exponents) over the float32 rows of `chunks` on `device`, added into
/// `sums` (integer sums: the same whatever the cut). With a center, only where can_sum_squares.
inline void exact_column_sums_on_device(vulkan::Device& device, const std::vector<ResidentChunk>& chunks, std::uint32_t cols,
                                        algorithms::ExactColumnSums& sums, const Eigen::RowVectorXd* center = nullptr) {
  namespace shader = shader_interface::column_checks;
  if (center && !can_sum_squares(device)) throw unsupported(device.info().name + " has no shaderFloat64 for the variances");
  const std::vector<std::int32_t> exponents(sums.exponents.data(), sums.exponents.data() + cols);
  const std::vector<double> centers = center ? std::vector<double>(center->data(), center->data() + cols) : std::vector<double>{};
  const std::vector<std::uint32_t> words = column_checks_detail::run_pass(
      device, chunks, cols, center ? shader::kModeSquares : shader::kModeSums, exponents, centers);
  const std::uint32_t per = column_checks_detail::words_of(shader::kModeSums);
  for (std::size_t o = 0; o < words.size(); o += per) {
    const std::size_t f = (o / per) % cols;
    sums.whole[f] += static_cast<std::int64_t>(words[o] | (std::uint64_t(words[o + 1]) << 32));
    sums.fraction[f] += static_cast<std::int64_t>(words[o + 2] | (std::uint64_t(words[o + 3]) << 32));
  }
}

}  // namespace gpuml::kernels
