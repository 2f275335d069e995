// The compiled mode's one library translation unit (core/compiled.hpp): the backend choice's functions, and
// KMeans, NearestNeighbors and the pairwise kernels instantiated for float and double.
#define GPUML_COMPILED_LIBRARY
#include <gpuml/estimators/kmeans_impl.hpp>
#include <gpuml/estimators/neighbors_impl.hpp>
#include <gpuml/gpuml.hpp>
#include <gpuml/metrics/pairwise_impl.hpp>
#include <gpuml/select.hpp>

#if !defined(GPUML_COMPILED)
#error "src/gpuml.cpp is built by the gpuml_compiled target, which defines GPUML_COMPILED"
#endif

namespace gpuml {

template class KMeans<float>;
template class KMeans<double>;
template class NearestNeighbors<float>;
template class NearestNeighbors<double>;

template Vector<float> row_sq_norms<float>(MatrixView<float>, const Backend&);
template Vector<double> row_sq_norms<double>(MatrixView<double>, const Backend&);
template Matrix<float> pairwise_sq_distances<float>(MatrixView<float>, MatrixView<float>, const Backend&);
template Matrix<double> pairwise_sq_distances<double>(MatrixView<double>, MatrixView<double>, const Backend&);

}  // namespace gpuml
