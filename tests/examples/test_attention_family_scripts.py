"""examples/train_classifier_han.py and examples/train_reader_aoa.py end to end in --smoke mode."""

import glob

import numpy as np
import tensorflow as tf

from tests.examples.helpers import is_png, read_json, read_jsonl, run_script
from tests.models.test_han import write_fake_locale


def test_han_script_smoke_and_raw_text_export(tmp_path):
    out, export = tmp_path / "run", tmp_path / "export"
    root = write_fake_locale(str(tmp_path / "locale"), ("de", "fr", "es", "it"), n=24)
    log = run_script(
        "train_classifier_han.py",
        "--smoke",
        "--locale-dir",
        root,
        "--out",
        str(out),
        "--export",
        str(export),
    )
    assert "val_attention_on_evidence" in log
    results = read_json(out / "results.json")
    for key in ("test_accuracy", "test_attention_on_evidence", "test_bag_of_words_accuracy"):
        assert 0.0 <= results[key] <= 1.0
    assert read_jsonl(out / "metrics.jsonl")[0]["epoch"] == 1
    assert len(glob.glob(str(out / "attention" / "*.png"))) == 3
    assert all(is_png(p) for p in glob.glob(str(out / "attention" / "*.png")))
    served = tf.saved_model.load(str(export / "1")).signatures["serving_default"](
        inputs=tf.constant(["de datei %s nummer 1\nfr schlicht 2 wort satz"])
    )
    assert served["label"].numpy()[0].decode() in ("de", "fr", "es", "it")
    np.testing.assert_allclose(served["sentence_attention"].numpy().sum(), 1.0, atol=1e-5)


def test_aoa_script_smoke_and_raw_text_export(tmp_path):
    out, export = tmp_path / "run", tmp_path / "export"
    run_script(
        "train_reader_aoa.py",
        "--smoke",
        "--modules",
        "argparse,textwrap,json",
        "--out",
        str(out),
        "--export",
        str(export),
    )
    results = read_json(out / "results.json")
    assert (
        0.0 <= results["test_accuracy"] <= 1.0
        and 0.0 <= results["test_most_frequent_candidate_accuracy"] <= 1.0
    )
    assert len(glob.glob(str(out / "attention" / "*.png"))) == 3
    served = tf.saved_model.load(str(export / "1")).signatures["serving_default"](
        document=tf.constant(["the parser reads the command line"]),
        query=tf.constant(["the @blank reads"]),
        candidates=tf.constant(["parser command line"]),
    )
    assert served["answer"].numpy()[0].decode() in ("parser", "command", "line")
