#!/usr/bin/env bash
# Compile time of a consumer's translation unit, gpuml header-only and in the compiled mode (-DGPUML_COMPILED, what
# gpuml::compiled defines), against one that includes <Eigen/Dense> alone: same compiler and flags, interleaved runs
# (so load on the machine hits all alike), the median of each, wall and CPU (user + system) seconds, and the ratios.
#
#   bench/tu_time.sh [BUILD_DIR]     (default build/: its generated/ holds the shader headers header-only mode reads)
#   RUNS=5 CXX=clang++ FLAGS="-O2" bench/tu_time.sh
#
# Two gpuml translation units in each mode: one that includes <gpuml/gpuml.hpp> alone, and a consumer that also fits
# KMeans and NearestNeighbors and calls predict and kneighbors.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
cxx=${CXX:-g++}
flags=${FLAGS:--O2}
runs=${RUNS:-3}
[ -d "$build/generated/gpuml/shaders" ] || { echo "no generated shader headers in $build/generated: build gpuml first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

printf '#include <Eigen/Dense>\nint main() { return 0; }\n' >"$work/eigen.cpp"
printf '#include <gpuml/gpuml.hpp>\nint main() { return 0; }\n' >"$work/include.cpp"
cat >"$work/consumer.cpp" <<'CPP'
#include <gpuml/gpuml.hpp>
int main() {
  gpuml::Matrix<float> X(64, 2);
  for (Eigen::Index i = 0; i < X.rows(); ++i) X.row(i) << float(i % 8), float(i / 8);
  gpuml::KMeansParams params;
  params.n_clusters = 4;
  gpuml::KMeans<float> kmeans(params);
  const gpuml::Labels labels = kmeans.fit(X).predict(X);
  gpuml::NearestNeighbors<float> neighbors;
  const gpuml::KnnResult<float> found = neighbors.fit(X).kneighbors(X, 3);
  return labels.size() == X.rows() && found.indices(0, 0) == 0 ? 0 : 1;
}
CPP

names=(eigen include-header-only include-compiled consumer-header-only consumer-compiled)
sources=(eigen include include consumer consumer)
defines=("" "" -DGPUML_COMPILED "" -DGPUML_COMPILED)
labels=("<Eigen/Dense> only" "<gpuml/gpuml.hpp> only, header-only" "<gpuml/gpuml.hpp> only, compiled mode"
        "consumer (KMeans, NearestNeighbors), header-only" "consumer (KMeans, NearestNeighbors), compiled mode")

compile() {  # prints "wall cpu" in seconds (the shell's own timing of the compiler and its children)
  local i=$1 TIMEFORMAT='%R %U %S'
  { time "$cxx" -std=c++20 $flags ${defines[$i]} -I"$root/include" -I"$build/generated" -I/usr/include/eigen3 \
      -c "$work/${sources[$i]}.cpp" -o "$work/out.o"; } 2>"$work/time"
  tail -n1 "$work/time" | awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for i in "${!names[@]}"; do compile "$i" >/dev/null; done  # warm the file cache and check every unit compiles
for ((r = 0; r < runs; ++r)); do
  for i in "${!names[@]}"; do compile "$i" >>"$work/${names[$i]}.samples"; done
done

echo "$cxx -std=c++20 $flags, median of $runs interleaved runs, $(nproc) cores"
printf '%-52s %8s %6s %8s %6s\n' "translation unit" "wall s" "ratio" "CPU s" "ratio"
base_wall=$(cut -d' ' -f1 "$work/eigen.samples" | median)
base_cpu=$(cut -d' ' -f2 "$work/eigen.samples" | median)
for i in "${!names[@]}"; do
  wall=$(cut -d' ' -f1 "$work/${names[$i]}.samples" | median)
  cpu=$(cut -d' ' -f2 "$work/${names[$i]}.samples" | median)
  printf '%-52s %8.2f %5.2fx %8.2f %5.2fx\n' "${labels[$i]}" "$wall" "$(echo "$wall / $base_wall" | bc -l)" \
    "$cpu" "$(echo "$cpu / $base_cpu" | bc -l)"
done
