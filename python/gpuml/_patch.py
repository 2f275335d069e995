"""gpuml.patch_sklearn(): scikit-learn's KMeans, NearestNeighbors, KNeighborsClassifier and KNeighborsRegressor
become gpuml's, wherever scikit-learn code or user code looks them up afterwards (sklearn.cluster, sklearn.neighbors
and the private modules that define them). What gpuml cannot run goes to scikit-learn's own code, said once at
INFO level on the "gpuml" logger."""

import importlib
import threading

_lock = threading.Lock()
_saved = {}

# (module, name) -> "gpuml attribute"
_TARGETS = {
    ("sklearn.cluster", "KMeans"): "KMeans",
    ("sklearn.cluster._kmeans", "KMeans"): "KMeans",
    ("sklearn.neighbors", "NearestNeighbors"): "NearestNeighbors",
    ("sklearn.neighbors._unsupervised", "NearestNeighbors"): "NearestNeighbors",
    ("sklearn.neighbors", "KNeighborsClassifier"): "KNeighborsClassifier",
    ("sklearn.neighbors._classification", "KNeighborsClassifier"): "KNeighborsClassifier",
    ("sklearn.neighbors", "KNeighborsRegressor"): "KNeighborsRegressor",
    ("sklearn.neighbors._regression", "KNeighborsRegressor"): "KNeighborsRegressor",
}


def patch_sklearn():
    """Replaces scikit-learn's four classes by gpuml's (idempotent)."""
    import gpuml

    with _lock:
        for (module_name, name), attr in _TARGETS.items():
            module = importlib.import_module(module_name)
            if (module_name, name) not in _saved:
                _saved[(module_name, name)] = getattr(module, name)
            setattr(module, name, getattr(gpuml, attr))


def unpatch_sklearn():
    """Restores scikit-learn's own classes."""
    with _lock:
        for (module_name, name), original in _saved.items():
            setattr(importlib.import_module(module_name), name, original)
        _saved.clear()


def patched_names():
    """The dotted names patch_sklearn() currently replaces."""
    with _lock:
        return sorted(f"{m}.{n}" for m, n in _saved)
