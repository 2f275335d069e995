"""What gpuml computes after a k-NN search, in the extension rather than in numpy: the float64 distances of float32
data, the classifier's votes and the regressor's means. Each is checked against an independent reference on the
same neighbours: distances against numpy's float64 arithmetic from differences, votes and means against
scikit-learn's own code (which they must equal bit for bit)."""

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics.pairwise
from sklearn.neighbors._base import _get_weights
from sklearn.utils.extmath import weighted_mode

import gpuml
from gpuml import _gpuml

# scikit-learn's classes as gpuml's estimators derive from them (patch_sklearn may have replaced the public names).
SklearnClassifier = gpuml.KNeighborsClassifier.__bases__[-1]
SklearnRegressor = gpuml.KNeighborsRegressor.__bases__[-1]

_METRICS = [
    dict(metric="euclidean"),
    dict(metric="sqeuclidean"),
    dict(metric="manhattan"),
    dict(metric="chebyshev"),
    dict(metric="cosine"),
    dict(metric="minkowski", p=1),
    dict(metric="minkowski", p=np.inf),
]


def _reference_distances(Q, X, indices, metric):
    """float64 distances from each row of Q to its neighbours X[indices], from differences, in numpy."""
    q = Q.astype(np.float64)[:, None, :]
    x = X.astype(np.float64)[indices]
    name, p = metric["metric"], metric.get("p")
    if name == "cosine":  # scikit-learn's cosine distances of float32 data: float32, from its own float32 products
        return np.take_along_axis(sklearn.metrics.pairwise.cosine_distances(Q, X), indices, axis=1)
    diff = np.abs(q - x)
    if name == "manhattan" or p == 1:
        return diff.sum(axis=-1)
    if name == "chebyshev" or p == np.inf:
        return diff.max(axis=-1)
    squared = (diff * diff).sum(axis=-1)
    return squared if name == "sqeuclidean" else np.sqrt(squared)


def _assert_reference_distances(d, reference):
    assert d.dtype == reference.dtype
    if reference.dtype == np.float32:  # cosine: equal but for how the BLAS orders a float32 product's sum
        np.testing.assert_allclose(d, reference, rtol=0, atol=2.5e-7)
    else:  # equal but for the order of the float64 sums
        np.testing.assert_allclose(d, reference, rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("d", [3, 8, 37])
@pytest.mark.parametrize("metric", _METRICS, ids=lambda m: "-".join(str(v) for v in m.values()))
def test_float32_distances_are_float64_from_differences(rng, device, metric, d):
    X = rng.normal(size=(1013, d)).astype(np.float32)
    Q = rng.normal(size=(89, d)).astype(np.float32)
    if metric["metric"] == "cosine":
        X[17] = 0.0  # scikit-learn puts a zero vector at distance 1 from everything
        Q[5] = 0.0
    nn = gpuml.NearestNeighbors(n_neighbors=11, device=device, **metric).fit(X)
    distances, indices = nn.kneighbors(Q)
    _assert_reference_distances(distances, _reference_distances(Q, X, indices, metric))
    np.testing.assert_array_equal(nn.kneighbors(Q, return_distance=False), indices)
    assert distances.flags.c_contiguous and distances.flags.writeable and indices.dtype == np.int64

    own, own_indices = nn.kneighbors(n_neighbors=4)  # X=None: the training rows, each without itself
    _assert_reference_distances(own, _reference_distances(X, X, own_indices, metric))
    assert not np.any(own_indices == np.arange(len(X))[:, None])

    graph = nn.kneighbors_graph(Q, 6, mode="distance")
    six, six_indices = nn.kneighbors(Q, 6)
    np.testing.assert_array_equal(graph.indices, six_indices.ravel())
    np.testing.assert_array_equal(graph.data, six.ravel())


def test_float64_data_keeps_the_searchs_distances(rng, device):
    X = rng.normal(size=(611, 13))
    Q = rng.normal(size=(53, 13))
    distances, indices = gpuml.NearestNeighbors(n_neighbors=7, device=device).fit(X).kneighbors(Q)
    assert distances.dtype == np.float64
    reference = _reference_distances(Q, X, indices, dict(metric="euclidean"))
    np.testing.assert_allclose(distances, reference, rtol=1e-12)


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine"])
def test_distances_to_any_neighbours(rng, metric):
    X = rng.uniform(-3, 5, size=(509, 29)).astype(np.float32)
    Q = rng.uniform(-3, 5, size=(41, 29)).astype(np.float32)
    db = _gpuml.Neighbors_float32(X, metric, "host")
    indices = rng.integers(0, len(X), size=(len(Q), 23))  # repeats and any order
    _assert_reference_distances(db.distances_to(Q, indices), _reference_distances(Q, X, indices, dict(metric=metric)))
    own = rng.integers(0, len(X), size=(len(X), 3))
    _assert_reference_distances(db.distances_to(None, own), _reference_distances(X, X, own, dict(metric=metric)))
    with pytest.raises(ValueError, match="outside"):
        db.distances_to(Q, np.full((len(Q), 2), len(X)))
    with pytest.raises(ValueError, match="rows"):
        db.distances_to(Q, indices[:-1])


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine"])
def test_radius_neighbors_float32_distances(rng, device, metric):
    X = rng.normal(size=(733, 9)).astype(np.float32)
    Q = rng.normal(size=(37, 9)).astype(np.float32)
    full = _reference_distances(Q, X, np.broadcast_to(np.arange(len(X)), (len(Q), len(X))), dict(metric=metric))
    radius = float(np.quantile(full, 0.04))
    nn = gpuml.NearestNeighbors(radius=radius, metric=metric, device=device).fit(X)
    distances, indices = nn.radius_neighbors(Q, sort_results=True)
    for row, (d, i) in enumerate(zip(distances, indices)):
        _assert_reference_distances(d, full[row, i])
        assert np.all(np.diff(d) >= 0)
        # The rows within the radius, but for rows at the radius within float32 rounding (cosine selects by the
        # search's float32 values).
        differ = np.array(sorted(set(i.tolist()) ^ set(np.flatnonzero(full[row] <= radius).tolist())), dtype=np.int64)
        assert np.all(np.abs(full[row, differ] - radius) <= 1e-5 * radius), (row, differ)


def _labels_with_ties(rng, n):
    """Class names for n samples: uneven class sizes, one class much rarer than the others."""
    names = np.array(["ant", "bee", "cat", "dog", "eel", "fox", "gnu"])
    return names[rng.choice(len(names), size=n, p=[0.3, 0.2, 0.15, 0.15, 0.1, 0.08, 0.02])]


def _tied_data(rng, n, d, dtype):
    """Points on a small integer grid: many equal distances, so equal weights and vote totals tied but for rounding,
    where the order of the additions decides."""
    return rng.integers(0, 5, size=(n, d)).astype(dtype) + rng.choice([0.0, 0.1, 1 / 3], size=(n, d)).astype(dtype)


@pytest.mark.parametrize("k", [5, 8, 37, 150, 300])
@pytest.mark.parametrize("dtype,metric", [(np.float32, "euclidean"), (np.float64, "manhattan"), (np.float32, "cosine")])
def test_classifier_votes_are_sklearns_on_the_same_neighbours(rng, device, k, dtype, metric):
    X = _tied_data(rng, 1301, 4, dtype)
    Q = _tied_data(rng, 211, 4, dtype)
    y = _labels_with_ties(rng, len(X))
    for weights in ("uniform", "distance"):
        ours = gpuml.KNeighborsClassifier(n_neighbors=k, weights=weights, metric=metric, device=device).fit(X, y)
        distances, indices = ours.kneighbors(Q)
        labels = ours._y[indices]
        if weights == "uniform":
            # scikit-learn's predict_proba loop (its uniform path searches by itself) and scipy's mode.
            w = np.ones_like(indices)
            proba = np.zeros((len(Q), len(ours.classes_)))
            for i, idx in enumerate(labels.T):
                proba[np.arange(len(Q)), idx] += w[:, i]
            proba /= proba.sum(axis=1)[:, np.newaxis]
            predicted = ours.classes_[scipy.stats.mode(labels, axis=1).mode.ravel()]
        else:
            # scikit-learn's own predict and predict_proba on gpuml's neighbours (through ours.kneighbors).
            proba = SklearnClassifier.predict_proba(ours, Q)
            predicted = SklearnClassifier.predict(ours, Q)
            modes = weighted_mode(labels, _get_weights(distances, "distance"), axis=1)[0].ravel().astype(np.intp)
            np.testing.assert_array_equal(predicted, ours.classes_[modes])
        np.testing.assert_array_equal(ours.predict_proba(Q), proba)
        np.testing.assert_array_equal(ours.predict(Q), predicted)
    np.testing.assert_array_equal(ours.predict(None), SklearnClassifier.predict(ours, None))  # the training rows


@pytest.mark.parametrize("k", [5, 8, 37, 150, 300])
@pytest.mark.parametrize("outputs", [None, 1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_regressor_means_are_sklearns_on_the_same_neighbours(rng, device, k, outputs, dtype):
    X = _tied_data(rng, 997, 3, dtype)
    Q = _tied_data(rng, 173, 3, dtype)
    y = rng.normal(size=len(X) if outputs is None else (len(X), outputs)) * rng.uniform(0.1, 1e3)
    for weights in ("uniform", "distance"):
        ours = gpuml.KNeighborsRegressor(n_neighbors=k, weights=weights, device=device).fit(X, y)
        expected = SklearnRegressor.predict(ours, Q)  # scikit-learn's code on gpuml's neighbours
        predicted = ours.predict(Q)
        assert predicted.shape == expected.shape and predicted.dtype == expected.dtype
        np.testing.assert_array_equal(predicted, expected)
    np.testing.assert_array_equal(ours.predict(None), SklearnRegressor.predict(ours, None))


@pytest.mark.parametrize("k", [5, 9, 37, 150])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vote_totals_round_as_sklearns(rng, k, dtype):
    """Weights of a few decimal values: class totals equal in decimal arithmetic and apart by a rounding in binary,
    where only scikit-learn's order of additions gives its winner."""
    n, n_samples, n_classes = 3001, 503, 4
    indices = rng.integers(0, n_samples, size=(n, k))
    labels = rng.integers(0, n_classes, size=n_samples)
    weights = rng.choice(np.array([0.1, 0.2, 0.3, 0.6], dtype=dtype), size=(n, k))
    modes = _gpuml.weighted_modes(indices, labels, n_classes, weights)[0]
    np.testing.assert_array_equal(modes, weighted_mode(labels[indices], weights, axis=1)[0].ravel().astype(np.intp))
    totals = np.zeros((n, n_classes))
    for i, idx in enumerate(labels[indices].T):  # scikit-learn's predict_proba loop
        totals[np.arange(n), idx] += weights[:, i]
    np.testing.assert_array_equal(_gpuml.class_votes(indices, labels, n_classes, weights)[0], totals)


def test_callable_weights_and_integer_targets_stay_sklearns(rng, device):
    X = rng.normal(size=(401, 6)).astype(np.float32)
    Q = rng.normal(size=(31, 6)).astype(np.float32)
    y = rng.integers(-50, 50, size=len(X))

    def halves(d):
        return 0.5 / (d + 0.25)

    clf = gpuml.KNeighborsClassifier(n_neighbors=9, weights=halves, device=device).fit(X, y % 3)
    np.testing.assert_array_equal(clf.predict_proba(Q), SklearnClassifier.predict_proba(clf, Q))
    reg = gpuml.KNeighborsRegressor(n_neighbors=9, device=device).fit(X, y)
    np.testing.assert_array_equal(reg.predict(Q), SklearnRegressor.predict(reg, Q))


def test_votes_and_means_refuse_bad_arrays(rng):
    indices = rng.integers(0, 50, size=(7, 4))
    labels = rng.integers(0, 3, size=50)
    labels[indices[3, 2]] = 2
    with pytest.raises(ValueError, match="labels hold"):
        _gpuml.class_votes(indices, labels, 2, None)
    with pytest.raises(ValueError, match="indices hold"):
        _gpuml.class_votes(indices + 50, labels, 3, None)
    with pytest.raises(ValueError, match="shape"):
        _gpuml.weighted_modes(indices, labels, 3, rng.random((7, 3)))
    indices[6, 1] = 49
    with pytest.raises(ValueError, match="outside"):
        _gpuml.neighbour_means(indices, rng.random((49, 1)), None)
