// What a k-NN or radius search returns (KnnResult, RadiusResult, KnnSearchStats): the types NearestNeighbors names,
// apart from the search contract (algorithms/knn.hpp), so the compiled mode's consumers read only these.
#pragma once

#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>

#include <cstdint>
#include <vector>

namespace gpuml::algorithms {

/// What a search did on a device, returned with its result (kernels::knn_search fills it; a host search leaves it
/// as constructed: no device time, no passes).
struct KnnSearchStats {
  double device_ms = -1;  // GPU time of its kernels (timestamps; negative where the queue has none)
  std::uint64_t sample_rows = 0;  // database rows read by the bounding sample passes (0: none ran)
  // Bounding samples whose values were written whole and their k-th picked (instead of heaps): one per (block, batch).
  std::uint64_t dense_samples = 0;
  // (block, query batch) pairs finished from candidate lists, and those whose lists overflowed and were searched
  // again with heaps.
  std::uint64_t list_batches = 0, list_overflows = 0;
  std::uint64_t coop_passes = 0;  // list passes run on cooperative matrices (knn_filter_coop.comp)
  std::uint64_t database_blocks = 0;  // database blocks searched (more than one: streamed through, or split)
  // Selected pairs whose squared distances the device formed as the host's finish would (which then reads no
  // database row for them): float32 (squared) euclidean searches of one database block on devices with float64.
  std::uint64_t squared_on_device = 0;
  bool streamed = false;              // the database was uploaded for this search, block by block, not resident
  // Queries searched again with more candidates because the first selection could not settle their k-th neighbour
  // (counted once per extra search; the fields above describe the first search only).
  std::uint64_t boundary_queries = 0;

  /// Where the search's time went, in milliseconds. On the device (timestamps; negative where the queue has none):
  /// the queries' squared norms and float16 rows (load), the bounding pass over a sample (its values and their k-th
  /// per query, or heaps and their merge: sample), the bounding list pass over a larger sample and its gather (bound), the list or heap pass over the
  /// database (scan), the gather of its lists or the exact distances of its k best (gather), the results' copy back
  /// (read); zeros from a search that never ran on a device (device_ms then says -1). On the host (wall time, from
  /// when the search holds its workspace): plan, buffers, kernels and the database's float16 rows (setup), the
  /// queries packed into staging (pack), waiting for the device (wait), the running lists of successive blocks
  /// (merge), the exact values and order of the selected pairs and the rest (finish), the whole search (total).
  struct Phases {
    double load = 0, sample = 0, bound = 0, scan = 0, gather = 0, read = 0;
    double setup = 0, pack = 0, wait = 0, merge = 0, finish = 0, total = 0;
    void add(const Phases& o) {
      for (auto [a, b] : {std::pair{&load, o.load}, {&sample, o.sample}, {&bound, o.bound}, {&scan, o.scan},
                          {&gather, o.gather}, {&read, o.read}})
        add_device_ms(*a, b);
      setup += o.setup, pack += o.pack, wait += o.wait, merge += o.merge, finish += o.finish, total += o.total;
    }
  } ms;

  /// Adds another part's search (a shard's, searched at the same time): device times add where both have them.
  void add(const KnnSearchStats& other) {
    ms.add(other.ms);
    add_device_ms(device_ms, other.device_ms);
    sample_rows += other.sample_rows;
    dense_samples += other.dense_samples;
    list_batches += other.list_batches;
    list_overflows += other.list_overflows;
    coop_passes += other.coop_passes;
    database_blocks += other.database_blocks;
    squared_on_device += other.squared_on_device;
    streamed = streamed || other.streamed;
    boundary_queries += other.boundary_queries;
  }
};

/// The result of a k-NN search: what NearestNeighbors::kneighbors returns.
template <class T>
struct KnnResult {
  Matrix<T> distances;  ///< n_queries x k
  IndexMatrix indices;  ///< n_queries x k, rows of the database
  KnnSearchStats stats{};  ///< what the search did on a device (summed over the parts of a sharded search)
};

/// The result of a radius search: ragged neighbour lists as compressed rows. The neighbours of query i are entries
/// offsets[i] to offsets[i + 1] of indices and distances (scikit-learn returns them as arrays of arrays).
template <class T>
struct RadiusResult {
  std::vector<std::int64_t> offsets;  ///< n_queries + 1 entries, offsets[0] = 0
  std::vector<std::int64_t> indices;
  std::vector<T> distances;
};

}  // namespace gpuml::algorithms
