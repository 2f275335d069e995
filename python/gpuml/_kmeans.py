"""gpuml.KMeans: scikit-learn's KMeans whose Lloyd iterations and predictions run on gpuml's kernels.

Parameters, validation, initialisation (k-means++ and random, with scikit-learn's random streams), n_init, centring
and the tolerance are scikit-learn's own code paths, so a fit sees the same starting centres as scikit-learn's; the
Lloyd loop (E-step on the device, M-step with scikit-learn's relocation of empty clusters) and predict run in gpuml.
algorithm="elkan" runs the same Lloyd iterations: Elkan's method returns Lloyd's result, only faster on the CPU.
"""

import numpy as np
import scipy.sparse as sp
from sklearn.base import _fit_context
from sklearn.cluster import KMeans as _SklearnKMeans
from sklearn.cluster._kmeans import _is_same_clustering
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_array, check_random_state
from sklearn.utils._openmp_helpers import _openmp_effective_n_threads
from sklearn.utils.extmath import row_norms
from sklearn.utils.validation import _check_sample_weight, _is_arraylike_not_scalar, check_is_fitted, validate_data

from . import _gpuml
from ._common import DEVICE_CONSTRAINT, calls, densify, device_choice, log_fallback_once, raise_warnings

import warnings


def _kernel(name, dtype):
    return getattr(_gpuml, f"{name}_{np.dtype(dtype).name}")


class KMeans(_SklearnKMeans):
    """K-Means clustering on a Vulkan device (or gpuml's host backend): scikit-learn's KMeans, plus `device`.

    device : "auto", "gpu", "discrete", "integrated", "cpu", "host", a Vulkan device index or a name, default "auto"
        Where the Lloyd iterations and predict run; "auto" follows GPUML_DEVICE, else a GPU, else the host backend.
    """

    _parameter_constraints = {**_SklearnKMeans._parameter_constraints, "device": DEVICE_CONSTRAINT}

    def __init__(
        self,
        n_clusters=8,
        *,
        init="k-means++",
        n_init="auto",
        max_iter=300,
        tol=1e-4,
        verbose=0,
        random_state=None,
        copy_x=True,
        algorithm="lloyd",
        device="auto",
    ):
        super().__init__(
            n_clusters=n_clusters,
            init=init,
            n_init=n_init,
            max_iter=max_iter,
            tol=tol,
            verbose=verbose,
            random_state=random_state,
            copy_x=copy_x,
            algorithm=algorithm,
        )
        self.device = device

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        """Compute k-means clustering (see sklearn.cluster.KMeans.fit)."""
        X = validate_data(
            self,
            X,
            accept_sparse="csr",
            dtype=[np.float64, np.float32],
            order="C",
            copy=self.copy_x,
            accept_large_sparse=False,
        )
        X_dense = X
        if sp.issparse(X):
            X_dense = densify(X, X.dtype)
            if X_dense is None:
                log_fallback_once(self, "sparse input too large to densify")
                calls.count("sklearn")
                return self._sklearn_fit(X, sample_weight)

        self._check_params_vs_input(X)
        random_state = check_random_state(self.random_state)
        sample_weight = _check_sample_weight(sample_weight, X, dtype=X.dtype)
        self._n_threads = _openmp_effective_n_threads()
        device = device_choice(self.device)

        init = self.init
        init_is_array_like = _is_arraylike_not_scalar(init)
        if init_is_array_like:
            init = check_array(init, dtype=X.dtype, copy=True, order="C")
            self._validate_center_shape(X, init)

        # Centre dense data by its mean (scikit-learn does, for accurate distances; it leaves sparse data as it is).
        if not sp.issparse(X):
            X_mean = X.mean(axis=0)
            X -= X_mean
            if init_is_array_like:
                init -= X_mean

        # Only k-means++ reads the squared norms; the other inits skip a pass over X.
        x_squared_norms = row_norms(X, squared=True) if isinstance(init, str) and init == "k-means++" else None
        lloyd = _kernel("lloyd", X.dtype)
        best_inertia, best_labels = None, None
        said = []
        for _ in range(self._n_init):
            centers_init = self._init_centroids(
                X, x_squared_norms=x_squared_norms, init=init, random_state=random_state, sample_weight=sample_weight
            )
            if self.verbose:
                print("Initialization complete")
            labels, inertia, centers, n_iter_, messages = lloyd(
                X_dense,
                sample_weight,
                np.ascontiguousarray(centers_init, dtype=X.dtype),
                self.max_iter,
                float(self._tol),
                bool(self.verbose),
                device,
            )
            said += messages
            if best_inertia is None or (
                inertia < best_inertia and not _is_same_clustering(labels, best_labels, self.n_clusters)
            ):
                best_labels, best_centers, best_inertia, best_n_iter = labels, centers, inertia, n_iter_
        raise_warnings(dict.fromkeys(said))
        calls.count("gpuml")

        if not sp.issparse(X):
            if not self.copy_x:
                X += X_mean
            best_centers += X_mean

        distinct_clusters = np.count_nonzero(np.bincount(best_labels, minlength=self.n_clusters))
        if distinct_clusters < self.n_clusters:
            warnings.warn(
                "Number of distinct clusters ({}) found smaller than "
                "n_clusters ({}). Possibly due to duplicate points "
                "in X.".format(distinct_clusters, self.n_clusters),
                ConvergenceWarning,
                stacklevel=2,
            )

        self.cluster_centers_ = best_centers
        self._n_features_out = self.cluster_centers_.shape[0]
        self.labels_ = best_labels
        self.inertia_ = float(best_inertia)
        self.n_iter_ = best_n_iter
        return self

    def _sklearn_fit(self, X, sample_weight):
        return _SklearnKMeans.fit.__wrapped__(self, X, sample_weight=sample_weight)

    def predict(self, X):
        """Predict the closest cluster each sample in X belongs to (see sklearn.cluster.KMeans.predict)."""
        check_is_fitted(self)
        X = self._check_test_data(X)
        if sp.issparse(X):
            X_dense = densify(X, X.dtype)
            if X_dense is None:
                log_fallback_once(self, "sparse input too large to densify")
                calls.count("sklearn")
                return super().predict(X)
            X = X_dense
        centers = np.ascontiguousarray(self.cluster_centers_, dtype=X.dtype)
        labels, messages = _kernel("predict", X.dtype)(X, centers, device_choice(self.device))
        raise_warnings(messages)
        calls.count("gpuml")
        return labels
