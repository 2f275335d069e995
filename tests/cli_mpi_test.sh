#!/usr/bin/env bash
# gpuml-kmeans-mpi as a user meets it, alone and under mpirun with two ranks: --version and --help exit 0 without an
# input and print once, usage errors exit 2 and run-time errors 1 on every rank, each with a message naming the
# problem, no rank left hanging (each command has a time limit) and no MPI abort or missing-finalize report.
# Usage: cli_mpi_test.sh BIN_DIR [MPIEXEC [NUMPROC_FLAG]]. Runs on the host backend.
set -u
bin=$(cd "$1" && pwd)
mpiexec=${2:-mpirun}
np_flag=${3:--np}
export GPUML_DEVICE=host
# Open MPI in CI containers (root) and on machines with fewer cores than ranks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A small float32 .npy (101 x 3), written without numpy.
python3 - <<'PY'
import random, struct
n, d = 101, 3
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (n, d)
header += " " * (63 - (10 + len(header)) % 64) + "\n"
random.seed(5)
with open("X.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%df" % (n * d), *[random.gauss(0, 1) for _ in range(n * d)]))
PY

P="$bin/gpuml-kmeans-mpi"
version=$("$P" --version 2>/dev/null | awk '{print $2}')

# expect LAUNCH STATUS NEEDLE ARGS...: the program, launched alone or by mpirun on 2 ranks, exits with STATUS within
# a minute, and stdout or stderr contains NEEDLE.
expect() {
  local launch=$1 want=$2 needle=$3
  shift 3
  local cmd=("$P")
  [ "$launch" = alone ] || cmd=("$mpiexec" "$np_flag" 2 "$P")
  timeout 60 "${cmd[@]}" "$@" >out.txt 2>err.txt
  local got=$?
  [ "$got" -ne 124 ] || { fail "$launch $*: still running after a minute"; return; }
  [ "$got" -eq "$want" ] || fail "$launch $*: exited $got, expected $want: $(head -c 300 err.txt)"
  grep -qF -- "$needle" out.txt err.txt || fail "$launch $*: no '$needle' in: $(head -c 300 out.txt err.txt)"
  ! grep -qiE "MPI_ABORT|finalize|segmentation|core dumped" err.txt || fail "$launch $*: MPI noise: $(head -c 300 err.txt)"
}

# once FILE NEEDLE: NEEDLE is on exactly one line of FILE (rank 0 alone prints).
once() {
  local n
  n=$(grep -cF -- "$2" "$1")
  [ "$n" -eq 1 ] || fail "'$2' printed $n times, expected once"
}

for launch in alone mpirun; do
  expect $launch 0 "gpuml-kmeans-mpi $version" --version
  once out.txt "gpuml-kmeans-mpi"
  [ "$(cat out.txt)" = "gpuml-kmeans-mpi $version" ] || fail "$launch --version printed: $(head -c 200 out.txt)"
  expect $launch 0 "Usage" --help
  once out.txt "Usage"

  # Usage errors: 2, naming the flag, printed once.
  expect $launch 2 "--input is required"
  once err.txt "--input is required"
  expect $launch 2 "--n-clusters: must be >= 1" --input X.npy --n-clusters 0
  expect $launch 2 "--n-clusters" --input X.npy --n-clusters abc
  expect $launch 2 "--max-iter: must be >= 1" --input X.npy --max-iter 0
  expect $launch 2 "--tol: must be >= 0" --input X.npy --tol -1
  expect $launch 2 "--no-such-flag" --input X.npy --no-such-flag
  expect $launch 2 "--labels-out out.txt: expected a .npy or .csv extension" --input X.npy --labels-out out.txt
  expect $launch 2 "the directory missing-dir does not exist" --input X.npy --centers-out missing-dir/c.npy
  expect $launch 2 "--device nosuch-device" --input X.npy --n-clusters 3 --device nosuch-device
  once err.txt "nosuch-device"

  # Run-time errors: 1, naming the file and the problem, printed once.
  expect $launch 1 "file not found" --input missing.npy
  once err.txt "file not found"
  expect $launch 1 "init.npy" --input X.npy --n-clusters 3 --init init.npy

  # A fit: 0, the summary once, the outputs written.
  expect $launch 0 "n_iter" --input X.npy --n-clusters 3 --max-iter 10 --labels-out l.npy --centers-out c.csv
  once out.txt "n_iter"
  [ -s l.npy ] && [ -s c.csv ] || fail "$launch: the outputs were not written"
  rm -f l.npy c.csv
  expect $launch 0 "," --input X.npy --n-clusters 3 --max-iter 10 --centers-out -
  [ "$(wc -l <out.txt)" -eq 3 ] || fail "$launch --centers-out -: $(wc -l <out.txt) lines on stdout, expected 3"
done

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "gpuml-kmeans-mpi: version, help, usage and run-time errors alike alone and on 2 ranks"
