"""examples/train_captioner.py and examples/sequential_classifier.py end to end in --smoke mode."""

import glob

import numpy as np
import tensorflow as tf

from tests.examples.helpers import is_png, read_json, read_jsonl, run_script


def test_captioner_hard_attention_smoke_and_export(tmp_path):
    out, export = tmp_path / "run", tmp_path / "export"
    run_script("train_captioner.py", "--smoke", "--attention", "hard", "--out", str(out), "--export", str(export))
    results = read_json(out / "results.json")
    assert results["model"] == "show-attend-tell hard"
    for key in ("val_exact_match", "test_exact_match", "test_attention_in_box"):
        assert 0.0 <= results[key] <= 1.0
    (record,) = read_jsonl(out / "metrics.jsonl")
    assert {"val_exact_match", "val_attention_in_box", "loss"} <= set(record)
    assert read_json(out / "checkpoints" / "latest.json")["epoch"] == 1
    pngs = glob.glob(str(out / "attention" / "*.png"))
    assert len(pngs) == 3 and all(is_png(p) for p in pngs)

    loaded = tf.saved_model.load(str(export / "1"))
    images = np.zeros((2, 16, 64, 2), np.float32)  # the strip + the x-coordinate channel
    answer = loaded.signatures["greedy"](images=tf.constant(images))
    assert answer["outputs"].dtype == tf.string and answer["outputs"].shape == (2,)
    assert answer["alignments"].shape[0] == 2


def test_sequential_classifier_smoke_mirrored_and_export(tmp_path):
    out, export = tmp_path / "run", tmp_path / "export"
    log = run_script(
        "sequential_classifier.py", "--smoke", "--distribute", "mirrored", "--logical-cpus", "2", "--out", str(out),
        "--export", str(export),
    )
    assert "--distribute mirrored: 2 replicas in sync" in log  # one replica on each logical CPU
    assert "val_accuracy" in log
    results = read_json(out / "results.json")
    assert 0.0 <= results["val_accuracy"] <= 1.0 and 0.0 <= results["test_accuracy"] <= 1.0
    assert read_jsonl(out / "metrics.jsonl")[0]["epoch"] == 1
    pngs = glob.glob(str(out / "attention" / "*.png"))
    assert len(pngs) == 3 and all(is_png(p) for p in pngs)
    loaded = tf.saved_model.load(str(export / "1"))
    probs = loaded.serve(tf.zeros((3, 8, 8), tf.float32)).numpy()
    assert probs.shape == (3, 10)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
