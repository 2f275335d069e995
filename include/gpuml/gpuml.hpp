// gpuml: scikit-learn's GPU-worthy estimators on any Vulkan device, with an Eigen host fallback.
// This single header brings in the whole public API. In the compiled mode (core/compiled.hpp) it declares KMeans,
// the neighbour estimators, the pairwise kernels and the backend choice, all defined in the library; DBSCAN
// (estimators/dbscan.hpp), files (io/io.hpp) and the Vulkan side of the backend choice (select.hpp: run_on,
// external_backend) stay header-only there, each included where it is used.
#pragma once

#include <gpuml/backend_choice.hpp>
#include <gpuml/core/backend.hpp>
#include <gpuml/core/checks.hpp>
#include <gpuml/core/compiled.hpp>
#include <gpuml/core/config.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/core/warnings.hpp>
#include <gpuml/estimators/kmeans.hpp>
#include <gpuml/estimators/neighbors.hpp>
#include <gpuml/metrics/pairwise.hpp>
#include <gpuml/version.hpp>

#if !defined(GPUML_COMPILED)
#include <gpuml/estimators/dbscan.hpp>
#include <gpuml/io/io.hpp>
#include <gpuml/select.hpp>
#endif
