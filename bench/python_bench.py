"""gpuml from Python against the C++ programs and scikit-learn, side by side in one run.

Workloads (the shapes of the seed study and of the k-NN benchmark; smaller with --n / --n-db for a quick look):
  kmeans-array  KMeans(127, init=X[:127], n_init=1, max_iter=100, tol=0).fit(X), X n x 14 float32
  kmeans-pp     KMeans(127, max_iter=100, tol=0, random_state=0).fit(X)          (default init: k-means++)
  knn-10/100    NearestNeighbors(n_neighbors=k).fit(D).kneighbors(Q), D n_db x 128, Q n_q x 128 float32

Each gpuml Python row times the call as a user makes it (X already in memory), best of --repeat after one warm-up
call, and splits it into the fit's own phases (gpuml's fit statistics: checks, seeding, upload, iterations, final
step) and what Python adds around them. The C++ rows run gpuml-kmeans / gpuml-knn on the same .npy files
(fit_seconds / search_seconds, best of --repeat). scikit-learn runs with its defaults on the same data, capped at
--sklearn-max-iter iterations (its per-iteration time and its k-means++ seeding are reported) and skipped with
--no-sklearn.

  python3 bench/python_bench.py --n 50000000 --n-db 1000000 --n-q 10000
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpuml_programs import data_directory, find_binary, run_json  # noqa: E402
from peers import make_knn_workload, write_workload  # noqa: E402


def best_of(repeat, call):
    """(the best wall time of `repeat` calls after one untimed warm-up, the last call's result)."""
    result = call()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        result = call()
        best = min(best, time.perf_counter() - t)
    return best, result


def kmeans_rows(args, data, device, rows):
    import gpuml
    X = np.load(data["X"])  # in memory, as a user's array
    init = np.load(data["init"])
    cases = [
        ("kmeans-array", dict(n_clusters=args.k, init=init, n_init=1),
         ["--n-clusters", str(args.k), "--init", data["init"]]),
        ("kmeans-pp", dict(n_clusters=args.k, random_state=0), ["--n-clusters", str(args.k), "--seed", "0"]),
    ]
    kmeans_bin = find_binary("gpuml-kmeans", "examples", args.kmeans_bin)
    for name, params, cli in cases:
        common = dict(max_iter=args.max_iter, tol=0)
        cpp_cmd = [str(kmeans_bin), "--input", data["X"], *cli, "--max-iter", str(args.max_iter), "--tol", "0", "--json",
                   "--warmup", "--repeat", str(args.repeat), "--device", device or "auto"]
        before, _ = run_json(cpp_cmd, timeout=args.timeout)  # the C++ program before and after Python: the best
        seconds, model = best_of(args.repeat, lambda: gpuml.KMeans(**params, **common, device=device).fit(X))
        stats = model.fit_stats_
        t = stats["times"]
        rows.append(dict(workload=name, impl="gpuml Python", seconds=seconds, n_iter=int(model.n_iter_),
                         inertia=float(model.inertia_), uploads=stats["uploads"],
                         shares=dict(python=seconds - t["total"], checks=t["checks"], seeding=t["seeding"],
                                     upload=t["setup"], iterations=t["iterations"], results=t["finish"])))
        out, note = run_json(cpp_cmd, timeout=args.timeout)
        if out and before and before["fit_seconds"] < out["fit_seconds"]:
            out = before
        if out:
            ft = out["fit_times"]
            rows.append(dict(workload=name, impl="gpuml C++ (gpuml-kmeans)", seconds=out["fit_seconds"],
                             n_iter=out["n_iter"], inertia=out["inertia"],
                             shares=dict(checks=ft["checks"], seeding=ft["seeding"], upload=ft["setup"],
                                         iterations=ft["iterations"], results=ft["finish"])))
        else:
            rows.append(dict(workload=name, impl="gpuml C++ (gpuml-kmeans)", note=note))
        if args.no_sklearn:
            continue
        import sklearn.cluster
        capped = dict(common, max_iter=min(args.max_iter, args.sklearn_max_iter))
        t0 = time.perf_counter()
        ref = sklearn.cluster._kmeans.KMeans(**params, **capped).fit(X)
        seconds = time.perf_counter() - t0
        rows.append(dict(workload=name, impl=f"scikit-learn (max_iter={capped['max_iter']})", seconds=seconds,
                         n_iter=int(ref.n_iter_), inertia=float(ref.inertia_)))
        if name == "kmeans-pp":  # the starting centers alone: scikit-learn's k-means++ against gpuml's
            from sklearn.cluster._kmeans import _kmeans_plusplus
            from sklearn.utils.extmath import row_norms
            t0 = time.perf_counter()
            Xc = X - X.mean(axis=0)
            _, theirs = _kmeans_plusplus(Xc, args.k, row_norms(Xc, squared=True), np.ones(len(X), X.dtype),
                                         np.random.RandomState(0))
            seeding = time.perf_counter() - t0
            del Xc
            state = np.random.RandomState(0).get_state()
            ours = gpuml._gpuml.starting_samples_float32(X, None, args.k, "k-means++",
                                                         np.ascontiguousarray(state[1], dtype=np.uint32), state[2],
                                                         device)[0]
            rows.append(dict(workload=name, impl="scikit-learn k-means++ seeding alone", seconds=seeding,
                             note=f"gpuml's starting samples {'equal' if np.array_equal(ours, theirs) else 'differ'}"))


def knn_rows(args, device, rows):
    import gpuml
    directory, keep = data_directory(args.data_dir, "gpuml-python-bench-")
    D, Q = make_knn_workload(args.n_db, args.n_q, 128, 0)
    np.save(directory / "D.npy", D)
    np.save(directory / "Q.npy", Q)
    os.sync()
    knn_bin = find_binary("gpuml-knn", "examples", args.knn_bin)
    for k in (10, 100):
        nn = gpuml.NearestNeighbors(n_neighbors=k, device=device).fit(D)
        seconds, (dist, ind) = best_of(args.repeat, lambda: nn.kneighbors(Q))
        rows.append(dict(workload=f"knn-{k}", impl="gpuml Python", seconds=seconds))
        out, note = run_json([str(knn_bin), "--database", str(directory / "D.npy"), "--queries", str(directory / "Q.npy"),
                              "--k", str(k), "--json", "--warmup", "--repeat", str(args.repeat),
                              "--device", device or "auto"], timeout=args.timeout)
        rows.append(dict(workload=f"knn-{k}", impl="gpuml C++ (gpuml-knn)",
                         seconds=out.get("search_seconds") if out else None, note=None if out else note))
        if not args.no_sklearn:
            import sklearn.neighbors
            ref = sklearn.neighbors._unsupervised.NearestNeighbors(n_neighbors=k).fit(D)
            t0 = time.perf_counter()
            _, ref_ind = ref.kneighbors(Q)
            rows.append(dict(workload=f"knn-{k}", impl="scikit-learn", seconds=time.perf_counter() - t0,
                             note=f"indices equal to gpuml's in {np.mean((ref_ind == ind).all(axis=1)):.4%} of rows"))
    del keep


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="k-means samples (the seed study: 50,000,000)")
    ap.add_argument("--k", type=int, default=127)
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--n-db", type=int, default=100_000, help="k-NN database rows (the benchmark: 1,000,000)")
    ap.add_argument("--n-q", type=int, default=1_000, help="k-NN queries (the benchmark: 10,000)")
    ap.add_argument("--device", default="", help="gpuml's device choice (default: GPUML_DEVICE, else auto)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--workloads", default="kmeans,knn")
    ap.add_argument("--no-sklearn", action="store_true")
    ap.add_argument("--sklearn-max-iter", type=int, default=10)
    ap.add_argument("--data-dir")
    ap.add_argument("--kmeans-bin")
    ap.add_argument("--knn-bin")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    rows = []
    if "kmeans" in args.workloads:
        directory, keep = data_directory(args.data_dir, "gpuml-python-bench-")
        data = write_workload(directory, args.n, 14, args.k, 0)
        os.sync()  # the file's pages written back before anything is timed
        kmeans_rows(args, data, args.device, rows)
        del keep
    if "knn" in args.workloads:
        knn_rows(args, args.device, rows)

    print(f"{'workload':<14} {'implementation':<42} {'seconds':>9} {'vs C++':>7}  shares / notes")
    for r in rows:
        cpp = next((c for c in rows if c["workload"] == r["workload"] and c["impl"].startswith("gpuml C++")
                    and c.get("seconds")), None)
        ratio = f"{r['seconds'] / cpp['seconds']:.2f}x" if r.get("seconds") and cpp else ""
        shares = " ".join(f"{k} {v:.3f}" for k, v in r.get("shares", {}).items())
        extra = f"n_iter {r['n_iter']} inertia {r['inertia']:.10g}" if "inertia" in r else ""
        seconds = f"{r['seconds']:.4f}" if r.get("seconds") is not None else "–"
        print(f"{r['workload']:<14} {r['impl']:<42} {seconds:>9} {ratio:>7}  {shares} {extra} {r.get('note') or ''}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
