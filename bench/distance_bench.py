#!/usr/bin/env python3
"""Pairwise squared distances: gpuml-distance-bench (the Vulkan kernel alone, device timestamps, and
gpuml::pairwise_sq_distances end to end) next to PyTorch's ||x||^2 + ||y||^2 - 2 X Y^T (peers.torch_pairwise, TF32
off, CUDA events) on the same GPU, in one run, with a side-by-side table and ratios.

    python3 bench/distance_bench.py                         # n = m = 16384, d = 128 float32, first GPU + CUDA
    python3 bench/distance_bench.py --n 1024 --m 1024 --device cpu --repeats 3   # lavapipe; torch skipped

torch is imported only by peers.torch_pairwise; without torch (or CUDA) that row is skipped with a note.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from gpuml_programs import find_binary, fmt, plot_bars  # noqa: E402
import peers  # noqa: E402




def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--m", type=int, default=16384)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=10, help="timed repetitions of each")
    ap.add_argument("--e2e-repeats", type=int, default=3, help="timed gpuml::pairwise_sq_distances calls")
    ap.add_argument("--device", default=None, help="gpuml's Vulkan device (default: $GPUML_DEVICE, else gpu)")
    ap.add_argument("--torch-device", default="cuda")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch row")
    ap.add_argument("--bin", help="path to gpuml-distance-bench (default: build*/bench/gpuml-distance-bench)")
    ap.add_argument("--json-out", help="also write both results as JSON here")
    ap.add_argument("--plot", help="also draw the table as a PNG here (matplotlib)")
    args = ap.parse_args()

    binary = find_binary("gpuml-distance-bench", "bench", args.bin)
    cmd = [str(binary), "--n", str(args.n), "--m", str(args.m), "--d", str(args.d), "--repeats", str(args.repeats),
           "--e2e-repeats", str(args.e2e_repeats), "--json"]
    if args.device:
        cmd += ["--device", args.device]
    notes = []
    print("running gpuml-distance-bench ...", file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    g = json.loads(lines[-1]) if lines else None
    if g is None:
        notes.append(f"gpuml skipped: exit {p.returncode}: {p.stderr.strip().splitlines()[0] if p.stderr.strip() else ''}")
    elif not g.get("ok", False):
        notes.append(f"gpuml result MISMATCH against float64 (kernel {g['kernel_max_rel_error']:.2e}, "
                     f"end to end {g['e2e_max_rel_error']:.2e}, tolerance {g['tolerance']:.1e})")

    t = None
    if args.no_torch:
        pass
    elif importlib.util.find_spec("torch") is None:
        notes.append("torch skipped: PyTorch is not installed")
    else:
        print("running torch ...", file=sys.stderr, flush=True)
        try:
            t = peers.torch_pairwise(args.n, args.m, args.d, repeats=args.repeats, device=args.torch_device)
        except Exception as e:
            notes.append(f"torch skipped: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    print()
    print(f"pairwise squared distances: n={args.n:,} m={args.m:,} d={args.d} float32 "
          f"({2.0 * args.n * args.m * args.d / 1e9:.1f} GFLOP per call)")
    print()
    print("| implementation | device | ms | TFLOP/s | vs gpuml kernel |")
    print("|---|---|---:|---:|---:|")
    base = g["kernel_ms"] if g and g["kernel_ms"] > 0 else None
    if g:
        print(f"| gpuml kernel ({g['timing']}, median of {g['repeats']}) | {g['device']} | {g['kernel_ms']:.3f} | "
              f"{g['kernel_tflops']:.3f} | 1.00 |")
        if g.get("e2e_ms") is not None:
            print(f"| gpuml::pairwise_sq_distances end to end (upload + kernels + download) | {g['device']} | "
                  f"{g['e2e_ms']:.3f} | {g['e2e_tflops']:.3f} | {fmt(g['e2e_ms'] / base if base else None, '.2f')} |")
    if t:
        print(f"| torch {t['version']} addmm + add + clamp (TF32 off, mean of {t['repeats']}) | {t['device']} | "
              f"{t['ms']:.3f} | {t['tflops']:.3f} | {fmt(t['ms'] / base if base else None, '.2f')} |")
    print()
    print("ms per call; TFLOP/s counts 2 * n * m * d. The gpuml kernel row and torch both start from data already "
          "on the device and write the n x m matrix there; the end-to-end row adds the transfers.")
    if g and g.get("norms_ms", -1) >= 0:
        print(f"The gpuml kernel row excludes the row norms ({g['norms_ms']:.3f} ms, computed before it); torch's "
              "time includes its norms.")
    if g:
        print(f"gpuml check on {g['check_samples']} sampled entries vs float64: kernel {g['kernel_max_rel_error']:.2e}, "
              f"end to end {g['e2e_max_rel_error']:.2e} ({'OK' if g['ok'] else 'MISMATCH'})")
    labels, values, mine = [], [], []
    if g:
        labels += ["gpuml kernel"] + (["gpuml end to end"] if g.get("e2e_ms") is not None else [])
        values += [g["kernel_ms"]] + ([g["e2e_ms"]] if g.get("e2e_ms") is not None else [])
        mine += [True] * (len(labels) - len(mine))
    if t:
        labels.append(f"torch {t['version']} addmm (TF32 off)")
        values.append(t["ms"])
        mine.append(False)
    note = plot_bars(args.plot, f"pairwise squared distances {args.n:,} x {args.m:,}, d={args.d}", labels, values, "ms",
                     mine)
    if note:
        notes.append(note)
    for note in notes:
        print(f"- note: {note}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"gpuml": g, "torch": t, "notes": notes}, f, indent=1)
    return 0 if g and g.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
