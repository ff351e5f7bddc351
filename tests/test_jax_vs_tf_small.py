"""`benchmarks/jax_vs_tf.py --small` runs: a TensorFlow and a JAX worker process, the generate
rows and the training epochs of a tiny model on a small generated corpus. Its ratios are
printed, never asserted (speed lives in benchmarks/); what is checked is that every row is
there, both backends decoded the same sequences from the same weights and trained on the same
batch plan."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.processes
def test_jax_vs_tf_benchmark_runs_small():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    results = os.path.join(ROOT, "benchmarks", "RESULTS.md")
    with open(results, encoding="utf-8") as f:
        before = f.read()
    done = subprocess.run(
        [sys.executable, "benchmarks/jax_vs_tf.py", "--small"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    for model in ("transformer", "bahdanau"):
        for search in ("greedy", "beam 4"):
            for batch in (1, 4):
                row = next(
                    (
                        x
                        for x in out.splitlines()
                        if x.startswith(f"| {model}, {search}, B {batch} |")
                    ),
                    None,
                )
                assert row is not None, out
                cells = [c.strip() for c in row.strip("|").split("|")]
                # the same weights: both backends' best sequences agree on every row
                assert cells[-1] == f"{batch}/{batch}", row
    assert "Same batch plan on both backends: yes" in out, out
    epochs = [x for x in out.splitlines() if re.match(r"\| [12] \|", x)]
    assert len(epochs) == 2, out  # --small times two epochs
    first_compiles = int(epochs[0].split("|")[5].split()[0])
    assert first_compiles >= 1, epochs  # the first JAX epoch compiles its train step
    assert "MET" in out or "MISSED" in out, out
    with open(results, encoding="utf-8") as f:
        assert f.read() == before  # --small writes no section
