"""gpuml.KMeans: scikit-learn's KMeans whose whole fit runs in gpuml's one k-means fit (gpuml::fit_kmeans).

Parameters are validated by scikit-learn's own code with its messages; then X goes to the library as it is (a
C-contiguous float32/float64 array or a memory-mapped .npy, never copied or centred on the host), and the library
checks it, centers it as it uploads it, draws the starting centers of every n_init run from numpy's random stream in
the RandomState's own state (so the starting centers are scikit-learn's for the same random_state, computed on the
device), runs the Lloyd iterations with scikit-learn's relocation and tolerance, and keeps the best run by
scikit-learn's rule. The RandomState is left advanced as scikit-learn's fit leaves it. A callable init runs on the
host as scikit-learn calls it. algorithm="elkan" runs the same Lloyd iterations: Elkan's method returns Lloyd's
result, only faster on the CPU.
"""

import numpy as np
import scipy.sparse as sp
from sklearn.base import _fit_context
from sklearn.cluster import KMeans as _SklearnKMeans
from sklearn.cluster._kmeans import _is_same_clustering
from sklearn.utils import check_array, check_random_state
from sklearn.utils._openmp_helpers import _openmp_effective_n_threads
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
        # No copy (gpuml never writes to X) and no finite check here: the library checks X in its first pass.
        X = validate_data(
            self,
            X,
            accept_sparse="csr",
            dtype=[np.float64, np.float32],
            order="C",
            copy=False,
            accept_large_sparse=False,
            ensure_all_finite=False,
        )
        if sp.issparse(X):
            if not np.isfinite(X.data).all():
                raise ValueError("Input X contains NaN or infinity.")
            X_dense = densify(X, X.dtype)
            if X_dense is None:
                log_fallback_once(self, "sparse input too large to densify")
                calls.count("sklearn")
                return self._sklearn_fit(X, sample_weight)
            X = X_dense

        self._check_params(X)
        random_state = check_random_state(self.random_state)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=X.dtype)
        self._n_threads = _openmp_effective_n_threads()
        device = device_choice(self.device)
        fit = _kernel("fit", X.dtype)

        init = self.init
        if _is_arraylike_not_scalar(init):
            init = check_array(init, dtype=X.dtype, copy=True, order="C")
            self._validate_center_shape(X, init)
        if callable(init):
            result = self._fit_callable_init(X, sample_weight, random_state, fit, device)
        else:
            state = random_state.get_state(legacy=True)
            result = fit(
                X,
                sample_weight,
                self.n_clusters,
                init if isinstance(init, str) else "k-means++",
                None if isinstance(init, str) else init,
                self._n_init,
                self.max_iter,
                float(self.tol),
                bool(self.verbose),
                np.ascontiguousarray(state[1], dtype=np.uint32),
                int(state[2]),
                device,
            )
            labels, inertia, centers, n_iter, stats, key, pos, said = result
            random_state.set_state(("MT19937", key, pos, state[3], state[4]))
            result = labels, inertia, centers, n_iter, stats, said
        labels, inertia, centers, n_iter, stats, said = result
        raise_warnings(dict.fromkeys(said))
        calls.count("gpuml")

        self._tol = stats["tol"]
        self.fit_stats_ = stats
        self.cluster_centers_ = centers
        self._n_features_out = self.cluster_centers_.shape[0]
        self.labels_ = labels
        self.inertia_ = float(inertia)
        self.n_iter_ = n_iter
        return self

    def _check_params(self, X):
        """scikit-learn's _check_params_vs_input without its pass over X for the tolerance (the library derives
        the tolerance in its own first pass)."""
        if X.shape[0] < self.n_clusters:
            raise ValueError(f"n_samples={X.shape[0]} should be >= n_clusters={self.n_clusters}.")
        if self.n_init == "auto":
            if isinstance(self.init, str) and self.init == "k-means++":
                self._n_init = 1
            elif isinstance(self.init, str) and self.init == "random":
                self._n_init = 10
            elif callable(self.init):
                self._n_init = 10
            else:
                self._n_init = 1
        else:
            self._n_init = self.n_init
        if _is_arraylike_not_scalar(self.init) and self._n_init != 1:
            warnings.warn(
                "Explicit initial center position passed: performing only one init in "
                f"{self.__class__.__name__} instead of n_init={self._n_init}.",
                RuntimeWarning,
                stacklevel=3,
            )
            self._n_init = 1
        self._algorithm = self.algorithm
        if self._algorithm == "elkan" and self.n_clusters == 1:
            warnings.warn(
                "algorithm='elkan' doesn't make sense for a single cluster. Using 'lloyd' instead.",
                RuntimeWarning,
            )
            self._algorithm = "lloyd"

    def _fit_callable_init(self, X, sample_weight, random_state, fit, device):
        """init=callable: scikit-learn calls it with X less its mean once per run; each run is then one fit from
        that array, and the best run is kept by scikit-learn's rule."""
        X_mean = X.mean(axis=0)
        X_centred = X - X_mean
        best = None
        for _ in range(self._n_init):
            centers = self.init(X_centred, self.n_clusters, random_state=random_state)
            centers = check_array(centers, dtype=X.dtype, copy=False, order="C")
            self._validate_center_shape(X, centers)
            key = np.zeros(624, dtype=np.uint32)  # an array init draws nothing
            labels, inertia, out, n_iter, stats, _, _, said = fit(
                X, sample_weight, self.n_clusters, "k-means++", np.ascontiguousarray(centers + X_mean, dtype=X.dtype),
                1, self.max_iter, float(self.tol), bool(self.verbose), key, 624, device)
            if best is None or (inertia < best[1] and not _is_same_clustering(labels, best[0], self.n_clusters)):
                best = (labels, inertia, out, n_iter, stats, said)
        return best

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
