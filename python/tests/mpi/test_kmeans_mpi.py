"""gpuml.mpi.KMeans against gpuml.KMeans: every rank makes the same data, fits its own contiguous shard across the
ranks, and fits all the rows alone in its own process on the same device; the distributed fit must be that fit bit for
bit (labels gathered in rank order, centers, inertia, n_iter), since the per-cluster sums are added exactly."""

import importlib.util

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

import gpuml

if importlib.util.find_spec("gpuml._gpuml_mpi") is None:
    pytest.skip("gpuml was built without MPI", allow_module_level=True)

import gpuml.mpi  # noqa: E402


def _shard(comm, n, leave_last_empty):
    """This rank's rows of n: uneven contiguous shards (rank r's share proportional to r + 1), the last rank's empty
    when asked and there are several ranks."""
    size, rank = comm.Get_size(), comm.Get_rank()
    parts = size - 1 if leave_last_empty and size > 1 else size
    cuts = np.concatenate([[0], np.cumsum([n * (r + 1) // (parts * (parts + 1) // 2) for r in range(parts)])])
    cuts[-1] = n
    cuts = np.concatenate([cuts, [n] * (size - parts)])
    return slice(int(cuts[rank]), int(cuts[rank + 1]))


def _blobs(rng, n, d, k, dtype):
    centers = rng.uniform(-10, 10, (k, d))
    return (centers[rng.integers(k, size=n)] + rng.normal(scale=1.5, size=(n, d))).astype(dtype)


def _expect_same_fit(comm, many, one, rows, what):
    labels = np.concatenate(comm.allgather(many.labels_))
    np.testing.assert_array_equal(labels, one.labels_, err_msg=what)
    np.testing.assert_array_equal(many.cluster_centers_, one.cluster_centers_, err_msg=what)
    assert many.inertia_ == one.inertia_, what
    assert many.n_iter_ == one.n_iter_, what
    assert many.cluster_centers_.dtype == one.cluster_centers_.dtype, what
    assert many.labels_.shape == (rows.stop - rows.start,), what


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("last_empty", [False, True])
def test_array_init_matches_one_process(comm, rng, device, dtype, last_empty):
    n, d, k = 389, 5, 6
    X = _blobs(rng, n, d, k, dtype)
    w = rng.uniform(0.2, 3.0, n).astype(dtype)
    rows = _shard(comm, n, last_empty)
    init = X[:k].copy()
    many = gpuml.mpi.KMeans(k, init=init, tol=0, max_iter=40, device=device, comm=comm)
    many.fit(X[rows], sample_weight=w[rows])
    one = gpuml.KMeans(k, init=init, tol=0, max_iter=40, device=device).fit(X, sample_weight=w)
    _expect_same_fit(comm, many, one, rows, f"{np.dtype(dtype).name} last_empty={last_empty}")
    if rows.stop == rows.start:
        return
    # predict, transform and score on this rank's rows are the one-process model's
    np.testing.assert_array_equal(many.predict(X[rows]), one.predict(X[rows]))
    np.testing.assert_array_equal(many.transform(X[rows]), one.transform(X[rows]))
    assert many.score(X[rows], sample_weight=w[rows]) == one.score(X[rows], sample_weight=w[rows])


# k-means++ across ranks on real-valued data with real weights: sampling blocks are global and every block sum and
# potential is an exact fixed-point sum, so the draws are one process's on any cut of the rows.
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("last_empty", [False, True])
def test_plus_plus_matches_one_process(comm, rng, device, dtype, last_empty):
    n, d, k = 421, 4, 5
    X = _blobs(rng, n, d, k, dtype)
    w = rng.uniform(0.1, 3.0, n).astype(dtype)
    rows = _shard(comm, n, last_empty)
    seed = int(rng.integers(2**31))
    many_state, one_state = np.random.RandomState(seed), np.random.RandomState(seed)
    many = gpuml.mpi.KMeans(k, n_init=2, random_state=many_state, device=device, comm=comm)
    many.fit(X[rows], sample_weight=w[rows])
    one = gpuml.KMeans(k, n_init=2, random_state=one_state, device=device).fit(X, sample_weight=w)
    _expect_same_fit(comm, many, one, rows, f"{np.dtype(dtype).name} last_empty={last_empty} random_state={seed}")
    # the RandomState is left as one process's fit leaves it
    assert many_state.randint(2**31) == one_state.randint(2**31)


def test_random_state_none_is_rank_zeros(comm, rng, device):
    X = _blobs(rng, 120, 3, 4, np.float64)
    rows = _shard(comm, 120, False)
    km = gpuml.mpi.KMeans(4, device=device, comm=comm).fit(X[rows])
    everyone = comm.allgather(km.cluster_centers_)
    for centers in everyone[1:]:
        np.testing.assert_array_equal(centers, everyone[0])


def test_nan_on_one_rank_raises_on_every_rank(comm, rng, device):
    size = comm.Get_size()
    X = _blobs(rng, 90, 3, 3, np.float64)
    rows = _shard(comm, 90, False)
    mine = X[rows].copy()
    if comm.Get_rank() == size - 1:
        mine[1, 2] = np.nan
    with pytest.raises(ValueError, match=f"rank {size - 1} of {size}: .*NaN"):
        gpuml.mpi.KMeans(3, init=X[:3], device=device, comm=comm).fit(mine)
    comm.Barrier()  # every rank is here: none was left waiting


def test_bad_parameters_raise_on_every_rank(comm, rng):
    size = comm.Get_size()
    X = _blobs(rng, 60, 3, 3, np.float64)
    mine = X[_shard(comm, 60, False)]
    with pytest.raises(InvalidParameterError, match="rank 0 of"):
        gpuml.mpi.KMeans(3, init="random", comm=comm).fit(mine)
    # a parameter that differs on the last rank
    k = 4 if comm.Get_rank() == size - 1 and size > 1 else 3
    if size > 1:
        with pytest.raises(ValueError, match="n_clusters differs across ranks"):
            gpuml.mpi.KMeans(k, random_state=0, comm=comm).fit(mine)
    # more clusters than rows over all ranks
    with pytest.raises(ValueError, match="should be >= n_clusters"):
        gpuml.mpi.KMeans(61, random_state=0, comm=comm).fit(mine)
    comm.Barrier()


def test_a_split_communicator(comm, rng, device):
    """Two groups of ranks (even and odd) fit two data sets at once, each over its own communicator."""
    group = comm.Split(comm.Get_rank() % 2, comm.Get_rank())
    try:
        n, k = 150, 3
        X = [_blobs(rng, n, 3, k, np.float64) for _ in range(2)][comm.Get_rank() % 2]
        rows = _shard(group, n, False)
        many = gpuml.mpi.KMeans(k, init=X[:k], device=device, comm=group).fit(X[rows])
        one = gpuml.KMeans(k, init=X[:k], device=device).fit(X)
        _expect_same_fit(group, many, one, rows, f"group {comm.Get_rank() % 2}")
    finally:
        group.Free()
