"""scikit-learn's estimators built on nearest neighbours, timed as scikit-learn runs them and with gpuml's patch, on
the same data in one process: one row per estimator with both times, the ratio and whether the results are equal.

    python bench/sklearn_estimators.py [--small] [--json FILE] [--only NAME,...] [--dbscan-n N] [--lof-n N] ...

Prints a markdown table and writes the rows as JSON (default sklearn_estimators.json); gpuml runs twice, the first
call paying for the device's opening and its pipelines. --small runs every row in
seconds (a smoke test); the defaults are the sizes of the measured table (DBSCAN 1M x 2 with about 30 neighbours per
sample and 1M x 16, TSNE 100k x 50, Isomap 50k, LOF 1M x 16, the radius classifier). The device is gpuml's default
(GPUML_DEVICE, else a GPU, else the host backend)."""

import argparse
import json
import time

import numpy as np


def _blobs(n, d, seed, centers=20):
    from sklearn.datasets import make_blobs

    X, y = make_blobs(n_samples=n, n_features=d, centers=centers, cluster_std=1.0, random_state=seed)
    return X.astype(np.float32), y


def _eps_for(X, neighbours, seed):
    """The radius that gives about `neighbours` neighbours per sample (a sample's distances to the others)."""
    rng = np.random.default_rng(seed)
    probe = X[rng.choice(len(X), size=min(len(X), 64), replace=False)]
    from sklearn.metrics import pairwise_distances

    q = neighbours / len(X)
    return float(np.median(np.quantile(pairwise_distances(probe, X), q, axis=1)))


def _cases(a):
    """name -> (size text, build the estimator and run it: returns what is compared)."""
    cases = {}
    for n, d in ((a.dbscan_n, 2), (a.dbscan_n, 16)):
        X, _ = _blobs(n, d, 1)
        eps = _eps_for(X, 30, 2)

        def run(X=X, eps=eps):
            from sklearn.cluster import DBSCAN

            m = DBSCAN(eps=eps, min_samples=10).fit(X)
            return m.labels_, m.core_sample_indices_

        cases[f"DBSCAN {n}x{d}"] = (f"{n} x {d}, eps {eps:.3g}", run)

    # Uniform in the unit square: about 30 neighbours for every sample, not only the median one.
    X = np.random.default_rng(9).random((a.dbscan_n, 2)).astype(np.float32)
    eps = float(np.sqrt(30 / (np.pi * a.dbscan_n)))

    def uniform(X=X, eps=eps):
        from sklearn.cluster import DBSCAN

        m = DBSCAN(eps=eps, min_samples=5).fit(X)
        return m.labels_, m.core_sample_indices_

    cases[f"DBSCAN uniform {a.dbscan_n}x2"] = (f"{a.dbscan_n} x 2 uniform, eps {eps:.3g}", uniform)

    X, _ = _blobs(a.tsne_n, 50, 3)

    def tsne(X=X):
        from sklearn.manifold import TSNE

        return TSNE(n_components=2, perplexity=30.0, max_iter=250, random_state=0).fit_transform(X)

    cases["TSNE"] = (f"{a.tsne_n} x 50, 250 iterations", tsne)

    X, _ = _blobs(a.isomap_n, 10, 4)

    def isomap(X=X):
        from sklearn.manifold import Isomap

        return Isomap(n_neighbors=10, n_components=2).fit(X).dist_matrix_[:100]

    cases["Isomap"] = (f"{a.isomap_n} x 10", isomap)

    X, _ = _blobs(a.lof_n, 16, 5)

    def lof(X=X):
        from sklearn.neighbors import LocalOutlierFactor

        return LocalOutlierFactor(n_neighbors=20).fit(X).negative_outlier_factor_

    cases["LocalOutlierFactor"] = (f"{a.lof_n} x 16, k 20", lof)

    X, y = _blobs(a.radius_n, 8, 6)
    Q, _ = _blobs(a.radius_n // 10, 8, 7)
    radius = _eps_for(X, 30, 8)

    def radius_classifier(X=X, y=y, Q=Q, radius=radius):
        from sklearn.neighbors import RadiusNeighborsClassifier

        return RadiusNeighborsClassifier(radius=radius, outlier_label="most_frequent").fit(X, y).predict(Q)

    cases["RadiusNeighborsClassifier"] = (f"{a.radius_n} x 8, {len(Q)} queries, ~30 neighbours", radius_classifier)
    return cases


def _equal(a, b):
    if isinstance(a, tuple):  # the first part that differs, else "yes"
        return next((e for e in map(_equal, a, b) if e != "yes"), "yes")
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return "no (shapes)"
    if np.array_equal(a, b):
        return "yes"
    if a.dtype.kind == "f" and np.allclose(a, b, rtol=1e-5, atol=1e-6):
        return "within 1e-5"
    return "no"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="every row in seconds (a smoke test)")
    p.add_argument("--json", default="sklearn_estimators.json")
    p.add_argument("--only", help="comma-separated row names (prefixes), e.g. DBSCAN,TSNE")
    p.add_argument("--dbscan-n", type=int, default=1_000_000)
    p.add_argument("--tsne-n", type=int, default=100_000)
    p.add_argument("--isomap-n", type=int, default=50_000)
    p.add_argument("--lof-n", type=int, default=1_000_000)
    p.add_argument("--radius-n", type=int, default=1_000_000)
    a = p.parse_args()
    if a.small:
        a.dbscan_n, a.tsne_n, a.isomap_n, a.lof_n, a.radius_n = 3000, 600, 800, 3000, 3000

    import gpuml

    rows = []
    for name, (size, run) in _cases(a).items():
        if a.only and not any(name.startswith(o) for o in a.only.split(",")):
            continue
        gpuml.unpatch_sklearn()
        start = time.perf_counter()
        expected = run()
        sklearn_s = time.perf_counter() - start
        gpuml.patch_sklearn()
        gpuml.calls.reset()
        start = time.perf_counter()
        got = run()
        gpuml_s = time.perf_counter() - start
        calls = gpuml.calls.gpuml
        # Again, as a script that fits more than once sees it (the device open, its pipelines built).
        start = time.perf_counter()
        run()
        again_s = time.perf_counter() - start
        gpuml.unpatch_sklearn()
        equal = "n/a (TSNE's descent amplifies last bits)" if name == "TSNE" else _equal(got, expected)
        rows.append(dict(estimator=name, size=size, sklearn_s=round(sklearn_s, 3), gpuml_s=round(gpuml_s, 3),
                         gpuml_again_s=round(again_s, 3), speedup=round(sklearn_s / gpuml_s, 2),
                         speedup_again=round(sklearn_s / again_s, 2), gpuml_calls=calls, equal=equal))
        print(f"{name}: scikit-learn {sklearn_s:.2f} s, gpuml {gpuml_s:.2f} s, again {again_s:.2f} s ({calls} gpuml calls)",
              flush=True)

    device = gpuml.backend_name()
    print(f"\nDevice: {device}\n")
    print("| estimator | size | scikit-learn (s) | gpuml, first (s) | gpuml, again (s) | speed-up (first, again) | gpuml calls | equal |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['estimator']} | {r['size']} | {r['sklearn_s']} | {r['gpuml_s']} | {r['gpuml_again_s']} | "
              f"{r['speedup']}x, {r['speedup_again']}x | {r['gpuml_calls']} | {r['equal']} |")
    with open(a.json, "w") as f:
        json.dump({"device": device, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
