"""What the estimators share: the device parameter, warnings from the C++ side, and the log of fallbacks."""

import logging
import threading
import warnings
from numbers import Integral

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import StrOptions

from . import _gpuml

logger = logging.getLogger("gpuml")

#: scikit-learn parameter constraint of the `device` parameter every gpuml estimator adds.
DEVICE_CONSTRAINT = [StrOptions({"auto", "gpu", "discrete", "integrated", "cpu", "host"}), str, Integral]

_said_lock = threading.Lock()
_said = set()


def device_choice(device):
    """The C++ backend choice for an estimator's `device` parameter ("" is gpuml's default rule, GPUML_DEVICE)."""
    if device is None or (isinstance(device, str) and device == "auto"):
        return ""
    if isinstance(device, Integral) and not isinstance(device, bool):
        if device < 0:
            raise ValueError(f"device must be a non-negative device index, got {device}")
        return str(int(device))
    if isinstance(device, str):
        return device
    raise TypeError(f"device must be 'auto', 'gpu', 'cpu', 'host', a device index or a name, got {device!r}")


def raise_warnings(messages, stacklevel=3):
    """Raises what the C++ side said as Python warnings: scikit-learn's ConvergenceWarning where scikit-learn
    raises one, RuntimeWarning for conditions of the device (a fallback to the host backend, for example)."""
    for message in messages:
        category = ConvergenceWarning if "distinct clusters" in message else RuntimeWarning
        warnings.warn(message, category, stacklevel=stacklevel)


def log_fallback_once(estimator, reason):
    """Says once per process, at INFO level, that a call went to scikit-learn's own implementation, and why."""
    key = (type(estimator).__name__, reason)
    with _said_lock:
        if key in _said:
            return
        _said.add(key)
    logger.info("gpuml.%s: %s; using scikit-learn's implementation", type(estimator).__name__, reason)


def float_dtype(*arrays):
    """float32 when every array is float32, else float64 (integers and mixed precisions compute in float64)."""
    dtypes = [a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype for a in arrays]  # a tree's memoryview too
    return np.float32 if all(dt == np.float32 for dt in dtypes) else np.float64


#: Sparse inputs are densified for the kernels up to this many bytes; larger ones go to scikit-learn.
MAX_DENSIFIED_BYTES = 1 << 30


def densify(X, dtype):
    """A dense C-contiguous copy of a sparse matrix, or None when it would exceed MAX_DENSIFIED_BYTES."""
    if X.shape[0] * X.shape[1] * np.dtype(dtype).itemsize > MAX_DENSIFIED_BYTES:
        return None
    return np.ascontiguousarray(X.toarray(), dtype=dtype)


def devices():
    """The Vulkan devices gpuml sees: a list of dicts with index, name, type and float64 support."""
    return _gpuml.devices()


def backend_name(device="auto"):
    """Where work for a `device` choice runs: a Vulkan device's name, or "host"."""
    return _gpuml.backend_name(device_choice(device))


class CallCounter:
    """How many calls ran in gpuml and how many went to scikit-learn (the tests check that gpuml did the work)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.gpuml = 0
        self.sklearn = 0

    def count(self, where):
        with self._lock:
            setattr(self, where, getattr(self, where) + 1)

    def reset(self):
        with self._lock:
            self.gpuml = self.sklearn = 0


calls = CallCounter()
