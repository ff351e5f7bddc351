"""examples/train_captioner.py and examples/sequential_classifier.py end to end in --smoke mode."""

import glob
import importlib.util
import os

import numpy as np
import tensorflow as tf

from tests.examples.helpers import ROOT, is_png, read_json, read_jsonl, run_script


def _example(name):
    """examples/<name>.py imported as a module (its data and metric functions)."""
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(ROOT, "examples", name + ".py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_captioner_metrics():
    """train_captioner.evaluate on a made-up decoder: 1 of 2 captions right, 3 of 5 steps with
    the attention's argmax cell centred inside the box of the digit being written."""
    from keras_attn.data.digits import DigitStrips

    captioner = _example("train_captioner")
    strips = DigitStrips(
        images=np.zeros((2, 16, 64, 1), np.float32),
        captions=["3 1 4", "7 7"],
        labels=np.array([[3, 1, 4, -1, -1], [7, 7, -1, -1, -1]], np.int32),
        boxes=np.array(
            [
                [[0, 16], [16, 32], [32, 48], [-1, -1], [-1, -1]],
                [[0, 16], [16, 32], [-1, -1], [-1, -1], [-1, -1]],
            ],
            np.int32,
        ),
        lengths=np.array([3, 2], np.int32),
        source_index=np.full((2, 5), -1, np.int32),
    )
    grid_width, steps, cells = 8, 4, 16  # 2 rows of 8 cells, 8 pixels per column
    sequences = np.array([[4 + 3, 4 + 1, 4 + 4, 2], [4 + 7, 2, 0, 0]], np.int32)
    alignments = np.zeros((2, steps, cells), np.float32)
    # Strip 0: columns 0, 2, 5 (centres 4, 20, 44 px) inside boxes 0, 1, 2; rows 1, 0, 1.
    for t, cell in enumerate([8 + 0, 2, 8 + 5]):
        alignments[0, t, cell] = 1.0
    # Strip 1: both steps look at column 7 (centre 60 px), outside both boxes.
    alignments[1, :, 7] = 1.0

    def decode(images):
        n = len(images)
        return {"sequences": tf.constant(sequences[:n]), "alignments": tf.constant(alignments[:n])}

    exact, in_box, captions, _ = captioner.evaluate(decode, strips, grid_width)
    assert captions == ["3 1 4", "7"]
    assert exact == 0.5
    assert in_box == 3 / 5


def test_captioner_hard_attention_smoke_and_export(tmp_path):
    out, export = tmp_path / "run", tmp_path / "export"
    run_script(
        "train_captioner.py",
        "--smoke",
        "--attention",
        "hard",
        "--out",
        str(out),
        "--export",
        str(export),
    )
    results = read_json(out / "results.json")
    assert results["model"] == "show-attend-tell hard"
    (record,) = read_jsonl(out / "metrics.jsonl")
    # One epoch: the validation after it saw the final weights.
    assert record["val_exact_match"] == results["val_exact_match"]
    assert record["val_attention_in_box"] == results["val_attention_in_box"]
    assert read_json(out / "checkpoints" / "latest.json")["epoch"] == 1
    pngs = glob.glob(str(out / "attention" / "*.png"))
    assert len(pngs) == 3 and all(is_png(p) for p in pngs)

    loaded = tf.saved_model.load(str(export / "1"))
    images = np.zeros((2, 16, 64, 2), np.float32)  # the strip + the x-coordinate channel
    answer = loaded.signatures["greedy"](images=tf.constant(images))
    assert answer["outputs"].dtype == tf.string and answer["outputs"].shape == (2,)
    assert answer["alignments"].shape[0] == 2

    # The reported exact matches, recomputed: the same strips (--smoke sizes, seed 0) captioned
    # by the exported model ("314" for "3 1 4"); within one strip (near-ties may break apart).
    from keras_attn.data import digit_strips_splits

    splits = digit_strips_splits(128, 16, 16, seed=0)
    for name in ("val", "test"):
        strips = splits[name]
        served = loaded.signatures["greedy"](
            images=tf.constant(_example("train_captioner").with_coords(strips.images))
        )
        hits = [
            h.decode() == c.replace(" ", "")
            for h, c in zip(served["outputs"].numpy(), strips.captions)
        ]
        assert abs(results[f"{name}_exact_match"] - np.mean(hits)) <= 1.0 / len(hits) + 1e-9, name


def test_sequential_classifier_smoke_mirrored_and_export(tmp_path):
    out, export = tmp_path / "run", tmp_path / "export"
    log = run_script(
        "sequential_classifier.py",
        "--smoke",
        "--distribute",
        "mirrored",
        "--logical-cpus",
        "2",
        "--out",
        str(out),
        "--export",
        str(export),
    )
    assert "--distribute mirrored: 2 replicas in sync" in log  # one replica on each logical CPU
    assert "val_accuracy" in log
    results = read_json(out / "results.json")
    assert read_jsonl(out / "metrics.jsonl")[0]["epoch"] == 1
    pngs = glob.glob(str(out / "attention" / "*.png"))
    assert len(pngs) == 3 and all(is_png(p) for p in pngs)
    loaded = tf.saved_model.load(str(export / "1"))
    probs = loaded.serve(tf.zeros((3, 8, 8), tf.float32)).numpy()
    assert probs.shape == (3, 10)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    # The reported accuracies, recomputed with the exported model on the same digits (seed 0).
    splits = _example("sequential_classifier").load_splits(0, smoke=True)
    for name in ("val", "test"):
        images, labels = splits[name]
        predicted = np.argmax(loaded.serve(tf.constant(images)).numpy(), -1)
        assert (
            abs(results[f"{name}_accuracy"] - np.mean(predicted == labels))
            <= 1.0 / len(labels) + 1e-9
        )
