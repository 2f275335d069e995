// Host engine for DBSCAN (algorithms/dbscan.hpp): every sample's eps-neighbourhood by the brute-force radius scan
// of host/radius.hpp, each sample itself included where its distance to itself is within eps (always, except a
// zero row under cosine, whose distance to everything is 1: as scikit-learn's radius_neighbors(X) decides); the
// components by the algorithm layer's union-find.
#pragma once

#include <gpuml/algorithms/dbscan.hpp>
#include <gpuml/algorithms/radius.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/host/radius.hpp>

#include <cstdint>
#include <vector>

namespace gpuml::host {

template <class T>
class DbscanEngine {
 public:
  DbscanEngine(MatrixView<T> X, Metric metric) : X_(X), metric_(metric) {}

  /// Over the rows sorted by their widest feature (each sample scans its window), mapped back to X's order.
  void search(double eps, bool /*weighted*/) {
    const algorithms::SortedRows<T> sorted(X_, metric_);
    graph_.set(algorithms::sorted_self_graph<T>(sorted, X_,
                                                [&](MatrixView<T> rows, Eigen::Index feature) {
                                                  return radius_search<T>(rows, rows, eps, metric_, false, false, feature);
                                                }),
               X_.rows());
  }
  template <class W>
  std::vector<std::uint8_t> core_samples(std::int64_t min_samples, const W* sample_weight) const {
    return graph_.core_samples(min_samples, sample_weight);
  }
  std::vector<std::int64_t> components(const std::vector<std::uint8_t>& core) const { return graph_.components(core); }
  std::int64_t edges() const { return graph_.edges(); }

 private:
  MatrixView<T> X_;
  Metric metric_;
  algorithms::HostNeighbourhoods<T> graph_;
};

}  // namespace gpuml::host
