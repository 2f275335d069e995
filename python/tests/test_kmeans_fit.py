"""gpuml.KMeans's fit in the library: scikit-learn's starting centers from numpy's stream, one upload for every
n_init run, and the RandomState left as scikit-learn leaves it."""

import numpy as np
import pytest
import sklearn.cluster
from sklearn.cluster._kmeans import _kmeans_plusplus
from sklearn.utils.extmath import row_norms

import gpuml
from gpuml import _gpuml


def _state(random_state):
    key, pos = random_state.get_state(legacy=True)[1:3]
    return np.ascontiguousarray(key, dtype=np.uint32), int(pos)


def _data(rng, n, d, dtype):
    scale = rng.uniform(0.5, 3.0, d)
    return (rng.normal(size=(n, d)) * scale + rng.uniform(-5, 5, d)).astype(dtype)


def test_random_sample_is_numpys_stream(rng):
    seed = int(rng.integers(2**32))
    reference = np.random.RandomState(seed)
    reference.random_sample(int(rng.integers(1, 700)))  # any position, the key regenerated at least once
    values, key, pos = _gpuml.random_sample(*_state(reference), 1500)
    np.testing.assert_array_equal(values, reference.random_sample(1500))
    after_key, after_pos = _state(reference)
    np.testing.assert_array_equal(key, after_key)
    assert pos == after_pos


def _sklearn_starting_samples(X, w, k, seed, init):
    """The samples scikit-learn's KMeans.fit starts its first run from (its own code, on X less its mean)."""
    random_state = np.random.RandomState(seed)
    centred = X - X.mean(axis=0)
    if init == "k-means++":
        _, indices = _kmeans_plusplus(centred, k, row_norms(centred, squared=True), w, random_state)
    else:
        indices = random_state.choice(X.shape[0], size=k, replace=False, p=w / w.sum())
    return np.asarray(indices), _state(random_state)[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("init", ["k-means++", "random"])
def test_starting_samples_are_sklearns(rng, device, dtype, init):
    n, d, k = int(rng.integers(700, 2100)), int(rng.integers(2, 19)), int(rng.integers(3, 40))
    X = _data(rng, n, d, dtype)
    w = rng.uniform(0.2, 3.0, n).astype(dtype)
    w[rng.random(n) < 0.1] = 0  # zero weights are never drawn
    starting = getattr(_gpuml, f"starting_samples_{np.dtype(dtype).name}")
    seeds = rng.integers(2**32, size=8)
    same = 0
    for seed in seeds:
        ours, _, pos, _ = starting(X, w, k, init, *_state(np.random.RandomState(int(seed))), device)
        theirs, their_pos = _sklearn_starting_samples(X, w, k, int(seed), init)
        assert len(set(ours.tolist())) == k and (w[ours] > 0).all()
        assert pos == their_pos  # the same numbers drawn
        same += np.array_equal(ours, theirs)
    # A draw can differ only within float rounding of a boundary; at these sizes that is rare.
    assert same >= len(seeds) - 1


def test_fit_starts_where_sklearn_starts(rng, device):
    """max_iter=1 from the same starting centers gives scikit-learn's first iteration; the RandomState advances as
    scikit-learn's does."""
    X = _data(rng, 1531, 6, np.float64)
    ours_state, their_state = np.random.RandomState(11), np.random.RandomState(11)
    ours = gpuml.KMeans(9, max_iter=1, n_init=3, random_state=ours_state, device=device).fit(X)
    theirs = sklearn.cluster._kmeans.KMeans(9, max_iter=1, n_init=3, random_state=their_state).fit(X)
    np.testing.assert_allclose(ours.cluster_centers_, theirs.cluster_centers_, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(ours.labels_, theirs.labels_)
    np.testing.assert_array_equal(ours_state.random_sample(5), their_state.random_sample(5))


def test_n_init_runs_share_one_upload_and_keep_the_best(rng, device):
    X = _data(rng, 4099, 5, np.float32)
    together = gpuml.KMeans(7, init="random", n_init=4, random_state=5, device=device).fit(X)
    assert together.fit_stats_["n_init"] == 4
    if gpuml.backend_name(device) != "host":
        assert together.fit_stats_["uploads"] == 1
        assert together.fit_stats_["reserved_uploads"] == 1  # into memory allocated during the input checks
        assert not together.fit_stats_["checks_on_device"]  # X below Config::device_checks_min_bytes: the host's
    # Ten separate runs drawing from the same stream in turn: the fit keeps the best by scikit-learn's rule.
    stream = np.random.RandomState(5)
    best = None
    for _ in range(4):
        one = gpuml.KMeans(7, init="random", n_init=1, random_state=stream, device=device).fit(X)
        if best is None or (one.inertia_ < best.inertia_ and not _same(one.labels_, best.labels_)):
            best = one
    np.testing.assert_array_equal(together.labels_, best.labels_)
    np.testing.assert_array_equal(together.cluster_centers_, best.cluster_centers_)
    assert together.inertia_ == best.inertia_


def _same(a, b):
    return len(set(zip(a.tolist(), b.tolist()))) == len(set(a.tolist())) == len(set(b.tolist()))


def test_x_is_not_copied_or_changed(rng, device, tmp_path):
    X = _data(rng, 2003, 4, np.float32)
    path = tmp_path / "x.npy"
    np.save(path, X)
    mapped = np.load(path, mmap_mode="r")  # read-only: a write would fail
    model = gpuml.KMeans(5, random_state=0, device=device).fit(mapped)
    reference = gpuml.KMeans(5, random_state=0, device=device).fit(X)
    np.testing.assert_array_equal(model.labels_, reference.labels_)
    np.testing.assert_array_equal(np.load(path), X)


def test_non_finite_x_names_the_value(rng, device):
    X = _data(rng, 301, 3, np.float64)
    X[117, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        gpuml.KMeans(3, device=device).fit(X)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_several_devices_give_one_devices_fit_bit_for_bit(rng, device, dtype):
    """device="i,i" and "i,i,i" (the device under test opened two and three times): KMeans shards its rows across
    the devices and adds their exact sums, so labels, centers, inertia and n_iter are one device's, bit for bit, on
    real-valued data with weights."""
    name = gpuml.backend_name(device)
    if name == "host":
        pytest.skip("sharding needs a Vulkan device")
    index = next(d["index"] for d in gpuml.devices() if d["name"] == name)
    X = (rng.uniform(-3.0, 7.0, size=(20011, 5))).astype(dtype)
    w = rng.uniform(0.25, 2.0, size=X.shape[0]).astype(dtype)
    params = dict(n_clusters=23, init=X[:23], n_init=1, max_iter=50, tol=0)
    one = gpuml.KMeans(**params, device=index).fit(X, sample_weight=w)
    for devices in (f"{index},{index}", f"{index},{index},{index}"):
        many = gpuml.KMeans(**params, device=devices).fit(X, sample_weight=w)
        np.testing.assert_array_equal(many.labels_, one.labels_)
        np.testing.assert_array_equal(many.cluster_centers_, one.cluster_centers_)
        assert many.inertia_ == one.inertia_
        assert many.n_iter_ == one.n_iter_
