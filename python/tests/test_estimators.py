"""gpuml's estimators against scikit-learn's own, on fresh random data of awkward sizes."""

import pickle
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.cluster
import sklearn.metrics
import sklearn.neighbors
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning, NotFittedError

import gpuml


def _blobs(rng, n, d, k, dtype):
    X, _ = make_blobs(n_samples=n, n_features=d, centers=k, cluster_std=0.4, random_state=int(rng.integers(2**31)))
    return X.astype(dtype)


def _same_partition(a, b):
    """Labels equal up to a renaming of the clusters."""
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def _mismatches(a, b):
    """(which samples' labels differ under the best one-to-one renaming of a's clusters onto b's, greedy by count;
    that renaming from b's clusters back to a's)."""
    pairs, mapping = {}, {}
    for pair in zip(a.tolist(), b.tolist()):
        pairs[pair] = pairs.get(pair, 0) + 1
    for (x, y), _ in sorted(pairs.items(), key=lambda item: -item[1]):
        if x not in mapping and y not in mapping.values():
            mapping[x] = y
    differ = np.array([mapping.get(x) != y for x, y in zip(a.tolist(), b.tolist())])
    return differ, {y: x for x, y in mapping.items()}


def _sklearn_starting_samples(X, w, k, random_state):
    from sklearn.cluster._kmeans import _kmeans_plusplus
    from sklearn.utils.extmath import row_norms

    centred = X - X.mean(axis=0)
    return _kmeans_plusplus(centred, k, row_norms(centred, squared=True), w, np.random.RandomState(random_state))[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "n,d,k,init", [(1003, 7, 5, "k-means++"), (517, 33, 13, "random"), (2051, 3, 64, "k-means++"), (259, 129, 9, "array")]
)
def test_kmeans_matches_sklearn(rng, device, dtype, n, d, k, init):
    X = _blobs(rng, n, d, k, dtype)
    w = rng.uniform(0.5, 2.0, n).astype(dtype)
    init_value = X[rng.choice(n, k, replace=False)] + 0.1 if init == "array" else init
    params = dict(n_clusters=k, init=init_value, n_init=2 if init == "random" else "auto", random_state=7, tol=1e-6)
    before = gpuml.calls.gpuml
    ours = gpuml.KMeans(**params, device=device).fit(X, sample_weight=w)
    assert gpuml.calls.gpuml == before + 1  # gpuml ran the fit, not scikit-learn
    reference = params
    if init == "k-means++" and dtype == np.float32:
        # A float32 draw can fall within rounding of a boundary (test_kmeans_fit.py measures how rarely); Lloyd's
        # iterations are then compared from gpuml's own starting samples.
        key, pos = np.random.RandomState(7).get_state()[1:3]
        starting = gpuml._gpuml.starting_samples_float32(X, w, k, "k-means++", np.asarray(key, np.uint32), pos, device)[0]
        if not np.array_equal(starting, _sklearn_starting_samples(X, w, k, 7)):
            reference = dict(params, init=X[starting], n_init=1)
    ref = sklearn.cluster._kmeans.KMeans(**reference).fit(X, sample_weight=w)
    assert ours.cluster_centers_.dtype == ref.cluster_centers_.dtype == dtype
    assert ours.labels_.dtype == np.int32
    Y = _blobs(rng, 301, d, k, dtype)
    if dtype == np.float64 or _same_partition(ours.labels_, ref.labels_):
        assert _same_partition(ours.labels_, ref.labels_)
        assert ours.n_iter_ == ref.n_iter_
        rtol = 1e-5 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(ours.inertia_, ref.inertia_, rtol=rtol)
        np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=rtol, atol=rtol * 10)
        np.testing.assert_array_equal(ours.predict(Y), ref.predict(Y))
        np.testing.assert_allclose(ours.score(Y), ref.score(Y), rtol=rtol)
        return
    # float32: gpuml forms distances from differences, scikit-learn from norms and products, and the two round
    # differently; a sample within that rounding of two centers can go either way, and the runs then part a little.
    # Such samples are few, and each lies on the border of gpuml's cluster and the one scikit-learn put it in (a
    # sample inside another blob would be several times farther from that cluster's center).
    differ, back = _mismatches(ours.labels_, ref.labels_)
    assert differ.sum() <= max(1, n // 100), f"{differ.sum()} of {n} labels differ"
    X64, centers = X.astype(np.float64), ours.cluster_centers_.astype(np.float64)
    for i in np.flatnonzero(differ):
        mine = np.sum((X64[i] - centers[ours.labels_[i]]) ** 2)
        other = np.sum((X64[i] - centers[back.get(ref.labels_[i], ours.labels_[i])]) ** 2)
        assert other <= 1.25 * mine, f"sample {i}: {other} from scikit-learn's cluster, {mine} from gpuml's"
    assert abs(ours.n_iter_ - ref.n_iter_) <= 2
    np.testing.assert_allclose(ours.inertia_, ref.inertia_, rtol=1e-4)


def test_kmeans_sparse_input_matches_sklearn(rng, device):
    X = _blobs(rng, 611, 17, 6, np.float64)
    X[rng.random(X.shape) < 0.5] = 0.0
    Xs = sp.csr_matrix(X)
    ours = gpuml.KMeans(n_clusters=6, random_state=3, device=device).fit(Xs)
    ref = sklearn.cluster._kmeans.KMeans(n_clusters=6, random_state=3).fit(Xs)
    assert _same_partition(ours.labels_, ref.labels_)
    np.testing.assert_allclose(ours.inertia_, ref.inertia_, rtol=1e-10)
    np.testing.assert_array_equal(ours.predict(Xs), ref.predict(Xs))


def test_kmeans_verbose_goes_to_python_stdout(rng, device, capsys):
    X = _blobs(rng, 401, 5, 4, np.float32)
    gpuml.KMeans(n_clusters=4, random_state=0, verbose=1, tol=0, device=device).fit(X)
    out = capsys.readouterr().out
    assert "Initialization complete" in out
    assert "Iteration 0, inertia" in out
    assert "Converged at iteration" in out and "strict convergence" in out


def test_kmeans_warnings_and_errors_are_sklearns(rng, device):
    X = np.repeat(_blobs(rng, 3, 4, 1, np.float64), 5, axis=0)  # three distinct points
    with pytest.warns(ConvergenceWarning, match=r"Number of distinct clusters \(3\) found smaller than n_clusters"):
        gpuml.KMeans(n_clusters=5, random_state=0, device=device).fit(X)
    with pytest.raises(ValueError, match="n_samples=15 should be >= n_clusters=16"):
        gpuml.KMeans(n_clusters=16, device=device).fit(X)
    with pytest.raises(NotFittedError):
        gpuml.KMeans(device=device).predict(X)
    with pytest.raises(ValueError, match="device"):
        gpuml.KMeans(device=1.5).fit(X)


def test_kmeans_failed_fit_leaves_the_estimator_fitted_as_before(rng, device):
    X = _blobs(rng, 300, 4, 3, np.float64)
    km = gpuml.KMeans(n_clusters=3, random_state=0, device=device).fit(X)
    centers = km.cluster_centers_.copy()
    bad = X.copy()
    bad[7, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        km.fit(bad)
    np.testing.assert_array_equal(km.cluster_centers_, centers)


_METRICS = [
    dict(metric="minkowski", p=2),
    dict(metric="minkowski", p=1),
    dict(metric="minkowski", p=np.inf),
    dict(metric="euclidean"),
    dict(metric="manhattan"),
    dict(metric="chebyshev"),
    dict(metric="cosine"),
    dict(metric="sqeuclidean"),
]


def _assert_same_neighbours(i, i_ref, d, d_ref, dtype):
    """The same neighbours, except where float32 data puts two candidates within rounding of each other (gpuml ranks
    float32 data in float32, scikit-learn in float64): there the distances at that place still agree."""
    if dtype == np.float64:
        np.testing.assert_array_equal(i, i_ref)
        return
    differ = i != i_ref
    assert differ.mean() < 0.01, f"{differ.sum()} of {differ.size} neighbours differ"
    np.testing.assert_allclose(d[differ], d_ref[differ], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", _METRICS, ids=lambda m: "-".join(str(v) for v in m.values()))
def test_kneighbors_matches_sklearn(rng, device, dtype, metric):
    X = rng.normal(size=(1237, 19)).astype(dtype)
    Q = rng.normal(size=(97, 19)).astype(dtype)
    ours = gpuml.NearestNeighbors(n_neighbors=6, device=device, **metric).fit(X)
    ref = sklearn.neighbors._unsupervised.NearestNeighbors(n_neighbors=6, algorithm="brute", **metric).fit(X)
    before = gpuml.calls.gpuml
    d, i = ours.kneighbors(Q)
    assert gpuml.calls.gpuml == before + 1
    d_ref, i_ref = ref.kneighbors(Q)
    _assert_same_neighbours(i, i_ref, d, d_ref, dtype)
    assert d.dtype == d_ref.dtype
    np.testing.assert_allclose(d, d_ref, rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-6)
    d, i = ours.kneighbors(n_neighbors=3)  # X=None: each training sample excluded from its own neighbours
    d_ref, i_ref = ref.kneighbors(n_neighbors=3)
    _assert_same_neighbours(i, i_ref, d, d_ref, dtype)
    d2, i2 = ref.kneighbors(Q, 2)
    _assert_same_neighbours(ours.kneighbors(Q, 2, return_distance=False), i2, ours.kneighbors(Q, 2)[0], d2, dtype)
    g, g_ref = ours.kneighbors_graph(Q, 4, mode="distance"), ref.kneighbors_graph(Q, 4, mode="distance")
    np.testing.assert_array_equal(g.indices, g_ref.indices)
    np.testing.assert_allclose(g.data, g_ref.data, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", _METRICS, ids=lambda m: "-".join(str(v) for v in m.values()))
def test_radius_neighbors_match_sklearn(rng, device, dtype, metric):
    X = rng.normal(size=(733, 6)).astype(dtype)
    Q = rng.normal(size=(41, 6)).astype(dtype)
    ref = sklearn.neighbors._unsupervised.NearestNeighbors(algorithm="brute", **metric).fit(X)
    radius = float(np.quantile(ref.kneighbors(Q[:1], 733)[0], 0.05))  # a few dozen neighbours per query
    ours = gpuml.NearestNeighbors(radius=radius, device=device, **metric).fit(X)
    ref.set_params(radius=radius)
    for queries in (Q, None):
        before = gpuml.calls.gpuml
        d, i = ours.radius_neighbors(queries, sort_results=True)
        assert gpuml.calls.gpuml == before + 1
        d_ref, i_ref = ref.radius_neighbors(queries, sort_results=True)
        assert len(i) == len(i_ref)
        for row, (a, b, da, db) in enumerate(zip(i, i_ref, d, d_ref)):
            # The same neighbours, except rows at the radius within float rounding, which scikit-learn compares in
            # float32 for some metrics of float32 data; ours sorted by (distance, index), scikit-learn's order among
            # (near-)ties is its own.
            q = X[row] if queries is None else Q[row]
            for j in set(a.tolist()) ^ set(b.tolist()):
                exact = float(sklearn.metrics.pairwise_distances(q[None].astype(np.float64), X[j : j + 1].astype(np.float64), **metric)[0, 0])
                assert abs(exact - radius) <= 1e-6 * radius, (row, j, exact, radius)
                keep_a, keep_b = a != j, b != j
                a, da, b, db = a[keep_a], da[keep_a], b[keep_b], db[keep_b]
            np.testing.assert_array_equal(np.sort(a), np.sort(b))
            assert np.all(np.diff(da) >= 0) and np.all((np.diff(da) > 0) | (np.diff(a) > 0))
            db = db[np.argsort(b)][np.argsort(np.argsort(a))]  # scikit-learn's distances in our order
            assert da.dtype == db.dtype
            # scikit-learn computes cosine distances of float32 data in float32.
            rtol = 2e-5 if (dtype == np.float32 and metric["metric"] == "cosine") else 1e-6
            np.testing.assert_allclose(da, db, rtol=rtol, atol=1e-7)
        unsorted = ours.radius_neighbors(queries, return_distance=False)
        for a, b in zip(unsorted, i):
            np.testing.assert_array_equal(a, np.sort(b))  # index order without sort_results
    g, g_ref = ours.radius_neighbors_graph(Q, mode="distance"), ref.radius_neighbors_graph(Q, mode="distance")
    assert abs(g.nnz - g_ref.nnz) <= 2 and abs(g.sum() - g_ref.sum()) <= 2 * radius + 1e-6 * g_ref.sum()


def test_unsupported_metrics_are_sklearns(rng, device):
    X = rng.normal(size=(211, 5))
    ref = sklearn.neighbors._unsupervised.NearestNeighbors(metric="minkowski", p=3).fit(X)
    before = gpuml.calls.sklearn
    odd = gpuml.NearestNeighbors(metric="minkowski", p=3, device=device).fit(X)
    np.testing.assert_array_equal(odd.kneighbors(X[:9])[1], ref.kneighbors(X[:9])[1])
    assert gpuml.calls.sklearn == before + 1


def test_sparse_queries_and_database(rng, device):
    X = rng.normal(size=(333, 21))
    X[rng.random(X.shape) < 0.6] = 0
    Xs = sp.csr_matrix(X)
    ours = gpuml.NearestNeighbors(n_neighbors=4, algorithm="brute", device=device).fit(Xs)
    ref = sklearn.neighbors._unsupervised.NearestNeighbors(n_neighbors=4, algorithm="brute").fit(Xs)
    np.testing.assert_array_equal(ours.kneighbors(Xs[:50])[1], ref.kneighbors(Xs[:50])[1])


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_classifier_and_regressor_match_sklearn(rng, device, weights):
    X = rng.normal(size=(777, 9)).astype(np.float32)
    names = np.array(["cat", "dog", "emu", "fox"])
    y = names[rng.integers(0, 4, len(X))]
    Q = rng.normal(size=(123, 9)).astype(np.float32)
    ours = gpuml.KNeighborsClassifier(n_neighbors=7, weights=weights, device=device).fit(X, y)
    ref = sklearn.neighbors._classification.KNeighborsClassifier(n_neighbors=7, weights=weights).fit(X, y)
    before = gpuml.calls.gpuml
    np.testing.assert_array_equal(ours.predict(Q), ref.predict(Q))
    assert gpuml.calls.gpuml > before
    np.testing.assert_allclose(ours.predict_proba(Q), ref.predict_proba(Q), rtol=1e-6)
    assert ours.score(Q, ref.predict(Q)) == 1.0
    t = rng.normal(size=(len(X), 2))
    reg = gpuml.KNeighborsRegressor(n_neighbors=5, weights=weights, device=device).fit(X, t)
    reg_ref = sklearn.neighbors._regression.KNeighborsRegressor(n_neighbors=5, weights=weights).fit(X, t)
    np.testing.assert_allclose(reg.predict(Q), reg_ref.predict(Q), rtol=1e-6)


def test_pickled_models_predict_the_same_in_a_new_process(rng, device, tmp_path):
    X = _blobs(rng, 907, 11, 7, np.float32)
    Q = _blobs(rng, 101, 11, 7, np.float32)
    km = gpuml.KMeans(n_clusters=7, random_state=1, device=device).fit(X)
    nn = gpuml.NearestNeighbors(n_neighbors=5, device=device).fit(X)
    expected = (km.predict(Q), nn.kneighbors(Q)[1])
    (tmp_path / "models.pkl").write_bytes(pickle.dumps((km, nn, Q)))
    code = textwrap.dedent(
        f"""
        import pickle, sys, numpy as np, gpuml
        km, nn, Q = pickle.loads(open({str(tmp_path / "models.pkl")!r}, "rb").read())
        np.save({str(tmp_path / "labels.npy")!r}, km.predict(Q))
        np.save({str(tmp_path / "indices.npy")!r}, nn.kneighbors(Q)[1])
        assert gpuml.calls.gpuml == 2, gpuml.calls.gpuml
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    np.testing.assert_array_equal(np.load(tmp_path / "labels.npy"), expected[0])
    np.testing.assert_array_equal(np.load(tmp_path / "indices.npy"), expected[1])


def test_ctrl_c_stops_a_long_fit(device):
    """SIGINT during a fit (sent once its third iteration has printed) raises KeyboardInterrupt in the fitting thread
    and leaves the estimator unfitted; the time from the signal to the exception is printed, not asserted."""
    code = textwrap.dedent(
        f"""
        import signal, time, numpy as np, gpuml
        # Ctrl-C delivered and handled as in a terminal, whatever this process inherited (a shell's background job
        # starts with SIGINT ignored; a parent thread's blocked signals carry over to its children).
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGINT}})
        signal.signal(signal.SIGINT, signal.default_int_handler)
        X = np.random.default_rng(0).uniform(size=(200000, 32)).astype(np.float32)
        km = gpuml.KMeans(n_clusters=256, init=X[:256], max_iter=100000, tol=0, verbose=1, device={device!r})
        try:
            km.fit(X)
        except KeyboardInterrupt:
            print("interrupted", time.monotonic(), hasattr(km, "cluster_centers_"), flush=True)
        """
    )
    import signal
    import time

    # -u: the child's verbose lines reach this process as they are written (a pipe's 8 KiB buffer would hold some
    # 200 of them, and a loaded machine could then see "Iteration 2" only after the fit converged).
    child = subprocess.Popen([sys.executable, "-u", "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        for line in child.stdout:
            if line.startswith("Iteration 2,"):
                break
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=120)
    finally:
        child.kill()
    last = out.strip().splitlines()[-1].split()
    assert last[0] == "interrupted", out[-500:]
    assert last[2] == "False"  # nothing half-fitted
    print(f"Ctrl-C to KeyboardInterrupt: {float(last[1]) - sent:.3f} s")


def test_two_threads_share_one_fitted_estimator(rng, device):
    X = rng.normal(size=(2003, 13)).astype(np.float32)
    nn = gpuml.NearestNeighbors(n_neighbors=3, device=device).fit(X)
    km = gpuml.KMeans(n_clusters=9, random_state=0, device=device).fit(X)
    serial = (nn.kneighbors(X[:500])[1], km.predict(X))
    results = [None, None]

    def work(slot):
        results[slot] = (nn.kneighbors(X[:500])[1], km.predict(X))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r[0], serial[0])
        np.testing.assert_array_equal(r[1], serial[1])


def test_patch_sklearn_and_accel(tmp_path):
    original = sklearn.cluster.KMeans
    gpuml.patch_sklearn()
    try:
        assert sklearn.cluster.KMeans is gpuml.KMeans
        assert sklearn.neighbors.KNeighborsClassifier is gpuml.KNeighborsClassifier
        assert "sklearn.cluster.KMeans" in gpuml.patched_names()
    finally:
        gpuml.unpatch_sklearn()
    assert sklearn.cluster.KMeans is original
    script = tmp_path / "user_script.py"
    script.write_text(
        "import sys\nfrom sklearn.cluster import KMeans\nfrom sklearn.neighbors import NearestNeighbors\n"
        "print(KMeans.__module__, NearestNeighbors.__module__, sys.argv[1:])\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "gpuml.accel", str(script), "a", "b"], check=True, capture_output=True, text=True
    ).stdout
    assert out.split() == ["gpuml._kmeans", "gpuml._neighbors", "['a',", "'b']"]


def test_devices_and_backend_name():
    assert isinstance(gpuml.devices(), list)
    assert gpuml.backend_name("host") == "host"
