"""scikit-learn's estimator checks on gpuml's four estimators. A check may fail only where scikit-learn lists the
same failure for its own class (sklearn's PER_ESTIMATOR_XFAIL_CHECKS, with its reasons)."""

import sklearn.cluster
import sklearn.neighbors
from sklearn.utils._test_common.instance_generator import _get_expected_failed_checks
from sklearn.utils.estimator_checks import parametrize_with_checks

import gpuml

_SKLEARN_CLASS = {
    gpuml.KMeans: sklearn.cluster._kmeans.KMeans,
    gpuml.NearestNeighbors: sklearn.neighbors._unsupervised.NearestNeighbors,
    gpuml.KNeighborsClassifier: sklearn.neighbors._classification.KNeighborsClassifier,
    gpuml.KNeighborsRegressor: sklearn.neighbors._regression.KNeighborsRegressor,
}


def _expected_failures(estimator):
    """The checks scikit-learn itself expects its own class (same parameters) to fail, with its reasons."""
    sk = _SKLEARN_CLASS[type(estimator)]
    params = {k: v for k, v in estimator.get_params().items() if k != "device"}
    return _get_expected_failed_checks(sk(**params))


def _estimators():
    import os

    device = os.environ.get("GPUML_TEST_DEVICE", "host")
    return [
        gpuml.KMeans(n_clusters=2, n_init=2, max_iter=5, device=device),
        gpuml.NearestNeighbors(device=device),
        gpuml.KNeighborsClassifier(device=device),
        gpuml.KNeighborsRegressor(device=device),
    ]


@parametrize_with_checks(_estimators(), expected_failed_checks=_expected_failures)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)
