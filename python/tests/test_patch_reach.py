"""The patch reaches every scikit-learn estimator built on nearest neighbours, even when every scikit-learn module
was imported before it (a fresh interpreter, so nothing of this test process leaks in)."""

import json
import subprocess
import sys
import textwrap

_PROGRAM = textwrap.dedent(
    """
    import importlib, json, pkgutil, warnings
    import numpy as np
    import sklearn

    warnings.simplefilter("ignore")
    for info in pkgutil.walk_packages(sklearn.__path__, "sklearn."):
        if ".tests" in info.name or "externals" in info.name or "conftest" in info.name:
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:  # optional dependencies (matplotlib, pandas) this environment may lack
            pass

    import gpuml

    names = gpuml.patch_sklearn()
    from sklearn.cluster import DBSCAN, OPTICS, SpectralClustering
    from sklearn.impute import KNNImputer
    from sklearn.manifold import TSNE, Isomap, LocallyLinearEmbedding, SpectralEmbedding
    from sklearn.neighbors import (LocalOutlierFactor, RadiusNeighborsClassifier, RadiusNeighborsRegressor,
                                   kneighbors_graph, radius_neighbors_graph)
    from sklearn.semi_supervised import LabelSpreading

    rng = np.random.default_rng({seed})
    X = rng.normal(size=(163, 4))
    y = rng.integers(0, 3, size=len(X))
    partial = y.copy()
    partial[::3] = -1
    holes = X.copy()
    holes[::7, 1] = np.nan
    work = {{
        "DBSCAN": lambda: DBSCAN(eps=0.9, min_samples=4).fit(X),
        "OPTICS": lambda: OPTICS(min_samples=5).fit(X),
        "TSNE": lambda: TSNE(perplexity=5.0, max_iter=250, random_state=0).fit(X),
        "Isomap": lambda: Isomap(n_neighbors=7).fit(X),
        "LocallyLinearEmbedding": lambda: LocallyLinearEmbedding(n_neighbors=7).fit(X),
        "SpectralEmbedding": lambda: SpectralEmbedding(affinity="nearest_neighbors", n_neighbors=7,
                                                       random_state=0).fit(X),
        "SpectralClustering": lambda: SpectralClustering(n_clusters=3, affinity="nearest_neighbors", n_neighbors=7,
                                                         random_state=0).fit(X),
        "kneighbors_graph": lambda: kneighbors_graph(X, 6),
        "radius_neighbors_graph": lambda: radius_neighbors_graph(X, 1.0),
        "LocalOutlierFactor": lambda: LocalOutlierFactor(n_neighbors=9).fit(X),
        "LabelSpreading": lambda: LabelSpreading(kernel="knn", n_neighbors=7).fit(X, partial),
        "KNNImputer": lambda: KNNImputer(n_neighbors=4).fit_transform(holes),
        "RadiusNeighborsClassifier": lambda: RadiusNeighborsClassifier(radius=2.0).fit(X, y).predict(X),
        "RadiusNeighborsRegressor": lambda: RadiusNeighborsRegressor(radius=2.0).fit(X, X[:, 0]).predict(X),
    }}
    made = {{}}
    for name, run in work.items():
        before = gpuml.calls.gpuml
        run()
        made[name] = gpuml.calls.gpuml - before
    print(json.dumps({{"made": made, "names": names}}))
    """
)

#: Estimators that build or use no patched class, and why (their counts must stay 0, so that this list stays true).
NOT_REACHED = {
    "KNNImputer": "computes nan_euclidean distances with pairwise_distances_chunked itself, no neighbour estimator",
}


def test_patch_after_importing_every_sklearn_module_reaches_every_neighbour_estimator(rng):
    code = _PROGRAM.format(seed=int(rng.integers(2**31)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for name, made in result["made"].items():
        if name in NOT_REACHED:
            assert made == 0, f"{name} now reaches gpuml: NOT_REACHED is out of date"
        else:
            assert made > 0, f"{name} made no call into gpuml"
    for name in ("sklearn.cluster.DBSCAN", "sklearn.cluster._dbscan.DBSCAN", "sklearn.neighbors.LocalOutlierFactor",
                 "sklearn.neighbors._lof.LocalOutlierFactor", "sklearn.neighbors.RadiusNeighborsClassifier",
                 "sklearn.neighbors.KNeighborsTransformer", "sklearn.neighbors._graph.RadiusNeighborsTransformer",
                 "sklearn.manifold._t_sne.NearestNeighbors"):
        assert name in result["names"]
