#!/usr/bin/env python3
"""Where the time of gpuml's Python k-NN calls goes.

Part 1, the calls: each public call (kneighbors with and without distances, kneighbors_graph in both modes, the
classifier's predict and predict_proba, the regressor's predict, uniform and weighted by distance) on a database
of --database rows, next to the bare search (the extension's kneighbors without distances, the GIL released).
"search" is the time inside the extension's kneighbors call, "outside" the rest of the call; the search itself
varies from run to run on the host backend more than the rest does, so "outside" is the figure to compare.

Part 2, the stages after the search, at a larger shape without searching (--stage-database, --stage-queries,
neighbours drawn at random): each stage as the package computes it now (gpuml) next to the numpy and
scikit-learn code it replaces (the float64 recomputation in numpy chunks, or on the host where GPUML_DEVICE names a
device that forms it; np.add.at votes, scikit-learn's weighted votes and means), and whether both give the same
values.

    GPUML_DEVICE=host python3 bench/python_knn_stages.py
    GPUML_DEVICE=host python3 bench/python_knn_stages.py --database 200000 --queries 2000 --k 10,100 --skip-stages

Data: uniform [0, 1) float32 (or --dtype float64) from a fixed seed. After one warm-up run (which also puts the
database on the device), part 1 gives the median of --repeats runs, part 2 the fastest run's wall time and the
median processor time (all threads: on a shared machine it says more about the work than the wall time does).
GPUML_NUM_THREADS caps gpuml's host threads.
"""

import argparse
import functools
import os
import statistics
import time
from collections import defaultdict

import numpy as np
import scipy.sparse as sp
from sklearn.neighbors._base import _get_weights
from sklearn.utils.extmath import weighted_mode
from sklearn.utils.validation import check_array

import gpuml
from gpuml import _gpuml, _neighbors

SEARCH = "search"


class Stages:
    """Seconds spent in the extension's functions and the database's kneighbors, accumulated per public call."""

    def __init__(self):
        self.seconds = defaultdict(float)

    def timed(self, name, fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start

        return run

    def install(self):
        """Routes _neighbors' calls into the extension through timing wrappers."""
        stages = self

        class Database:
            def __init__(self, db):
                self._db = db

            def __getattr__(self, name):
                attr = getattr(self._db, name)
                return stages.timed(SEARCH, attr) if name == "kneighbors" else attr

        class Extension:
            def __getattr__(self, name):
                attr = getattr(_gpuml, name)
                if name.startswith("Neighbors_"):
                    return lambda *args: Database(attr(*args))
                return stages.timed(name, attr) if callable(attr) else attr

        _neighbors._gpuml = Extension()

    def measure(self, fn, repeats):
        """(median seconds of fn(), {stage: median seconds})."""
        fn()
        totals, per_stage = [], defaultdict(list)
        for _ in range(repeats):
            self.seconds.clear()
            start = time.perf_counter()
            fn()
            totals.append(time.perf_counter() - start)
            for name, s in self.seconds.items():
                per_stage[name].append(s)
        return statistics.median(totals), {name: statistics.median(v) for name, v in per_stage.items()}


def median_seconds(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def wall_and_cpu(fn, repeats):
    """(fastest wall seconds, median processor seconds of all threads) of fn(): on a shared machine the processor
    time says more about the work than the wall time does."""
    fn()
    walls, cpus = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    return min(walls), statistics.median(cpus)


def ms(seconds):
    return f"{seconds * 1e3:9.2f}"


def database_of(estimator, dtype):
    db = estimator._gpuml_database(dtype)
    db = db[0] if isinstance(db, tuple) else db  # earlier versions returned (database, array)
    return getattr(db, "_db", db)


def part_calls(args, D, Q, labels, targets, stages):
    print(f"\nPart 1: calls, database {D.shape} {D.dtype}, queries {Q.shape}, metric {args.metric}")
    for k in args.ks:
        models = {}
        for weights in ("uniform", "distance"):
            models[weights] = (
                gpuml.KNeighborsClassifier(n_neighbors=k, weights=weights, metric=args.metric).fit(D, labels),
                gpuml.KNeighborsRegressor(n_neighbors=k, weights=weights, metric=args.metric).fit(D, targets),
            )
        nn = gpuml.NearestNeighbors(n_neighbors=k, metric=args.metric).fit(D)
        nn.kneighbors(Q[:1])
        bare = database_of(nn, D.dtype)
        try:
            bare.kneighbors(Q[:1], k, False)
            search = median_seconds(lambda: bare.kneighbors(Q, k, False), args.repeats)
        except TypeError:  # an extension without return_distance
            search = median_seconds(lambda: bare.kneighbors(Q, k), args.repeats)
        calls = {
            "kneighbors": lambda: nn.kneighbors(Q),
            "kneighbors(return_distance=False)": lambda: nn.kneighbors(Q, return_distance=False),
            "kneighbors_graph(connectivity)": lambda: nn.kneighbors_graph(Q),
            "kneighbors_graph(distance)": lambda: nn.kneighbors_graph(Q, mode="distance"),
        }
        for weights, (clf, reg) in models.items():
            calls[f"classifier predict, {weights}"] = functools.partial(clf.predict, Q)
            calls[f"classifier predict_proba, {weights}"] = functools.partial(clf.predict_proba, Q)
            calls[f"regressor predict, {weights}"] = functools.partial(reg.predict, Q)
        print(f"\nk = {k}: bare search (the extension's kneighbors without distances) {ms(search)} ms")
        print(f"{'call':40s} {'total ms':>9s} {'search':>9s} {'outside':>9s} {'/ bare':>7s}  in the extension (ms)")
        for name, fn in calls.items():
            total, parts = stages.measure(fn, args.repeats)
            inside = parts.pop(SEARCH, 0.0)
            outside = total - inside
            detail = ", ".join(f"{stage} {v * 1e3:.2f}" for stage, v in sorted(parts.items()))
            print(f"{name:40s} {ms(total)} {ms(inside)} {ms(outside)} {outside / search:7.3f}  {detail}")


def numpy_exact_distances(X, Y, indices):
    """Euclidean distances of X's rows to their neighbours Y[indices] in float64, in numpy chunks: what gpuml's
    Python package computed after each float32 search before the recomputation moved into the extension."""
    out = np.empty(indices.shape, dtype=np.float64)
    step = max(1, (1 << 22) // max(1, indices.shape[1] * X.shape[1]))
    for s in range(0, X.shape[0], step):
        neighbours = Y[indices[s : s + step]].astype(np.float64, copy=False)
        q = X[s : s + step, None, :].astype(np.float64, copy=False)
        diff = np.abs(np.broadcast_to(q, neighbours.shape) - neighbours)
        out[s : s + step] = np.sqrt(np.einsum("...d,...d->...", diff, diff))
    return out


def sklearn_proba(labels, indices, weights, n_classes):
    """scikit-learn's KNeighborsClassifier.predict_proba after its search (uniform: weights of ones)."""
    rows = np.arange(indices.shape[0])
    pred_labels = labels[indices]
    proba = np.zeros((indices.shape[0], n_classes))
    weights = np.ones_like(indices) if weights is None else weights
    for i, idx in enumerate(pred_labels.T):
        proba[rows, idx] += weights[:, i]
    proba /= proba.sum(axis=1)[:, np.newaxis]
    return proba


def add_at_proba(labels, indices, n_classes):
    """Uniform votes as gpuml's Python package counted them before (np.add.at)."""
    proba = np.zeros((indices.shape[0], n_classes))
    np.add.at(proba, (np.arange(indices.shape[0])[:, None], labels[indices]), 1.0)
    proba /= indices.shape[1]
    return proba


def sklearn_means(y, indices, weights):
    """scikit-learn's KNeighborsRegressor.predict after its search."""
    y2 = y.reshape((-1, 1))
    if weights is None:
        return np.mean(y2[indices], axis=1).ravel()
    denom = np.sum(weights, axis=1)
    return (np.sum(y2[indices, 0] * weights, axis=1) / denom).ravel()


def sklearn_graph(indices, data, n_samples_fit):
    """scikit-learn's kneighbors_graph from kneighbors' arrays."""
    n_queries, k = indices.shape
    indptr = np.arange(0, n_queries * k + 1, k)
    return sp.csr_matrix((data, indices.ravel(), indptr), shape=(n_queries, n_samples_fit))


def part_stages(args, stages):
    rng = np.random.default_rng(1)
    n, q = args.stage_database, args.stage_queries
    D = rng.random((n, args.features), dtype=np.float32)
    Q = rng.random((q, args.features), dtype=np.float32)
    labels = rng.integers(0, args.classes, n)
    targets = rng.random(n)
    print(f"\nPart 2: the stages after a search, database {D.shape} float32, queries {Q.shape}, random neighbours")
    db = _gpuml.Neighbors_float32(D, "euclidean", "host")
    # The same float64 distances formed on the device (GPUML_DEVICE) where that is not the host.
    device = os.environ.get("GPUML_DEVICE", "host")
    on_device = None if device == "host" else _gpuml.Neighbors_float32(D, "euclidean", device)
    for k in args.ks:
        indices = np.sort(rng.integers(0, n, (q, k)), axis=1)
        print(f"\nk = {k}")
        print(f"{'':44s} {'gpuml':>19s} {'before':>19s}")
        print(f"{'stage':44s} {'wall ms':>9s} {'cpu ms':>9s} {'wall ms':>9s} {'cpu ms':>9s}  same values")
        distances = db.distances_to(Q, indices)
        weights = _gpuml.distance_weights(distances)[0]
        sk_weights = _get_weights(distances.copy(), "distance")
        rows = [
            ("float64 distances (euclidean)", lambda: db.distances_to(Q, indices),
             lambda: numpy_exact_distances(Q, D, indices),
             lambda a, b: np.allclose(a, b, rtol=1e-14, atol=0)),
            *([(f"float64 distances (euclidean) on {device}", lambda: on_device.distances_to(Q, indices),
                lambda: db.distances_to(Q, indices), np.array_equal)] if on_device else []),
            ("distance weights", lambda: _gpuml.distance_weights(distances),
             lambda: _get_weights(distances.copy(), "distance"), lambda a, b: np.array_equal(a[0], b)),
            ("uniform votes -> predict_proba",
             lambda: _proba(_gpuml.class_votes(indices, labels, args.classes, None)[0]),
             lambda: add_at_proba(labels, indices, args.classes), np.array_equal),
            ("uniform votes -> predict", lambda: np.argmax(_gpuml.class_votes(indices, labels, args.classes, None)[0], 1),
             lambda: np.argmax(add_at_proba(labels, indices, args.classes), axis=1), np.array_equal),
            ("distance votes -> predict_proba",
             lambda: _proba(_gpuml.class_votes(indices, labels, args.classes, weights)[0]),
             lambda: sklearn_proba(labels, indices, sk_weights, args.classes), np.array_equal),
            ("distance votes -> predict (weighted mode)",
             lambda: _gpuml.weighted_modes(indices, labels, args.classes, weights)[0],
             lambda: weighted_mode(labels[indices], sk_weights, axis=1)[0].ravel().astype(np.intp), np.array_equal),
            ("regressor mean, uniform", lambda: _gpuml.neighbour_means(indices, targets.reshape(-1, 1), None)[0].ravel(),
             lambda: sklearn_means(targets, indices, None), np.array_equal),
            ("regressor mean, distance",
             lambda: _gpuml.neighbour_means(indices, targets.reshape(-1, 1), weights)[0].ravel(),
             lambda: sklearn_means(targets, indices, sk_weights), np.array_equal),
            ("kneighbors_graph (scikit-learn's CSR build)", lambda: sklearn_graph(indices, distances.ravel(), n),
             None, None),
            ("query validation (check_array)", lambda: check_array(Q, accept_sparse="csr", order="C"), None, None),
        ]
        for name, ours, before, same in rows:
            wall, cpu = wall_and_cpu(ours, args.repeats)
            wall_before, cpu_before = wall_and_cpu(before, args.repeats) if before else (float("nan"),) * 2
            equal = "" if same is None else ("yes" if same(ours(), before()) else "NO")
            print(f"{name:44s} {ms(wall)} {ms(cpu)} {ms(wall_before)} {ms(cpu_before)}  {equal}")


def _proba(votes):
    votes /= votes.sum(axis=1)[:, np.newaxis]
    return votes


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--k", default="10,100", help="comma-separated n_neighbors values")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--metric", default="minkowski")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stage-database", type=int, default=1_000_000)
    parser.add_argument("--stage-queries", type=int, default=10_000)
    parser.add_argument("--skip-calls", action="store_true")
    parser.add_argument("--skip-stages", action="store_true")
    args = parser.parse_args()
    args.ks = [int(v) for v in args.k.split(",")]
    print(f"backend {gpuml.backend_name()}")

    stages = Stages()
    if not args.skip_stages:
        part_stages(args, stages)
    if not args.skip_calls:
        rng = np.random.default_rng(0)
        D = rng.random((args.database, args.features), dtype=np.float64).astype(args.dtype)
        Q = rng.random((args.queries, args.features), dtype=np.float64).astype(args.dtype)
        labels = rng.integers(0, args.classes, args.database)
        targets = rng.random(args.database)
        stages.install()
        part_calls(args, D, Q, labels, targets, stages)


if __name__ == "__main__":
    main()
