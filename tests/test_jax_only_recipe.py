"""The translator recipe across the two installs: trained and resumed in the environment
`keras-attn[jax]` makes (`.venv-notf`, where TensorFlow cannot be imported: `make test-notf`
builds it), then exported with `keras-attn export RUN_DIR EXPORT_DIR` and translated with
`keras-attn translate` here, where TensorFlow is installed. The export holds the run's final
weights and answers greedily what the run decoded (its test.hyp.txt)."""

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from tests.notf.test_translator_recipe import write_pairs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WITHOUT_TENSORFLOW = os.path.join(ROOT, ".venv-notf", "bin", "python")
COMMAND = os.path.join(os.path.dirname(sys.executable), "keras-attn")


def saved_weights(version_dir):
    """The floating-point variables of a SavedModel, read from its checkpoint."""
    import tensorflow as tf

    path = os.path.join(version_dir, "variables", "variables")
    values = [np.asarray(tf.train.load_variable(path, n)) for n, _ in tf.train.list_variables(path)]
    return [v for v in values if v.dtype.kind == "f"]


def run_weights(path):
    """The model's weights in a run's `.weights.h5` (its optimizer's state left out)."""
    found = []
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, item: (
                found.append(item[()])
                if isinstance(item, h5py.Dataset) and not name.startswith("optimizer")
                else None
            )
        )
    return found


def run(argv, **kwargs):
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=900, **kwargs)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc


@pytest.mark.processes
def test_a_run_trained_without_tensorflow_is_exported_and_translated_with_it(tmp_path):
    assert os.path.exists(WITHOUT_TENSORFLOW), "no .venv-notf: `make test-notf` builds it"
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    absent = "import importlib.util as u; assert u.find_spec('tensorflow') is None, 'TensorFlow'"
    run([WITHOUT_TENSORFLOW, "-c", absent], env=env)

    data, out, export = tmp_path / "pairs.tsv", tmp_path / "run", tmp_path / "export"
    write_pairs(data)
    script = os.path.join(ROOT, "examples", "train_translator.py")
    argv = [WITHOUT_TENSORFLOW, script, "--smoke", "--data", str(data), "--out", str(out)]
    argv += ["--model", "bahdanau", "--steps-per-epoch", "3", "--heatmaps", "0"]
    argv += ["--schedule", "constant", "--verbose", "2", "--no-keep-placeholders"]
    run([*argv, "--epochs", "1"], env=env)
    assert "Resumed from" in run([*argv, "--epochs", "2", "--resume"], env=env).stdout
    assert json.loads((out / "results.json").read_text())["epochs_trained"] == 2

    tensorflow_env = dict(os.environ, KERAS_BACKEND="tensorflow")
    exported = run([COMMAND, "export", str(out), str(export)], env=tensorflow_env)
    assert exported.stdout == f"{export / '1'}\n" and exported.stderr == ""
    # the export holds the weights the run finished with, every one
    saved, trained = saved_weights(export / "1"), run_weights(out / "final.weights.h5")
    assert len(saved) == len(trained) > 10
    for array in trained:
        assert any(a.shape == array.shape and np.array_equal(a, array) for a in saved)

    pairs = (out / "data" / "test.tsv").read_text(encoding="utf-8").splitlines()
    sources = "".join(line.split("\t")[0] + "\n" for line in pairs)
    hyps = (out / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    answered = run(
        [COMMAND, "translate", str(export / "1"), "--greedy", "--json"],
        input=sources,
        env=tensorflow_env,
    )
    outputs = [item["hypotheses"][0]["output"] for item in json.loads(answered.stdout)]
    assert len(outputs) == len(hyps) == len(pairs) > 10
    assert outputs == hyps
