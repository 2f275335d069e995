"""python -m gpuml.accel [-v] script.py [args...]
python -m gpuml.accel [-v] -m module [args...]

Runs a script or a module as `python script.py` or `python -m module` would (the same sys.argv and sys.path[0]),
with scikit-learn patched by gpuml.patch_sklearn() first. -v, --verbose: says on stderr what the patch replaced
and where gpuml hands work to scikit-learn (the "gpuml" logger at INFO level)."""

import logging
import os
import runpy
import sys
import zipfile


def _verbose_logging():
    logger = logging.getLogger("gpuml")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def _script_path_entry(script):
    """Sets sys.path[0] as `python script` does: the script's folder (symbolic links resolved) in place of the
    current directory that `python -m gpuml.accel` put there. A folder or zip file with a __main__.py gets none
    here: runpy.run_path puts the path itself first, as Python does."""
    if sys.flags.safe_path:  # python -P: neither puts anything there
        return
    started_here = bool(sys.path) and sys.path[0] in (os.getcwd(), "")
    if _is_plain_file(script):
        entry = os.path.dirname(os.path.realpath(script))
        if started_here:
            sys.path[0] = entry
        else:
            sys.path.insert(0, entry)
    elif started_here:
        del sys.path[0]


def _is_plain_file(path):
    """A script file, not a folder or zip file holding a __main__.py."""
    return os.path.isfile(path) and not zipfile.is_zipfile(path)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = False
    while argv and argv[0] in ("-v", "--verbose"):
        verbose = True
        argv.pop(0)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    if argv[0] == "-m" and len(argv) < 2:
        print("python -m gpuml.accel -m module [args...]: a module name is missing", file=sys.stderr)
        return 2
    if verbose:
        _verbose_logging()
    import gpuml

    gpuml.patch_sklearn()
    if argv[0] == "-m":
        # sys.path[0] stays the current directory, as with `python -m`; run_module sets sys.argv[0] to the file.
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        if not os.path.exists(argv[0]):
            print(f"python -m gpuml.accel: can't open file {argv[0]!r}: no such file or directory", file=sys.stderr)
            return 2
        sys.argv = argv
        _script_path_entry(argv[0])
        # A folder or zip file goes onto sys.path as run_path is given it: absolute, as Python puts it there.
        runpy.run_path(argv[0] if _is_plain_file(argv[0]) else os.path.abspath(argv[0]), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
