"""gpuml for scikit-learn users: KMeans and the k-nearest-neighbour estimators on any Vulkan device.

    import gpuml
    km = gpuml.KMeans(n_clusters=8).fit(X)          # scikit-learn's KMeans, computed by gpuml
    gpuml.patch_sklearn()                            # sklearn.cluster.KMeans & co. become gpuml's

Every estimator takes scikit-learn's parameters plus `device` ("auto", "gpu", "cpu", "host", an index or a name).
"""

from ._common import backend_name, calls, devices
from ._kmeans import KMeans
from ._neighbors import KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors
from ._patch import patch_sklearn, patched_names, unpatch_sklearn

__version__ = "0.1.0"

__all__ = [
    "KMeans",
    "NearestNeighbors",
    "KNeighborsClassifier",
    "KNeighborsRegressor",
    "patch_sklearn",
    "unpatch_sklearn",
    "patched_names",
    "devices",
    "backend_name",
    "calls",
]
