// gpuml-kmeans-mpi: distributed k-means (gpuml/mpi/kmeans.hpp). Every rank memory-maps one .npy file and fits its
// own range of rows (about n / ranks, in rank order) on its own backend; rank 0 prints the result and writes the
// outputs (labels gathered from every rank).
//
//   mpirun -np 4 gpuml-kmeans-mpi --input X.npy --n-clusters 127 --init first --max-iter 100 --tol 0
//   mpirun -np 4 gpuml-kmeans-mpi --input X.npy --n-clusters 127 --init k-means++ --seed 7
//   mpirun -np 2 gpuml-kmeans-mpi --input X.npy --init init.npy --labels-out labels.npy --json --device gpu
//
// Each rank's --device (default GPUML_DEVICE / auto) is its own: with one GPU per rank, pass --device-per-rank to
// use device number (local rank). As the other programs: --help and --version exit 0 (rank 0 prints), a usage error
// exits 2 and a run-time error 1, on every rank alike: a problem on any rank ends every rank with that rank's message.
#include <gpuml/gpuml.hpp>
#include <gpuml/mpi/kmeans.hpp>

#include "program.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace {

/// A read-only memory map of a whole file, unmapped when it goes.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw gpuml::invalid_input(path + ": cannot open");
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
      ::close(fd);
      throw gpuml::invalid_input(path + ": cannot read its size, or it is empty");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (data_ == MAP_FAILED) throw gpuml::invalid_input(path + ": cannot memory-map it");
  }
  ~MappedFile() { ::munmap(data_, size_); }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const char* bytes() const { return static_cast<const char*>(data_); }
  std::size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

struct Options {
  std::string input, init = "first", device, labels_out, centers_out;
  int n_clusters = 127, max_iter = 100, n_init = 0;
  std::uint64_t random_state = 0;
  double tol = 0;
  bool json = false, device_per_rank = false, verbose = false;
};

/// Collective: runs `step` on this rank; when it throws on any rank, every rank throws that rank's message, as a
/// usage_error when some rank's was one (so every rank exits with the same status).
template <class Step>
void together(const gpuml::mpi::Communicator& comm, Step&& step) {
  std::string problem;
  int kind = 0, worst = 0;  // 0: none, 1: run time, 2: usage
  try {
    step();
  } catch (const gpuml_program::usage_error& e) {
    problem = e.what();
    kind = 2;
  } catch (const std::exception& e) {
    problem = e.what();
    kind = 1;
  }
  MPI_Allreduce(&kind, &worst, 1, MPI_INT, MPI_MAX, comm.get());
  if (worst == 0) return;
  try {
    comm.check(problem.empty() && kind != 0 ? std::string("unknown error") : problem);
  } catch (const gpuml::error& e) {
    if (worst == 2) throw gpuml_program::usage_error(e.what());
    throw;
  }
}

template <class T>
int run(const Options& o, const gpuml::NpyHeader& h, const MappedFile& file, gpuml_program::Outputs& outputs,
        const gpuml::mpi::Communicator& comm) {
  const std::int64_t n = h.rows, d = h.cols;
  const std::int64_t first = n * comm.rank() / comm.size(), last = n * (comm.rank() + 1) / comm.size();
  // This rank's rows, in place in the mapped file.
  const auto* base = reinterpret_cast<const T*>(file.bytes() + h.data_offset);
  const Eigen::Map<const gpuml::Matrix<T>> mine(base + first * d, last - first, d);

  // Local preparation, checked on every rank together: a rank that cannot read the init or open its device ends
  // every rank, instead of leaving them waiting in the fit.
  gpuml::KMeansParams p;
  p.n_clusters = o.n_clusters;
  p.max_iter = o.max_iter;
  p.tol = o.tol;
  p.verbose = o.verbose;
  p.n_init = o.n_init;
  p.random_state = o.random_state;
  gpuml::Backend backend = gpuml::Backend::host();
  together(comm, [&] {
    if (o.init == "first") {
      if (n < o.n_clusters) throw gpuml::invalid_input("--init first needs at least n_clusters samples");
      p.init_centers = Eigen::Map<const gpuml::Matrix<T>>(base, o.n_clusters, d).template cast<double>();
    } else if (o.init == "k-means++") {
      p.init = o.init;  // seeded across ranks
    } else {
      p.init_centers = gpuml::read_matrix<double>(o.init);
    }
    if (o.device_per_rank) {
      const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
      const std::string device = local ? local : std::to_string(comm.rank());
      try {
        backend = gpuml::select_backend(device);
      } catch (const gpuml::error& e) {
        throw gpuml_program::usage_error("--device-per-rank: device " + device + ": " + e.what());
      }
    } else {
      backend = gpuml_program::backend_for(o.device);
    }
  });
  gpuml::mpi::KMeans<T> km(p, comm.get(), backend);
  const auto t0 = std::chrono::steady_clock::now();
  km.fit(mine);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Labels to rank 0, in rank order.
  const auto counts = comm.gather(last - first);
  std::vector<int> recv_counts, displs;
  int offset = 0;
  for (auto c : counts) {
    recv_counts.push_back(static_cast<int>(c));
    displs.push_back(offset);
    offset += static_cast<int>(c);
  }
  gpuml::Labels all(comm.rank() == 0 ? n : 0);
  MPI_Gatherv(km.labels().data(), static_cast<int>(last - first), MPI_INT32_T, all.data(), recv_counts.data(),
              displs.data(), MPI_INT32_T, 0, comm.get());
  // Rank 0 writes; every rank learns whether it could.
  together(comm, [&] {
    if (comm.rank() != 0) return;
    outputs.set("--labels-out", [&](const std::string& path) { gpuml::write_matrix(path, all); });
    outputs.set("--centers-out", [&](const std::string& path) { gpuml::write_matrix(path, km.cluster_centers()); });
    outputs.commit();
  });
  if (comm.rank() != 0) return 0;
  if (o.json) {
    nlohmann::json j{{"program", "gpuml-kmeans-mpi"}, {"ranks", comm.size()}, {"n", n}, {"d", d},
                     {"k", o.n_clusters}, {"n_iter", km.n_iter()}, {"inertia", km.inertia()},
                     {"fit_seconds", seconds}, {"ms_per_iter", 1e3 * km.iteration_seconds() / std::max(1, km.n_iter())},
                     {"backend_rank0", gpuml::describe(backend)},
                     {"labels_fnv", gpuml_program::fingerprint(all.data(), static_cast<std::size_t>(all.size()) * sizeof(all[0]))},
                     {"centers_fnv", gpuml_program::fingerprint(km.cluster_centers().data(),
                                                                static_cast<std::size_t>(km.cluster_centers().size()) *
                                                                    sizeof(km.cluster_centers()(0, 0)))}};
    std::printf("%s\n", j.dump().c_str());
  } else if (!outputs.to_stdout()) {
    std::printf("ranks: %d, n=%lld d=%lld k=%d\nn_iter: %d\ninertia: %.10g\nfit: %.3f s\n", comm.size(),
                static_cast<long long>(n), static_cast<long long>(d), o.n_clusters, km.n_iter(), km.inertia(), seconds);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    const gpuml::mpi::Communicator comm;
    Options o;
    CLI::App app{"Distributed k-means over MPI: each rank fits its range of rows of one memory-mapped .npy file."};
    app.add_option("--input", o.input, "the data: a C-order float32 or float64 .npy file (n x d)")->required();
    app.add_option("--n-clusters", o.n_clusters, "k (default 127)")->check(gpuml_program::at_least(1));
    app.add_option("--init", o.init,
                   "first (the first n_clusters rows) | k-means++ (greedy, across ranks) | PATH to initial centers "
                   "(.npy/.csv)");
    app.add_option("--n-init", o.n_init, "k-means++ runs, the best kept (default 1)")->check(CLI::NonNegativeNumber);
    app.add_option("--seed", o.random_state, "random_state of k-means++ (default 0)");
    app.add_option("--max-iter", o.max_iter, "maximum Lloyd iterations (default 100)")
        ->check(gpuml_program::at_least(1));
    app.add_option("--tol", o.tol, "relative tolerance (default 0: until the labels stop changing or max-iter)")
        ->check(gpuml_program::at_least(0));
    app.add_option("--device", o.device, "each rank's backend (default GPUML_DEVICE, else auto)");
    app.add_flag("--device-per-rank", o.device_per_rank, "use Vulkan device number (local rank) on each rank");
    app.add_option("--labels-out", o.labels_out, "rank 0 writes every sample's label here (.npy/.csv; - for CSV on stdout)");
    app.add_option("--centers-out", o.centers_out, "rank 0 writes the centers here (.npy/.csv; - for CSV on stdout)");
    app.add_flag("--json", o.json, "rank 0 prints one JSON object");
    app.add_flag("--verbose", o.verbose, "scikit-learn's verbose lines, from rank 0");
    gpuml_program::add_version(app, "gpuml-kmeans-mpi");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      // --help and --version exit 0 and a usage error 2, as the other programs do; rank 0 alone prints.
      const int rc = comm.rank() == 0 ? app.exit(e) : e.get_exit_code();
      MPI_Finalize();
      return rc == 0 ? 0 : 2;
    }
    try {
      // Outputs first (rank 0 writes them): a bad path ends every rank before the data is read.
      gpuml_program::Outputs outputs;
      together(comm, [&] {
        if (comm.rank() != 0) return;
        outputs.add("--labels-out", o.labels_out);
        outputs.add("--centers-out", o.centers_out);
        if (outputs.to_stdout() && o.json)
          throw gpuml_program::usage_error("--json and an output to stdout (-) exclude each other");
      });
      gpuml::NpyHeader h;
      std::optional<MappedFile> file;
      together(comm, [&] {
        h = gpuml::read_npy_header(o.input);
        if (h.ndim != 2 || h.fortran_order || (h.dtype != gpuml::NpyDtype::f4 && h.dtype != gpuml::NpyDtype::f8))
          throw gpuml::invalid_input(o.input + ": needs a 2-D C-order float32 or float64 array");
        file.emplace(o.input);
        const std::uint64_t item = h.dtype == gpuml::NpyDtype::f4 ? 4 : 8;
        if (file->size() < h.data_offset + std::uint64_t(h.rows) * std::uint64_t(h.cols) * item)
          throw gpuml::invalid_input(o.input + ": shorter than its header says");
      });
      status = h.dtype == gpuml::NpyDtype::f4 ? run<float>(o, h, *file, outputs, comm)
                                              : run<double>(o, h, *file, outputs, comm);
    } catch (const gpuml_program::usage_error& e) {
      std::fflush(stdout);
      if (comm.rank() == 0) std::fprintf(stderr, "gpuml-kmeans-mpi: error: %s\n", e.what());
      status = 2;
    } catch (const std::exception& e) {
      std::fflush(stdout);
      if (comm.rank() == 0) std::fprintf(stderr, "gpuml-kmeans-mpi: error: %s\n", e.what());
      status = 1;
    }
  }
  MPI_Finalize();
  return status;
}
