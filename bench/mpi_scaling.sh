#!/usr/bin/env bash
# Distributed KMeans scaling: the same memory-mapped .npy file fitted by gpuml-kmeans (one process) and by
# gpuml-kmeans-mpi on 1, 2, 4 ... ranks (each rank its row range), seed-shaped (d = 14, k = 127, init = the first
# 127 samples, tol 0, a fixed number of iterations). Prints one Markdown table: ms per Lloyd iteration (the
# iterations alone: E-steps, the per-iteration collectives and M-steps), speed-up against one rank, and inertia.
#
#   bench/mpi_scaling.sh --bin build/examples --n 2000000 --device host --ranks "1 2 4"
#   bench/mpi_scaling.sh --bin build/examples --mpi-bin DIR --n 50000000 --device gpu --ranks "1 2 4" --iters 20
#
# --mpi-bin: where gpuml-kmeans-mpi is (default --bin); mpirun from PATH. Ranks are not bound to cores (the
# host backend's threads share the machine); OMP/Eigen threads follow the ranks' own defaults.
set -euo pipefail
bin=build/examples mpi_bin= n=2000000 device=host ranks="1 2 4" iters=20 work=
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --mpi-bin) mpi_bin=$2; shift 2 ;;
    --n) n=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
mpi_bin=${mpi_bin:-$bin}
work=${work:-$(mktemp -d)}
mkdir -p "$work"
x="$work/X_$n.npy"
[ -f "$x" ] || "$bin/gpuml-kmeans" --n-samples "$n" --write-synthetic "$x" >/dev/null
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
common=(--input "$x" --init first --n-clusters 127 --max-iter "$iters" --tol 0 --device "$device" --json)
"$bin/gpuml-kmeans" "${common[@]}" >"$work/one.json"
echo "n = $n, d = 14, k = 127, $iters iterations, backend $device, $(nproc) cores"
echo
echo "| run | ms / iteration | speed-up | inertia |"
echo "|---|---:|---:|---:|"
printf "| gpuml-kmeans (one process) | %.2f | | %s |\n" "$(field "$work/one.json" ms_per_iter)" "$(field "$work/one.json" inertia)"
base=
for np in $ranks; do
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$mpi_bin/gpuml-kmeans-mpi" "${common[@]}" \
    >"$work/mpi$np.json"
  ms=$(field "$work/mpi$np.json" ms_per_iter)
  base=${base:-$ms}
  printf "| %d rank(s) | %.2f | %.2f | %s |\n" "$np" "$ms" "$(python3 -c "print($base / $ms)")" \
    "$(field "$work/mpi$np.json" inertia)"
done
