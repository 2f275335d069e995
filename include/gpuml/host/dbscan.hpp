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
  algorithms::RadiusResult<T> neighbourhoods(double eps) {
    const algorithms::SortedRows<T> sorted(X_, metric_);
    if (!sorted.sorted()) return radius_search<T>(X_, X_, eps, metric_, false, false);
    return algorithms::unsort_graph(radius_search<T>(sorted.rows, sorted.rows, eps, metric_, false, false, sorted.feature),
                                    sorted.order);
  }

  std::vector<std::int64_t> components(const algorithms::RadiusResult<T>& hood, const std::vector<std::uint8_t>& core) {
    return algorithms::union_find_roots(hood, core);
  }

 private:
  MatrixView<T> X_;
  Metric metric_;
};

}  // namespace gpuml::host
