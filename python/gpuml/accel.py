"""python -m gpuml.accel script.py [args...]: runs a script with scikit-learn patched by gpuml.patch_sklearn()."""

import runpy
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    import gpuml

    gpuml.patch_sklearn()
    sys.argv = list(argv)
    if argv[0] == "-m":
        if len(argv) < 2:
            print("python -m gpuml.accel -m module [args...]: a module name is missing", file=sys.stderr)
            return 2
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
