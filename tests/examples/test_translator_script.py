"""examples/train_translator.py end to end in --smoke mode: dates (Bahdanau, exported) and a TSV
corpus (SentencePiece, Transformer, BLEU)."""

import glob
import os

import numpy as np
import tensorflow as tf

from tests.examples.helpers import is_png, read_json, read_jsonl, run_script


def _event_tags(directory):
    tags = set()
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(v.tag for v in event.summary.value)
    return tags


def test_dates_smoke_trains_validates_checkpoints_plots_and_exports(tmp_path):
    out, export = tmp_path / "run", tmp_path / "export"
    log = run_script("train_translator.py", "--smoke", "--out", str(out), "--export", str(export))

    results = read_json(out / "results.json")
    assert results["metric"] == "exact_match" and results["epochs"] == 1
    for key in ("val_exact_match", "test_exact_match", "test_locale_exact_match"):
        assert 0.0 <= results[key] <= 1.0
    (record,) = read_jsonl(out / "metrics.jsonl")  # one epoch, one line
    assert record["epoch"] == 1 and "loss" in record and 0.0 <= record["val_exact_match"] <= 1.0
    assert "val_exact_match" in log  # printed by the progress bar's epoch line
    latest = read_json(out / "checkpoints" / "latest.json")
    assert latest["epoch"] == 1 and (out / "checkpoints" / latest["file"]).exists()
    assert "epoch_loss" in _event_tags(out / "tensorboard" / "train")
    assert "epoch_exact_match" in _event_tags(out / "tensorboard" / "validation")
    pngs = sorted(glob.glob(str(out / "attention" / "*.png")))
    assert len(pngs) == 3 and all(is_png(p) for p in pngs)

    loaded = tf.saved_model.load(str(export / "1"))
    answer = loaded.signatures["greedy"](inputs=tf.constant(["21.11.26", "Nov 21, 2026"]))
    assert answer["outputs"].dtype == tf.string and answer["outputs"].shape == (2,)
    alignments = answer["alignments"].numpy()
    assert alignments.shape[0] == 2 and np.all(np.isfinite(alignments))


def test_tsv_corpus_with_sentencepiece_transformer_and_bleu(tmp_path):
    words = "red green blue cat dog bird sun moon tree river stone cloud".split()
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(300):
        phrase = list(rng.choice(words, size=int(rng.integers(2, 5))))
        lines.append(" ".join(phrase) + "\t" + " ".join(reversed(phrase)).upper())
    data = tmp_path / "pairs.tsv"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    run_script("train_translator.py", "--smoke", "--data", str(data), "--model", "transformer", "--out", str(out))

    results = read_json(out / "results.json")
    assert results["metric"] == "chrf" and results["model"] == "transformer"
    assert 0.0 <= results["val_bleu"] <= 100.0 and 0.0 <= results["test_bleu"] <= 100.0
    assert 0.0 <= results["val_chrf"] <= 100.0 and 0.0 <= results["test_chrf"] <= 100.0
    assert results["test_copy_source_chrf"] < 50.0  # reversed and upper-cased: copying scores low
    assert (out / "best.weights.h5").exists()
    assert (out / "tokenizer.model").exists()
    assert len(glob.glob(str(out / "attention" / "*.png"))) == 3
