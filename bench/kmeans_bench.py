#!/usr/bin/env python3
"""k-means benchmark: gpuml-kmeans on each chosen backend next to scikit-learn, scikit-learn-intelex and (on a GPU
machine) PyTorch, all in one run, on the same data with the same initial centers.

The workload is the seed's: n samples (default 1,000,000) of blobs-like float32 data, d=14, k=127, init = the first
k samples, max_iter=100, tol=0, n_init=1. It is written once (by peers.write_workload, or by gpuml-kmeans
--write-synthetic with --data-from gpuml) as X.npy + init.npy; every implementation reads the same files.

Prints a markdown table: ms per iteration, achieved TFLOP/s (2nkd per iteration), and each row's time per
iteration relative to the baseline gpuml row (> 1: slower than gpuml). A peer that is not installed (or a backend
that is not present) is skipped with a note.

    python3 bench/kmeans_bench.py                                 # host + gpu (if present) + sklearn + sklearnex
    python3 bench/kmeans_bench.py --n 200000 --backends host,cpu --peers sklearn
    python3 bench/kmeans_bench.py --backends gpu,host --peers sklearn,sklearnex,torch   # GPU machine
    python3 bench/kmeans_bench.py --backends gpu --peers torch,flash-fp16,flash-tf32,flash-ieee  # with flash-kmeans
    python3 bench/kmeans_bench.py --backends gpu --e-steps plain,bounded --peers none   # gpuml's two E-steps
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from gpuml_programs import add_run_arguments, data_directory, find_binary, fmt, plot_bars, run_json  # noqa: E402
import peers  # noqa: E402  (numpy only at import; torch is imported inside peers.torch_*)





def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="samples (default 1,000,000)")
    ap.add_argument("--d", type=int, default=14)
    ap.add_argument("--k", type=int, default=127)
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="workload seed (peers.write_workload)")
    ap.add_argument("--data-dir", help="where X.npy and init.npy go (default: a temporary directory)")
    ap.add_argument("--data-from", choices=["peers", "gpuml"], default="peers",
                    help="write the data with peers.write_workload (default) or gpuml-kmeans --write-synthetic")
    ap.add_argument("--backends", default="host,gpu",
                    help="gpuml devices to run, comma-separated: host, gpu, discrete, integrated, cpu (lavapipe), N, "
                         "a name, or none (default host,gpu; absent ones are skipped)")
    ap.add_argument("--peers", default="sklearn,sklearnex,torch",
                    help="peers, comma-separated: sklearn, sklearnex, torch, flash-fp16, flash-tf32, flash-ieee (flash-kmeans), "
                         "gpuml-python (the Python package on the first of --backends), or none (default sklearn, sklearnex, torch; torch is skipped "
                         "without torch or CUDA)")
    ap.add_argument("--e-steps", default="auto",
                    help="gpuml's E-steps to run on each backend, comma-separated: auto, plain, bounded (default auto); "
                         "the rows' labels and centers are compared bit for bit")
    ap.add_argument("--torch-device", default="cuda")
    add_run_arguments(ap, "gpuml-kmeans", "fits")
    args = ap.parse_args()

    binary = find_binary("gpuml-kmeans", "examples", args.bin)
    data_dir, tmp = data_directory(args.data_dir, "gpuml-kmeans-bench-")
    x_path, init_path = data_dir / "X.npy", data_dir / "init.npy"
    if args.data_from == "peers":
        peers.write_workload(data_dir, args.n, args.d, args.k, args.seed)
        source = f"peers.write_workload(n={args.n}, d={args.d}, k={args.k}, seed={args.seed})"
    else:
        out, note = run_json([str(binary), "--write-synthetic", str(x_path), "--n-samples", str(args.n),
                              "--n-features", str(args.d), "--n-clusters", str(args.k), "--json"])
        if out is None:
            sys.exit(f"error: gpuml-kmeans --write-synthetic failed: {note}")
        os.replace(data_dir / "X_init.npy", init_path)
        source = f"gpuml-kmeans --write-synthetic (n={args.n}, d={args.d}, k={args.k})"

    import numpy as np

    X = np.load(x_path, mmap_mode="r")
    init = np.load(init_path)
    n, d = X.shape
    k = init.shape[0]
    flops_per_iter = 2.0 * n * k * d
    rows: list[dict] = []
    notes: list[str] = []

    # gpuml, one run per backend and E-step.
    e_steps = [s.strip() for s in args.e_steps.split(",") if s.strip()]
    for b in [s.strip() for s in args.backends.split(",") if s.strip() and s.strip() != "none"]:
        for e in e_steps:
            cmd = [str(binary), "--input", str(x_path), "--init", str(init_path), "--n-clusters", str(k), "--max-iter",
                   str(args.max_iter), "--tol", "0", "--n-init", "1", "--device", b, "--e-step", e, "--json",
                   "--repeat", str(args.repeat)]
            if not args.no_warmup:
                cmd.append("--warmup")
            label = b if e_steps == ["auto"] else f"{b}, {e} E-step"
            print(f"running gpuml-kmeans on {label} ...", file=sys.stderr, flush=True)
            out, note = run_json(cmd, args.timeout)
            if out is None:
                notes.append(f"gpuml ({label}) skipped: {note}")
                continue
            if note:
                notes.append(f"gpuml ({label}): {note}")
            ft = out.get("fit_times")
            if ft:
                notes.append(f"gpuml ({label}): its last fit took {ft['total']:.3f} s: checks and statistics "
                             f"{ft['checks']:.3f}, seeding {ft['seeding']:.3f}, the upload {ft['setup']:.3f}, iterations "
                             f"{ft['iterations']:.3f}, final step and labels {ft['finish']:.3f}, freeing the rest "
                             f"{ft['lloyd'] - ft['setup'] - ft['iterations'] - ft['finish']:.3f}")
            rows.append({"name": f"gpuml ({label})", "backend": b, "device": out["backend"], "n_iter": out["n_iter"],
                         "inertia": out["inertia"], "seconds": out["fit_seconds"], "ms_per_iter": out["ms_per_iter"],
                         "gpuml": True, "raw": out})
        same = [r for r in rows if r["gpuml"] and r["backend"] == b]
        if len(same) > 1:
            prints = {(r["raw"].get("labels_fnv"), r["raw"].get("centers_fnv"), r["raw"]["inertia"]) for r in same}
            notes.append(f"gpuml on {b}: the {len(same)} E-steps' labels, centers and inertia are "
                         + ("identical bit for bit" if len(prints) == 1 else "NOT identical"))

    # Peers.
    wanted = [s.strip() for s in args.peers.split(",") if s.strip() and s.strip() != "none"]
    Xa = np.ascontiguousarray(X)
    for peer in wanted:
        print(f"running {peer} ...", file=sys.stderr, flush=True)
        try:
            if peer == "sklearn":
                r = peers.sklearn_kmeans(Xa, init, max_iter=args.max_iter)
                device = f"CPU, {r['threads']} threads"
                ms = r["seconds_per_iter"] * 1e3
                name = f"scikit-learn {r['version']}"
                seconds = r["seconds"]
            elif peer == "gpuml-python":
                if importlib.util.find_spec("gpuml") is None:
                    notes.append("gpuml-python skipped: the gpuml Python package is not installed (pip install ./python)")
                    continue
                py_device = next((b for b in args.backends.split(",") if b.strip() not in ("", "none")), "auto")
                r = peers.gpuml_python_kmeans(Xa, init, max_iter=args.max_iter, device=py_device.strip())
                device = r["device"]
                ms = r["seconds_per_iter"] * 1e3
                name = f"gpuml {r['version']} from Python"
                seconds = r["seconds"]
            elif peer == "sklearnex":
                if importlib.util.find_spec("sklearnex") is None:
                    notes.append("sklearnex skipped: scikit-learn-intelex is not installed")
                    continue
                r = peers.sklearnex_kmeans(Xa, init, max_iter=args.max_iter)
                device = f"CPU, {r['threads']} threads"
                if r.get("accelerated") is False:
                    notes.append("sklearnex reported falling back to scikit-learn for fit")
                ms = r["seconds_per_iter"] * 1e3
                name = f"scikit-learn-intelex {r['version']}"
                seconds = r["seconds"]
            elif peer == "torch":
                if importlib.util.find_spec("torch") is None:
                    notes.append("torch skipped: PyTorch is not installed")
                    continue
                r = peers.torch_kmeans(Xa, init, n_iter=args.max_iter, device=args.torch_device)
                device = r["device"]
                ms = r["ms_per_iter"]
                name = f"torch {r['version']} (TF32 off)"
                seconds = r["ms"] / 1e3
            elif peer.startswith("flash"):
                mode = peer.partition("-")[2] or "fp16"
                if importlib.util.find_spec("flash_kmeans") is None or mode not in peers.FLASH_MODES:
                    notes.append(f"{peer} skipped: flash-kmeans is not installed, or not a mode of "
                                 f"{', '.join('flash-' + m for m in peers.FLASH_MODES)}")
                    continue
                r = peers.flash_kmeans_subprocess(x_path, init_path, args.max_iter, mode, args.timeout)
                device = r["device"]
                ms = r["ms_per_iter"]
                name = f"flash-kmeans {r['version']}, {peers.FLASH_MODES[mode]}"
                seconds = r["ms"] / 1e3
                notes.append(f"{name}: {r['float64_mislabels']:,} labels are not the float64 argmin of their centers")
            else:
                notes.append(f"unknown peer '{peer}' skipped (sklearn, sklearnex, torch, flash-fp16, flash-tf32, "
                             "flash-ieee, gpuml-python)")
                continue
        except Exception as e:  # a peer that cannot run here (no CUDA, ...) is a note, not a failure
            notes.append(f"{peer} skipped: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        for w in r.get("warnings", []):
            notes.append(f"{peer}: {w}")
        rows.append({"name": name, "device": device, "n_iter": r["n_iter"], "inertia": r["inertia"],
                     "seconds": seconds, "ms_per_iter": ms, "gpuml": False, "raw": r})

    gp = [r for r in rows if r["gpuml"]]
    base = None
    if args.baseline:
        base = next((r for r in gp if r["backend"] == args.baseline), None)
        if base is None:
            notes.append(f"baseline gpuml ({args.baseline}) did not run; using the first gpuml row")
    if base is None and gp:
        base = gp[0]

    print()
    print(f"k-means: n={n:,} d={d} k={k} float32, init = the first {k} samples, max_iter={args.max_iter}, tol=0, "
          f"n_init=1; data from {source}")
    print()
    ratio_head = f"time/iter vs {base['name']}" if base else "time/iter vs gpuml"
    print(f"| implementation | device | n_iter | inertia | rel. inertia | fit s | ms/iter | TFLOP/s | {ratio_head} |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        tflops = flops_per_iter / (r["ms_per_iter"] * 1e-3) / 1e12 if r["ms_per_iter"] > 0 else None
        rel = (r["inertia"] / base["inertia"] - 1.0) if base and base["inertia"] else None
        ratio = r["ms_per_iter"] / base["ms_per_iter"] if base and base["ms_per_iter"] > 0 else None
        print(f"| {r['name']} | {r['device']} | {r['n_iter']} | {r['inertia']:.6g} | {fmt(rel, '+.1e')} | "
              f"{r['seconds']:.3f} | {r['ms_per_iter']:.3f} | {fmt(tflops, '.4f')} | {fmt(ratio, '.2f')} |")
    print()
    print("ms/iter: gpuml, the Lloyd loop alone (KMeans::iteration_seconds / n_iter; the data upload and final "
          "labelling are in 'fit s'); scikit-learn and sklearnex, fit time / n_iter (incl. validation and the final "
          "labelling); torch, the Lloyd loop on data already on the GPU. TFLOP/s counts 2nkd per iteration. "
          "rel. inertia is against the baseline row; implementations that stop at different iterations differ.")
    plot_note = plot_bars(args.plot, f"k-means, n={n:,} d={d} k={k} float32, {args.max_iter} iterations",
                          [f"{r['name']} ({r['device']})" for r in rows], [r["ms_per_iter"] for r in rows],
                          "ms per iteration", [r["gpuml"] for r in rows])
    if plot_note:
        notes.append(plot_note)
    for note in notes:
        print(f"- note: {note}")

    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"n": n, "d": d, "k": k, "max_iter": args.max_iter, "source": source,
                       "results": [r["raw"] | {"name": r["name"]} for r in rows], "notes": notes}, f, indent=1)
    if tmp:
        tmp.cleanup()
    return 0 if gp else 1


if __name__ == "__main__":
    sys.exit(main())
