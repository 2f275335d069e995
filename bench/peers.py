"""Peers that gpuml's benchmarks are measured against, timed on the same data.

CPU peers (run anywhere):
    sklearn_kmeans     scikit-learn KMeans(algorithm="lloyd", n_init=1, init=<given centers>, tol=0)
    sklearnex_kmeans   the same through scikit-learn-intelex (oneDAL)
    sklearn_knn        scikit-learn NearestNeighbors(algorithm="brute").kneighbors
    faiss_knn          faiss-cpu IndexFlatL2.search

PyTorch peers (for the GPU machine; torch is imported only inside these functions, TF32 off):
    torch_kmeans       Lloyd iterations as matmul + argmin + index_add, chunked over samples
    torch_knn          brute k-NN as matmul + topk over 1024-query tiles
    torch_pairwise     squared Euclidean distances ||x||^2 + ||y||^2 - 2 X Y^T, in TFLOP/s

Workload:
    make_workload / write_workload   deterministic blobs-like float32 data (d=14, k=127) and a fixed init
                                     (the first k rows), written as X.npy and init.npy.

Every timing function takes NumPy arrays, returns a plain dict (JSON-serialisable apart from the optional
result arrays requested with return_result=True) and never calls any gpuml binary, so a driver can put the
numbers next to gpuml's own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import warnings
from pathlib import Path

import numpy as np

__all__ = [
    "make_workload",
    "write_workload",
    "make_knn_workload",
    "sklearn_kmeans",
    "sklearnex_kmeans",
    "sklearn_knn",
    "faiss_knn",
    "torch_kmeans",
    "torch_knn",
    "torch_pairwise",
    "kmeans_inertia",
]

# --------------------------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------------------------

_CHUNK_ROWS = 1 << 20


def _blob_centers(d: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 0])
    return rng.uniform(-10.0, 10.0, size=(k, d)).astype(np.float32)


def _fill_blobs(out: np.ndarray, centers: np.ndarray, seed: int) -> None:
    """Fills out (n x d, float32) chunk by chunk; chunk c uses its own generator, so the data do not depend on
    whether they are built in memory or straight into a memory-mapped file."""
    n, d = out.shape
    k = centers.shape[0]
    for c, start in enumerate(range(0, n, _CHUNK_ROWS)):
        stop = min(n, start + _CHUNK_ROWS)
        rng = np.random.default_rng([seed, 1, c])
        labels = rng.integers(0, k, size=stop - start)
        noise = rng.standard_normal(size=(stop - start, d), dtype=np.float32)
        np.add(centers[labels], noise, out=out[start:stop])


def make_workload(n: int, d: int = 14, k: int = 127, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic blobs-like k-means data: n samples around k centers drawn uniformly in [-10, 10]^d, unit
    Gaussian noise, float32, C order. Returns (X, init) where init = X[:k].copy() (the fixed initial centers).
    The same (n, d, k, seed) gives the same bytes on every machine (NumPy's PCG64)."""
    if n < k:
        raise ValueError(f"n={n} must be at least k={k}: the initial centers are the first k rows")
    X = np.empty((n, d), dtype=np.float32)
    _fill_blobs(X, _blob_centers(d, k, seed), seed)
    return X, X[:k].copy()


def write_workload(directory: str | os.PathLike, n: int, d: int = 14, k: int = 127, seed: int = 0) -> dict:
    """Writes the make_workload data as <directory>/X.npy and <directory>/init.npy without holding X in memory
    (X is filled through a memory map, so 50M x 14 needs only a chunk of RAM). Returns the paths and sizes."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if n < k:
        raise ValueError(f"n={n} must be at least k={k}: the initial centers are the first k rows")
    x_path, init_path = directory / "X.npy", directory / "init.npy"
    X = np.lib.format.open_memmap(x_path, mode="w+", dtype=np.float32, shape=(n, d))
    _fill_blobs(X, _blob_centers(d, k, seed), seed)
    init = np.array(X[:k])
    X.flush()
    del X
    np.save(init_path, init)
    return {"X": str(x_path), "init": str(init_path), "n": n, "d": d, "k": k, "seed": seed}


def make_knn_workload(n_db: int, n_queries: int, d: int = 128, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic k-NN data: a uniform [0, 1) float32 database (n_db x d) and queries (n_queries x d)."""
    rng = np.random.default_rng([seed, 2])
    db = rng.random(size=(n_db, d), dtype=np.float32)
    queries = rng.random(size=(n_queries, d), dtype=np.float32)
    return db, queries


def kmeans_inertia(X: np.ndarray, centers: np.ndarray) -> float:
    """Sum of squared distances from each sample to its nearest center, accumulated in float64 in chunks
    (a common yardstick for every implementation's final centers)."""
    C = np.asarray(centers, dtype=np.float64)
    c_norm = (C * C).sum(1)
    total = 0.0
    for start in range(0, X.shape[0], 1 << 16):
        x = np.asarray(X[start : start + (1 << 16)], dtype=np.float64)
        d2 = (x * x).sum(1)[:, None] + c_norm[None, :] - 2.0 * (x @ C.T)
        total += float(np.maximum(d2.min(1), 0.0).sum())
    return total


# --------------------------------------------------------------------------------------------------------------
# scikit-learn / scikit-learn-intelex k-means
# --------------------------------------------------------------------------------------------------------------


def _kmeans_result(library, version, model, X, seconds, max_iter, return_result, accelerated=None, caught=()) -> dict:
    n_iter = int(model.n_iter_)
    out = {
        "library": library,
        "version": version,
        "n": int(X.shape[0]),
        "d": int(X.shape[1]),
        "k": int(model.cluster_centers_.shape[0]),
        "dtype": str(X.dtype),
        "max_iter": int(max_iter),
        "n_iter": n_iter,
        "seconds": seconds,
        "seconds_per_iter": seconds / max(n_iter, 1),
        "inertia": float(model.inertia_),
        "threads": os.cpu_count(),
    }
    if accelerated is not None:
        out["accelerated"] = accelerated
    # Warnings raised by the timed fit (e.g. ConvergenceWarning about fewer distinct clusters than k).
    out["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    if return_result:
        out["centers"] = np.asarray(model.cluster_centers_)
        out["labels"] = np.asarray(model.labels_)
    return out


def sklearn_kmeans(X: np.ndarray, init: np.ndarray, max_iter: int = 100, warmup: bool = True,
                   return_result: bool = False) -> dict:
    """Times scikit-learn KMeans(algorithm="lloyd", n_init=1, init=init, max_iter=max_iter, tol=0).fit(X).

    Returns a dict with seconds (whole fit), n_iter (scikit-learn's n_iter_; with tol=0 it stops early only when
    the labels stop changing), seconds_per_iter = seconds / n_iter, and inertia (inertia_). The fit time includes
    scikit-learn's input validation and final labelling pass, as a user would see it. warmup runs a 1-iteration
    fit on the first rows first so thread pools and imports are not timed. return_result adds centers and labels.
    """
    import sklearn
    from sklearn.cluster import KMeans

    X, init = _as_kmeans_input(X, init)

    def model(iters):
        return KMeans(n_clusters=init.shape[0], init=init, n_init=1, max_iter=iters, tol=0.0, algorithm="lloyd",
                      random_state=0, copy_x=True)

    if warmup:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model(1).fit(X[: max(init.shape[0], min(X.shape[0], 10_000))])
    m = model(max_iter)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        m.fit(X)
        seconds = time.perf_counter() - t0
    return _kmeans_result("scikit-learn", sklearn.__version__, m, X, seconds, max_iter, return_result,
                          caught=caught)


def gpuml_python_kmeans(X: np.ndarray, init: np.ndarray, max_iter: int = 100, device: str = "gpu",
                        warmup: bool = True, return_result: bool = False) -> dict:
    """Times gpuml.KMeans (the Python package) exactly as sklearn_kmeans times scikit-learn: the same parameters,
    a whole fit as a user sees it (validation, centring a copy, the device upload, the iterations, the final
    labelling). Next to the C++ program's row this is the binding's overhead per fit."""
    import gpuml

    X, init = _as_kmeans_input(X, init)

    def model(iters):
        return gpuml.KMeans(n_clusters=init.shape[0], init=init, n_init=1, max_iter=iters, tol=0.0,
                            algorithm="lloyd", random_state=0, copy_x=True, device=device)

    if warmup:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model(1).fit(X[: max(init.shape[0], min(X.shape[0], 10_000))])
    m = model(max_iter)
    before = gpuml.calls.gpuml
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        m.fit(X)
        seconds = time.perf_counter() - t0
    out = _kmeans_result("gpuml (Python)", gpuml.__version__, m, X, seconds, max_iter, return_result,
                         accelerated=gpuml.calls.gpuml > before, caught=caught)
    out["device"] = gpuml.backend_name(device)
    return out


class _SklearnexLog(logging.Handler):
    """Collects sklearnex's verbose messages to tell whether a call ran on oneDAL or fell back to scikit-learn."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _capture_sklearnex_log():
    logger = logging.getLogger("sklearnex")
    handler = _SklearnexLog()
    old = (logger.level, logger.handlers[:], logger.propagate)
    logger.handlers = [handler]  # sklearnex's own stderr handler is silenced while capturing
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.setLevel(old[0])
        logger.handlers = old[1]
        logger.propagate = old[2]


def sklearnex_kmeans(X: np.ndarray, init: np.ndarray, max_iter: int = 100, warmup: bool = True,
                     return_result: bool = False) -> dict:
    """Times scikit-learn-intelex's KMeans (sklearnex.cluster.KMeans, oneDAL on the CPU) with the same parameters
    as sklearn_kmeans (oneDAL counts iterations its own way; n_iter is its n_iter_). The dict adds "accelerated": True when sklearnex reported running its oneDAL version of fit,
    False when it reported falling back to scikit-learn, None when it said neither."""
    from sklearnex.cluster import KMeans

    X, init = _as_kmeans_input(X, init)

    def model(iters):
        return KMeans(n_clusters=init.shape[0], init=init, n_init=1, max_iter=iters, tol=0.0, algorithm="lloyd",
                      random_state=0, copy_x=True)

    if warmup:
        with warnings.catch_warnings(), _capture_sklearnex_log():
            warnings.simplefilter("ignore")
            model(1).fit(X[: max(init.shape[0], min(X.shape[0], 10_000))])
    m = model(max_iter)
    with _capture_sklearnex_log() as log, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        m.fit(X)
        seconds = time.perf_counter() - t0
    fit_msgs = [s for s in log.messages if ".fit" in s]
    accelerated = None
    if any("fallback" in s.lower() for s in fit_msgs):
        accelerated = False
    elif any("accelerated" in s.lower() for s in fit_msgs):
        accelerated = True
    # (sklearnex.__version__ can be a development placeholder; the installed distribution's version is reliable.)
    version = _dist_version("scikit-learn-intelex")
    return _kmeans_result("scikit-learn-intelex", version, m, X, seconds, max_iter, return_result, accelerated,
                          caught=caught)


def _as_kmeans_input(X, init):
    X = np.ascontiguousarray(X)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float32)
    init = np.ascontiguousarray(init, dtype=X.dtype)
    if init.ndim != 2 or init.shape[1] != X.shape[1]:
        raise ValueError(f"init has shape {init.shape}, expected (k, {X.shape[1]})")
    return X, init


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


# --------------------------------------------------------------------------------------------------------------
# scikit-learn / faiss k-NN
# --------------------------------------------------------------------------------------------------------------


def _knn_result(library, version, db, queries, k, seconds, build_seconds, return_result, dist, idx) -> dict:
    out = {
        "library": library,
        "version": version,
        "n_db": int(db.shape[0]),
        "n_queries": int(queries.shape[0]),
        "d": int(db.shape[1]),
        "k": int(k),
        "dtype": str(db.dtype),
        "seconds": seconds,
        "queries_per_second": queries.shape[0] / seconds if seconds > 0 else float("inf"),
        "build_seconds": build_seconds,
        "threads": os.cpu_count(),
    }
    if return_result:
        out["distances"] = dist
        out["indices"] = idx
    return out


def sklearn_knn(db: np.ndarray, queries: np.ndarray, k: int = 10, return_result: bool = False) -> dict:
    """Times scikit-learn NearestNeighbors(n_neighbors=k, algorithm="brute").fit(db).kneighbors(queries).

    "seconds" is the kneighbors call only (fit of a brute index just stores the data; reported as build_seconds).
    Distances returned by scikit-learn are Euclidean (not squared)."""
    import sklearn
    from sklearn.neighbors import NearestNeighbors

    db = np.ascontiguousarray(db)
    queries = np.ascontiguousarray(queries, dtype=db.dtype)
    t0 = time.perf_counter()
    nn = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(db)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    dist, idx = nn.kneighbors(queries, n_neighbors=k, return_distance=True)
    seconds = time.perf_counter() - t0
    return _knn_result("scikit-learn", sklearn.__version__, db, queries, k, seconds, build, return_result, dist, idx)


def faiss_knn(db: np.ndarray, queries: np.ndarray, k: int = 10, return_result: bool = False) -> dict:
    """Times faiss-cpu IndexFlatL2(d).search(queries, k) (exact brute force, float32, all OpenMP threads).

    "seconds" is the search only; adding the database is build_seconds. faiss returns squared L2 distances."""
    import faiss

    db = np.ascontiguousarray(db, dtype=np.float32)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    t0 = time.perf_counter()
    index = faiss.IndexFlatL2(db.shape[1])
    index.add(db)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    dist, idx = index.search(queries, k)
    seconds = time.perf_counter() - t0
    return _knn_result("faiss-cpu", faiss.__version__, db, queries, k, seconds, build, return_result, dist, idx)


# --------------------------------------------------------------------------------------------------------------
# PyTorch peers (GPU machine). torch is imported only here.
# --------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _exact_fp32(torch):
    """TF32 off for matmuls (and cuDNN) for the duration; the previous settings are restored afterwards."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old[0], old[1]
        torch.set_float32_matmul_precision(old[2])


class _Timer:
    """Elapsed milliseconds: CUDA events on a CUDA device, time.perf_counter on the CPU."""

    def __init__(self, torch, device):
        self.torch = torch
        self.cuda = torch.device(device).type == "cuda"

    def __enter__(self):
        if self.cuda:
            self.start = self.torch.cuda.Event(enable_timing=True)
            self.stop = self.torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.stop.record()
            self.stop.synchronize()
            self.ms = self.start.elapsed_time(self.stop)
        else:
            self.ms = (time.perf_counter() - self.t0) * 1e3
        return False


def _torch_device_name(torch, device) -> str:
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return dev.type


def torch_kmeans(X: np.ndarray, init: np.ndarray, n_iter: int = 100, chunk_rows: int = 1 << 21,
                 device: str = "cuda", warmup_iters: int = 1, return_result: bool = False) -> dict:
    """Lloyd's algorithm in PyTorch float32 (TF32 off), n_iter iterations with no convergence test, timed with
    CUDA events; returns ms_per_iter.

    Each iteration, per chunk of chunk_rows samples: scores = ||c||^2 - 2 x C^T (matmul; ||x||^2 does not change the
    argmin), labels = argmin, then index_add of the samples and of ones into per-cluster sums and counts; new
    centers = sums / counts, an empty cluster keeps its center. Chunking bounds the chunk x k score matrix, so a
    50M x 14 float32 dataset (2.8 GB) plus scores fits easily. X is copied to the device once, outside the timing.
    The dict's inertia is computed after timing, in float64 on the host (kmeans_inertia), from the final centers.
    """
    import torch

    X = np.ascontiguousarray(X, dtype=np.float32)
    init = np.ascontiguousarray(init, dtype=np.float32)
    n, d = X.shape
    k = init.shape[0]
    with _exact_fp32(torch), torch.no_grad():
        dev = torch.device(device)
        Xt = torch.from_numpy(X).to(dev)
        C = torch.from_numpy(init).to(dev)
        sums = torch.empty((k, d), dtype=torch.float32, device=dev)
        counts = torch.empty((k,), dtype=torch.float32, device=dev)
        ones = torch.ones((min(chunk_rows, n),), dtype=torch.float32, device=dev)

        def iterate(C):
            sums.zero_()
            counts.zero_()
            c_norm = (C * C).sum(1)
            for start in range(0, n, chunk_rows):
                x = Xt[start : start + chunk_rows]
                scores = torch.addmm(c_norm.unsqueeze(0), x, C.t(), beta=1.0, alpha=-2.0)
                labels = scores.argmin(1)
                sums.index_add_(0, labels, x)
                counts.index_add_(0, labels, ones[: x.shape[0]])
            new = sums / counts.clamp_min(1.0).unsqueeze(1)
            return torch.where((counts > 0).unsqueeze(1), new, C)

        for _ in range(warmup_iters):
            iterate(C.clone())
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        with _Timer(torch, device) as t:
            for _ in range(n_iter):
                C = iterate(C)
        centers = C.cpu().numpy()
        device_name = _torch_device_name(torch, device)
    out = {
        "library": "torch",
        "version": torch.__version__,
        "device": device_name,
        "n": n,
        "d": d,
        "k": k,
        "dtype": "float32",
        "tf32": False,
        "n_iter": n_iter,
        "chunk_rows": chunk_rows,
        "ms": t.ms,
        "ms_per_iter": t.ms / max(n_iter, 1),
        "inertia": kmeans_inertia(X, centers),
    }
    if return_result:
        out["centers"] = centers
    return out


def float64_mislabels(torch, Xt, C, labels, chunk_rows: int = 1 << 21) -> int:
    """Samples whose label is not the float64 argmin of their squared distances to centers C (ties: any minimiser)."""
    C64 = C.to(torch.float64)
    c_norm = (C64 * C64).sum(1)
    wrong = 0
    for start in range(0, Xt.shape[0], chunk_rows):
        x = Xt[start : start + chunk_rows].to(torch.float64)
        d = torch.addmm(c_norm.unsqueeze(0), x, C64.t(), beta=1.0, alpha=-2.0)
        best = d.min(1).values
        mine = d.gather(1, labels[start : start + chunk_rows].view(-1, 1).to(torch.int64)).squeeze(1)
        wrong += int((mine > best).sum().item())
    return wrong


FLASH_MODES = {"fp16": "float16 inputs", "tf32": "float32 inputs, its default TF32 products",
               "ieee": "float32 inputs, IEEE products (TRITON_F32_DEFAULT=ieee)"}


def flash_kmeans(X: np.ndarray, init: np.ndarray, n_iter: int = 100, mode: str = "fp16", device: str = "cuda") -> dict:
    """flash-kmeans (Triton) batch_kmeans_Euclid, tol=0, n_iter iterations from `init`, timed with CUDA events after
    one warm-up iteration (Triton compiles then). The mode picks the precision: float16 inputs, float32 with its
    default TF32 products, or float32 with IEEE products; the IEEE mode must be chosen before Triton compiles, so
    each mode runs in its own process (flash_kmeans_subprocess). The dict counts the labels of one more assignment
    to the final centers that are not their float64 argmin."""
    import torch
    import flash_kmeans as fk
    from flash_kmeans import kmeans_triton_impl as impl

    X = np.ascontiguousarray(X, dtype=np.float32)
    n, d = X.shape
    k = init.shape[0]
    dtype = torch.float16 if mode == "fp16" else torch.float32
    with torch.no_grad():
        dev = torch.device(device)
        Xt32 = torch.from_numpy(X).to(dev)
        x = Xt32.to(dtype).unsqueeze(0)
        C0 = torch.from_numpy(np.ascontiguousarray(init, dtype=np.float32)).to(dev).to(dtype).unsqueeze(0)
        fk.batch_kmeans_Euclid(x, k, max_iters=1, tol=0.0, init_centroids=C0.clone())  # compiles
        torch.cuda.synchronize(dev)
        with _Timer(torch, device) as t:
            _, C, iters = fk.batch_kmeans_Euclid(x, k, max_iters=n_iter, tol=0.0, init_centroids=C0.clone())
        x_sq = (x.float() ** 2).sum(-1).to(dtype)
        _, _, labels = impl._euclid_iter_compiled(x, x_sq, C, True)
        centers = C[0].float()
        wrong = float64_mislabels(torch, Xt32, centers, labels[0])
        device_name = _torch_device_name(torch, device)
    return {"library": "flash-kmeans", "version": getattr(fk, "__version__", "?"), "mode": mode,
            "device": device_name, "n": n, "d": d, "k": k, "n_iter": int(iters), "ms": t.ms,
            "ms_per_iter": t.ms / max(int(iters), 1), "inertia": kmeans_inertia(X, centers.cpu().numpy()),
            "float64_mislabels": wrong}


def flash_kmeans_subprocess(x_path, init_path, n_iter: int, mode: str, timeout: float | None = None) -> dict:
    """flash_kmeans in a fresh process (the Triton precision is read once per process)."""
    import json
    import subprocess
    import sys

    env = dict(os.environ)
    if mode == "ieee":
        env["TRITON_F32_DEFAULT"] = "ieee"
    cmd = [sys.executable, __file__, "flash", str(x_path), str(init_path), str(n_iter), mode]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError((p.stderr.strip().splitlines() or ["no output"])[-1])
    return json.loads(lines[-1])


def torch_knn(db: np.ndarray, queries: np.ndarray, k: int = 10, query_tile: int = 1024, db_chunk: int | None = None,
              device: str = "cuda", warmup: bool = True, return_result: bool = False) -> dict:
    """Brute-force k-NN in PyTorch float32 (TF32 off): for each tile of query_tile queries,
    d2 = ||q||^2 + ||x||^2 - 2 Q X^T (one addmm) and topk(k, smallest). With db_chunk set, the database is
    processed in chunks and the per-chunk top-k are merged (for databases whose tile x n score matrix would not
    fit). Timed with CUDA events over the search of all queries (data already on the device); returns ms and
    queries_per_second. Distances are squared L2."""
    import torch

    db = np.ascontiguousarray(db, dtype=np.float32)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    with _exact_fp32(torch), torch.no_grad():
        dev = torch.device(device)
        D = torch.from_numpy(db).to(dev)
        Q = torch.from_numpy(queries).to(dev)
        d_norm = (D * D).sum(1)
        n_db = D.shape[0]
        chunk = n_db if db_chunk is None else max(int(db_chunk), k)

        def search():
            all_d, all_i = [], []
            for qs in range(0, Q.shape[0], query_tile):
                q = Q[qs : qs + query_tile]
                q_norm = (q * q).sum(1, keepdim=True)
                best_d = best_i = None
                for cs in range(0, n_db, chunk):
                    x = D[cs : cs + chunk]
                    d2 = torch.addmm(d_norm[cs : cs + chunk].unsqueeze(0), q, x.t(), beta=1.0, alpha=-2.0)
                    d2.add_(q_norm).clamp_min_(0.0)
                    kk = min(k, x.shape[0])
                    vals, idx = torch.topk(d2, kk, dim=1, largest=False, sorted=True)
                    idx = idx + cs
                    if best_d is None:
                        best_d, best_i = vals, idx
                    else:
                        cat_d = torch.cat([best_d, vals], 1)
                        cat_i = torch.cat([best_i, idx], 1)
                        best_d, pos = torch.topk(cat_d, min(k, cat_d.shape[1]), dim=1, largest=False, sorted=True)
                        best_i = torch.gather(cat_i, 1, pos)
                all_d.append(best_d)
                all_i.append(best_i)
            return torch.cat(all_d), torch.cat(all_i)

        if warmup:
            search()
        with _Timer(torch, device) as t:
            dist, idx = search()
        device_name = _torch_device_name(torch, device)
        dist, idx = dist.cpu().numpy(), idx.cpu().numpy()
    out = {
        "library": "torch",
        "version": torch.__version__,
        "device": device_name,
        "n_db": int(db.shape[0]),
        "n_queries": int(queries.shape[0]),
        "d": int(db.shape[1]),
        "k": int(k),
        "dtype": "float32",
        "tf32": False,
        "query_tile": query_tile,
        "db_chunk": db_chunk,
        "ms": t.ms,
        "seconds": t.ms / 1e3,
        "queries_per_second": queries.shape[0] / (t.ms / 1e3) if t.ms > 0 else float("inf"),
    }
    if return_result:
        out["distances"] = dist
        out["indices"] = idx
    return out


def torch_pairwise(n: int = 16384, m: int = 16384, d: int = 128, repeats: int = 10, device: str = "cuda",
                   seed: int = 0, X: np.ndarray | None = None, Y: np.ndarray | None = None) -> dict:
    """Squared Euclidean distance matrix in PyTorch float32 (TF32 off): D = ||x||^2 + ||y||^2 - 2 X Y^T, as one
    addmm plus a broadcast add and a clamp at zero, materialising the n x m result. Timed with CUDA events over
    `repeats` runs after one warm-up; reports ms per run and TFLOP/s counting 2*n*m*d flops (the matmul).
    Uses the given X (n x d) and Y (m x d) or deterministic uniform data."""
    import torch

    if X is None or Y is None:
        rng = np.random.default_rng([seed, 3])
        X = rng.random(size=(n, d), dtype=np.float32)
        Y = rng.random(size=(m, d), dtype=np.float32)
    X = np.ascontiguousarray(X, dtype=np.float32)
    Y = np.ascontiguousarray(Y, dtype=np.float32)
    n, d = X.shape
    m = Y.shape[0]
    with _exact_fp32(torch), torch.no_grad():
        dev = torch.device(device)
        Xt = torch.from_numpy(X).to(dev)
        Yt = torch.from_numpy(Y).to(dev)
        out_buf = torch.empty((n, m), dtype=torch.float32, device=dev)

        def run():
            x_norm = (Xt * Xt).sum(1, keepdim=True)
            y_norm = (Yt * Yt).sum(1).unsqueeze(0)
            torch.addmm(y_norm, Xt, Yt.t(), beta=1.0, alpha=-2.0, out=out_buf)
            out_buf.add_(x_norm).clamp_min_(0.0)

        run()
        with _Timer(torch, device) as t:
            for _ in range(repeats):
                run()
        device_name = _torch_device_name(torch, device)
    ms = t.ms / max(repeats, 1)
    flops = 2.0 * n * m * d
    return {
        "library": "torch",
        "version": torch.__version__,
        "device": device_name,
        "n": n,
        "m": m,
        "d": d,
        "dtype": "float32",
        "tf32": False,
        "repeats": repeats,
        "ms": ms,
        "tflops": flops / (ms / 1e3) / 1e12 if ms > 0 else float("inf"),
    }


if __name__ == "__main__":
    import json
    import sys

    if len(sys.argv) == 6 and sys.argv[1] == "flash":  # flash_kmeans_subprocess: X.npy init.npy n_iter mode
        _, _, x_path, init_path, n_iter, mode = sys.argv
        print(json.dumps(flash_kmeans(np.load(x_path, mmap_mode="r"), np.load(init_path), int(n_iter), mode)))
        sys.exit(0)
    # a small smoke run of the CPU peers
    X, init = make_workload(100_000)
    for fn in (sklearn_kmeans, sklearnex_kmeans):
        print(json.dumps(fn(X, init, max_iter=20)))
    db, q = make_knn_workload(100_000, 1_000)
    for fn in (sklearn_knn, faiss_knn):
        print(json.dumps(fn(db, q, k=10)))
