"""gpuml.DBSCAN against scikit-learn's DBSCAN: labels_, core_sample_indices_ and components_ equal on random data with
duplicates and pairs at exactly eps, the bundled datasets, float32 and float64, every gpuml metric, weights; the
fallbacks to scikit-learn's own fit."""

import logging

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.cluster
from sklearn.datasets import load_iris, load_wine, make_blobs
from sklearn.preprocessing import StandardScaler

from gpuml import _common
from gpuml._dbscan import DBSCAN


def assert_same(ours, theirs):
    np.testing.assert_array_equal(ours.labels_, theirs.labels_)
    np.testing.assert_array_equal(ours.core_sample_indices_, theirs.core_sample_indices_)
    np.testing.assert_array_equal(ours.components_, theirs.components_)
    assert ours.labels_.dtype == theirs.labels_.dtype
    assert ours.core_sample_indices_.dtype == theirs.core_sample_indices_.dtype
    assert ours.components_.dtype == theirs.components_.dtype
    assert ours.n_features_in_ == theirs.n_features_in_


def fit_both(X, device, sample_weight=None, **params):
    _common.calls.reset()
    ours = DBSCAN(device=device, **params).fit(X, sample_weight=sample_weight)
    assert _common.calls.gpuml == 1 and _common.calls.sklearn == 0
    theirs = sklearn.cluster.DBSCAN(**params).fit(X, sample_weight=sample_weight)
    return ours, theirs


def grid(rng, n, d, span):
    """Integer coordinates: duplicates, and many pairs at exactly an integer eps."""
    return rng.integers(0, span, size=(n, d)).astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "metric, p, eps",
    [
        ("euclidean", None, 2.0),
        ("euclidean", None, 5.0),
        ("minkowski", 2, 2.0),
        ("sqeuclidean", None, 4.0),
        ("manhattan", None, 3.0),
        ("minkowski", 1, 2.0),
        ("chebyshev", None, 1.0),
        ("chebyshev", None, 2.0),
    ],
)
def test_ties_at_exactly_eps(rng, device, dtype, metric, p, eps):
    X = grid(rng, 233, 2, int(8 * eps) + 12).astype(dtype)
    seen = set()
    # Up to min_samples large enough that only the densest spots are cores: some fit then has several clusters and
    # noise whatever the draw (with 1 - 8 alone, about one draw in 2,400 of these cases had one cluster at most).
    for min_samples in (1, 3, 5, 8, 12, 16, 24):
        ours, theirs = fit_both(X, device, eps=eps, min_samples=min_samples, metric=metric, p=p)
        assert_same(ours, theirs)
        seen.add((len(set(theirs.labels_)) > 2, -1 in theirs.labels_))
    assert (True, True) in seen  # several clusters and noise in one fit at least: the comparison means something


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "chebyshev", "cosine", "sqeuclidean"])
def test_continuous_data(rng, device, dtype, metric):
    X = rng.normal(size=(307, 3)).astype(dtype)
    X[:300:17] = X[3::17]  # duplicates
    # eps near the 3rd percentile of the pairwise distances, midway across the widest gap between two distinct
    # distances there: rounding decides nothing far from a pair's distance, and ties at exactly eps are the grid
    # test's business (a quantile can land exactly on a distance that duplicated points repeat).
    from sklearn.metrics import pairwise_distances

    D = pairwise_distances(X.astype(np.float64), metric=metric)
    distinct = np.unique(D[np.triu_indices(len(X), 1)])
    lo, hi = int(0.025 * len(distinct)), int(0.035 * len(distinct))
    j = lo + int(np.argmax(distinct[lo + 1 : hi + 1] - distinct[lo:hi]))
    eps = float((distinct[j] + distinct[j + 1]) / 2)
    ours, theirs = fit_both(X, device, eps=eps, min_samples=5, metric=metric)
    assert_same(ours, theirs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sample_weight(rng, device, dtype):
    X = grid(rng, 199, 2, 11).astype(dtype)
    # zero, fractional, large and negative weights; random fractions make the sums' rounding matter.
    w = rng.choice([0.0, 0.25, 0.5, 1.0, 1.5, 6.0, -1.0], size=len(X))
    for weights in (w, rng.uniform(0, 1.2, size=len(X)), rng.uniform(0, 1, size=len(X)).round(1)):
        ours, theirs = fit_both(X, device, sample_weight=weights, eps=1.5, min_samples=3, algorithm="brute")
        assert_same(ours, theirs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["iris", "wine", "blobs"])
def test_bundled_datasets(device, dtype, name):
    if name == "iris":
        X, eps = load_iris().data, 0.4
    elif name == "wine":
        X, eps = StandardScaler().fit_transform(load_wine().data), 2.3
    else:
        X, _ = make_blobs(n_samples=1500, centers=5, cluster_std=0.6, random_state=3)
        eps = 0.3
    X = X.astype(dtype)
    for min_samples in (3, 5, 10):
        ours, theirs = fit_both(X, device, eps=eps, min_samples=min_samples)
        assert_same(ours, theirs)


def test_integer_input_and_fit_predict(device):
    X = np.array([[1, 2], [2, 2], [2, 3], [8, 7], [8, 8], [25, 80]])
    ours, theirs = fit_both(X, device, eps=3, min_samples=2)
    assert_same(ours, theirs)
    np.testing.assert_array_equal(ours.labels_, [0, 0, 0, 1, 1, -1])
    np.testing.assert_array_equal(DBSCAN(eps=3, min_samples=2, device=device).fit_predict(X), ours.labels_)


@pytest.mark.parametrize(
    "params, X_kind, reason",
    [
        ({"metric": "precomputed"}, "dense", "metric='precomputed'"),
        ({"metric": lambda a, b: np.abs(a - b).sum()}, "dense", "a callable metric"),
        ({"metric": "minkowski", "p": 3}, "dense", "metric='minkowski' with p=3"),
        ({"metric": "hamming"}, "dense", "metric='hamming'"),
        ({}, "sparse", "sparse input"),
    ],
)
def test_fallbacks_are_scikit_learns_fit_and_logged(rng, device, caplog, params, X_kind, reason):
    X = rng.integers(0, 5, size=(40, 2)).astype(np.float64)
    if params.get("metric") == "precomputed":
        from sklearn.metrics import pairwise_distances

        X = pairwise_distances(X)
    if X_kind == "sparse":
        X = sp.csr_matrix(X)
    _common.calls.reset()
    _common._said.clear()
    with caplog.at_level(logging.INFO, logger="gpuml"):
        ours = DBSCAN(eps=1.5, min_samples=3, device=device, **params).fit(X)
    assert _common.calls.sklearn == 1 and _common.calls.gpuml == 0
    assert any(reason in r.getMessage() and "scikit-learn's implementation" in r.getMessage() for r in caplog.records)
    theirs = sklearn.cluster.DBSCAN(eps=1.5, min_samples=3, **params).fit(X)
    np.testing.assert_array_equal(ours.labels_, theirs.labels_)


def test_validation_is_scikit_learns(device):
    X = np.zeros((5, 2)) + np.arange(5)[:, None]
    with pytest.raises(ValueError, match="eps"):
        DBSCAN(eps=0, device=device).fit(X)
    with pytest.raises(ValueError, match="min_samples"):
        DBSCAN(min_samples=0, device=device).fit(X)
    with pytest.raises(ValueError, match="NaN"):
        DBSCAN(device=device).fit(np.array([[0.0, np.nan], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="sample_weight"):
        DBSCAN(device=device).fit(X, sample_weight=np.ones(4))
    with pytest.raises(ValueError, match="device"):
        DBSCAN(device="no-such-device").fit(X)
