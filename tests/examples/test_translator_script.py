"""examples/train_translator.py end to end in --smoke mode: dates (Bahdanau, exported) and a TSV
corpus (SentencePiece, Transformer, BLEU)."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.examples.helpers import ROOT, is_png, read_json, read_jsonl, run_script


def _translator_module():
    """examples/train_translator.py imported as a module (its `score`)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "train_translator", os.path.join(ROOT, "examples", "train_translator.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_translator_metrics():
    score = _translator_module().score
    hyps, refs = ["2026-11-21", "2026-11-20", "x"], ["2026-11-21", "2026-11-21", "x"]
    assert score("exact_match", hyps, refs) == {"exact_match": 2 / 3}
    assert score("exact_match", [], []) == {"exact_match": 0.0}
    refs = ["the red cat sat on the mat", "a dog ran far away from home"]
    right = score("chrf", refs, refs)
    assert set(right) == {"chrf", "bleu"}
    np.testing.assert_allclose([right["chrf"], right["bleu"]], [100.0, 100.0], rtol=1e-9)
    wrong = score("chrf", ["zzz qqq www", "vvv ppp"], refs)
    assert wrong["chrf"] < 5.0 and wrong["bleu"] < 1.0


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
    (record,) = read_jsonl(out / "metrics.jsonl")  # one epoch, one line
    assert record["epoch"] == 1 and np.isfinite(record["loss"])
    # One epoch: the validation after it saw the final weights.
    assert record["val_exact_match"] == results["val_exact_match"]
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

    # The reported exact matches, recomputed here: the same splits (--smoke sizes, seed 0)
    # decoded greedily by the exported model, compared with the ISO dates. Within one example:
    # the SavedModel and the in-process search may break a near-tie differently.
    from keras_attn.data import dates_splits

    splits = dates_splits(256, 32, 32, seed=0)
    for name in ("val", "test", "test_locale"):
        sources = [s for s, _ in splits[name]]
        served = loaded.signatures["greedy"](inputs=tf.constant(sources))["outputs"].numpy()
        hits = [h.decode("utf-8") == t for h, (_, t) in zip(served, splits[name])]
        assert abs(results[f"{name}_exact_match"] - np.mean(hits)) <= 1.0 / len(hits) + 1e-9, name


@pytest.mark.processes
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
    run_script(
        "train_translator.py",
        "--smoke",
        "--data",
        str(data),
        "--model",
        "transformer",
        "--out",
        str(out),
    )

    results = read_json(out / "results.json")
    assert results["metric"] == "chrf" and results["model"] == "transformer"
    (record,) = read_jsonl(out / "metrics.jsonl")
    # The validation scores after the one epoch and the final ones: the same (best = only) weights
    # and sentences.
    assert record["val_chrf"] == results["val_chrf"] and record["val_bleu"] == results["val_bleu"]
    assert np.isfinite(results["test_chrf"]) and np.isfinite(results["test_bleu"])
    assert results["test_copy_source_chrf"] < 50.0  # reversed and upper-cased: copying scores low
    assert (out / "best.weights.h5").exists()
    assert (out / "tokenizer.model").exists()
    assert len(glob.glob(str(out / "attention" / "*.png"))) == 3
