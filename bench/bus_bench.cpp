// gpuml-bus-bench: the bandwidth from pinned host memory to the device (and back), the bound on anything that
// streams data from the host each iteration (k-means beyond device memory). Copies one buffer with
// vkCmdCopyBuffer between MemoryUse::host and MemoryUse::device buffers, timed by device timestamps. And what a fit's
// set-up pays: the library's upload of ordinary (pageable) host memory through its staging buffers, plain and centred
// as k-means uploads X, on one device and on every device of the choice at once, against a host memcpy of the same
// bytes (wall clock, the best of --repeat).
#include <gpuml/gpuml.hpp>
#include <gpuml/vulkan/commands.hpp>

#include "program.hpp"

#include <CLI/CLI.hpp>

#include <gpuml/kernels/resident_samples.hpp>
#include <gpuml/vulkan/transfer.hpp>

#include <algorithm>
#include <chrono>
#include <vector>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <sys/mman.h>
#include <string>

int main(int argc, char** argv) {
  CLI::App app{"gpuml-bus-bench: host-to-device and device-to-host copy bandwidth of pinned host memory, by device "
               "timestamps (the best of --repeat copies)."};
  gpuml_program::add_version(app, "gpuml-bus-bench");
  std::uint64_t mib = 1024;
  int repeat = 5;
  std::string device = "gpu";
  bool huge_pages = false;
  app.add_option("--mib", mib, "bytes per copy, in MiB (default 1024)")->check(CLI::PositiveNumber);
  app.add_option("--repeat", repeat, "copies per direction (default 5)")->check(CLI::PositiveNumber);
  app.add_option("--device", device, "device choice, as GPUML_DEVICE (default gpu)");
  app.add_flag("--huge-pages", huge_pages,
               "the host matrix in transparent huge pages (madvise), as numpy allocates large arrays on Linux");
  return gpuml_program::run("gpuml-bus-bench", app, argc, argv, [&] {
    const gpuml::Backend backend = gpuml::select_backend(device);
    if (!backend.is_vulkan()) throw gpuml::invalid_input("--device: the bus bandwidth needs a Vulkan device");
    gpuml::vulkan::Device& dev = *backend.device();
    const std::uint64_t bytes = mib << 20;
    const auto host = dev.buffer(bytes, gpuml::vulkan::MemoryUse::host);
    const auto local = dev.buffer(bytes, gpuml::vulkan::MemoryUse::device);
    if (host.mapped()) std::memset(host.mapped(), 1, bytes);  // touch every page before timing
    auto best_ms = [&](bool to_device) {
      double best = 1e300;
      for (int r = 0; r < repeat; ++r) {
        gpuml::vulkan::Commands cmds(dev, 2);
        cmds.timestamp(0);
        if (to_device) cmds.copy(host, 0, local, 0, bytes);
        else cmds.copy(local, 0, host, 0, bytes);
        cmds.timestamp(1);
        cmds.submit_and_wait();
        best = std::min(best, cmds.elapsed_ms(0, 1));
      }
      return best;
    };
    const double up = best_ms(true), down = best_ms(false);

    // Ordinary host memory: a float matrix of d = 14 columns (the seed workload's rows), per device `bytes` of it.
    using Clock = std::chrono::steady_clock;
    auto best_wall_ms = [&](auto&& work) {
      double best = 1e300;
      for (int r = 0; r < repeat; ++r) {
        const auto t0 = Clock::now();
        work();
        best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      return best;
    };
    const std::vector<gpuml::vulkan::Device*> devices = [&] {
      std::vector<gpuml::vulkan::Device*> all;
      for (std::size_t i = 0; i < backend.device_count(); ++i) all.push_back(backend.device(i));
      return all;
    }();
    constexpr Eigen::Index d = 14;
    const Eigen::Index rows_each = static_cast<Eigen::Index>(bytes / (d * sizeof(float)));
    const Eigen::Index rows = rows_each * static_cast<Eigen::Index>(devices.size());
    // Aligned to 2 MiB so that, with --huge-pages, every page of the matrix may be a huge page.
    constexpr std::size_t kHugePage = std::size_t(2) << 20;
    const std::size_t x_bytes = (static_cast<std::size_t>(rows * d) * sizeof(float) + kHugePage - 1) / kHugePage * kHugePage;
    std::unique_ptr<float, decltype(&std::free)> storage(static_cast<float*>(std::aligned_alloc(kHugePage, x_bytes)), &std::free);
    if (!storage) throw gpuml::error("no host memory for the matrix");
    if (huge_pages && madvise(storage.get(), x_bytes, MADV_HUGEPAGE) != 0)
      throw gpuml::error("madvise(MADV_HUGEPAGE) failed: transparent huge pages are off here");
    Eigen::Map<gpuml::Matrix<float>> X(storage.get(), rows, d);
    gpuml::parallel_chunks(rows, 1 << 16, [&](std::int64_t, std::int64_t b, std::int64_t e) {
      for (Eigen::Index i = b; i < e; ++i)
        for (Eigen::Index j = 0; j < d; ++j) X(i, j) = static_cast<float>((i * 31 + j * 7) % 1000) * 0.001f;
    });
    const std::vector<float> shift(d, 0.5f);
    std::vector<gpuml::vulkan::Buffer> targets;
    for (auto* device : devices) targets.push_back(device->buffer(rows_each * d * sizeof(float)));
    std::vector<float> copy(static_cast<std::size_t>(rows_each * d));
    const std::uint64_t each = static_cast<std::uint64_t>(rows_each * d * sizeof(float));
    const double memcpy_ms = best_wall_ms([&] { gpuml::vulkan::transfer_detail::copy_bytes(copy.data(), X.data(), each); });
    // centred: X less a shift, on the host as it is staged, or on the device after a plain upload (as k-means does
    // where X holds no subnormal).
    enum class Centring { none, host, device };
    auto upload_ms = [&](std::size_t count, Centring centring) {
      std::vector<gpuml::vulkan::Buffer> shifts;
      for (std::size_t s = 0; s < count; ++s) {
        shifts.push_back(devices[s]->buffer(d * sizeof(float)));
        gpuml::vulkan::upload(*devices[s], shifts.back(), 0, shift.data(), d * sizeof(float));
      }
      return best_wall_ms([&] {
        gpuml::concurrently(count, [&](std::size_t s) {
          gpuml::ShiftedView<float> view(X.middleRows(s * rows_each, rows_each), centring == Centring::none ? nullptr : shift.data());
          view.subnormal_free = true;
          gpuml::kernels::upload_centred_rows<float>(*devices[s], targets[s], view, 0, rows_each,
                                                     centring == Centring::device ? &shifts[s] : nullptr);
        });
      });
    };
    auto gbps = [](double b, double ms) { return b / ms / 1e6; };
    std::printf("{\"huge_pages\": %s, \"device\": \"%s\", \"devices\": %zu, \"bytes\": %llu, \"host_threads\": %d, \"host_import\": %s, "
                "\"host_to_device_ms\": %.3f, \"host_to_device_GBps\": %.2f, "
                "\"device_to_host_ms\": %.3f, \"device_to_host_GBps\": %.2f, \"memcpy_GBps\": %.2f",
                huge_pages ? "true" : "false", dev.info().name.c_str(), devices.size(), static_cast<unsigned long long>(bytes), gpuml::host_threads(),
                dev.info().host_memory_import ? "true" : "false", up, gbps(bytes, up), down, gbps(bytes, down),
                gbps(each, memcpy_ms));
    // Uploads as the library makes them, staged and read in place: one device, then every device at once.
    for (const auto mode : {gpuml::Upload::staged, gpuml::Upload::imported}) {
      gpuml::configure(gpuml::config().set_upload(mode));
      const char* name = mode == gpuml::Upload::staged ? "staged" : "imported";
      for (const std::size_t count : {std::size_t(1), devices.size()}) {
        const char* who = count == 1 ? "one" : "all";
        const double bytes_moved = static_cast<double>(each * count);
        std::printf(", \"%s_%s_GBps\": %.2f, \"%s_%s_host_centred_GBps\": %.2f, \"%s_%s_device_centred_GBps\": %.2f",
                    name, who, gbps(bytes_moved, upload_ms(count, Centring::none)), name, who,
                    gbps(bytes_moved, upload_ms(count, Centring::host)), name, who,
                    gbps(bytes_moved, upload_ms(count, Centring::device)));
      }
    }
    std::printf("}\n");
    return 0;
  });
}
