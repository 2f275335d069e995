"""gpuml.patch_sklearn(): scikit-learn's KMeans, DBSCAN, NearestNeighbors, KNeighborsClassifier,
KNeighborsRegressor, RadiusNeighborsClassifier, RadiusNeighborsRegressor, KNeighborsTransformer,
RadiusNeighborsTransformer and LocalOutlierFactor (PATCHED_CLASSES) become gpuml's under every name a scikit-learn module holds them by, whatever was imported first: sklearn.cluster
and sklearn.neighbors, the private modules that define the classes, and every module that bound one at its own
import (DBSCAN's, OPTICS', TSNE's, Isomap's, SpectralEmbedding's modules, sklearn.neighbors._graph for
kneighbors_graph(), ...). A scikit-learn module imported later binds gpuml's classes from the patched modules.
What gpuml cannot run goes to scikit-learn's own code, said once at INFO level on the "gpuml" logger.

Only scikit-learn's modules (sklearn.*) are patched: gpuml's own modules keep the scikit-learn classes its classes
inherit from, and names that other code bound before the patch keep scikit-learn's classes."""

import importlib
import logging
import sys
import threading

from ._graph import KNeighborsTransformer, RadiusNeighborsTransformer
from ._kmeans import KMeans
from ._lof import LocalOutlierFactor
from ._neighbors import KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors
from ._radius import RadiusNeighborsClassifier, RadiusNeighborsRegressor

try:  # DBSCAN's module and extension functions are built separately from the neighbour estimators
    from ._dbscan import DBSCAN

    _OPTIONAL_CLASSES = (DBSCAN,)
except ImportError:
    _OPTIONAL_CLASSES = ()

logger = logging.getLogger("gpuml")

_lock = threading.Lock()

_GPUML_CLASSES = (
    KMeans,
    NearestNeighbors,
    KNeighborsClassifier,
    KNeighborsRegressor,
    RadiusNeighborsClassifier,
    RadiusNeighborsRegressor,
    KNeighborsTransformer,
    RadiusNeighborsTransformer,
    LocalOutlierFactor,
    *_OPTIONAL_CLASSES,
)

#: The names of the scikit-learn classes patch_sklearn() replaces.
PATCHED_CLASSES = tuple(c.__name__ for c in _GPUML_CLASSES)

# The subpackages whose modules bind one of the classes at import (scikit-learn 1.9): imported before the walk, so
# that what patch_sklearn() lists does not depend on what the program imported so far.
_SUBPACKAGES = ("sklearn.cluster", "sklearn.neighbors", "sklearn.manifold", "sklearn.semi_supervised",
                "sklearn.feature_selection")


def _sklearn_class(ours):
    """The scikit-learn class a gpuml class replaces: its base of the same name (found through the class, as the
    names in scikit-learn's modules may already be patched)."""
    return next(b for b in ours.__mro__[1:] if b.__name__ == ours.__name__ and b.__module__.startswith("sklearn."))


def _rebind(replacement):
    """Sets every attribute of a loaded sklearn.* module that is one of replacement's keys (by identity) to its value;
    returns the dotted names it set. replacement maps id(old) -> (old, new): ids, as a module may hold unhashable
    values."""
    changed = []
    for module_name, module in list(sys.modules.items()):
        if module_name != "sklearn" and not module_name.startswith("sklearn."):
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for attr, value in list(namespace.items()):
            hit = replacement.get(id(value))
            if hit is not None and hit[0] is value:
                setattr(module, attr, hit[1])
                changed.append(f"{module_name}.{attr}")
    return sorted(changed)


def _holding(classes):
    """The dotted names in loaded sklearn.* modules whose value is one of `classes`."""
    ids = {id(c) for c in classes}
    return sorted(
        f"{module_name}.{attr}"
        for module_name, module in list(sys.modules.items())
        if (module_name == "sklearn" or module_name.startswith("sklearn."))
        and isinstance(getattr(module, "__dict__", None), dict)
        for attr, value in list(vars(module).items())
        if id(value) in ids and any(value is c for c in classes)
    )


def patch_sklearn():
    """Replaces scikit-learn's classes (PATCHED_CLASSES) by gpuml's wherever scikit-learn's modules hold them (idempotent).
    Returns the dotted names that hold gpuml's classes now; the names it replaced are logged at INFO level."""
    for name in _SUBPACKAGES:  # outside the lock: an import may run code that takes it
        importlib.import_module(name)
    with _lock:
        replaced = _rebind({id(_sklearn_class(c)): (_sklearn_class(c), c) for c in _GPUML_CLASSES})
        names = _holding(_GPUML_CLASSES)
    if replaced:
        logger.info("gpuml.patch_sklearn: scikit-learn now runs gpuml's classes under %d names: %s",
                    len(replaced), ", ".join(replaced))
    return names


def unpatch_sklearn():
    """Restores scikit-learn's own classes under every sklearn.* name that holds a gpuml class, including names that
    modules imported while the patch was active bound. Returns the dotted names it restored."""
    with _lock:
        restored = _rebind({id(c): (c, _sklearn_class(c)) for c in _GPUML_CLASSES})
    if restored:
        logger.info("gpuml.unpatch_sklearn: scikit-learn's own classes are back under %d names", len(restored))
    return restored


def patched_names():
    """The dotted names in scikit-learn's loaded modules that hold gpuml's classes now."""
    with _lock:
        return _holding(_GPUML_CLASSES)
