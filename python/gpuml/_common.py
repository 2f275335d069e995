"""What the estimators share: the device parameter, warnings from the C++ side, and the log of fallbacks."""

import logging
import threading
import warnings
from numbers import Integral

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, InvalidParameterError, Options, StrOptions

from . import _gpuml

logger = logging.getLogger("gpuml")

#: The `device` keywords: "auto" follows GPUML_DEVICE (a warning and the host backend when it names no device
#: present); the others name the host backend or the first Vulkan device of a kind.
DEVICE_KEYWORDS = ("auto", "host", "gpu", "discrete", "integrated", "cpu")


def _names_present_devices(choice):
    """Whether gpuml's C++ resolver finds what `choice` (a backend choice string) names among the devices present."""
    try:
        _gpuml.backend_name(choice)
    except (_gpuml.Unsupported, _gpuml.InvalidInput, IndexError):  # IndexError: an index past unsigned long
        return False
    return True


def _present_devices():
    found = [f"{d['index']}: {d['name']} ({d['type']})" for d in _gpuml.devices()]
    return "; ".join(found) if found else "none found"


class _DeviceKeyword(StrOptions):
    """One of DEVICE_KEYWORDS, where a kind of device it asks for is present ("auto" and "host" always are)."""

    def __init__(self):
        super().__init__(set(DEVICE_KEYWORDS))

    def is_satisfied_by(self, val):
        return super().is_satisfied_by(val) and (val in ("auto", "host") or _names_present_devices(val))

    def __str__(self):  # the keywords in a fixed order (scikit-learn's lists a set's)
        return "'auto', 'host' or one of 'gpu', 'discrete', 'integrated', 'cpu' where such a Vulkan device is present"


class _DeviceIndex(Interval):
    """The index of a Vulkan device present; an int, never a bool (True would otherwise pass as device 1)."""

    def __init__(self):
        super().__init__(Integral, 0, None, closed="left")

    def is_satisfied_by(self, val):
        return not isinstance(val, bool) and super().is_satisfied_by(val) and _names_present_devices(str(int(val)))

    def __str__(self):
        return "the index of a Vulkan device present (an int >= 0)"


class _DeviceName(Options):
    """Any other text gpuml's resolver takes: part of a device's name, a device index as text, or a comma-separated
    list of them (KMeans shards its rows across the devices). The keywords are matched exactly, as scikit-learn's
    string options are: "Host", "AUTO", "" and "default" (the C++ side's spelling of "auto") are not names.
    An Options subclass because scikit-learn's validation accepts no other kind of constraint object; its options
    are the devices present, so it lists none of its own."""

    def __init__(self):
        super().__init__(str, set())

    def is_satisfied_by(self, val):
        return (
            isinstance(val, str)
            and val.lower() not in (*DEVICE_KEYWORDS, "", "default")
            and _names_present_devices(val)
        )

    def __str__(self):
        return (
            "a str naming Vulkan devices present (part of a name, an index as text or a comma-separated list; "
            f"present: {_present_devices()})"
        )


#: scikit-learn parameter constraint of the `device` parameter every gpuml estimator adds. The three constraints are
#: disjoint (a keyword, an int, any other text), so scikit-learn's check_param_validation can generate a value that
#: breaks each. The rule: a value that names no device present (device="cuda", device="gpu" without a GPU, an index
#: past the last device) is an invalid parameter value: scikit-learn's InvalidParameterError, a ValueError, raised
#: by fit's parameter validation with the devices present in its message; booleans are never a device.
DEVICE_CONSTRAINT = [_DeviceKeyword(), _DeviceIndex(), _DeviceName()]

_said_lock = threading.Lock()
_said = set()


def device_choice(device):
    """The C++ backend choice for an estimator's `device` parameter ("" is gpuml's default rule, GPUML_DEVICE).
    Fit validates `device` against DEVICE_CONSTRAINT first; this only refuses what can never be a device."""
    if device is None or (isinstance(device, str) and device == "auto"):
        return ""
    if isinstance(device, Integral) and not isinstance(device, bool):
        if device < 0:
            raise InvalidParameterError(f"device must be a non-negative device index, got {device}")
        return str(int(device))
    if isinstance(device, str):
        return device
    raise InvalidParameterError(
        f"device must be 'auto', 'gpu', 'discrete', 'integrated', 'cpu', 'host', a device index or a name, "
        f"got {device!r}"
    )


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
