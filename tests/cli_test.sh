#!/usr/bin/env bash
# The command-line programs as a user meets them: --version and --help, exit status 2 for usage errors and 1 for
# run-time errors with a message naming the problem, outputs checked before the work and never left half-written,
# CSV with other delimiters, headers and chosen columns, stdout output, and the predict mode.
# Usage: cli_test.sh BIN_DIR (holding gpuml-kmeans, gpuml-knn, gpuml-devices). Runs on the host backend.
set -u
bin=$(cd "$1" && pwd)
export GPUML_DEVICE=host
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect STATUS NEEDLE CMD...: the command exits with STATUS and its stderr contains NEEDLE.
expect() {
  local want=$1 needle=$2
  shift 2
  "$@" >out.txt 2>err.txt
  local got=$?
  [ "$got" -eq "$want" ] || fail "$* exited $got, expected $want: $(head -c 300 err.txt)"
  grep -qF -- "$needle" err.txt out.txt || fail "$*: no '$needle' in: $(head -c 300 err.txt)"
}

K="$bin/gpuml-kmeans"
N="$bin/gpuml-knn"
D="$bin/gpuml-devices"
S="$bin/gpuml-dbscan"
for p in "$K" "$N" "$D" "$S"; do
  expect 0 "0." "$p" --version
  expect 0 "Usage" "$p" --help
done

printf 'sepal_length;sepal_width;species\n5.1;3.5;setosa\n7.0;3.2;versicolor\n6.3;3.3;virginica\n4.9;3.0;setosa\n' > iris.csv
printf '1.0,2.O,3.0\n4,5,6\n7,8,9\n' > typo.csv
printf '1,2\n3,4\n5\n' > ragged.csv
printf '0,1\n2,nan\n' > nan.csv
printf '' > empty.csv
printf '\x93NUMPY\x01\x00' > truncated.npy

# Usage errors: 2, naming the flag.
expect 2 "--tol: must be >= 0" "$K" --tol -1
expect 2 "--n-clusters: must be >= 1" "$K" --n-clusters 0
expect 2 "--max-iter: must be >= 1" "$K" --max-iter 0
expect 2 "--k: must be >= 1" "$N" --k 0
expect 2 "--n-init must be 'auto' or a positive integer" "$K" --n-samples 50 --n-clusters 3 --n-init x
expect 2 "--device nosuch-device: no Vulkan device matches" "$K" --device nosuch-device --n-samples 50
expect 2 "--labels-out out.txt: expected a .npy or .csv extension" "$K" --n-samples 50 --labels-out out.txt
expect 2 "the directory missing-dir does not exist" "$K" --n-samples 50 --labels-out missing-dir/l.npy
expect 2 "--metric" "$N" --metric nosuch --n-database 20
expect 2 "--delimiter must be one character" "$K" --input iris.csv --delimiter ';;'
expect 2 "--queries needs --database" "$N" --queries x.npy
expect 2 "--distances-out needs --predict-with" "$K" --n-samples 50 --distances-out d.npy

# Run-time errors: 1, naming the file and the problem.
expect 1 "file not found" "$K" --input missing.npy
expect 1 "line 1, field 2: '2.O' is not a number" "$K" --input typo.csv --n-clusters 2
expect 1 "line 3 has 1 fields" "$K" --input ragged.csv --n-clusters 2
expect 1 "NaN or infinity" "$K" --input nan.csv --n-clusters 1
expect 1 "is empty" "$K" --input empty.csv --n-clusters 1
expect 1 "truncated.npy" "$K" --input truncated.npy
expect 1 "line 2, field 3: 'setosa'" "$K" --input iris.csv --delimiter ';' --n-clusters 2
expect 1 "n_samples=4 should be >= n_clusters=9" "$K" --input iris.csv --delimiter ';' --columns 0,1 --n-clusters 9

# Nothing is written when a run fails: the labels are not left behind by a failure after them.
"$K" --input iris.csv --delimiter ';' --columns sepal_length,sepal_width --n-clusters 9 --labels-out l.npy \
  --centers-out c.npy >/dev/null 2>&1
[ ! -e l.npy ] && [ ! -e c.npy ] || fail "a failed fit left output files"
ls -a | grep -q '\.part-' && fail "a failed run left a temporary file"

# Outputs: files and stdout, then the predict mode on the saved centers.
"$K" --input iris.csv --delimiter ';' --columns sepal_length,sepal_width --n-clusters 2 --init first \
  --labels-out l.npy --centers-out c.csv >/dev/null 2>err.txt || fail "fit with outputs: $(cat err.txt)"
[ -s l.npy ] && [ -s c.csv ] || fail "outputs missing"
"$K" --input iris.csv --delimiter ';' --columns 0,1 --n-clusters 2 --init first --labels-out - > stdout.txt 2>err.txt \
  || fail "labels to stdout: $(cat err.txt)"
[ "$(wc -l < stdout.txt)" -eq 4 ] || fail "labels on stdout: $(cat stdout.txt)"
"$K" --input iris.csv --delimiter ';' --columns 0,1 --predict-with c.csv --labels-out - --distances-out d.csv \
  > predicted.txt 2>err.txt || fail "predict mode: $(cat err.txt)"
cmp -s stdout.txt predicted.txt || fail "predict-with gave other labels than the fit: $(cat predicted.txt)"
[ "$(head -n1 d.csv | tr ',' '\n' | wc -l)" -eq 2 ] || fail "distances to 2 centers expected: $(head -n1 d.csv)"
expect 1 "cluster_centers" "$K" --input iris.csv --delimiter ';' --columns 0,1 --predict-with nan.csv --labels-out p.npy
"$N" --database iris.csv --delimiter ';' --columns 0,1 --k 2 --indices-out - > knn.txt 2>err.txt || fail "knn: $(cat err.txt)"
[ "$(wc -l < knn.txt)" -eq 4 ] || fail "k-NN indices on stdout: $(cat knn.txt)"

# Outputs through symbolic links and to devices: a link's target gets the data and the link stays a link (one into
# a missing directory is a usage error); a device that fails the write is a run-time error naming it, and one
# without a .npy or .csv extension gets CSV.
mkdir -p store links
ln -s ../store/labels.npy links/labels.npy
"$K" --input iris.csv --delimiter ';' --columns 0,1 --n-clusters 2 --init first --labels-out links/labels.npy \
  >/dev/null 2>err.txt || fail "labels through a link: $(cat err.txt)"
[ -L links/labels.npy ] || fail "the link links/labels.npy was replaced"
[ -s store/labels.npy ] && cmp -s l.npy store/labels.npy || fail "the link's target store/labels.npy has not the labels"
ls -a links store | grep -q '\.part-' && fail "a run through a link left a temporary file"
ln -s nowhere/labels.npy links/lost.npy
expect 2 "the directory links/nowhere (where the link leads) does not exist" "$K" --n-samples 50 --labels-out links/lost.npy
if [ -e /dev/full ]; then
  expect 1 "--labels-out /dev/full: " "$K" --input iris.csv --delimiter ';' --columns 0,1 --n-clusters 2 --labels-out /dev/full
  grep -qF "failed" err.txt || fail "/dev/full: no write failure reported: $(cat err.txt)"
  ln -s /dev/full full.npy
  expect 1 "--labels-out full.npy: " "$K" --input iris.csv --delimiter ';' --columns 0,1 --n-clusters 2 --labels-out full.npy
  [ -L full.npy ] || fail "the link full.npy to /dev/full was replaced"
  [ -c /dev/full ] || fail "/dev/full was replaced"
fi
"$K" --input iris.csv --delimiter ';' --columns 0,1 --n-clusters 2 --init first --labels-out /dev/stdout 2>err.txt \
  | cat > device.txt || fail "labels to /dev/stdout: $(cat err.txt)"
grep -xE '[0-9]+' device.txt | cmp -s stdout.txt - || fail "labels to /dev/stdout (a pipe) are not those of --labels-out -: $(cat device.txt)"

# gpuml-dbscan: usage errors, a small fit whose labels go to stdout, the JSON summary, and its progress bar.
expect 2 "--eps: must be > 0" "$S" --eps 0
expect 2 "--min-samples: must be >= 1" "$S" --min-samples 0
expect 2 "--metric: DBSCAN: metric 'minkowski' is supported with p = 1, 2 or inf" "$S" --metric minkowski --p 3
expect 2 "--metric: unknown metric 'nosuch'" "$S" --metric nosuch
expect 1 "file not found" "$S" --input missing.npy
# iris.csv's two columns: samples 0 and 3 are 0.54 apart, every other pair more than 0.6 (1 and 2: 0.71), so eps 0.6
# and min_samples 2 make one cluster {0, 3} and leave 1 and 2 noise.
"$S" --input iris.csv --delimiter ';' --columns 0,1 --eps 0.6 --min-samples 2 --labels-out - > dbscan.txt 2>err.txt \
  || fail "dbscan: $(cat err.txt)"
[ "$(tr '\n' ' ' < dbscan.txt)" = "0 -1 -1 0 " ] || fail "dbscan labels on stdout: $(cat dbscan.txt)"
"$S" --n-samples 3000 --json > dbscan.json 2>err.txt || fail "dbscan --json: $(cat err.txt)"
grep -q '"n_clusters":8' dbscan.json && grep -q '"n_noise":' dbscan.json && grep -q '"n_core":' dbscan.json \
  || fail "dbscan --json: $(cat dbscan.json)"
"$S" --n-samples 3000 --progress >out.txt 2>err.txt || fail "dbscan progress run"
grep -q "3/3 clusters" err.txt || fail "no DBSCAN progress bar on stderr with --progress: $(cat err.txt)"

# A progress bar when asked for, on stderr only.
"$K" --n-samples 20000 --n-clusters 20 --max-iter 30 --tol 0 --progress >out.txt 2>err.txt || fail "progress run"
grep -q "iterations, center shift" err.txt || fail "no progress bar on stderr with --progress"
grep -q "iterations, center shift" out.txt && fail "the progress bar went to stdout"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all command-line checks passed"
