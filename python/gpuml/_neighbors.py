"""gpuml.NearestNeighbors, KNeighborsClassifier and KNeighborsRegressor: scikit-learn's classes whose k-nearest
neighbour searches run on gpuml's kernels.

fit is scikit-learn's (validation, targets, classes, its tree when algorithm asks for one, which radius searches
use); kneighbors, and through it predict and kneighbors_graph, and radius_neighbors (radius_neighbors_graph, the radius
estimators' predict) search with gpuml for the metrics gpuml has
(euclidean, sqeuclidean, manhattan, chebyshev, cosine; minkowski with p = 1, 2 or inf). gpuml keeps the database on
the device after the first search and rebuilds that copy from _fit_X when it is missing (after unpickling, say).
Distances of float32 data are returned as scikit-learn returns them: float64 (float32 for cosine), recomputed
from differences in float64 for the chosen neighbours, on the host threads within the search's call.
The classifier's votes (predict, predict_proba) and the regressor's means, uniform or weighted by distance, are
computed by gpuml too, in the order of scikit-learn's numpy operations (so the same neighbours give the same bits);
several outputs and callable weights are scikit-learn's.
"""

import numbers
import threading
import weakref

import numpy as np
import scipy.sparse as sp
from sklearn.neighbors import KNeighborsClassifier as _SklearnKNeighborsClassifier
from sklearn.neighbors import KNeighborsRegressor as _SklearnKNeighborsRegressor
from sklearn.neighbors import NearestNeighbors as _SklearnNearestNeighbors
from sklearn.preprocessing import normalize
from sklearn.utils.arrayfuncs import _all_with_any_reduction_axis_1
from sklearn.utils.validation import check_is_fitted, validate_data

from . import _gpuml
from ._common import DEVICE_CONSTRAINT, calls, densify, device_choice, float_dtype, log_fallback_once, raise_warnings

# Each fitted estimator's database on gpuml, beside it (see _gpuml_database); dropped with the estimator.
_databases = weakref.WeakKeyDictionary()
_databases_lock = threading.Lock()

_METRICS = {"euclidean", "l2", "sqeuclidean", "manhattan", "cityblock", "l1", "chebyshev", "cosine"}


def _gpuml_metric(metric, p, metric_params):
    """gpuml's name for scikit-learn's metric, or None where gpuml has no kernel for it."""
    params = dict(metric_params or {})
    if metric == "minkowski":
        p = params.pop("p", p)
        if params:
            return None
        return {1: "manhattan", 2: "euclidean", np.inf: "chebyshev"}.get(p if p is not None else 2)
    if callable(metric) or params or metric not in _METRICS:
        return None
    return metric


def _ragged(values, offsets):
    """scikit-learn's radius_neighbors format: an object array of one array per query."""
    out = np.empty(len(offsets) - 1, dtype=object)
    for i in range(len(out)):
        out[i] = values[offsets[i] : offsets[i + 1]]
    return out


def _sort_rows(distances, indices):
    """Puts each row in (distance, index) order, in place, where it is not. The search ranks float32 data by its
    float32 values, and two neighbours within float32 rounding of each other can come back in the opposite order of
    their float64 distances (iris has such pairs); scikit-learn's lists ascend in the distances it returns, and
    LocalOutlierFactor reads a row's last column as its k-distance."""
    step = np.diff(distances, axis=1)
    rows = np.flatnonzero(((step < 0) | ((step == 0) & (np.diff(indices, axis=1) < 0))).any(axis=1))
    if len(rows):
        d, i = distances[rows], indices[rows]
        order = np.lexsort((i, d), axis=-1)
        distances[rows] = np.take_along_axis(d, order, axis=1)
        indices[rows] = np.take_along_axis(i, order, axis=1)


def _sklearn_float32_cosine(queries, fit_X, rows, indices, chunk=1 << 16):
    """The cosine distances of float32 queries[rows] to fit_X[indices] (index arrays of one shape), rounded as
    scikit-learn's cosine_distances rounds them: rows scaled by scikit-learn's own normalize, then 1 - their dot
    product accumulated as a float32 matrix product accumulates it (one fused multiply-add per feature, in feature
    order; a product of two float32 values is exact in float64), clipped to [0, 2]. gpuml's kernel divides by the
    norms instead, which differs in the last bit (and TSNE's gradient descent amplifies the last bit)."""
    q, f = normalize(queries), normalize(fit_X)
    rows, indices = rows.ravel(), indices.ravel()
    out = np.empty(len(indices), dtype=np.float32)
    for start in range(0, len(indices), chunk):
        r, i = rows[start : start + chunk], indices[start : start + chunk]
        acc = np.zeros(len(i), dtype=np.float32)
        for j in range(q.shape[1]):
            acc = (acc + q[r, j].astype(np.float64) * f[i, j].astype(np.float64)).astype(np.float32)
        np.clip(1 - acc, 0, 2, out=out[start : start + chunk])
    return out


def _dense(X):
    return X.toarray() if sp.issparse(X) else X


class _GpumlNeighborsBase:
    """What gpuml's searches share: whether gpuml can run them, and the database on gpuml. Every gpuml neighbour
    estimator (NearestNeighbors, the k and radius estimators, the transformers, LocalOutlierFactor) searches through
    the mixins below, so they all search, fall back and count calls alike."""

    def _gpuml_unsupported(self):
        """Why this fitted estimator's searches cannot run on gpuml (None when they can)."""
        if self.metric == "precomputed":
            return "metric='precomputed'"
        if _gpuml_metric(self.metric, self.p, self.metric_params) is None:
            return f"metric={self.metric!r} with p={self.p!r} and metric_params={self.metric_params!r}"
        if getattr(self, "_fit_X", None) is None:
            return "no stored training data"
        return None

    def _gpuml_database(self, dtype):
        """The database on gpuml (which keeps its float array of _fit_X), built on first use and kept beside the
        estimator, not in it: predict leaves __dict__ unchanged, pickles carry only scikit-learn's attributes, and a
        refit, an unpickled copy or another dtype or device gets a new one. None when _fit_X is sparse and too
        large."""
        key = (self._fit_X, np.dtype(dtype).name, self.device)
        with _databases_lock:
            entry = _databases.get(self)
            if entry is not None and entry[0][0] is key[0] and entry[0][1:] == key[1:]:
                return entry[1]
        fit_X = self._fit_X
        if sp.issparse(fit_X):
            fit_X = densify(fit_X, dtype)
            if fit_X is None:
                return None
        fit_X = np.ascontiguousarray(fit_X, dtype=dtype)
        metric = _gpuml_metric(self.metric, self.p, self.metric_params)
        db = getattr(_gpuml, f"Neighbors_{np.dtype(dtype).name}")(fit_X, metric, device_choice(self.device))
        raise_warnings(db.fit_warnings())
        with _databases_lock:
            _databases[self] = (key, db)
        return db


class _GpumlKNeighborsMixin(_GpumlNeighborsBase):
    """kneighbors on gpuml for the supported metrics; everything else is scikit-learn's."""

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """Find the K-neighbors of a point (see sklearn.neighbors.NearestNeighbors.kneighbors)."""
        check_is_fitted(self)
        reason = self._gpuml_unsupported()
        if reason is not None:
            log_fallback_once(self, reason)
            calls.count("sklearn")
            return super().kneighbors(X, n_neighbors, return_distance)

        if n_neighbors is None:
            n_neighbors = self.n_neighbors
        elif n_neighbors <= 0:
            raise ValueError("Expected n_neighbors > 0. Got %d" % n_neighbors)
        elif not isinstance(n_neighbors, numbers.Integral):
            raise TypeError("n_neighbors does not take %s value, enter integer value" % type(n_neighbors))

        query_is_train = X is None
        if not query_is_train and sp.issparse(X) and self._fit_method != "brute":
            calls.count("sklearn")  # scikit-learn refuses sparse queries to a tree, with its own message
            return super().kneighbors(X, n_neighbors, return_distance)
        if not query_is_train:
            X = validate_data(self, X, accept_sparse="csr", reset=False, order="C")
        n_samples_fit = self.n_samples_fit_
        n_queries = n_samples_fit if query_is_train else X.shape[0]
        if n_neighbors + int(query_is_train) > n_samples_fit:
            inequality_str = "n_neighbors < n_samples_fit" if query_is_train else "n_neighbors <= n_samples_fit"
            raise ValueError(
                f"Expected {inequality_str}, but "
                f"n_neighbors = {n_neighbors}, n_samples_fit = {n_samples_fit}, "
                f"n_samples = {n_queries}"
            )

        dtype = float_dtype(self._fit_X) if query_is_train else float_dtype(self._fit_X, X)
        queries = None
        if not query_is_train:
            queries = densify(X, dtype) if sp.issparse(X) else np.ascontiguousarray(X, dtype=dtype)
        db = self._gpuml_database(dtype)
        if db is None or (not query_is_train and queries is None):
            log_fallback_once(self, "sparse input too large to densify")
            calls.count("sklearn")
            return super().kneighbors(None if query_is_train else X, n_neighbors, return_distance)

        # float32 data: the distances come back recomputed in float64 from differences (float32 for cosine), and
        # float32 data ranked in float32 comes back in the order of the distances returned, with or without them
        # (the extension orders the rows by their float64 distances; cosine's here, _sort_rows, by scikit-learn's
        # float32 distances, _sklearn_float32_cosine).
        reorder = dtype == np.float32
        distances, indices, messages = db.kneighbors(queries, int(n_neighbors), bool(return_distance or reorder))
        raise_warnings(messages)
        calls.count("gpuml")
        if reorder and _gpuml_metric(self.metric, self.p, self.metric_params) == "cosine":
            fit_X = _dense(self._fit_X)
            rows = np.repeat(np.arange(len(indices)), indices.shape[1])
            distances = _sklearn_float32_cosine(fit_X if query_is_train else queries, fit_X, rows, indices)
            distances = distances.reshape(indices.shape)
            _sort_rows(distances, indices)
        return (distances, indices) if return_distance else indices


class _GpumlRadiusNeighborsMixin(_GpumlNeighborsBase):
    """radius_neighbors on gpuml for the supported metrics; everything else is scikit-learn's."""

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """Find the neighbors within a given radius (see sklearn.neighbors.NearestNeighbors.radius_neighbors)."""
        check_is_fitted(self)
        reason = self._gpuml_unsupported()
        if reason is None and radius is not None and np.ndim(radius) > 0:
            reason = "a radius per query"
        if reason is None and X is not None and sp.issparse(X) and self._fit_method != "brute":
            reason = "sparse queries to a tree"  # scikit-learn refuses them, with its own message
        if reason is not None:
            log_fallback_once(self, reason)
            calls.count("sklearn")
            return super().radius_neighbors(X, radius, return_distance, sort_results)
        if sort_results and not return_distance:
            raise ValueError("return_distance must be True if sort_results is True.")
        query_is_train = X is None
        if not query_is_train:
            X = validate_data(self, X, accept_sparse="csr", reset=False, order="C")
        if radius is None:
            radius = self.radius
        radius = float(radius)

        dtype = float_dtype(self._fit_X) if query_is_train else float_dtype(self._fit_X, X)
        queries = None
        if not query_is_train:
            queries = densify(X, dtype) if sp.issparse(X) else np.ascontiguousarray(X, dtype=dtype)
        db = self._gpuml_database(dtype)
        if db is None or (not query_is_train and queries is None):
            log_fallback_once(self, "sparse input too large to densify")
            calls.count("sklearn")
            return super().radius_neighbors(None if query_is_train else X, radius, return_distance, sort_results)
        metric = _gpuml_metric(self.metric, self.p, self.metric_params)
        wide = dtype == np.float32
        # float32 data: select with float32 rounding room, then decide on the distances scikit-learn computes: float64
        # from differences, cosine's float32 as scikit-learn rounds it.
        search_radius = radius * (1 + 1e-4) + (1e-6 if metric == "cosine" else 1e-30) if wide else radius
        offsets, indices, distances, messages = db.radius_neighbors(queries, search_radius, bool(sort_results), wide)
        raise_warnings(messages)
        calls.count("gpuml")
        if wide and metric == "cosine":
            fit_X = _dense(self._fit_X)
            rows = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
            distances = _sklearn_float32_cosine(fit_X if query_is_train else queries, fit_X, rows, indices)
        if wide:
            rows = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
            keep = distances <= radius
            rows, indices, distances = rows[keep], indices[keep], distances[keep]
            offsets = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(offsets) - 1))])
            if sort_results:
                order = np.lexsort((indices, distances, rows))
                indices, distances = indices[order], distances[order]
        ind = _ragged(indices, offsets)
        return (_ragged(distances, offsets), ind) if return_distance else ind


class NearestNeighbors(_GpumlKNeighborsMixin, _GpumlRadiusNeighborsMixin, _SklearnNearestNeighbors):
    """Unsupervised nearest neighbours on a Vulkan device: scikit-learn's NearestNeighbors, plus `device`."""

    _parameter_constraints = {**_SklearnNearestNeighbors._parameter_constraints, "device": DEVICE_CONSTRAINT}

    def __init__(
        self,
        *,
        n_neighbors=5,
        radius=1.0,
        algorithm="auto",
        leaf_size=30,
        metric="minkowski",
        p=2,
        metric_params=None,
        n_jobs=None,
        device="auto",
    ):
        super().__init__(
            n_neighbors=n_neighbors,
            radius=radius,
            algorithm=algorithm,
            leaf_size=leaf_size,
            metric=metric,
            p=p,
            metric_params=metric_params,
            n_jobs=n_jobs,
        )
        self.device = device


class KNeighborsClassifier(_GpumlKNeighborsMixin, _SklearnKNeighborsClassifier):
    """k-nearest-neighbour vote on a Vulkan device: scikit-learn's KNeighborsClassifier, plus `device`."""

    _parameter_constraints = {**_SklearnKNeighborsClassifier._parameter_constraints, "device": DEVICE_CONSTRAINT}

    def __init__(
        self,
        n_neighbors=5,
        *,
        weights="uniform",
        algorithm="auto",
        leaf_size=30,
        p=2,
        metric="minkowski",
        metric_params=None,
        n_jobs=None,
        device="auto",
    ):
        super().__init__(
            n_neighbors=n_neighbors,
            weights=weights,
            algorithm=algorithm,
            leaf_size=leaf_size,
            p=p,
            metric=metric,
            metric_params=metric_params,
            n_jobs=n_jobs,
        )
        self.device = device

    def _gpuml_vote(self, X):
        """(neighbour indices, their weights or None for uniform votes) for a vote on gpuml, or None to leave the
        whole prediction to scikit-learn (several outputs, callable weights, a search gpuml does not run)."""
        if self.weights not in ("uniform", "distance") or self.outputs_2d_ or self._gpuml_unsupported() is not None:
            return None
        if self.weights == "uniform":
            return self.kneighbors(X, return_distance=False), None
        distances, indices = self.kneighbors(X)
        weights, messages = _gpuml.distance_weights(distances)
        raise_warnings(messages)
        if _all_with_any_reduction_axis_1(weights, value=0):
            raise ValueError(
                "All neighbors of some sample is getting zero weights. "
                "Please modify 'weights' to avoid this case if you are "
                "using a user-defined function."
            )
        return indices, weights

    def _labels(self):
        """The training samples' class indices (scikit-learn's _y) as the int64 array gpuml's votes read."""
        return np.ascontiguousarray(self._y, dtype=np.int64)

    def predict_proba(self, X):
        """Return probability estimates for the test data X (see sklearn's KNeighborsClassifier.predict_proba)."""
        check_is_fitted(self, "_fit_method")
        vote = self._gpuml_vote(X)
        if vote is None:
            return super().predict_proba(X)
        indices, weights = vote
        proba, messages = _gpuml.class_votes(indices, self._labels(), len(self.classes_), weights)
        raise_warnings(messages)
        proba /= proba.sum(axis=1)[:, np.newaxis]  # scikit-learn's normalisation, in its order
        return proba

    def predict(self, X):
        """Predict the class labels for the provided data (see sklearn's KNeighborsClassifier.predict)."""
        check_is_fitted(self, "_fit_method")
        vote = self._gpuml_vote(X)
        if vote is None:
            return super().predict(X)
        indices, weights = vote
        if weights is None:  # the most frequent class, ties to the smallest, as scipy's mode
            votes, messages = _gpuml.class_votes(indices, self._labels(), len(self.classes_), None)
            raise_warnings(messages)
            return self.classes_[np.argmax(votes, axis=1)]
        modes, messages = _gpuml.weighted_modes(indices, self._labels(), len(self.classes_), weights)
        raise_warnings(messages)
        return self.classes_.take(modes)


class KNeighborsRegressor(_GpumlKNeighborsMixin, _SklearnKNeighborsRegressor):
    """k-nearest-neighbour regression on a Vulkan device: scikit-learn's KNeighborsRegressor, plus `device`."""

    _parameter_constraints = {**_SklearnKNeighborsRegressor._parameter_constraints, "device": DEVICE_CONSTRAINT}

    def __init__(
        self,
        n_neighbors=5,
        *,
        weights="uniform",
        algorithm="auto",
        leaf_size=30,
        p=2,
        metric="minkowski",
        metric_params=None,
        n_jobs=None,
        device="auto",
    ):
        super().__init__(
            n_neighbors=n_neighbors,
            weights=weights,
            algorithm=algorithm,
            leaf_size=leaf_size,
            p=p,
            metric=metric,
            metric_params=metric_params,
            n_jobs=n_jobs,
        )
        self.device = device

    def predict(self, X):
        """Predict the target for the provided data (see sklearn's KNeighborsRegressor.predict)."""
        check_is_fitted(self, "_fit_method")
        y = self._y
        if self.weights not in ("uniform", "distance") or y.dtype != np.float64 or self._gpuml_unsupported() is not None:
            return super().predict(X)
        if self.weights == "uniform":
            indices, weights = self.kneighbors(X, return_distance=False), None
        else:
            distances, indices = self.kneighbors(X)
            weights, messages = _gpuml.distance_weights(distances)
            raise_warnings(messages)
        means, messages = _gpuml.neighbour_means(indices, np.ascontiguousarray(y.reshape(len(y), -1)), weights)
        raise_warnings(messages)
        return means.ravel() if y.ndim == 1 else means
