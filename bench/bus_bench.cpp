// gpuml-bus-bench: the bandwidth from pinned host memory to the device (and back), the bound on anything that
// streams data from the host each iteration (k-means beyond device memory). Copies one buffer with
// vkCmdCopyBuffer between MemoryUse::host and MemoryUse::device buffers, timed by device timestamps.
#include <gpuml/gpuml.hpp>
#include <gpuml/vulkan/commands.hpp>

#include "program.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  CLI::App app{"gpuml-bus-bench: host-to-device and device-to-host copy bandwidth of pinned host memory, by device "
               "timestamps (the best of --repeat copies)."};
  gpuml_program::add_version(app, "gpuml-bus-bench");
  std::uint64_t mib = 1024;
  int repeat = 5;
  std::string device = "gpu";
  app.add_option("--mib", mib, "bytes per copy, in MiB (default 1024)")->check(CLI::PositiveNumber);
  app.add_option("--repeat", repeat, "copies per direction (default 5)")->check(CLI::PositiveNumber);
  app.add_option("--device", device, "device choice, as GPUML_DEVICE (default gpu)");
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
    std::printf("{\"device\": \"%s\", \"bytes\": %llu, \"host_to_device_ms\": %.3f, \"host_to_device_GBps\": %.2f, "
                "\"device_to_host_ms\": %.3f, \"device_to_host_GBps\": %.2f}\n",
                dev.info().name.c_str(), static_cast<unsigned long long>(bytes), up, bytes / up / 1e6, down,
                bytes / down / 1e6);
    return 0;
  });
}
