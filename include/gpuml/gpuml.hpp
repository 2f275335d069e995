// gpuml: scikit-learn's GPU-worthy estimators on any Vulkan device, with an Eigen host fallback.
// This single header brings in the whole public API.
#pragma once

#include <gpuml/core/backend.hpp>
#include <gpuml/core/checks.hpp>
#include <gpuml/core/config.hpp>
#include <gpuml/core/error.hpp>
#include <gpuml/core/iteration.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/core/parallel.hpp>
#include <gpuml/core/metric.hpp>
#include <gpuml/core/warnings.hpp>
#include <gpuml/estimators/dbscan.hpp>
#include <gpuml/estimators/kmeans.hpp>
#include <gpuml/estimators/neighbors.hpp>
#include <gpuml/io/io.hpp>
#include <gpuml/metrics/pairwise.hpp>
#include <gpuml/select.hpp>
#include <gpuml/version.hpp>
