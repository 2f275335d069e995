// Lists the Vulkan devices gpuml sees and the backend it picks, then computes pairwise squared distances on
// an embedded synthetic dataset with that backend and checks them against the host backend.
#include <gpuml/gpuml.hpp>

#include "program.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

namespace {

// The embedded default dataset: 2000 points in 24 dimensions around 10 centers, from a fixed seed.
gpuml::Matrix<float> embedded_dataset() {
  std::mt19937_64 rng(20261120);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  std::uniform_real_distribution<float> center(-5.0f, 5.0f);
  gpuml::Matrix<float> centers(10, 24), X(2000, 24);
  for (Eigen::Index i = 0; i < centers.size(); ++i) centers.data()[i] = center(rng);
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (Eigen::Index j = 0; j < X.cols(); ++j) X(i, j) = centers(i % 10, j) + noise(rng);
  return X;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpuml-devices: lists the Vulkan devices gpuml sees, the one it uses by default (GPUML_DEVICE), and\n"
               "checks it: pairwise squared distances of an embedded dataset against the host backend.\n"
               "Exit status: 0 when they agree, 1 on a mismatch or a run-time error, 2 on a usage error."};
  gpuml_program::add_version(app, "gpuml-devices");
  return gpuml_program::run("gpuml-devices", app, argc, argv, [&] {
    const auto devices = gpuml::vulkan_devices();
    std::printf("Vulkan devices: %zu\n", devices.size());
    for (const auto& d : devices)
      std::printf("  %u: %s (%s), driver %s, subgroup %u-%u, shared memory %u KiB, max binding %llu MiB, fp64 %s\n",
                  d.index, d.name.c_str(), gpuml::vulkan::device_type_name(d.type), d.driver_info.c_str(),
                  d.min_subgroup_size, d.max_subgroup_size, d.max_shared_memory / 1024,
                  static_cast<unsigned long long>(d.max_storage_buffer_range >> 20), d.float64 ? "yes" : "no");
    const gpuml::Backend backend = gpuml::default_backend();
    std::printf("gpuml uses: %s (set GPUML_DEVICE=gpu|discrete|integrated|cpu|host|N|name to choose)\n",
                gpuml::describe(backend).c_str());

    const gpuml::Matrix<float> X = embedded_dataset();
    const auto Y = X.topRows(300);
    const auto t0 = std::chrono::steady_clock::now();
    const gpuml::Matrix<float> D = gpuml::pairwise_sq_distances<float>(X, Y, backend);
    const auto t1 = std::chrono::steady_clock::now();
    const gpuml::Matrix<float> H = gpuml::pairwise_sq_distances<float>(X, Y, gpuml::Backend::host());
    double worst = 0;
    for (Eigen::Index i = 0; i < D.rows(); ++i)
      for (Eigen::Index j = 0; j < D.cols(); ++j)
        worst = std::max(worst, std::abs(double(D(i, j)) - H(i, j)) / (1.0 + X.row(i).squaredNorm() + Y.row(j).squaredNorm()));
    std::printf("pairwise squared distances %lld x %lld (d = %lld): %.2f ms, largest relative difference to the host %.2e\n",
                static_cast<long long>(D.rows()), static_cast<long long>(D.cols()), static_cast<long long>(X.cols()),
                std::chrono::duration<double, std::milli>(t1 - t0).count(), worst);
    if (backend.is_vulkan())
      std::printf("pipelines built: %u in %.1f ms (cache file %s)\n", backend.device()->pipelines_built(),
                  backend.device()->pipeline_seconds() * 1e3, backend.device()->pipeline_cache_file().c_str());
    if (worst > 1e-5) {
      std::printf("MISMATCH against the host backend\n");
      return 1;
    }
    std::printf("OK\n");
    return 0;
  });
}
