// Distance metrics for neighbour search: scikit-learn's names and aliases, plus faiss's maximum inner product.
#pragma once

#include <gpuml/core/error.hpp>

#include <string>
#include <string_view>

namespace gpuml {

enum class Metric {
  euclidean,      ///< sqrt(sum (x - y)^2); aliases "l2"
  sqeuclidean,    ///< sum (x - y)^2
  manhattan,      ///< sum |x - y|; aliases "cityblock", "l1"
  cosine,         ///< 1 - <x, y> / (|x| |y|); a zero vector is at distance 1 from everything
  chebyshev,      ///< max |x - y|
  inner_product,  ///< maximum inner product search (faiss IndexFlatIP): the largest <x, y> are the neighbours
};

/// The canonical name of a metric (the one metric_name returns is always accepted by parse_metric).
inline const char* metric_name(Metric m) {
  switch (m) {
    case Metric::euclidean: return "euclidean";
    case Metric::sqeuclidean: return "sqeuclidean";
    case Metric::manhattan: return "manhattan";
    case Metric::cosine: return "cosine";
    case Metric::chebyshev: return "chebyshev";
    case Metric::inner_product: return "inner_product";
  }
  return "unknown";
}

/// Parses a metric name as scikit-learn spells it (case-sensitive, as sklearn is).
inline Metric parse_metric(std::string_view name) {
  if (name == "euclidean" || name == "l2") return Metric::euclidean;
  if (name == "sqeuclidean") return Metric::sqeuclidean;
  if (name == "manhattan" || name == "cityblock" || name == "l1") return Metric::manhattan;
  if (name == "cosine") return Metric::cosine;
  if (name == "chebyshev") return Metric::chebyshev;
  if (name == "inner_product") return Metric::inner_product;
  throw invalid_input("unknown metric '" + std::string(name) +
                      "'; valid metrics are euclidean (l2), sqeuclidean, manhattan (cityblock, l1), cosine, "
                      "chebyshev and inner_product");
}

/// True for metrics whose neighbours are the largest values rather than the smallest.
constexpr bool metric_is_similarity(Metric m) { return m == Metric::inner_product; }

}  // namespace gpuml
