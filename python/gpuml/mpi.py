"""gpuml.mpi.KMeans: scikit-learn's KMeans fitted across the ranks of an mpi4py communicator.

Every rank passes its own rows (a shard of one data set, in rank order; any sizes, an empty shard included) to fit;
underneath is the library's gpuml::mpi::KMeans (include/gpuml/mpi/kmeans.hpp), each rank computing on its own backend
(`device`) and the per-cluster sums added across ranks exactly, so the fit is one process's fit of all the rows, bit
for bit, from the same starting centers. Afterwards cluster_centers_, inertia_ (over all rows) and n_iter_ are the
same on every rank and labels_ are this rank's rows' labels; predict, transform and score work on this rank's rows.

fit is collective: every rank calls it, with the same parameters. A problem on one rank (bad input, a parameter
that differs across ranks, a failure during the fit) ends fit on every rank with an exception of that rank's kind
(ValueError for bad input), whose message names the rank: no rank is left waiting. Warnings and verbose lines come
from rank 0 only.

Needs mpi4py and a gpuml built where CMake found MPI (the extension gpuml._gpuml_mpi); both are imported at the first
fit, so `import gpuml.mpi` works without them.
"""

import hashlib
import warnings

import numpy as np
from sklearn import get_config
from sklearn.cluster import KMeans as _SklearnKMeans
from sklearn.utils import check_array, check_random_state
from sklearn.utils._openmp_helpers import _openmp_effective_n_threads
from sklearn.utils._param_validation import InvalidParameterError, StrOptions
from sklearn.utils.validation import _check_sample_weight, _is_arraylike_not_scalar, validate_data

from ._common import DEVICE_CONSTRAINT, calls, device_choice, raise_warnings
from ._kmeans import KMeans as _GpumlKMeans

__all__ = ["KMeans"]


def _modules():
    """mpi4py's MPI (which initialises MPI) and gpuml's MPI extension, with a clear error where one is missing."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(
            "gpuml.mpi needs mpi4py (pip install mpi4py) and an MPI library (Debian: openmpi-bin)"
        ) from e
    try:
        from . import _gpuml_mpi
    except ImportError as e:
        raise ImportError(
            "gpuml.mpi: this gpuml was built without MPI (gpuml._gpuml_mpi is missing); install MPI's headers "
            "(Debian: libopenmpi-dev) and build gpuml again (pip install ./python)"
        ) from e
    return MPI, _gpuml_mpi


#: The exception classes a rank's problem is raised as on every rank: the first its exception is an instance of.
_KINDS = (InvalidParameterError, ValueError, TypeError, IndexError, MemoryError, ImportError, NotImplementedError,
          RuntimeError)


def _kind_of(exception):
    for i, kind in enumerate(_KINDS):
        if isinstance(exception, kind):
            return i
    return _KINDS.index(RuntimeError)


def _agree(comm, problem, settings, seed):
    """Collective: every rank's problem (an exception or None), settings and seed, gathered on every rank (as plain
    values: nothing a rank could fail to pickle). Raises on every rank, as the first failing rank's kind of exception,
    when any rank had a problem or a rank's settings differ from rank 0's; else returns rank 0's seed."""
    report = None if problem is None else (_kind_of(problem), str(problem))
    everyone = comm.allgather((report, settings, seed))
    size = len(everyone)
    for r, (theirs, _, _) in enumerate(everyone):
        if theirs is not None:
            kind, message = theirs
            error = _KINDS[kind](f"rank {r} of {size}: {message}")
            if r == comm.Get_rank():
                raise error from problem
            raise error
    for r, (_, theirs, _) in enumerate(everyone):
        for name, value in theirs.items():
            if value != everyone[0][1][name]:
                raise ValueError(
                    f"rank {r} of {size}: {name} differs across ranks ({value!r} on rank {r}, "
                    f"{everyone[0][1][name]!r} on rank 0); every rank must fit with the same parameters"
                )
    return everyone[0][2]


class KMeans(_GpumlKMeans):
    """K-Means clustering across the ranks of an MPI communicator: scikit-learn's KMeans, plus `device` and `comm`.

    fit(X) takes this rank's rows; the fitted model is the fit of all ranks' rows in rank order.

    init : "k-means++" or an array of shape (n_clusters, n_features), default "k-means++"
        k-means++ runs greedily across the ranks, drawing from random_state as one process draws; an array is
        rank 0's. init="random" and a callable are not offered across ranks.
    random_state : int, RandomState instance or None, default None
        Must be the same on every rank (fit refuses otherwise); None: rank 0 draws a seed and every rank uses it.
    device : "auto", "gpu", "discrete", "integrated", "cpu", "host", a Vulkan device index or a name, default None
        Where this rank computes; None (as "auto") follows GPUML_DEVICE, else a GPU, else the host backend.
    comm : mpi4py communicator, default None
        The ranks that fit together; None: MPI.COMM_WORLD.
    """

    _parameter_constraints = {
        **{k: v for k, v in _SklearnKMeans._parameter_constraints.items() if k not in ("copy_x", "algorithm")},
        "init": [StrOptions({"k-means++"}), "array-like"],
        "device": [None, *DEVICE_CONSTRAINT],
        "comm": "no_validation",
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        init="k-means++",
        n_init="auto",
        max_iter=300,
        tol=1e-4,
        verbose=0,
        random_state=None,
        device=None,
        comm=None,
    ):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.verbose = verbose
        self.random_state = random_state
        self.device = device
        self.comm = comm

    def fit(self, X, y=None, sample_weight=None):
        """Compute k-means clustering of every rank's rows (collective: every rank calls it with its own rows).

        X : array-like of shape (n_samples_on_this_rank, n_features); sample_weight : this rank's rows' weights.
        """
        MPI, extension = _modules()
        comm = MPI.COMM_WORLD if self.comm is None else self.comm
        rank = comm.Get_rank()
        problem, settings, seed = None, {}, None
        try:
            if not get_config()["skip_parameter_validation"]:
                self._validate_params()
            X = validate_data(
                self,
                X,
                dtype=[np.float64, np.float32],
                order="C",
                copy=False,
                ensure_all_finite=False,  # the library checks X in its first pass, on every rank at once
                ensure_min_samples=0,  # a rank may hold no rows
            )
            if sample_weight is not None:
                if X.shape[0] == 0:  # scikit-learn's check refuses an empty array
                    sample_weight = np.ascontiguousarray(sample_weight, dtype=X.dtype)
                    if sample_weight.shape != (0,):
                        raise ValueError(f"sample_weight.shape == {sample_weight.shape}, expected (0,)!")
                else:
                    sample_weight = _check_sample_weight(sample_weight, X, dtype=X.dtype)
            device = device_choice(self.device)
            init = None
            if _is_arraylike_not_scalar(self.init):
                init = check_array(self.init, dtype=X.dtype, copy=True, order="C")
                self._validate_center_shape(X, init)
            self._n_init = 1 if self.n_init == "auto" else self.n_init
            if init is not None and self._n_init != 1:
                if rank == 0:
                    warnings.warn(
                        "Explicit initial center position passed: performing only one init in "
                        f"{self.__class__.__name__} instead of n_init={self._n_init}.",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                self._n_init = 1
            if self.random_state is None:
                random_state = None
                if rank == 0:
                    seed = int(check_random_state(None).randint(np.iinfo(np.int32).max))
                stream = None
            else:
                random_state = check_random_state(self.random_state)
                state = random_state.get_state(legacy=True)
                stream = hashlib.sha256(np.asarray(state[1], dtype=np.uint32).tobytes() + str(state[2]).encode())
                stream = stream.hexdigest()
            settings = {
                "n_clusters": self.n_clusters,
                "init": "array" if init is not None else self.init,
                "n_init": self._n_init,
                "max_iter": self.max_iter,
                "tol": float(self.tol),
                "verbose": bool(self.verbose),
                "random_state": stream,
            }
        except Exception as e:  # reported to every rank, raised on every rank
            problem = e
        seed = _agree(comm, problem, settings, seed)
        if random_state is None:
            random_state = np.random.RandomState(seed)
        state = random_state.get_state(legacy=True)

        labels, inertia, centers, n_iter, seconds, key, pos, said = getattr(extension, f"fit_{X.dtype.name}")(
            X,
            sample_weight,
            self.n_clusters,
            init,
            self._n_init,
            self.max_iter,
            float(self.tol),
            bool(self.verbose),
            np.ascontiguousarray(state[1], dtype=np.uint32),
            int(state[2]),
            device,
            comm.py2f(),
        )
        random_state.set_state(("MT19937", key, pos, state[3], state[4]))
        raise_warnings(dict.fromkeys(said))
        calls.count("gpuml")

        self._n_threads = _openmp_effective_n_threads()
        self.fit_stats_ = {"n_init": self._n_init, "iteration_seconds": seconds, "ranks": comm.Get_size()}
        self.cluster_centers_ = centers
        self._n_features_out = centers.shape[0]
        self.labels_ = labels
        self.inertia_ = float(inertia)
        self.n_iter_ = n_iter
        return self
