"""gpuml.DBSCAN: scikit-learn's DBSCAN whose neighbourhoods, core samples and clusters are computed by gpuml.

Parameters and X are validated by scikit-learn's own code with its messages. Neighbourhoods are decided as gpuml's
scikit-learn decides them: float64 data in float64, float32 data on float64 distances of the same values (the fit
runs on them in float64; cosine in float32). Core samples (weighted neighbourhood sizes summed in numpy's order) and
clusters (labels numbered as scikit-learn's dbscan_inner numbers them) come from gpuml's DBSCAN algorithm.
`fit_stats_` holds where the fit's time went: seconds per phase under "times" (setup, neighbourhoods,
core_samples, components, labels, total), the neighbourhood entries ("n_edges") and where the components ran.
Sparse input, metric="precomputed", callables and metrics gpuml lacks go to scikit-learn's own fit (logged once
at INFO level on the `gpuml` logger).
"""

import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import _fit_context
from sklearn.cluster import DBSCAN as _SklearnDBSCAN
from sklearn.utils.validation import _check_sample_weight, validate_data

from . import _gpuml
from ._common import DEVICE_CONSTRAINT, calls, device_choice, log_fallback_once, raise_warnings
from ._neighbors import _gpuml_metric


class DBSCAN(_SklearnDBSCAN):
    """DBSCAN clustering on gpuml (a Vulkan device or gpuml's host backend): scikit-learn's DBSCAN, plus `device`.

    device : "auto", "gpu", "discrete", "integrated", "cpu", "host", a Vulkan device index or a name, default "auto"
        Where the neighbourhoods are computed; "auto" follows GPUML_DEVICE, else a GPU, else the host backend.
    """

    _parameter_constraints = {**_SklearnDBSCAN._parameter_constraints, "device": DEVICE_CONSTRAINT}

    def __init__(
        self,
        eps=0.5,
        *,
        min_samples=5,
        metric="euclidean",
        metric_params=None,
        algorithm="auto",
        leaf_size=30,
        p=None,
        n_jobs=None,
        device="auto",
    ):
        super().__init__(
            eps=eps,
            min_samples=min_samples,
            metric=metric,
            metric_params=metric_params,
            algorithm=algorithm,
            leaf_size=leaf_size,
            p=p,
            n_jobs=n_jobs,
        )
        self.device = device

    def _gpuml_unsupported(self, X):
        """Why this fit cannot run on gpuml (None when it can)."""
        if self.metric == "precomputed":
            return "metric='precomputed'"
        if callable(self.metric):
            return "a callable metric"
        if _gpuml_metric(self.metric, self.p, self.metric_params) is None:
            return f"metric={self.metric!r} with p={self.p!r} and metric_params={self.metric_params!r}"
        if sp.issparse(X):
            return "sparse input"
        return None

    @_fit_context(
        # DBSCAN.metric is not validated yet
        prefer_skip_nested_validation=False
    )
    def fit(self, X, y=None, sample_weight=None):
        """Perform DBSCAN clustering from features, or distance matrix (see sklearn.cluster.DBSCAN.fit)."""
        reason = self._gpuml_unsupported(X)
        if reason is not None:
            log_fallback_once(self, reason)
            calls.count("sklearn")
            return super().fit(X, y, sample_weight)
        X_valid = validate_data(self, X, accept_sparse="csr")
        if self.metric_params is not None and "p" in self.metric_params and self.p is not None:
            # scikit-learn's NearestNeighbors says so when DBSCAN builds it.
            warnings.warn(
                "Parameter p is found in metric_params. The corresponding parameter from __init__ is ignored.",
                SyntaxWarning,
                stacklevel=2,
            )
        # scikit-learn's neighbour search computes integer data in float64; components_ keep X's own dtype.
        X = np.ascontiguousarray(X_valid, dtype=X_valid.dtype if X_valid.dtype in (np.float32, np.float64) else np.float64)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X)  # its own float dtype, as scikit-learn sums it
        metric = _gpuml_metric(self.metric, self.p, self.metric_params)
        eps = float(self.eps)
        device = device_choice(self.device)
        if X.dtype == np.float32 and metric != "cosine":
            # scikit-learn decides float32 data's neighbourhoods on float64 distances (and sums float64 weights in
            # float64): the float64 fit on the same values decides as it does.
            X = X.astype(np.float64)
        if sample_weight is not None:
            sample_weight = np.ascontiguousarray(sample_weight, dtype=X.dtype)
        labels, core, messages, stats = getattr(_gpuml, f"dbscan_fit_{np.dtype(X.dtype).name}")(
            X, sample_weight, eps, int(self.min_samples), metric, 2.0, device
        )
        raise_warnings(messages)
        calls.count("gpuml")
        self.fit_stats_ = stats
        self.core_sample_indices_ = core.astype(np.intp, copy=False)
        self.labels_ = labels.astype(np.intp, copy=False)
        if len(self.core_sample_indices_):
            self.components_ = X_valid[self.core_sample_indices_].copy()
        else:
            self.components_ = np.empty((0, X_valid.shape[1]))
        return self
