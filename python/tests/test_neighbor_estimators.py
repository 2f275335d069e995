"""gpuml's LocalOutlierFactor, radius estimators and neighbour transformers against scikit-learn's, on random data
of awkward sizes: continuous data (no ties), and integer data whose distances tie exactly and lie exactly on the
radius."""

import numpy as np
import pytest
import sklearn.neighbors
from sklearn.metrics import pairwise_distances

import gpuml

_METRICS = [dict(metric="minkowski", p=2), dict(metric="manhattan"), dict(metric="chebyshev"), dict(metric="cosine")]
_metric_id = lambda m: "-".join(str(v) for v in m.values())  # noqa: E731


def _counted(work):
    """work()'s result, asserting that it ran at least one search in gpuml."""
    before = gpuml.calls.gpuml
    result = work()
    assert gpuml.calls.gpuml > before, "no call ran in gpuml"
    return result


def _tol(dtype, metric):
    # float32: scikit-learn ranks and reduces in its own order; LOF sums k ratios. Its float32 cosine distances carry
    # an absolute error near 1e-7 on the small distances of near neighbours, about 1e-5 of each: a ratio of two
    # such sums moved by 1.8e-5 (seen), so cosine gets a wider bound.
    if dtype == np.float32:
        return dict(rtol=1e-4 if metric.get("metric") == "cosine" else 1e-5, atol=1e-6)
    return dict(rtol=1e-12, atol=1e-12)


class _IndexOrderLOF(sklearn.neighbors.LocalOutlierFactor):
    """scikit-learn's LocalOutlierFactor over an independent brute force that breaks distance ties by the lower index
    (gpuml's documented order; scikit-learn's own order among ties depends on its algorithm)."""

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        queries = self._fit_X if X is None else X
        distances = pairwise_distances(queries.astype(np.float64), self._fit_X.astype(np.float64), metric=self.metric)
        if X is None:
            np.fill_diagonal(distances, np.inf)
        order = np.argsort(distances, axis=1, kind="stable")[:, : n_neighbors or self.n_neighbors]
        d = np.take_along_axis(distances, order, axis=1)
        return (d, order) if return_distance else order


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", _METRICS, ids=_metric_id)
def test_local_outlier_factor_matches_sklearn(rng, device, dtype, metric):
    n, d = int(rng.integers(300, 700)), int(rng.integers(3, 9))
    X = rng.normal(size=(n, d)).astype(dtype)
    X[: n // 40] *= 6  # a few outliers
    k = int(rng.integers(5, 30))
    ours = _counted(lambda: gpuml.LocalOutlierFactor(n_neighbors=k, device=device, **metric).fit(X))
    ref = sklearn.neighbors.LocalOutlierFactor(n_neighbors=k, **metric).fit(X)
    np.testing.assert_allclose(ours.negative_outlier_factor_, ref.negative_outlier_factor_, **_tol(dtype, metric))
    assert ours.negative_outlier_factor_.dtype == ref.negative_outlier_factor_.dtype
    np.testing.assert_array_equal(ours.fit_predict(X), ref.fit_predict(X))

    Q = rng.normal(size=(int(rng.integers(40, 90)), d)).astype(dtype) * 2
    ours = gpuml.LocalOutlierFactor(n_neighbors=k, novelty=True, device=device, **metric).fit(X)
    ref = sklearn.neighbors.LocalOutlierFactor(n_neighbors=k, novelty=True, **metric).fit(X)
    np.testing.assert_allclose(_counted(lambda: ours.decision_function(Q)), ref.decision_function(Q), **_tol(dtype, metric))
    np.testing.assert_allclose(ours.score_samples(Q), ref.score_samples(Q), **_tol(dtype, metric))
    np.testing.assert_array_equal(ours.predict(Q), ref.predict(Q))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "chebyshev"])
def test_local_outlier_factor_with_ties_breaks_them_by_index(rng, device, dtype, metric):
    n = int(rng.integers(150, 400))
    X = rng.integers(0, 6, size=(n, 3)).astype(dtype)  # many samples at equal, exactly representable distances
    k = int(rng.integers(4, 15))
    ours = _counted(lambda: gpuml.LocalOutlierFactor(n_neighbors=k, metric=metric, device=device).fit(X))
    ref = _IndexOrderLOF(n_neighbors=k, metric=metric).fit(X)
    np.testing.assert_array_equal(ours.negative_outlier_factor_, ref.negative_outlier_factor_)
    Q = rng.integers(-1, 7, size=(int(rng.integers(30, 70)), 3)).astype(dtype)
    ours = gpuml.LocalOutlierFactor(n_neighbors=k, metric=metric, novelty=True, device=device).fit(X)
    ref = _IndexOrderLOF(n_neighbors=k, metric=metric, novelty=True).fit(X)
    np.testing.assert_array_equal(ours.decision_function(Q), ref.decision_function(Q))
    np.testing.assert_array_equal(ours.predict(Q), ref.predict(Q))


def _grid(rng, dtype, n, d=3):
    """Integer points: many pairs exactly at integer radii, every distance exact in float32 and float64."""
    return rng.integers(0, 7, size=(n, d)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("outlier_label", [None, "most_frequent", -1])
def test_radius_classifier_matches_sklearn(rng, device, dtype, weights, outlier_label):
    X = _grid(rng, dtype, int(rng.integers(200, 500)))
    y = rng.integers(0, 4, size=len(X))
    Q = _grid(rng, dtype, int(rng.integers(30, 80))) * 1.5 - 2  # some queries far from every sample
    Q[:5] = X[:5]  # distance 0: distance weights go infinite, as in scikit-learn
    if outlier_label is None:
        Q = Q[(pairwise_distances(Q, X) <= 2.0).any(axis=1)]  # scikit-learn raises for a query without neighbours
    params = dict(radius=2.0, weights=weights, outlier_label=outlier_label)
    ours = gpuml.RadiusNeighborsClassifier(device=device, **params).fit(X, y)
    # Brute force: the neighbours in index order, as gpuml returns them unsorted; weights summed in another order
    # (a tree's) can tip votes that tie exactly on this grid. On float64 copies: gpuml returns float32 data's
    # distances in float64 (exact on this grid) as scikit-learn's trees do, where its float32 brute force rounds them.
    ref = sklearn.neighbors.RadiusNeighborsClassifier(algorithm="brute", **params).fit(X.astype(np.float64), y)
    with _no_check():  # scikit-learn warns of outliers and of infinite weights in both runs alike
        Q64 = Q.astype(np.float64)
        np.testing.assert_array_equal(_counted(lambda: ours.predict(Q)), ref.predict(Q64))
        np.testing.assert_array_equal(ours.predict_proba(Q), ref.predict_proba(Q64))
        assert ours.score(Q, ref.predict(Q64)) == 1.0


class _no_check:
    """A context that checks nothing: scikit-learn warns about outliers in both runs alike."""

    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("metric", _METRICS, ids=_metric_id)
def test_radius_regressor_matches_sklearn(rng, device, dtype, weights, metric):
    X = rng.normal(size=(int(rng.integers(300, 600)), int(rng.integers(2, 6)))).astype(dtype)
    y = rng.normal(size=(len(X), 2))
    Q = rng.normal(size=(int(rng.integers(30, 80)), X.shape[1])).astype(dtype) * 1.5
    ref = sklearn.neighbors.RadiusNeighborsRegressor(weights=weights, **metric)
    # Midway between two of the first query's distances near their 5% quantile: no pair at the radius itself, where
    # scikit-learn's own rounding of a distance (which a quantile can return exactly) would decide (exact ties are
    # tested on integer data, where every computation is exact).
    first = np.sort(pairwise_distances(Q[:1], X, **metric).ravel())
    at = int(0.05 * len(first))
    radius = float((first[at] + first[at + 1]) / 2)
    ref.set_params(radius=radius).fit(X, y)
    ours = gpuml.RadiusNeighborsRegressor(radius=radius, weights=weights, device=device, **metric).fit(X, y)
    with _no_check():  # queries without neighbours: NaN and a warning, in both
        expected = ref.predict(Q)
        got = _counted(lambda: ours.predict(Q))
    # The same neighbourhoods; cosine distances (scikit-learn's from normalised products) differ in their last bits,
    # which weights of 1 / distance amplify where a neighbour is near (2e-8 relative seen in float64).
    rtol = 1e-6 if dtype == np.float32 or metric["metric"] == "cosine" else 1e-12
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-12)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["distance", "connectivity"])
def test_transformers_match_sklearn(rng, device, dtype, mode):
    X = rng.normal(size=(int(rng.integers(200, 400)), int(rng.integers(3, 9)))).astype(dtype)
    Q = rng.normal(size=(int(rng.integers(20, 60)), X.shape[1])).astype(dtype)
    k = int(rng.integers(3, 12))
    ours = gpuml.KNeighborsTransformer(n_neighbors=k, mode=mode, device=device)
    ref = sklearn.neighbors.KNeighborsTransformer(n_neighbors=k, mode=mode)
    tol = dict(rtol=1e-12) if dtype == np.float64 else dict(rtol=1e-6)
    np.testing.assert_allclose(_counted(lambda: ours.fit_transform(X)).toarray(), ref.fit_transform(X).toarray(), **tol)
    np.testing.assert_allclose(ours.transform(Q).toarray(), ref.transform(Q).toarray(), **tol)

    G = _grid(rng, dtype, int(rng.integers(200, 400)))  # pairs exactly at the radius
    ours = gpuml.RadiusNeighborsTransformer(radius=3.0, mode=mode, device=device)
    ref = sklearn.neighbors.RadiusNeighborsTransformer(radius=3.0, mode=mode)
    a, b = _counted(lambda: ours.fit_transform(G)), ref.fit_transform(G)
    assert a.nnz == b.nnz and np.isclose(np.sort(a.data), np.sort(b.data), rtol=1e-12).all()
    np.testing.assert_array_equal(a.toarray(), b.toarray())


def test_unsupported_searches_fall_back_to_sklearn(rng, device, caplog):
    X = rng.normal(size=(157, 4))
    before = gpuml.calls.sklearn
    ours = gpuml.LocalOutlierFactor(n_neighbors=9, metric="canberra", device=device).fit(X)
    ref = sklearn.neighbors.LocalOutlierFactor(n_neighbors=9, metric="canberra").fit(X)
    np.testing.assert_array_equal(ours.negative_outlier_factor_, ref.negative_outlier_factor_)
    assert gpuml.calls.sklearn > before
    reg = gpuml.RadiusNeighborsRegressor(radius=1.5, metric="canberra", device=device).fit(X, X[:, 0])
    assert not hasattr(reg, "kneighbors")  # scikit-learn's radius estimators have no kneighbors
    with _no_check():
        np.testing.assert_array_equal(
            reg.predict(X[:20]),
            sklearn.neighbors.RadiusNeighborsRegressor(radius=1.5, metric="canberra").fit(X, X[:, 0]).predict(X[:20]),
        )
