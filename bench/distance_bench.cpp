// gpuml-distance-bench: the pairwise squared-distance kernel alone, timed with device timestamps, and the public
// gpuml::pairwise_sq_distances end to end (upload + kernels + download), on one Vulkan device.
//
//   gpuml-distance-bench                            n = m = 16384, d = 128, float32, on the first GPU
//   gpuml-distance-bench --n 2048 --m 2048 --d 64 --device cpu --repeats 5
//
// X and Y are uploaded once; each timed repetition records the row norms, a barrier and the distance dispatch
// (one per row block when the n x m output exceeds one buffer) between timestamps. The kernel time is the median
// over the repetitions of the timestamps around the distance dispatch; TFLOP/s counts 2 * n * m * d flops.
// Sampled entries of both results are checked against a float64 host computation; a mismatch exits with 1.
// The last line of stdout is one JSON object (--json prints only that).
#include <gpuml/gpuml.hpp>
#include <gpuml/kernels/distance.hpp>
#include <gpuml/vulkan/commands.hpp>
#include <gpuml/vulkan/transfer.hpp>

#include "program.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using gpuml_program::Clock;

struct Options {
  std::int64_t n = 16384, m = 16384;
  int d = 128;
  int repeats = 10, e2e_repeats = 3, samples = 4096;
  std::string device;
  bool json = false, float64 = false, skip_e2e = false;
  std::uint64_t seed = 7;
};

double median(std::vector<double> v) {
  if (v.empty()) return -1.0;
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

template <class T>
gpuml::Matrix<T> uniform(std::int64_t rows, int cols, std::uint64_t seed) {
  gpuml::Matrix<T> X(rows, cols);
  std::uint64_t s = seed;
  for (Eigen::Index i = 0; i < X.size(); ++i) {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    X.data()[i] = static_cast<T>(static_cast<double>(z >> 11) * 0x1.0p-53);
  }
  return X;
}

/// Largest relative error of sampled entries of D (rows [row0, row0 + D.rows()) of the full matrix) against
/// float64, relative to 1 + |x|^2 + |y|^2 (the size of the terms in the norm expansion).
template <class T>
double sampled_error(const T* D, std::int64_t ld, std::int64_t rows, std::int64_t row0, const gpuml::Matrix<T>& X,
                     const gpuml::Matrix<T>& Y, int samples, std::uint64_t seed) {
  double worst = 0;
  std::uint64_t s = seed;
  const std::int64_t m = Y.rows();
  for (int t = 0; t < samples; ++t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const std::int64_t i = static_cast<std::int64_t>((s >> 33) % static_cast<std::uint64_t>(rows));
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const std::int64_t j = static_cast<std::int64_t>((s >> 33) % static_cast<std::uint64_t>(m));
    double ref = 0, xn = 0, yn = 0;
    for (Eigen::Index f = 0; f < X.cols(); ++f) {
      const double a = X(row0 + i, f), b = Y(j, f);
      ref += (a - b) * (a - b);
      xn += a * a;
      yn += b * b;
    }
    const double got = static_cast<double>(D[i * ld + j]);
    const double err = std::isfinite(got) ? std::abs(got - ref) / (1.0 + xn + yn) : INFINITY;
    worst = std::max(worst, err);
  }
  return worst;
}

template <class T>
int run(const Options& o, const gpuml::Backend& backend) {
  using Traits = gpuml::kernels::DistanceTileTraits;
  namespace vk = gpuml::vulkan;
  vk::Device& dev = *backend.device();
  const auto& info = dev.info();
  gpuml::kernels::require_scalar_support<T>(dev);
  const auto tile = gpuml::kernels::resolve_tile<Traits, T>(info, {0, static_cast<std::uint32_t>(o.d)});
  if (std::string why; !gpuml::kernels::can_implement<Traits, T>(info, tile, {0, static_cast<std::uint32_t>(o.d)}, &why))
    throw gpuml::unsupported("the default distance tile cannot run on " + info.name + ": " + why);

  const std::int64_t n = o.n, m = o.m, d = o.d;
  const std::uint64_t s = sizeof(T);
  const gpuml::Matrix<T> X = uniform<T>(n, o.d, o.seed), Y = uniform<T>(m, o.d, o.seed + 1);
  const std::uint64_t max_bytes = std::min<std::uint64_t>(dev.max_buffer_bytes(), std::uint64_t(UINT32_MAX));
  if (std::uint64_t(n) * d * s > max_bytes || std::uint64_t(m) * d * s > max_bytes)
    throw gpuml::unsupported("X or Y exceeds one buffer binding of " + info.name + "; choose a smaller --n/--m/--d");
  if (gpuml::kernels::ceil_div(std::uint64_t(m), tile.block_cols()) > info.max_workgroup_count[0])
    throw gpuml::unsupported("--m exceeds the device's dispatch width; choose a smaller --m");
  // Rows of D per dispatch: as many as one output buffer and the dispatch height allow, a multiple of the tile.
  std::uint64_t bx = std::min<std::uint64_t>(n, max_bytes / (std::uint64_t(m) * s));
  bx = std::min<std::uint64_t>(bx, std::uint64_t(info.max_workgroup_count[1]) * tile.block_rows());
  if (bx < std::uint64_t(n)) bx = bx / tile.block_rows() * tile.block_rows();
  if (bx == 0) throw gpuml::unsupported("one tile row of the output exceeds a buffer; choose a smaller --m");
  const std::uint64_t align = std::max<std::uint64_t>(1, info.min_storage_buffer_offset_alignment);
  if (bx < std::uint64_t(n) && ((bx * s) % align || (bx * d * s) % align))
    throw gpuml::unsupported("row blocks would break the device's storage-buffer offset alignment");
  const std::uint64_t blocks = gpuml::kernels::ceil_div(std::uint64_t(n), bx);

  // Upload once.
  auto xbuf = dev.buffer(n * d * s), ybuf = dev.buffer(m * d * s), xn = dev.buffer(n * s), yn = dev.buffer(m * s);
  auto dbuf = dev.buffer(bx * m * s);
  auto t0 = Clock::now();
  vk::upload_rows<T>(dev, xbuf, 0, X, 0, n);
  vk::upload_rows<T>(dev, ybuf, 0, Y, 0, m);
  const double upload_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  t0 = Clock::now();
  namespace shader = gpuml::shader_interface::pairwise_sq_distances;
  const auto& kernel = dev.kernel(gpuml::shaders::pairwise_sq_distances_kernel::spec<T>(tile.constants()));
  const double pipeline_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

  auto record = [&](vk::Commands& cmds) {
    cmds.timestamp(0);
    gpuml::kernels::record_row_sq_norms<T>(dev, cmds, xbuf, xn, static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(d));
    gpuml::kernels::record_row_sq_norms<T>(dev, cmds, ybuf, yn, static_cast<std::uint32_t>(m), static_cast<std::uint32_t>(d));
    cmds.barrier();
    cmds.timestamp(1);
    for (std::uint64_t b = 0; b < blocks; ++b) {
      const std::uint64_t r0 = b * bx, rows = std::min<std::uint64_t>(bx, n - r0);
      if (b) cmds.barrier();  // the blocks share the output buffer
      const shader::Push push{.n = std::uint32_t(rows), .m = std::uint32_t(m), .d = std::uint32_t(d), .ldd = std::uint32_t(m)};
      cmds.dispatch(kernel,
                    {{shader::kBindingX, vk::BufferSlice(xbuf, r0 * d * s, rows * d * s)}, {shader::kBindingY, ybuf},
                     {shader::kBindingXNorms, vk::BufferSlice(xn, r0 * s, rows * s)}, {shader::kBindingYNorms, yn},
                     {shader::kBindingDistances, vk::BufferSlice(dbuf, 0, rows * m * s)}},
                    push, static_cast<std::uint32_t>(gpuml::kernels::ceil_div(std::uint64_t(m), tile.block_cols())),
                    static_cast<std::uint32_t>(gpuml::kernels::ceil_div(rows, tile.block_rows())));
    }
    cmds.timestamp(2);
  };

  {  // warm-up
    vk::Commands cmds(dev, 3);
    record(cmds);
    cmds.submit_and_wait();
  }
  std::vector<double> kernel_ms, norms_ms, submit_ms;
  bool device_timestamps = true;
  for (int r = 0; r < o.repeats; ++r) {
    vk::Commands cmds(dev, 3);
    record(cmds);
    t0 = Clock::now();
    cmds.submit_and_wait();
    submit_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    const double k = cmds.elapsed_ms(1, 2), nm = cmds.elapsed_ms(0, 1);
    if (k < 0) device_timestamps = false;
    kernel_ms.push_back(k);
    norms_ms.push_back(nm);
  }
  if (!device_timestamps) kernel_ms = submit_ms;  // no timestamps on this queue: host wall time of the submission
  const double kernel_median = median(kernel_ms);

  // Check the kernel's output (the last row block is what the buffer holds now).
  const std::uint64_t last0 = (blocks - 1) * bx, last_rows = n - last0;
  std::vector<T> block(last_rows * m);
  vk::download(dev, dbuf, 0, block.data(), block.size() * s);
  const double tol = sizeof(T) == 4 ? 1e-5 * std::sqrt(double(d)) : 1e-12 * std::sqrt(double(d));
  const double kernel_err = sampled_error<T>(block.data(), m, last_rows, last0, X, Y, o.samples, o.seed + 2);
  block = {};

  // End to end: the public call, fresh upload and download each time.
  std::vector<double> e2e_ms;
  double e2e_err = 0;
  if (!o.skip_e2e) {
    for (int r = 0; r < o.e2e_repeats; ++r) {
      t0 = Clock::now();
      gpuml::Matrix<T> D = gpuml::pairwise_sq_distances<T>(X, Y, backend);
      e2e_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (r == 0) e2e_err = sampled_error<T>(D.data(), m, n, 0, X, Y, o.samples, o.seed + 3);
    }
  }
  const double e2e_median = median(e2e_ms);

  const double flops = 2.0 * double(n) * double(m) * double(d);
  nlohmann::json j;
  j["program"] = "gpuml-distance-bench";
  j["gpuml_version"] = GPUML_VERSION_STRING;
  j["device"] = info.name;
  j["device_type"] = gpuml::vulkan::device_type_name(info.type);
  j["driver"] = info.driver_info;
  j["n"] = n;
  j["m"] = m;
  j["d"] = d;
  j["dtype"] = sizeof(T) == 4 ? "float32" : "float64";
  j["tile"] = {{"block_rows", tile.block_rows()}, {"block_cols", tile.block_cols()}, {"threads", tile.threads()}};
  j["row_blocks"] = blocks;
  j["repeats"] = o.repeats;
  j["timing"] = device_timestamps ? "device timestamps" : "host wall clock around submit+wait (no timestamps)";
  j["kernel_ms"] = kernel_median;
  j["kernel_ms_all"] = kernel_ms;
  j["kernel_tflops"] = kernel_median > 0 ? flops / (kernel_median * 1e-3) / 1e12 : 0.0;
  j["kernel_output_gbps"] = kernel_median > 0 ? double(n) * m * s / (kernel_median * 1e-3) / 1e9 : 0.0;
  j["norms_ms"] = device_timestamps ? median(norms_ms) : -1.0;
  j["submit_wait_ms"] = median(submit_ms);
  j["upload_ms"] = upload_ms;
  j["pipeline_ms"] = pipeline_ms;
  j["e2e_ms"] = o.skip_e2e ? nlohmann::json() : nlohmann::json(e2e_median);
  j["e2e_ms_all"] = e2e_ms;
  j["e2e_tflops"] = e2e_median > 0 ? flops / (e2e_median * 1e-3) / 1e12 : 0.0;
  j["check_samples"] = o.samples;
  j["kernel_max_rel_error"] = kernel_err;
  j["e2e_max_rel_error"] = e2e_err;
  j["tolerance"] = tol;
  const bool ok = kernel_err <= tol && e2e_err <= tol;
  j["ok"] = ok;
  if (!o.json) {
    std::printf("device: %s (%s)\n", info.name.c_str(), gpuml::vulkan::device_type_name(info.type));
    std::printf("pairwise squared distances, n=%lld m=%lld d=%lld %s, %llu row block(s)\n", static_cast<long long>(n),
                static_cast<long long>(m), static_cast<long long>(d), sizeof(T) == 4 ? "float32" : "float64",
                static_cast<unsigned long long>(blocks));
    std::printf("kernel: %.3f ms median of %d (%s), %.4g TFLOP/s, output %.4g GB/s\n", kernel_median, o.repeats,
                device_timestamps ? "device timestamps" : "host wall clock", j["kernel_tflops"].get<double>(),
                j["kernel_output_gbps"].get<double>());
    if (!o.skip_e2e)
      std::printf("end to end (gpuml::pairwise_sq_distances: upload + kernels + download): %.3f ms median of %d, %.4g TFLOP/s\n",
                  e2e_median, o.e2e_repeats, j["e2e_tflops"].get<double>());
    std::printf("check on %d sampled entries vs float64: kernel %.2e, end to end %.2e (tolerance %.1e): %s\n", o.samples,
                kernel_err, e2e_err, tol, ok ? "OK" : "MISMATCH");
  }
  std::printf("%s\n", j.dump().c_str());
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"gpuml-distance-bench: the pairwise squared-distance kernel (device timestamps) and "
               "gpuml::pairwise_sq_distances end to end, checked against float64 on sampled entries."};
  app.add_option("--n", o.n, "rows of X (default 16384)")->check(CLI::PositiveNumber);
  app.add_option("--m", o.m, "rows of Y (default 16384)")->check(CLI::PositiveNumber);
  app.add_option("--d", o.d, "features (default 128)")->check(CLI::PositiveNumber);
  app.add_option("--repeats", o.repeats, "timed kernel repetitions (default 10; the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--e2e-repeats", o.e2e_repeats, "timed end-to-end calls (default 3)")->check(CLI::PositiveNumber);
  app.add_flag("--skip-e2e", o.skip_e2e, "time the kernel only");
  app.add_option("--samples", o.samples, "entries checked against float64 (default 4096)")->check(CLI::PositiveNumber);
  app.add_option("--device", o.device,
                 "gpu | discrete | integrated | cpu | N | name (a Vulkan device; default: $GPUML_DEVICE, else gpu)");
  app.add_flag("--float64", o.float64, "float64 instead of float32 (needs shaderFloat64)");
  app.add_flag("--json", o.json, "print only the JSON object");
  app.add_option("--seed", o.seed, "seed of the uniform [0, 1) data");
  return gpuml_program::run("gpuml-distance-bench", app, argc, argv, [&] {
    std::string choice = o.device;
    if (choice.empty()) {
      const char* env = std::getenv("GPUML_DEVICE");
      choice = env && *env ? env : "gpu";
    }
    const gpuml::Backend backend = gpuml::select_backend(choice);
    if (!backend.is_vulkan())
      throw gpuml::invalid_input("gpuml-distance-bench times a Vulkan kernel; '" + choice +
                                 "' names the host backend (try --device gpu or --device cpu)");
    return o.float64 ? run<double>(o, backend) : run<float>(o, backend);
  });
}
