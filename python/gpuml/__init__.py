"""gpuml for scikit-learn users: KMeans, DBSCAN and the nearest-neighbour estimators on any Vulkan device.

    import gpuml
    km = gpuml.KMeans(n_clusters=8).fit(X)          # scikit-learn's KMeans, computed by gpuml
    gpuml.patch_sklearn()                            # sklearn.cluster.KMeans & co. become gpuml's, also inside
                                                     # DBSCAN, TSNE, Isomap, kneighbors_graph() and the like

Every estimator takes scikit-learn's parameters plus `device`: "auto" (GPUML_DEVICE, else a GPU, else the host
backend), "host", "gpu", "discrete", "integrated", "cpu", a Vulkan device index, or text naming devices (part of a
name, an index, a comma-separated list). fit raises scikit-learn's InvalidParameterError (a ValueError) for a value
that names no device present, and for anything else (True, None, a float).
"""

from ._common import backend_name, calls, devices
from ._graph import KNeighborsTransformer, RadiusNeighborsTransformer
from ._kmeans import KMeans
from ._lof import LocalOutlierFactor
from ._neighbors import KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors
from ._patch import patch_sklearn, patched_names, unpatch_sklearn
from ._radius import RadiusNeighborsClassifier, RadiusNeighborsRegressor

try:  # DBSCAN's module and extension functions are built separately from the neighbour estimators
    from ._dbscan import DBSCAN

    _OPTIONAL = ["DBSCAN"]
except ImportError:
    _OPTIONAL = []

__version__ = "0.1.0"

__all__ = [
    "KMeans",
    "NearestNeighbors",
    "KNeighborsClassifier",
    "KNeighborsRegressor",
    "RadiusNeighborsClassifier",
    "RadiusNeighborsRegressor",
    "KNeighborsTransformer",
    "RadiusNeighborsTransformer",
    "LocalOutlierFactor",
    *_OPTIONAL,
    "patch_sklearn",
    "unpatch_sklearn",
    "patched_names",
    "devices",
    "backend_name",
    "calls",
]
