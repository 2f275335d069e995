// A program that uses gpuml as a dependency: built by the two consumer projects beside this file, header-only or
// against gpuml::compiled (the compiled mode, where DBSCAN stays header-only and is included on its own).
#include <gpuml/estimators/dbscan.hpp>
#include <gpuml/gpuml.hpp>

#include <cstdio>

#if defined(GPUML_COMPILED)
constexpr const char* kMode = "compiled";
#else
constexpr const char* kMode = "header-only";
#endif

int main() {
  gpuml::Matrix<float> X(3, 2), Y(2, 2);
  X << 0, 0, 1, 0, 0, 2;
  Y << 0, 0, 1, 1;
  const auto D = gpuml::pairwise_sq_distances<float>(X, Y);
  // Expected: [[0, 2], [1, 1], [4, 2]]
  bool ok = D(0, 0) == 0 && D(0, 1) == 2 && D(1, 0) == 1 && D(1, 1) == 1 && D(2, 0) == 4 && D(2, 1) == 2;
  // DBSCAN: samples 0 and 1 are 1 apart, sample 2 is 2 from sample 0; eps 1, min_samples 2.
  // Expected labels: [0, 0, -1], core samples [0, 1].
  gpuml::DBSCAN<float> dbscan(gpuml::DBSCANParams{}.set_eps(1.0).set_min_samples(2));
  const gpuml::Labels labels = dbscan.fit_predict(X);
  ok = ok && labels[0] == 0 && labels[1] == 0 && labels[2] == -1 && dbscan.core_sample_indices().size() == 2;
  // KMeans with two clusters: sample 2 alone, samples 0 and 1 together.
  gpuml::KMeansParams params;
  params.n_clusters = 2;
  params.n_init = 10;
  gpuml::KMeans<double> kmeans(params);
  const gpuml::Labels clusters = kmeans.fit_predict(X.cast<double>());
  ok = ok && clusters[0] == clusters[1] && clusters[0] != clusters[2];
  // The nearest other sample of each: 1, 0, 0.
  gpuml::NearestNeighbors<float> neighbors;
  const gpuml::IndexMatrix nearest = neighbors.fit(X).kneighbors(X, 2).indices;
  ok = ok && nearest(0, 1) == 1 && nearest(1, 1) == 0 && nearest(2, 1) == 0;
  std::printf("consumer (%s) on %s: %s\n", kMode, gpuml::describe(gpuml::default_backend()).c_str(),
              ok ? "OK" : "WRONG");
  return ok ? 0 : 1;
}
