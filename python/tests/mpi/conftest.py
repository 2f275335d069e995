"""gpuml.mpi's tests, run under mpirun with one, two and three ranks (scripts/test-python): every rank runs every test,
as the collective fits need. The random seed is rank 0's, broadcast, so every rank makes the same data. Only rank 0
reports. A test that fails on one rank of several aborts the job after printing its report: the other ranks may be
waiting in a collective it will never join."""

import os
import sys

import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI", reason="gpuml.mpi's tests need mpi4py")


@pytest.hookimpl(trylast=True)  # after the terminal reporter is registered
def pytest_configure(config):
    if MPI.COMM_WORLD.Get_rank() != 0:  # one report: rank 0's (a failure elsewhere prints its own, below)
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            config.pluginmanager.unregister(reporter)


def pytest_runtest_logreport(report):
    world = MPI.COMM_WORLD
    if report.failed and world.Get_size() > 1:
        sys.stderr.write(f"\nrank {world.Get_rank()}: {report.nodeid} failed ({report.when}):\n{report.longreprtext}\n")
        sys.stderr.flush()
        world.Abort(1)


@pytest.fixture(scope="session")
def comm():
    return MPI.COMM_WORLD


@pytest.fixture
def rng(comm):
    """Fresh random data per run, the same on every rank; the seed is printed so a failure can be replayed with
    GPUML_TEST_SEED."""
    seed = None
    if comm.Get_rank() == 0:
        seed = int(os.environ.get("GPUML_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
    seed = comm.bcast(seed, root=0)
    print(f"GPUML_TEST_SEED={seed}")
    return np.random.default_rng(seed)
