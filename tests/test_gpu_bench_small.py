"""`benchmarks/gpu.py --small` runs on a CPU with JAX alone: a subprocess with
`KERAS_BACKEND=jax` in which a double of an install without TensorFlow (an import finder that
refuses every `tensorflow*` module) is in place before the script starts. Its ratios are
printed, never asserted (speed lives in benchmarks/)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN_WITHOUT_TENSORFLOW = r"""
import importlib.abc
import runpy
import sys


class NoTensorFlowFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0].startswith("tensorflow"):
            raise ImportError(f"No module named {name!r}")
        return None


sys.meta_path.insert(0, NoTensorFlowFinder())
sys.argv = ["benchmarks/gpu.py", "--small", "--profile"]
runpy.run_path("benchmarks/gpu.py", run_name="__main__")
"""


@pytest.mark.processes
def test_gpu_benchmark_runs_small_on_jax_without_tensorflow():
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_TENSORFLOW],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    lines = out.splitlines()
    for section in (
        "Our fused path (flash_attention=True) against our products",
        "Self-attention, forward + backward",
        "Grouped-query attention vs keras.layers.GroupQueryAttention",
        "The kernel's limit",
        "Transformer fit step, mixed_bfloat16",
        "Our Transformer, greedy decoding",
    ):
        assert section in out, out
    assert "BeamSampler" in out  # its row, or the note saying why it was skipped
    # --profile: the fit step's trace, our two paths at least, each having run kernels
    assert "Profile of fit, B 2 x 8" in out, out
    profiled = [  # the totals' rows: name, wall, busy, kernels, copies
        x.split("|") for x in lines if x.startswith(("| ours |", "| products |"))
    ]
    profiled = [x for x in profiled if len(x) == 7]
    assert len(profiled) >= 2 and all(float(x[4]) > 0 for x in profiled), out
    assert "TensorFlow was imported" not in out
    # One row per case of the small table, each with its ratios.
    assert sum(x.startswith(("| float32 |", "| mixed_bfloat16 |")) for x in lines) == 3, out
    # The check: MHA and GQA, two policies, three cases; NaN in padding stays finite.
    assert sum(x.startswith(("| MHA |", "| GQA |")) for x in lines) == 12, out
    assert "NOT FINITE" not in out and out.count("| finite, ") == 4, out
