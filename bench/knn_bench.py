#!/usr/bin/env python3
"""k-NN benchmark: gpuml-knn on each chosen backend next to faiss-cpu (IndexFlatL2), scikit-learn (brute) and, on a
GPU machine, PyTorch, all in one run on the same data (peers.make_knn_workload: uniform [0, 1) float32).

Shapes (database x d : queries : k), default:
    1,000,000 x 128 : 10,000 : 10
    1,000,000 x 128 : 10,000 : 100
    10,000,000 x 16 : 1,000 : 100
--scale multiplies the database and query counts (e.g. --scale 0.01 for a quick run); --shapes replaces the list.

For each shape, prints a markdown table: search seconds, queries per second, TFLOP/s (2 * n_db * n_queries * d),
recall@k of the indices against the exact reference (faiss, else scikit-learn, else the first gpuml row) and the
time relative to the baseline gpuml row (> 1: slower than gpuml). A peer that is not installed (or a backend that is
not present) is skipped with a note.

    python3 bench/knn_bench.py --scale 0.01
    python3 bench/knn_bench.py --backends gpu,host --peers faiss,torch          # GPU machine
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

from gpuml_programs import add_run_arguments, data_directory, find_binary, fmt, plot_bars, run_json  # noqa: E402
import peers  # noqa: E402  (torch is imported inside peers.torch_* only)

DEFAULT_SHAPES = "1000000x128:10000:10,1000000x128:10000:100,10000000x16:1000:100"




def parse_shapes(text: str, scale: float) -> list[tuple[int, int, int, int]]:
    shapes = []
    for item in text.split(","):
        try:
            dbpart, q, k = item.strip().split(":")
            n_db, d = dbpart.lower().split("x")
            n_db, d, q, k = int(float(n_db)), int(d), int(float(q)), int(k)
        except ValueError:
            sys.exit(f"error: bad shape '{item}': expected N_DBxD:N_QUERIES:K, e.g. 1000000x128:10000:10")
        n_db, q = max(int(n_db * scale), k + 1), max(int(q * scale), 1)
        shapes.append((n_db, d, q, k))
    return shapes


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean fraction of each row's true k neighbours found (order and ties aside)."""
    k = truth.shape[1]
    hits = sum(len(np.intersect1d(a, b, assume_unique=False)) for a, b in zip(found[:, :k], truth))
    return hits / truth.size



def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"N_DBxD:N_QUERIES:K,... (default {DEFAULT_SHAPES})")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies database and query counts (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backends", default="host,gpu",
                    help="gpuml devices, comma-separated: host, gpu, discrete, integrated, cpu (lavapipe), N, a name, "
                         "or none (default host,gpu; absent ones are skipped)")
    ap.add_argument("--peers", default="faiss,sklearn,torch",
                    help="faiss, sklearn, torch, or none (default all; torch is skipped without torch or CUDA)")
    ap.add_argument("--torch-device", default="cuda")
    ap.add_argument("--torch-db-chunk", type=int, default=None,
                    help="peers.torch_knn db_chunk (database rows per chunk; default: whole database)")
    add_run_arguments(ap, "gpuml-knn", "searches")
    ap.add_argument("--data-dir", help="where the .npy files go (default: a temporary directory)")
    args = ap.parse_args()

    binary = find_binary("gpuml-knn", "examples", args.bin)
    data_dir, tmp = data_directory(args.data_dir, "gpuml-knn-bench-")
    backends = [s.strip() for s in args.backends.split(",") if s.strip() and s.strip() != "none"]
    wanted = [s.strip() for s in args.peers.split(",") if s.strip() and s.strip() != "none"]
    all_results = []
    any_gpuml = False

    for n_db, d, n_q, k in parse_shapes(args.shapes, args.scale):
        print(f"shape: database {n_db:,} x {d}, {n_q:,} queries, k={k}", file=sys.stderr, flush=True)
        db, queries = peers.make_knn_workload(n_db, n_q, d, args.seed)
        db_path, q_path = data_dir / f"db_{n_db}x{d}.npy", data_dir / f"q_{n_q}x{d}.npy"
        np.save(db_path, db)
        np.save(q_path, queries)
        flops = 2.0 * n_db * n_q * d
        rows, notes = [], []

        for b in backends:
            idx_path = data_dir / f"gpuml_{b}_idx.npy"
            cmd = [str(binary), "--database", str(db_path), "--queries", str(q_path), "--k", str(k), "--device", b,
                   "--json", "--repeat", str(args.repeat), "--indices-out", str(idx_path)]
            if not args.no_warmup:
                cmd.append("--warmup")
            print(f"  gpuml-knn on {b} ...", file=sys.stderr, flush=True)
            out, note = run_json(cmd, args.timeout)
            if out is None:
                notes.append(f"gpuml ({b}) skipped: {note}")
                continue
            if note:
                notes.append(f"gpuml ({b}): {note}")
            idx = np.load(idx_path)
            idx_path.unlink()
            rows.append({"name": f"gpuml ({b})", "backend": b, "device": out["backend"], "seconds": out["search_seconds"],
                         "indices": idx, "gpuml": True, "raw": out})

        for peer in wanted:
            print(f"  {peer} ...", file=sys.stderr, flush=True)
            try:
                if peer == "faiss":
                    if importlib.util.find_spec("faiss") is None:
                        notes.append("faiss skipped: faiss-cpu is not installed")
                        continue
                    r = peers.faiss_knn(db, queries, k, return_result=True)
                    name, device, seconds = f"faiss-cpu {r['version']} IndexFlatL2", f"CPU, {r['threads']} threads", r["seconds"]
                elif peer == "sklearn":
                    r = peers.sklearn_knn(db, queries, k, return_result=True)
                    name, device, seconds = f"scikit-learn {r['version']} brute", f"CPU, {r['threads']} threads", r["seconds"]
                elif peer == "torch":
                    if importlib.util.find_spec("torch") is None:
                        notes.append("torch skipped: PyTorch is not installed")
                        continue
                    r = peers.torch_knn(db, queries, k, db_chunk=args.torch_db_chunk, device=args.torch_device,
                                        return_result=True)
                    name, device, seconds = f"torch {r['version']} (TF32 off)", r["device"], r["seconds"]
                else:
                    notes.append(f"unknown peer '{peer}' skipped (faiss, sklearn, torch)")
                    continue
            except Exception as e:  # a peer that cannot run here (no CUDA, out of memory, ...) is a note
                notes.append(f"{peer} skipped: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                continue
            idx = np.asarray(r.pop("indices"))
            r.pop("distances", None)
            rows.append({"name": name, "peer": peer, "device": device, "seconds": seconds, "indices": idx,
                         "gpuml": False, "raw": r})

        gp = [r for r in rows if r["gpuml"]]
        any_gpuml = any_gpuml or bool(gp)
        base = next((r for r in gp if r["backend"] == args.baseline), None) if args.baseline else None
        if base is None and gp:
            base = gp[0]
        ref = next((r for r in rows if r.get("peer") == "faiss"), None) or \
            next((r for r in rows if r.get("peer") == "sklearn"), None) or base

        print()
        print(f"k-NN: database {n_db:,} x {d} float32, {n_q:,} queries, k={k} (uniform [0, 1), seed {args.seed})")
        print()
        ratio_head = f"time vs {base['name']}" if base else "time vs gpuml"
        ref_head = f"recall@{k} vs {ref['name']}" if ref else f"recall@{k}"
        print(f"| implementation | device | search s | GPU kernels s | queries/s | TFLOP/s | {ref_head} | {ratio_head} |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            s = r["seconds"]
            rec = recall(r["indices"], ref["indices"]) if ref is not None else None
            ratio = s / base["seconds"] if base and base["seconds"] > 0 else None
            tflops = flops / s / 1e12 if s > 0 else None
            dev_ms = r["raw"].get("device_ms_all") if r["gpuml"] else None
            dev_s = min(dev_ms) / 1e3 if dev_ms and min(dev_ms) >= 0 else None
            print(f"| {r['name']} | {r['device']} | {s:.4f} | {fmt(dev_s, '.4f')} | {n_q / s if s > 0 else float('inf'):,.0f} | "
                  f"{fmt(tflops, '.4f')} | {fmt(rec, '.5f')} | {fmt(ratio, '.2f')} |")
        print()
        if args.plot:  # one picture per shape: PATH for the first, PATH-2.png, ... for the others
            stem = args.plot[:-4] if args.plot.endswith(".png") else args.plot
            path = args.plot if not all_results else f"{stem}-{len(all_results) + 1}.png"
            note = plot_bars(path, f"k-NN: database {n_db:,} x {d}, {n_q:,} queries, k={k}",
                             [f"{r['name']} ({r['device']})" for r in rows], [r["seconds"] * 1e3 for r in rows],
                             "search ms", [r["gpuml"] for r in rows])
            if note:
                notes.append(note)
        for note in notes:
            print(f"- note: {note}")
        if notes:
            print()
        all_results.append({"n_db": n_db, "d": d, "n_queries": n_q, "k": k, "notes": notes,
                            "results": [r["raw"] | {"name": r["name"]} for r in rows]})
        del db, queries
        db_path.unlink()
        q_path.unlink()

    print("search s: gpuml and the CPU peers time the search call with queries on the host (gpuml-knn: kneighbors after "
          "fit, which on a Vulkan backend keeps the database on the device, so the search uploads the queries and "
          "downloads the results); torch times the search on data already on the GPU. GPU kernels s: gpuml's search "
          "kernels alone (GPU timestamps). TFLOP/s counts 2 * n_db * n_queries * d.")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(all_results, f, indent=1)
    if tmp:
        tmp.cleanup()
    return 0 if any_gpuml else 1


if __name__ == "__main__":
    sys.exit(main())
