"""gpuml.KNeighborsTransformer and RadiusNeighborsTransformer: scikit-learn's transformers whose graphs are built
from gpuml's kneighbors and radius_neighbors, the code gpuml.NearestNeighbors runs (with its fallbacks to
scikit-learn, logged once)."""

from sklearn.neighbors import KNeighborsTransformer as _SklearnKNeighborsTransformer
from sklearn.neighbors import RadiusNeighborsTransformer as _SklearnRadiusNeighborsTransformer

from ._common import DEVICE_CONSTRAINT
from ._neighbors import _GpumlKNeighborsMixin, _GpumlRadiusNeighborsMixin


class KNeighborsTransformer(_GpumlKNeighborsMixin, _SklearnKNeighborsTransformer):
    """The k-nearest-neighbour graph on a Vulkan device: scikit-learn's KNeighborsTransformer, plus `device`."""

    _parameter_constraints = {**_SklearnKNeighborsTransformer._parameter_constraints, "device": DEVICE_CONSTRAINT}

    def __init__(
        self,
        *,
        mode="distance",
        n_neighbors=5,
        algorithm="auto",
        leaf_size=30,
        metric="minkowski",
        p=2,
        metric_params=None,
        n_jobs=None,
        device="auto",
    ):
        super().__init__(
            mode=mode,
            n_neighbors=n_neighbors,
            algorithm=algorithm,
            leaf_size=leaf_size,
            metric=metric,
            p=p,
            metric_params=metric_params,
            n_jobs=n_jobs,
        )
        self.device = device


class RadiusNeighborsTransformer(_GpumlRadiusNeighborsMixin, _SklearnRadiusNeighborsTransformer):
    """The radius-neighbour graph on a Vulkan device: scikit-learn's RadiusNeighborsTransformer, plus `device`."""

    _parameter_constraints = {
        **_SklearnRadiusNeighborsTransformer._parameter_constraints,
        "device": DEVICE_CONSTRAINT,
    }

    def __init__(
        self,
        *,
        mode="distance",
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
            mode=mode,
            radius=radius,
            algorithm=algorithm,
            leaf_size=leaf_size,
            metric=metric,
            p=p,
            metric_params=metric_params,
            n_jobs=n_jobs,
        )
        self.device = device
