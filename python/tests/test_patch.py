"""gpuml.patch_sklearn() and python -m gpuml.accel: the patch reaches every scikit-learn module that bound one of the
four classes, whatever was imported first, and unpatch_sklearn() puts scikit-learn's classes back everywhere."""

import importlib
import logging
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from sklearn.datasets import make_blobs

import gpuml

# The scikit-learn modules that bind one of the classes at their import, and the names they bind it by.
BOUND_AT_IMPORT = {
    "sklearn.cluster": ["KMeans"],
    "sklearn.cluster._kmeans": ["KMeans"],
    "sklearn.cluster._bicluster": ["KMeans"],
    "sklearn.cluster._dbscan": ["NearestNeighbors"],
    "sklearn.cluster._optics": ["NearestNeighbors"],
    "sklearn.cluster._spectral": ["NearestNeighbors"],
    "sklearn.cluster._mean_shift": ["NearestNeighbors"],
    "sklearn.manifold._t_sne": ["NearestNeighbors"],
    "sklearn.manifold._isomap": ["NearestNeighbors"],
    "sklearn.manifold._locally_linear": ["NearestNeighbors"],
    "sklearn.manifold._spectral_embedding": ["NearestNeighbors"],
    "sklearn.neighbors": ["NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor"],
    "sklearn.neighbors._graph": ["NearestNeighbors"],
    "sklearn.neighbors._unsupervised": ["NearestNeighbors"],
    "sklearn.neighbors._classification": ["KNeighborsClassifier"],
    "sklearn.neighbors._regression": ["KNeighborsRegressor"],
    "sklearn.semi_supervised._label_propagation": ["NearestNeighbors"],
    "sklearn.feature_selection._mutual_info": ["NearestNeighbors"],
}


@pytest.fixture
def unpatched():
    """Runs a test from scikit-learn's own classes and leaves them in place whatever the test does."""
    gpuml.unpatch_sklearn()
    yield
    gpuml.unpatch_sklearn()


def _originals():
    """{(module, name): the object there now}, importing every module (before any patch, in these tests)."""
    return {(m, n): getattr(importlib.import_module(m), n) for m, names in BOUND_AT_IMPORT.items() for n in names}


def _gpuml_calls(work):
    """Runs work() and returns its result and how many calls it made into gpuml."""
    before = gpuml.calls.gpuml
    result = work()
    return result, gpuml.calls.gpuml - before


def _blobs(rng, n, d):
    X, _ = make_blobs(n_samples=n, n_features=d, centers=4, cluster_std=0.3, random_state=int(rng.integers(2**31)))
    return X


def test_patch_reaches_modules_imported_before_it_and_unpatch_restores_them(unpatched, rng, caplog):
    originals = _originals()
    assert all(c.__module__.startswith("sklearn.") for c in originals.values())
    with caplog.at_level(logging.INFO, logger="gpuml"):
        names = gpuml.patch_sklearn()
    try:
        for (module_name, name), original in originals.items():
            assert f"{module_name}.{name}" in names
            replaced = getattr(sys.modules[module_name], name)
            assert replaced is getattr(gpuml, name), (module_name, name)
            assert issubclass(replaced, original)  # isinstance checks against scikit-learn's class still hold
            assert f"{module_name}.{name}" in caplog.text
        assert gpuml.patched_names() == names
        assert gpuml.patch_sklearn() == names  # idempotent
        # gpuml's own modules keep the classes gpuml's classes inherit from
        assert gpuml._kmeans._SklearnKMeans is originals[("sklearn.cluster._kmeans", "KMeans")]
        assert gpuml._neighbors._SklearnNearestNeighbors is originals[("sklearn.neighbors", "NearestNeighbors")]
    finally:
        restored = gpuml.unpatch_sklearn()
    assert set(restored) == set(names)
    for (module_name, name), original in originals.items():
        assert getattr(sys.modules[module_name], name) is original
    assert gpuml.patched_names() == []


def test_estimators_built_on_the_patched_classes_run_in_gpuml(unpatched, rng):
    from sklearn.cluster import DBSCAN, OPTICS, SpectralClustering
    from sklearn.manifold import TSNE, Isomap, LocallyLinearEmbedding, SpectralEmbedding
    from sklearn.neighbors import kneighbors_graph

    X = rng.normal(size=(int(rng.integers(97, 180)), int(rng.integers(3, 6))))  # one connected cloud
    n_neighbors = int(rng.integers(4, 9))
    seed = int(rng.integers(2**31))
    work = {
        "DBSCAN": lambda: DBSCAN(eps=0.8, min_samples=4).fit(X).labels_,
        "OPTICS": lambda: OPTICS(min_samples=5).fit(X).labels_,
        "kneighbors_graph": lambda: kneighbors_graph(X, n_neighbors, mode="distance").toarray(),
        "Isomap": lambda: Isomap(n_neighbors=n_neighbors, n_components=2).fit(X).dist_matrix_,
        "SpectralClustering": lambda: SpectralClustering(
            n_clusters=4, affinity="nearest_neighbors", n_neighbors=n_neighbors, random_state=seed
        ).fit(X).affinity_matrix_.toarray(),
        "SpectralEmbedding": lambda: SpectralEmbedding(
            n_components=2, affinity="nearest_neighbors", n_neighbors=n_neighbors, random_state=seed
        ).fit(X).affinity_matrix_.toarray(),
        "LocallyLinearEmbedding": lambda: LocallyLinearEmbedding(
            n_neighbors=n_neighbors, n_components=2, random_state=seed
        ).fit(X).nbrs_.kneighbors(X[:7])[1],
        "TSNE": lambda: TSNE(n_components=2, perplexity=5.0, max_iter=250, random_state=seed).fit(X).embedding_,
    }
    expected = {name: w() for name, w in work.items()}
    gpuml.calls.reset()
    assert sum(_gpuml_calls(w)[1] for w in work.values()) == 0  # scikit-learn's own run made no gpuml call

    gpuml.patch_sklearn()
    for name, w in work.items():
        result, made = _gpuml_calls(w)
        assert made > 0, f"{name} made no call into gpuml"
        if name == "TSNE":  # its gradient descent amplifies last-bit differences; the embedding is only checked sane
            assert result.shape == (len(X), 2) and np.isfinite(result).all()
        elif name in ("DBSCAN", "OPTICS", "LocallyLinearEmbedding"):
            np.testing.assert_array_equal(result, expected[name], err_msg=name)
        else:
            np.testing.assert_allclose(result, expected[name], rtol=1e-9, atol=1e-12, err_msg=name)


def test_models_built_while_patched_pickle_and_are_instances_of_sklearn_classes(unpatched, rng):
    import sklearn.cluster
    import sklearn.neighbors

    sklearn_kmeans = sklearn.cluster.KMeans
    gpuml.patch_sklearn()
    X = _blobs(rng, 211, 6)
    km = sklearn.cluster.KMeans(n_clusters=4, n_init=1, random_state=0).fit(X)
    nn = sklearn.neighbors.NearestNeighbors(n_neighbors=3).fit(X)
    assert isinstance(km, sklearn_kmeans) and type(km) is gpuml.KMeans
    km2, nn2 = pickle.loads(pickle.dumps((km, nn)))
    np.testing.assert_array_equal(km2.predict(X), km.predict(X))
    np.testing.assert_array_equal(nn2.kneighbors(X[:17])[1], nn.kneighbors(X[:17])[1])


def test_unpatch_restores_modules_imported_while_patched():
    """A scikit-learn module first imported while the patch is active binds gpuml's classes from the patched ones;
    unpatch_sklearn() gives it scikit-learn's back (a fresh interpreter, so that the module is not yet imported)."""
    code = textwrap.dedent(
        """
        import sys, gpuml
        gpuml.patch_sklearn()
        assert "sklearn.utils._test_common.instance_generator" not in sys.modules
        from sklearn.utils._test_common import instance_generator as late
        assert late.KMeans is gpuml.KMeans and late.KNeighborsClassifier is gpuml.KNeighborsClassifier
        assert "sklearn.utils._test_common.instance_generator.KMeans" in gpuml.patched_names()
        gpuml.unpatch_sklearn()
        import sklearn.cluster._kmeans, sklearn.neighbors._classification
        assert late.KMeans is sklearn.cluster._kmeans.KMeans is sklearn.cluster.KMeans
        assert late.KNeighborsClassifier is sklearn.neighbors._classification.KNeighborsClassifier
        assert late.KMeans.__module__ == "sklearn.cluster._kmeans"
        assert gpuml.patched_names() == []
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["ok"]


_PROBE = """
import sys
import {helper}
from sklearn.cluster import KMeans
import sklearn.cluster._dbscan
print(repr(({helper}.VALUE, sys.path[0], sys.argv, KMeans.__module__,
            sklearn.cluster._dbscan.NearestNeighbors.__module__)))
"""


def _run(args, cwd):
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return eval(done.stdout.strip().splitlines()[-1])  # the probe's repr() of plain values


def test_accel_runs_a_script_with_its_folder_first_on_sys_path(tmp_path, rng):
    helper = f"helper_{rng.integers(10**9)}"  # a name nothing else on sys.path has
    folder = tmp_path / "sub"
    folder.mkdir()
    value = int(rng.integers(10**6))
    (folder / f"{helper}.py").write_text(f"VALUE = {value}\n")
    (folder / "script.py").write_text(_PROBE.format(helper=helper))
    script = os.path.join("sub", "script.py")
    plain = _run([script, "a", "-b"], cwd=tmp_path)
    patched = _run(["-m", "gpuml.accel", script, "a", "-b"], cwd=tmp_path)
    assert plain[:3] == patched[:3] == (value, str(folder.resolve()), [script, "a", "-b"])
    assert plain[3:] == ("sklearn.cluster._kmeans", "sklearn.neighbors._unsupervised")
    assert patched[3:] == ("gpuml._kmeans", "gpuml._neighbors")


def test_accel_runs_a_module_with_the_current_folder_first_on_sys_path(tmp_path, rng):
    helper = f"helper_{rng.integers(10**9)}"
    module = f"probe_{rng.integers(10**9)}"
    value = int(rng.integers(10**6))
    (tmp_path / f"{helper}.py").write_text(f"VALUE = {value}\n")
    (tmp_path / f"{module}.py").write_text(_PROBE.format(helper=helper))
    plain = _run(["-m", module, "x"], cwd=tmp_path)
    patched = _run(["-m", "gpuml.accel", "-m", module, "x"], cwd=tmp_path)
    module_file = str((tmp_path / f"{module}.py").resolve())
    assert plain[:3] == patched[:3] == (value, str(tmp_path.resolve()), [module_file, "x"])
    assert patched[3:] == ("gpuml._kmeans", "gpuml._neighbors")


def test_accel_verbose_lists_what_it_patched_and_passes_the_exit_status(tmp_path):
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    done = subprocess.run(
        [sys.executable, "-m", "gpuml.accel", "-v", str(tmp_path / "exits.py")], capture_output=True, text=True
    )
    assert done.returncode == 3
    for name in ("sklearn.cluster._dbscan.NearestNeighbors", "sklearn.manifold._t_sne.NearestNeighbors",
                 "sklearn.neighbors._graph.NearestNeighbors", "sklearn.cluster.KMeans"):
        assert name in done.stderr
    quiet = subprocess.run([sys.executable, "-m", "gpuml.accel", str(tmp_path / "exits.py")], capture_output=True,
                           text=True)
    assert quiet.returncode == 3 and "NearestNeighbors" not in quiet.stderr  # INFO stays unseen without -v
