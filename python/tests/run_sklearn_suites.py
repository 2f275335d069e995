"""Runs scikit-learn's own test files for the patched classes with gpuml.patch_sklearn() active, the way
scikit-learn-intelex runs them, and prints passed / deselected / failed / skipped per file.

    python run_sklearn_suites.py [pytest args...]

Deselections come from sklearn_deselected.txt (each with its reason). The run fails when a test fails, or when
gpuml did no work in a file (the patch must really route scikit-learn's calls through gpuml). float32 cases run too
(SKLEARN_RUN_FLOAT32_TESTS=1)."""

import os
import pathlib
import sys

os.environ.setdefault("SKLEARN_RUN_FLOAT32_TESTS", "1")

import pytest  # noqa: E402

import gpuml  # noqa: E402

SUITES = ["sklearn.cluster.tests.test_k_means", "sklearn.neighbors.tests.test_neighbors"]


def deselected():
    """{suite-relative node id: reason} from sklearn_deselected.txt."""
    out = {}
    for line in (pathlib.Path(__file__).parent / "sklearn_deselected.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        node, _, reason = line.partition("#")
        if not reason.strip():
            raise SystemExit(f"sklearn_deselected.txt: {node.strip()} has no reason")
        out[node.strip()] = reason.strip()
    return out


class Counts:
    def __init__(self):
        self.outcomes = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0}
        self.deselected = 0

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            key = "xfailed" if hasattr(report, "wasxfail") else report.outcome
            self.outcomes[key] = self.outcomes.get(key, 0) + 1

    def pytest_deselected(self, items):
        self.deselected += len(items)


def main(extra):
    gpuml.patch_sklearn()
    wanted = deselected()
    failed = False
    for suite in SUITES:
        module = __import__(suite, fromlist=["_"])
        path = module.__file__
        # scikit-learn's conftest.py (its fixtures, e.g. global_random_seed) lives at the package root.
        site = str(pathlib.Path(__import__("sklearn").__file__).parent.parent)
        args = ["-q", "--disable-warnings", "-p", "no:cacheprovider", "--rootdir", site, "--confcutdir", site, path, *extra]
        for node in wanted:
            args += ["--deselect", f"{path}{node}"]
        counts = Counts()
        gpuml.calls.reset()
        rc = pytest.main(args, plugins=[counts])
        o = counts.outcomes
        print(
            f"{suite}: {o['passed']} passed, {counts.deselected} deselected, {o['failed']} failed, "
            f"{o['skipped']} skipped, {o['xfailed']} xfailed; gpuml ran {gpuml.calls.gpuml} calls, scikit-learn "
            f"{gpuml.calls.sklearn} (device: {gpuml.backend_name()})"
        )
        if rc not in (0, 5) or o["failed"]:
            failed = True
        if gpuml.calls.gpuml == 0:
            print(f"{suite}: gpuml did no work: the patch is not active", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
