"""The `device` parameter: scikit-learn's parameter validation accepts what names a device present and refuses the
rest with InvalidParameterError (a ValueError) at fit; GPUML_DEVICE with device="auto" only warns."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import check_param_validation

import gpuml
from gpuml import _gpuml

ESTIMATORS = [gpuml.KMeans, gpuml.NearestNeighbors, gpuml.KNeighborsClassifier, gpuml.KNeighborsRegressor]
KINDS = ("gpu", "discrete", "integrated", "cpu")


def _fit(cls, device, rng):
    n = int(rng.integers(23, 61))
    X = rng.normal(size=(n, 5))
    y = rng.integers(0, 3, n) if cls is gpuml.KNeighborsClassifier else rng.normal(size=n)
    params = dict(n_clusters=3, n_init=1) if cls is gpuml.KMeans else dict(n_neighbors=3)
    return cls(**params, device=device).fit(X, y)


def _kind_present(kind):
    try:
        _gpuml.backend_name(kind)
    except _gpuml.Unsupported:
        return False
    return True


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_sklearn_check_param_validation_passes(cls):
    check_param_validation(cls.__name__, cls())


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("device", ["cuda", True, False, -1, 2.0, None, "Host", "AUTO", "", "default", "past the end"])
def test_an_invalid_device_is_an_invalid_parameter_at_fit(cls, device, rng):
    if device == "past the end":
        device = len(gpuml.devices())
    with pytest.raises(InvalidParameterError, match=rf"The 'device' parameter of {cls.__name__} must be .* Got") as e:
        _fit(cls, device, rng)
    assert isinstance(e.value, ValueError)  # what scikit-learn users catch


@pytest.mark.parametrize("kind", KINDS)
def test_a_device_kind_is_valid_exactly_where_such_a_device_is_present(kind, rng):
    if _kind_present(kind):
        assert _fit(gpuml.KMeans, kind, rng).cluster_centers_.shape == (3, 5)
    else:
        with pytest.raises(InvalidParameterError, match=r"present: (none found|0: )"):
            _fit(gpuml.KMeans, kind, rng)


def test_present_devices_by_index_and_by_name_fit_like_the_host(rng):
    devices = gpuml.devices()
    if not devices:
        pytest.skip("no Vulkan device")
    X = rng.normal(size=(157, 7))
    Q = rng.normal(size=(31, 7))
    expected = gpuml.NearestNeighbors(n_neighbors=4, device="host").fit(X).kneighbors(Q)[1]
    last = devices[-1]
    for device in (last["index"], np.int64(last["index"]), str(last["index"]), last["name"][:5].upper()):
        before = gpuml.calls.gpuml
        found = gpuml.NearestNeighbors(n_neighbors=4, device=device).fit(X).kneighbors(Q)[1]
        assert gpuml.calls.gpuml == before + 1
        np.testing.assert_array_equal(found, expected)


def test_the_message_lists_the_devices_present(rng):
    with pytest.raises(InvalidParameterError) as raised:
        _fit(gpuml.NearestNeighbors, "no such device anywhere", rng)
    message = str(raised.value)
    for d in gpuml.devices():
        assert d["name"] in message
    if not gpuml.devices():
        assert "none found" in message


def test_gpuml_device_naming_no_device_warns_and_runs_on_the_host(tmp_path):
    code = textwrap.dedent(
        """
        import warnings, numpy as np, gpuml
        X = np.random.default_rng().normal(size=(73, 4))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gpuml.KMeans(n_clusters=3, n_init=1).fit(X)  # device="auto" follows GPUML_DEVICE
        assert gpuml.calls.gpuml == 1
        assert any(w.category is RuntimeWarning and "cuda" in str(w.message) for w in caught), caught
        print(gpuml.backend_name())
        """
    )
    env = {**os.environ, "GPUML_DEVICE": "cuda"}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    assert out.split() == ["host"]
