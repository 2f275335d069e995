"""Runs scikit-learn's own test files for the estimators gpuml accelerates, without and with gpuml.patch_sklearn(),
and prints passed / deselected / failed / skipped per file and mode, with the calls gpuml ran under the patch.

    python run_sklearn_suites.py [--suites ci|all|NAME,...] [--without] [--json FILE] [pytest args...]

--suites: "ci" (the default: the files fast enough for CI), "all" (every file in SUITES; some take minutes), or
comma-separated short names (test_lof,test_dbscan). --without also runs each file without the patch, for the
comparison table. Each file runs in a fresh interpreter per mode, so that neither run sees the other's imports.
Deselections (with the patch only) come from sklearn_deselected.txt, each with its reason. The run fails when a test
fails with the patch, or when gpuml ran no call in a file whose estimators build a patched class. float32 cases run
too (SKLEARN_RUN_FLOAT32_TESTS=1)."""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

os.environ.setdefault("SKLEARN_RUN_FLOAT32_TESTS", "1")

HERE = pathlib.Path(__file__).parent

#: scikit-learn test module -> (in CI, gpuml must run calls in it). Calls are not required where the estimators
#: under test build no patched class (KNNImputer computes nan_euclidean distances itself).
SUITES = {
    "sklearn.cluster.tests.test_k_means": (True, True),
    "sklearn.neighbors.tests.test_neighbors": (True, True),
    "sklearn.neighbors.tests.test_lof": (True, True),
    "sklearn.neighbors.tests.test_graph": (True, True),
    "sklearn.cluster.tests.test_dbscan": (True, True),
    "sklearn.cluster.tests.test_optics": (True, True),
    "sklearn.manifold.tests.test_isomap": (True, True),
    "sklearn.manifold.tests.test_locally_linear": (True, True),
    "sklearn.manifold.tests.test_spectral_embedding": (True, True),
    "sklearn.semi_supervised.tests.test_label_propagation": (True, True),
    "sklearn.impute.tests.test_knn": (True, False),
    "sklearn.manifold.tests.test_t_sne": (False, True),
}


def deselected():
    """{module: {suite-relative node id: reason}} from sklearn_deselected.txt (lines `module::test[params]  # why`;
    a line without a module prefix belongs to test_k_means or test_neighbors, by its name)."""
    out = {}
    for line in (HERE / "sklearn_deselected.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        node, _, reason = line.partition("#")
        node = node.strip()
        if not reason.strip():
            raise SystemExit(f"sklearn_deselected.txt: {node} has no reason")
        module, sep, rest = node.partition("::")
        if not module or module not in SUITES:
            raise SystemExit(f"sklearn_deselected.txt: {node} names no module of SUITES")
        out.setdefault(module, {})["::" + rest] = reason.strip()
    return out


class Counts:
    def __init__(self):
        self.outcomes = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0}
        self.deselected = 0
        self.failures = []

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            key = "xfailed" if hasattr(report, "wasxfail") else report.outcome
            self.outcomes[key] = self.outcomes.get(key, 0) + 1
            if key == "failed":
                self.failures.append(report.nodeid)

    def pytest_deselected(self, items):
        self.deselected += len(items)


def run_one(suite, patched, extra):
    """Runs one test file in this interpreter; returns its counts as a dict."""
    import pytest

    import gpuml

    if patched:
        gpuml.patch_sklearn()
    module = __import__(suite, fromlist=["_"])
    path = module.__file__
    # scikit-learn's conftest.py (its fixtures, e.g. global_random_seed) lives at the package root.
    site = str(pathlib.Path(__import__("sklearn").__file__).parent.parent)
    args = ["-q", "--disable-warnings", "-p", "no:cacheprovider", "--rootdir", site, "--confcutdir", site, path, *extra]
    if patched:  # pytest matches node ids relative to the root directory
        relative = os.path.relpath(path, site)
        for node in deselected().get(suite, {}):
            args += ["--deselect", f"{relative}{node}"]
    counts = Counts()
    gpuml.calls.reset()
    start = time.perf_counter()
    rc = pytest.main(args, plugins=[counts])
    return {
        "suite": suite,
        "patched": patched,
        **counts.outcomes,
        "deselected": counts.deselected,
        "failures": counts.failures,
        "gpuml_calls": gpuml.calls.gpuml,
        "sklearn_calls": gpuml.calls.sklearn,
        "seconds": round(time.perf_counter() - start, 1),
        "rc": int(rc),
        "device": gpuml.backend_name(),
    }


def run_child(suite, patched, extra):
    """Runs one file in a fresh interpreter; its counts come back as the last line of its output."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", suite, "--patched" if patched else "--unpatched", *extra],
        capture_output=True,
        text=True,
    )
    lines = done.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"{suite}: the run did not finish (exit status {done.returncode})")
    result = json.loads(lines[-1])
    if result["failed"]:
        sys.stderr.write(done.stdout)
    return result


def line(r):
    mode = "with the patch" if r["patched"] else "without the patch"
    text = (
        f"{r['suite']} {mode}: {r['passed']} passed, {r['deselected']} deselected, {r['failed']} failed, "
        f"{r['skipped']} skipped, {r['xfailed']} xfailed ({r['seconds']} s)"
    )
    if r["patched"]:
        text += f"; gpuml ran {r['gpuml_calls']} calls, scikit-learn {r['sklearn_calls']} (device: {r['device']})"
    return text


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", default="ci")
    parser.add_argument("--without", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--patched", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--unpatched", action="store_true", help=argparse.SUPPRESS)
    args, extra = parser.parse_known_args(argv)
    if args.child:
        print(json.dumps(run_one(args.child, args.patched, extra)))
        return 0

    if args.suites == "ci":
        suites = [s for s, (in_ci, _) in SUITES.items() if in_ci]
    elif args.suites == "all":
        suites = list(SUITES)
    else:
        by_name = {s.rsplit(".", 1)[1]: s for s in SUITES}
        unknown = [n for n in args.suites.split(",") if n not in by_name]
        if unknown:
            raise SystemExit(f"unknown suites {unknown}; known: {', '.join(by_name)}")
        suites = [by_name[n] for n in args.suites.split(",")]

    results, failed = [], False
    for suite in suites:
        for patched in ((False, True) if args.without else (True,)):
            r = run_child(suite, patched, extra)
            results.append(r)
            print(line(r), flush=True)
            if patched and (r["rc"] not in (0, 5) or r["failed"]):
                failed = True
            if patched and SUITES[suite][1] and r["gpuml_calls"] == 0:
                print(f"{suite}: gpuml ran no call: the patch is not active", file=sys.stderr)
                failed = True
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
