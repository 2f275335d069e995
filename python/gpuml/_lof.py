"""gpuml.LocalOutlierFactor: scikit-learn's LocalOutlierFactor whose neighbour searches run on gpuml.

fit's search of the training samples (X=None) and score_samples' search of new samples (novelty=True, through
decision_function and predict) go through gpuml's kneighbors, the code gpuml.NearestNeighbors runs, with its
fallbacks to scikit-learn (logged once); the reachability densities and outlier factors are scikit-learn's code on
those neighbours.
"""

from sklearn.neighbors import LocalOutlierFactor as _SklearnLocalOutlierFactor

from ._common import DEVICE_CONSTRAINT
from ._neighbors import _GpumlKNeighborsMixin


class LocalOutlierFactor(_GpumlKNeighborsMixin, _SklearnLocalOutlierFactor):
    """Local outlier factor on a Vulkan device: scikit-learn's LocalOutlierFactor, plus `device`."""

    _parameter_constraints = {**_SklearnLocalOutlierFactor._parameter_constraints, "device": DEVICE_CONSTRAINT}

    def __init__(
        self,
        n_neighbors=20,
        *,
        algorithm="auto",
        leaf_size=30,
        metric="minkowski",
        p=2,
        metric_params=None,
        contamination="auto",
        novelty=False,
        n_jobs=None,
        device="auto",
    ):
        super().__init__(
            n_neighbors=n_neighbors,
            algorithm=algorithm,
            leaf_size=leaf_size,
            metric=metric,
            p=p,
            metric_params=metric_params,
            contamination=contamination,
            novelty=novelty,
            n_jobs=n_jobs,
        )
        self.device = device
