"""`examples/train_translator.py` on a machine without TensorFlow: KERAS_BACKEND=jax, and a
`sys.meta_path` finder that refuses every `tensorflow*` import (`BlockTensorFlow`, the double of
a machine where TensorFlow is not installed). SentencePiece, the batches, validation with
sacrebleu, checkpoints, run_config.json and an exact `--resume` all run without it."""

import os
import subprocess
import sys

import pytest

from tests.examples.helpers import ROOT, read_json, read_jsonl, script
from tests.examples.test_numpy_text import BLOCKER, write_pairs

ARGS = ["--smoke", "--model", "bahdanau", "--steps-per-epoch", "3", "--heatmaps", "0"]
ARGS += ["--verbose", "2", "--n-val", "16", "--schedule", "constant"]  # no schedule over --epochs


def train_without_tensorflow(argv, log):
    """Run the script in a subprocess where TensorFlow cannot be imported."""
    program = BLOCKER + (
        "import runpy, sys\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "assert not any(m.split('.')[0] == 'tensorflow' for m in sys.modules), 'TensorFlow'\n"
        "print('trained without TensorFlow')\n"
    )
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-c", program, script("train_translator.py"), *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
    )
    log.write_text(proc.stdout + proc.stderr, encoding="utf-8")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "trained without TensorFlow" in output, output[-4000:]
    return output


@pytest.mark.processes
def test_trains_and_resumes_exactly_without_tensorflow(tmp_path):
    data = tmp_path / "pairs.tsv"
    write_pairs(data, n=400)
    whole, part = tmp_path / "whole", tmp_path / "part"
    argv = [*ARGS, "--data", str(data)]
    train_without_tensorflow([*argv, "--epochs", "2", "--out", str(whole)], tmp_path / "w.log")
    config = read_json(whole / "run_config.json")
    assert config["args"]["model"] == "bahdanau" and config["resolved"]["row"] == "text-small"
    for name in ("tokenizer.model", "final.weights.h5", "checkpoints/latest.json", "test.hyp.txt"):
        assert (whole / name).exists(), name
    assert not (whole / "tensorboard").exists()  # TensorBoard logs are written with TensorFlow
    metrics = read_jsonl(whole / "metrics.jsonl")
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert all(0.0 <= m["val_chrf"] <= 100.0 and "val_bleu" in m for m in metrics)
    results = read_json(whole / "results.json")
    assert results["epochs_trained"] == 2 and "test_chrf" in results

    # one epoch, then resumed to two: the same losses and validation scores as in one go
    train_without_tensorflow([*argv, "--epochs", "1", "--out", str(part)], tmp_path / "p1.log")
    log = train_without_tensorflow(
        [*argv, "--epochs", "2", "--resume", "--out", str(part)], tmp_path / "p2.log"
    )
    assert "Resumed from" in log
    resumed = read_jsonl(part / "metrics.jsonl")
    for key in ("loss", "val_chrf", "val_bleu"):
        assert [m[key] for m in resumed] == [m[key] for m in metrics], key
    assert (part / "tokenizer.model").read_bytes() == (whole / "tokenizer.model").read_bytes()


def test_the_blocker_refuses_tensorflow():
    scope = {}
    exec(BLOCKER, scope)  # the double, checked on its own
    blocker = next(f for f in sys.meta_path if type(f).__name__ == "BlockTensorFlow")
    try:
        for name in ("tensorflow", "tensorflow.python", "tensorflow_text"):
            try:
                blocker.find_spec(name)
            except ModuleNotFoundError as err:
                assert err.name == name
            else:
                raise AssertionError(f"{name} was not refused")
        assert blocker.find_spec("numpy") is None and blocker.find_spec("tensorflowx") is None
    finally:
        sys.meta_path.remove(blocker)
