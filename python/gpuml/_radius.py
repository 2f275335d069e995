"""gpuml.RadiusNeighborsClassifier and RadiusNeighborsRegressor: scikit-learn's radius estimators whose searches run
on gpuml's radius_neighbors, the code gpuml.NearestNeighbors runs (with its fallbacks to scikit-learn, logged once).
The votes, outlier_label handling and weighted means are scikit-learn's code on those neighbourhoods."""

from sklearn.neighbors import RadiusNeighborsClassifier as _SklearnRadiusNeighborsClassifier
from sklearn.neighbors import RadiusNeighborsRegressor as _SklearnRadiusNeighborsRegressor

from ._common import DEVICE_CONSTRAINT
from ._neighbors import _GpumlRadiusNeighborsMixin


class RadiusNeighborsClassifier(_GpumlRadiusNeighborsMixin, _SklearnRadiusNeighborsClassifier):
    """Vote among the neighbours within a radius, on a Vulkan device: scikit-learn's RadiusNeighborsClassifier, plus
    `device`."""

    _parameter_constraints = {**_SklearnRadiusNeighborsClassifier._parameter_constraints, "device": DEVICE_CONSTRAINT}

    def __init__(
        self,
        radius=1.0,
        *,
        weights="uniform",
        algorithm="auto",
        leaf_size=30,
        p=2,
        metric="minkowski",
        outlier_label=None,
        metric_params=None,
        n_jobs=None,
        device="auto",
    ):
        super().__init__(
            radius=radius,
            weights=weights,
            algorithm=algorithm,
            leaf_size=leaf_size,
            p=p,
            metric=metric,
            outlier_label=outlier_label,
            metric_params=metric_params,
            n_jobs=n_jobs,
        )
        self.device = device


class RadiusNeighborsRegressor(_GpumlRadiusNeighborsMixin, _SklearnRadiusNeighborsRegressor):
    """Mean of the neighbours within a radius, on a Vulkan device: scikit-learn's RadiusNeighborsRegressor, plus
    `device`."""

    _parameter_constraints = {**_SklearnRadiusNeighborsRegressor._parameter_constraints, "device": DEVICE_CONSTRAINT}

    def __init__(
        self,
        radius=1.0,
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
            radius=radius,
            weights=weights,
            algorithm=algorithm,
            leaf_size=leaf_size,
            p=p,
            metric=metric,
            metric_params=metric_params,
            n_jobs=n_jobs,
        )
        self.device = device
