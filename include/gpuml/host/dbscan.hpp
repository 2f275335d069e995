// Host engine for DBSCAN (algorithms/dbscan.hpp): every sample's eps-neighbourhood by the brute-force radius scan
// of host/radius.hpp, each sample itself included where its distance to itself is within eps (always, except a
// zero row under cosine, whose distance to everything is 1: as scikit-learn's radius_neighbors(X) decides).
#pragma once

#include <gpuml/algorithms/dbscan.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/host/radius.hpp>

namespace gpuml::host {

template <class T>
class DbscanEngine {
 public:
  DbscanEngine(MatrixView<T> X, Metric metric) : X_(X), metric_(metric) {}

  algorithms::RadiusResult<T> neighbourhoods(double eps) { return radius_search<T>(X_, X_, eps, metric_, false, false); }

 private:
  MatrixView<T> X_;
  Metric metric_;
};

}  // namespace gpuml::host
