"""`python benchmarks/X.py` runs as `python -m benchmarks.X`: a benchmark imports its siblings as
the `benchmarks` package and keras_attn as installed, and no script edits `sys.path`."""

import os
import sys


def run_as_module(file):
    """Replace this process by `python -m benchmarks.<name of file>` with the same arguments,
    the repository (the folder holding `benchmarks/`) on the new process's PYTHONPATH."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(file)))
    name = "benchmarks." + os.path.splitext(os.path.basename(file))[0]
    paths = [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", name, *sys.argv[1:]], env)
