#!/usr/bin/env bash
# Distributed KMeans scaling: the same memory-mapped .npy file fitted by gpuml-kmeans (one process) and by
# gpuml-kmeans-mpi on 1, 2, 4 ... ranks (each rank its row range), seed-shaped (d = 14, k = 127, init = the first
# 127 samples, tol 0, a fixed number of iterations). Prints one Markdown table: ms per Lloyd iteration (the
# iterations alone: E-steps, the per-iteration collectives and M-steps), speed-up against one rank, and inertia.
#
#   bench/mpi_scaling.sh --bin build/examples --n 2000000 --device host --ranks "1 2 4"
#   bench/mpi_scaling.sh --bin build/examples --mpi-bin DIR --n 50000000 --device gpu --ranks "1 2 4" --iters 20
#
# With --gpus "1 2 4" it compares, for each count g, g GPUs in one process (gpuml-kmeans --device 0,...,g-1, the
# best of --repeat fits after a warm-up fit) with g ranks of a GPU each (gpuml-kmeans-mpi --device-per-rank, one
# fit per process: its whole fit includes reading the file): ms per iteration, speed-up and whole fit against the
# first count's process, and whether labels, centers and inertia are its own, bit for bit (the run fails where not):
#
#   bench/mpi_scaling.sh --bin build/examples --n 200000000 --iters 50 --gpus "1 2 4"
#
# --mpi-bin: where gpuml-kmeans-mpi is (default --bin); mpirun from PATH, or $MPIRUN. Ranks are not bound to cores
# (the host backend's threads share the machine); OMP/Eigen threads follow the ranks' own defaults.
set -euo pipefail
bin=build/examples mpi_bin= n=2000000 device=host ranks="1 2 4" iters=20 work= gpus= repeat=3
mpirun=${MPIRUN:-mpirun}
while [ $# -gt 0 ]; do
  case $1 in
    --gpus) gpus=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
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
launch() { "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np "$@"; }
if [ -n "$gpus" ]; then
  echo "n = $n, d = 14, k = 127, $iters iterations, $(nproc) cores; in one process: best of $repeat fits after a warm-up"
  echo
  echo "| GPUs | one process: ms / it | speed-up | whole fit | ranks: ms / it | speed-up | whole fit (file read) | labels / centers |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---|"
  first=$(echo $gpus | cut -d' ' -f1)
  for g in $gpus; do
    list=$(seq -s, 0 $((g - 1)))
    "$bin/gpuml-kmeans" --input "$x" --init first --n-clusters 127 --max-iter "$iters" --tol 0 --device "$list" \
      --warmup --repeat "$repeat" --no-progress --json >"$work/gpus$g.json"
    launch "$g" "$mpi_bin/gpuml-kmeans-mpi" --input "$x" --init first --n-clusters 127 --max-iter "$iters" --tol 0 \
      --device-per-rank --json >"$work/ranks$g.json"
    python3 - "$work/gpus$g.json" "$work/ranks$g.json" "$g" "$work/gpus$first.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
one = json.load(open(sys.argv[4]))  # the first count's process: the reference
key = lambda j: (j["labels_fnv"], j["centers_fnv"], j["inertia"], j["n_iter"])
same = key(a) == key(one) and key(b) == key(one)
print("| %s | %.3f | %.2fx | %.3f s (%.2f) | %.3f | %.2fx | %.3f s | %s / %s%s |" % (
    sys.argv[3], a["ms_per_iter"], one["ms_per_iter"] / a["ms_per_iter"], a["fit_seconds"],
    a["fit_seconds"] / one["fit_seconds"], b["ms_per_iter"], one["ms_per_iter"] / b["ms_per_iter"], b["fit_seconds"],
    a["labels_fnv"], a["centers_fnv"], "" if same else " **differs from the first count's fit**"))
sys.exit(0 if same else 1)
PY
  done
  exit 0
fi
common=(--input "$x" --init first --n-clusters 127 --max-iter "$iters" --tol 0 --device "$device" --json)
"$bin/gpuml-kmeans" "${common[@]}" >"$work/one.json"
echo "n = $n, d = 14, k = 127, $iters iterations, backend $device, $(nproc) cores"
echo
echo "| run | ms / iteration | speed-up | inertia |"
echo "|---|---:|---:|---:|"
printf "| gpuml-kmeans (one process) | %.2f | | %s |\n" "$(field "$work/one.json" ms_per_iter)" "$(field "$work/one.json" inertia)"
base=
for np in $ranks; do
  launch "$np" "$mpi_bin/gpuml-kmeans-mpi" "${common[@]}" >"$work/mpi$np.json"
  ms=$(field "$work/mpi$np.json" ms_per_iter)
  base=${base:-$ms}
  printf "| %d rank(s) | %.2f | %.2f | %s |\n" "$np" "$ms" "$(python3 -c "print($base / $ms)")" \
    "$(field "$work/mpi$np.json" inertia)"
done
