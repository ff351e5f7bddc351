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


def test_a_run_of_one_part_keeps_the_other_parts_rows(tmp_path, monkeypatch):
    from benchmarks import common, jax_vs_tf

    section = "\n".join(
        [
            "<!-- jax-vs-tf:begin -->",
            "### JAX vs TensorFlow on the CPU (benchmarks/jax_vs_tf.py)",
            "",
            "    .venv/bin/python benchmarks/jax_vs_tf.py --repeats 3 --parts 'generate'",
            "    .venv/bin/python benchmarks/jax_vs_tf.py --repeats 3 --parts 'train'",
            "",
            "- met: generate transformer, greedy, B 1: repeated JAX >= TensorFlow (2.00x)",
            "- **missed**: training epoch: JAX within 1.3x TensorFlow, first epoch (2.11x)",
            "",
            "#### Repeated `generate`",
            "",
            "| generate row |",
            "",
            "#### The translator's training epoch",
            "",
            "| epoch row |",
            "",
            "#### Coarser buckets",
            "",
            "| bucket row |",
            "",
            "- date: 2026-01-01 00:00 UTC",
            "<!-- jax-vs-tf:end -->",
        ]
    )
    results = tmp_path / "RESULTS.md"
    results.write_text(section, encoding="utf-8")
    monkeypatch.setattr(common, "RESULTS", str(results))
    commands, checks, table = jax_vs_tf._previous("generate")
    assert commands == [section.splitlines()[3]]
    assert checks == [section.splitlines()[6]]
    assert table == "#### Repeated `generate`\n\n| generate row |"
    commands, checks, table = jax_vs_tf._previous("train")
    assert commands == [section.splitlines()[4]]
    assert checks == [section.splitlines()[7]]
    # the training subsection runs to the machine's lines, the buckets' rows with it
    assert table.startswith("#### The translator's training epoch")
    assert table.endswith("| bucket row |")
    assert "generate row" not in table
