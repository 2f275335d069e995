#!/usr/bin/env bash
# gpuml-kmeans-mpi against gpuml-kmeans on one memory-mapped .npy file: one rank gives the single-process labels
# bit for bit; two and three ranks the same n_iter and an inertia within float32 rounding of the partial sums;
# a bad input ends every rank with an error (exit status 1), not a hang.
set -euo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe)
"$bin/gpuml-kmeans" --n-samples 30011 --write-synthetic "$work/X.npy" >/dev/null
"$bin/gpuml-kmeans" --input "$work/X.npy" --init first --n-clusters 127 --max-iter 20 --tol 0 --device host \
  --labels-out "$work/one.npy" --json >"$work/one.json"
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
for np in 1 2 3; do
  "${mpirun[@]}" -np $np "$bin/gpuml-kmeans-mpi" --input "$work/X.npy" --n-clusters 127 --max-iter 20 --device host \
    --labels-out "$work/l$np.npy" --json >"$work/l$np.json"
  [ "$(field "$work/l$np.json" n_iter)" = "$(field "$work/one.json" n_iter)" ] || { echo "n_iter differs with $np ranks"; exit 1; }
  python3 - "$work/one.json" "$work/l$np.json" "$np" <<'PY'
import json, sys
one, many, np = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
rel = abs(one["inertia"] - many["inertia"]) / one["inertia"]
limit = 0.0 if np == 1 else 1e-4
assert rel <= limit, f"{np} ranks: inertia {many['inertia']} against {one['inertia']} (relative {rel:.2e})"
print(f"{np} rank(s): inertia relative difference {rel:.2e}")
PY
done
cmp "$work/one.npy" "$work/l1.npy"
echo "one rank: labels identical to gpuml-kmeans"
# k-means++ seeded across ranks: the seeds one process draws, so the same n_iter and (one rank) the same labels.
"$bin/gpuml-kmeans" --input "$work/X.npy" --init k-means++ --seed 7 --n-clusters 31 --max-iter 20 --tol 0 --device host \
  --labels-out "$work/pp_one.npy" --json >"$work/pp_one.json"
for np in 1 3; do
  "${mpirun[@]}" -np $np "$bin/gpuml-kmeans-mpi" --input "$work/X.npy" --init k-means++ --seed 7 --n-clusters 31 \
    --max-iter 20 --device host --labels-out "$work/pp$np.npy" --json >"$work/pp$np.json"
  [ "$(field "$work/pp$np.json" n_iter)" = "$(field "$work/pp_one.json" n_iter)" ] || { echo "k-means++: n_iter differs with $np ranks"; exit 1; }
  python3 - "$work/pp_one.json" "$work/pp$np.json" "$np" <<'PY'
import json, sys
one, many, np = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
rel = abs(one["inertia"] - many["inertia"]) / one["inertia"]
assert rel <= (0.0 if np == 1 else 1e-4), f"k-means++, {np} ranks: inertia {many['inertia']} against {one['inertia']}"
print(f"k-means++, {np} rank(s): inertia relative difference {rel:.2e}")
PY
done
cmp "$work/pp_one.npy" "$work/pp1.npy"
echo "k-means++, one rank: labels identical to gpuml-kmeans"
if "${mpirun[@]}" -np 2 "$bin/gpuml-kmeans-mpi" --input "$work/missing.npy" 2>"$work/err.txt"; then
  echo "a missing input did not fail"; exit 1
fi
grep -q "rank 0 of 2" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
echo "a missing input ends both ranks: $(head -n1 "$work/err.txt")"
# Like the other programs: --version and --help exit 0 without an input, a usage error exits 2.
"${mpirun[@]}" -np 2 "$bin/gpuml-kmeans-mpi" --version | grep -q "^gpuml-kmeans-mpi " || { echo "--version"; exit 1; }
"${mpirun[@]}" -np 1 "$bin/gpuml-kmeans-mpi" --help | grep -q -- "--input" || { echo "--help"; exit 1; }
set +e
"${mpirun[@]}" -np 1 "$bin/gpuml-kmeans-mpi" 2>/dev/null
status=$?
set -e
[ "$status" -eq 2 ] || { echo "a missing --input exited $status, not 2"; exit 1; }
echo "--version, --help and a usage error exit 0, 0 and 2"
