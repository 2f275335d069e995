"""Finding and running gpuml's own programs from the benchmark drivers (the peers live in peers.py)."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def find_binary(name: str, subdir: str, given: str | None) -> Path:
    """The program `name`: the path given, else build/<subdir>/name, else any build*/<subdir>/name."""
    if given:
        p = Path(given)
        if not p.is_file():
            sys.exit(f"error: {p} does not exist")
        return p
    for c in [ROOT / "build" / subdir / name] + sorted(ROOT.glob(f"build*/{subdir}/{name}")):
        if c.is_file() and os.access(c, os.X_OK):
            return c
    sys.exit(f"error: {name} not found under {ROOT}/build*/{subdir}; build it first:\n"
             f"  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j --target {name}")


def run_json(cmd: list[str], timeout: float | None = None) -> tuple[dict | None, str]:
    """Runs a gpuml program; returns (the JSON object on its last stdout line, or None; a note on failure)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    lines = [l for l in p.stdout.strip().splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        msg = (p.stderr.strip() or p.stdout.strip()).splitlines()
        first = next((i for i, l in enumerate(msg) if "error:" in l), max(len(msg) - 1, 0))
        return None, f"exit {p.returncode}: " + (" ".join(l.strip() for l in msg[first:first + 3]) if msg else "no output")
    return json.loads(lines[-1]), (p.stderr.strip().replace("\n", "; ") if p.stderr.strip() else "")


def fmt(x, spec):
    return "–" if x is None else format(x, spec)


def add_run_arguments(ap, program: str, runs: str) -> None:
    """The options every driver of a gpuml program takes: repeats, warm-up, baseline, binary, timeout, JSON out."""
    ap.add_argument("--repeat", type=int, default=1, help=f"gpuml {runs} per backend; the best is reported")
    ap.add_argument("--no-warmup", action="store_true", help=f"do not pass --warmup to {program}")
    ap.add_argument("--baseline", help="the gpuml backend the ratios refer to (default: the first that ran)")
    ap.add_argument("--bin", help=f"path to {program} (default: build*/examples/{program})")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per gpuml run")
    ap.add_argument("--json-out", help="also write every result as JSON here")
    ap.add_argument("--plot", help="also draw the table as a PNG here (matplotlib; default: no picture)")


def plot_bars(path: str | None, title: str, labels: list[str], values: list[float], unit: str,
              highlight: list[bool] | None = None) -> str | None:
    """Draws one horizontal bar per row of a printed table (value in `unit`, smaller is better) to the PNG `path`;
    gpuml's rows (highlight) in a colour of their own. Returns a note when matplotlib is missing, else None."""
    if not path:
        return None
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install matplotlib)"
    highlight = highlight or [False] * len(values)
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(values) + 1.4))
    y = list(range(len(values)))[::-1]
    bars = ax.barh(y, values, color=["#d95f02" if h else "#7570b3" for h in highlight])
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xscale("log" if values and min(values) > 0 and max(values) / min(values) > 50 else "linear")
    ax.set_xlabel(unit + " (smaller is better)")
    fig.suptitle(title, fontsize=9)
    for b, v in zip(bars, values):
        ax.text(b.get_width(), b.get_y() + b.get_height() / 2, f" {v:.3g}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def data_directory(given: str | None, prefix: str):
    """(the directory for the drivers' .npy files, the TemporaryDirectory to keep alive or None): `given`, created
    if needed, else a fresh temporary directory."""
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        return path, None
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    return Path(tmp.name), tmp
