"""gpuml's Python tests: the device under test comes from GPUML_TEST_DEVICE ("host", "cpu" for lavapipe, "gpu")."""

import os

import numpy as np
import pytest


@pytest.fixture(scope="session")
def device():
    return os.environ.get("GPUML_TEST_DEVICE", "host")


@pytest.fixture
def rng(request):
    """Fresh random data per run; the seed is printed so a failure can be replayed with GPUML_TEST_SEED."""
    seed = int(os.environ.get("GPUML_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
    print(f"GPUML_TEST_SEED={seed}")
    return np.random.default_rng(seed)
