"""How often gpuml's starting centers are scikit-learn's: for each shape, dtype and weighting, many seeds; for each
seed, the samples scikit-learn's KMeans.fit starts its first run from (its own _kmeans_plusplus or choice, on X less
its mean) against gpuml's (gpuml's fit driver, on the device or the host). Prints the share of identical seedings.

A seeding can differ only where a draw lands within float rounding of a boundary of the cumulative masses or two
candidates' potentials tie within rounding: scikit-learn sums its float32 potentials with BLAS, whose rounding depends
on the machine and its thread count, and gpuml sums them in double.

  python3 bench/seeding_vs_sklearn.py --seeds 1000 --shapes 1000x2x8,20000x14x31 --big 1000000x14x127 --big-seeds 20
"""
import argparse
import sys
import time

import numpy as np
from sklearn.cluster._kmeans import _kmeans_plusplus
from sklearn.utils.extmath import row_norms

from gpuml import _gpuml


def sklearn_samples(X, w, k, seed, init):
    random_state = np.random.RandomState(seed)
    centred = X - X.mean(axis=0)
    if init == "k-means++":
        return np.asarray(_kmeans_plusplus(centred, k, row_norms(centred, squared=True), w, random_state)[1])
    return random_state.choice(X.shape[0], size=k, replace=False, p=w / w.sum())


def gpuml_samples(X, w, k, seed, init, device, weighted):
    state = np.random.RandomState(seed).get_state()
    fn = getattr(_gpuml, f"starting_samples_{X.dtype.name}")
    return fn(X, w if weighted else None, k, init, np.ascontiguousarray(state[1], dtype=np.uint32), state[2], device)[0]


def data(n, d, dtype, seed):
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, (16, d))
    X = centers[rng.integers(16, size=n)] + rng.normal(size=(n, d)) * rng.uniform(0.3, 2.0, d)
    w = rng.uniform(0.1, 3.0, n)
    w[rng.random(n) < 0.05] = 0
    return X.astype(dtype), w.astype(dtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--shapes", default="1000x2x8,5003x14x127,20000x14x31", help="n x d x k, comma separated")
    ap.add_argument("--big", default="", help="larger shapes, run with --big-seeds seeds")
    ap.add_argument("--big-seeds", type=int, default=10)
    ap.add_argument("--inits", default="k-means++,random")
    ap.add_argument("--device", default="")
    args = ap.parse_args()
    plan = [(s, args.seeds) for s in args.shapes.split(",") if s] + [(s, args.big_seeds) for s in args.big.split(",") if s]
    total_same = total = 0
    print(f"{'n x d x k':<18} {'dtype':<8} {'weights':<8} {'init':<10} {'identical':>12} {'seconds':>8}")
    for shape, seeds in plan:
        n, d, k = (int(v) for v in shape.split("x"))
        for dtype in (np.float32, np.float64):
            X, w = data(n, d, dtype, n + d + k)
            for weighted in (False, True):
                weights = w if weighted else np.ones(n, dtype)
                for init in args.inits.split(","):
                    t0 = time.perf_counter()
                    same = sum(np.array_equal(sklearn_samples(X, weights, k, s, init),
                                              gpuml_samples(X, weights, k, s, init, args.device, weighted))
                               for s in range(seeds))
                    total_same += same
                    total += seeds
                    print(f"{shape:<18} {np.dtype(dtype).name:<8} {'random' if weighted else 'ones':<8} {init:<10} "
                          f"{same:>5}/{seeds:<6} {time.perf_counter() - t0:>8.1f}", flush=True)
    print(f"identical seedings: {total_same}/{total} ({total_same / max(total, 1):.2%}); "
          f"device: {_gpuml.backend_name(args.device)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
