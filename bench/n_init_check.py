"""KMeans(init="random", n_init=10) against ten single-init fits drawing in turn from the same RandomState: the
fit keeps scikit-learn's best run, and uploads X once (its fit statistics say how many times X went to a device).

  python3 bench/n_init_check.py --n 10000000 --device gpu
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.cluster._kmeans import _is_same_clustering

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import make_workload  # noqa: E402

import gpuml  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=127)
    ap.add_argument("--n-init", type=int, default=10)
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--device", default="")
    args = ap.parse_args()
    X, _ = make_workload(args.n, 14, args.k, 0)
    params = dict(n_clusters=args.k, init="random", max_iter=args.max_iter, device=args.device)

    t = time.perf_counter()
    together = gpuml.KMeans(**params, n_init=args.n_init, random_state=np.random.RandomState(0)).fit(X)
    seconds = time.perf_counter() - t
    stats = together.fit_stats_
    print(f"n_init={args.n_init} in one fit: {seconds:.3f} s, X uploaded {stats['uploads']} time(s), best run "
          f"{stats['best_run']}, inertia {together.inertia_!r}, phases {stats['times']}")

    stream = np.random.RandomState(0)
    best, best_run, separate = None, -1, 0.0
    for run in range(args.n_init):
        t = time.perf_counter()
        one = gpuml.KMeans(**params, n_init=1, random_state=stream).fit(X)
        separate += time.perf_counter() - t
        if best is None or (one.inertia_ < best.inertia_ and not _is_same_clustering(one.labels_, best.labels_,
                                                                                     args.k)):
            best, best_run = one, run
    same = (np.array_equal(together.labels_, best.labels_) and np.array_equal(together.cluster_centers_,
                                                                             best.cluster_centers_)
            and together.inertia_ == best.inertia_ and together.n_iter_ == best.n_iter_)
    print(f"{args.n_init} single-init fits: {separate:.3f} s, best run {best_run}, inertia {best.inertia_!r}; "
          f"labels, centers, inertia and n_iter {'identical' if same else 'DIFFER'}")
    return 0 if same and (stats["uploads"] <= 1) else 1


if __name__ == "__main__":
    sys.exit(main())
