#!/usr/bin/env python3
"""Compile time of one translation unit that includes <gpuml/gpuml.hpp> against one that includes <Eigen/Dense>
alone, side by side in one run (alternating, so load on the machine hits both alike).

    python3 bench/include_cost.py [--build build] [--repeat 5] [--cxx g++] [--flags "-O2"]

Prints the median and every sample of each, and the ratio of the medians. Also --header to time any other header.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_seconds(cxx, flags, includes, header, workdir):
    src = os.path.join(workdir, "tu.cpp")
    with open(src, "w") as f:
        f.write(f"#include <{header}>\nint main() {{ return 0; }}\n")
    cmd = [cxx, "-std=c++20", *flags, *[f"-I{i}" for i in includes], "-c", src, "-o", os.path.join(workdir, "tu.o")]
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory (for the generated shader headers)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    ap.add_argument("--flags", default="-O2", help="compiler flags for both translation units")
    ap.add_argument("--header", action="append", help="headers to time (default: gpuml/gpuml.hpp and Eigen/Dense)")
    args = ap.parse_args()
    generated = os.path.join(args.build, "generated")
    if not os.path.isdir(os.path.join(generated, "gpuml", "shaders")):
        sys.exit(f"no generated shader headers in {generated}: build gpuml first (cmake --build {args.build})")
    includes = [os.path.join(ROOT, "include"), generated, "/usr/include/eigen3"]
    headers = args.header or ["Eigen/Dense", "gpuml/gpuml.hpp"]
    flags = args.flags.split()
    samples = {h: [] for h in headers}
    with tempfile.TemporaryDirectory() as workdir:
        for h in headers:  # warm the file cache once
            compile_seconds(args.cxx, flags, includes, h, workdir)
        for _ in range(args.repeat):
            for h in headers:
                samples[h].append(compile_seconds(args.cxx, flags, includes, h, workdir))
    base = statistics.median(samples[headers[0]])
    print(f"{args.cxx} -std=c++20 {args.flags}, {args.repeat} runs each, alternating")
    for h in headers:
        med = statistics.median(samples[h])
        runs = " ".join(f"{s:.2f}" for s in samples[h])
        print(f"  <{h}>: median {med:.2f} s ({runs}), {med / base:.2f}x <{headers[0]}>")


if __name__ == "__main__":
    main()
