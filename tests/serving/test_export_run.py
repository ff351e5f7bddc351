"""`keras-attn export RUN_DIR EXPORT_DIR` of a dates training run, the real command in a fresh
process: no locale data needed (`babel` hidden), `--litert` converts the model behind the date
grammar (its n-best is the SavedModel's), an existing version and the settings a `.tflite`
file cannot carry are refused before the model loads, naming the flag, and `check --timeout`
reports a timeout as one."""

import json
import os

import numpy as np
import pytest

from keras_attn.data.date_grammar import is_iso_date
from keras_attn.serving.litert import LiteRTModel
from keras_attn.serving.streaming import ServeSessionClient, search
from tests.examples.helpers import run_script
from tests.serving.test_cli import keras_attn_command
from tests.serving.test_steps_dates import TEXTS

BEAM = 2


@pytest.fixture(scope="module")
def dates_run(tmp_path_factory):
    """A smoke dates run (one epoch on a few hundred dates)."""
    run = tmp_path_factory.mktemp("dates") / "run"
    argv = ["--smoke", "--model", "bahdanau", "--out", str(run), "--epochs", "1"]
    run_script("train_translator.py", *argv, "--heatmaps", "0")
    return run


@pytest.mark.processes
def test_a_dates_run_exports_with_its_grammar_on_the_device_too(dates_run, tmp_path):
    export, lite = tmp_path / "export", str(tmp_path / "dates.tflite")
    argv = ("export", str(dates_run), str(export), "--beam-size", str(BEAM), "--litert", lite)
    argv += ("--length-penalty", "0.5")
    code, out, err, _ = keras_attn_command(*argv, missing=("babel",))
    assert code == 0 and err == "", err
    assert out.splitlines() == [str(export / "1"), lite]
    with open(export / "1" / "assets.extra" / "search_settings.json", encoding="utf-8") as f:
        settings = json.load(f)
    assert (settings["beam_size"], settings["length_penalty"]) == (BEAM, 0.5)
    device = LiteRTModel(lite)
    with ServeSessionClient(str(export / "1")) as client:
        want = client.predict(
            "beam_search",
            {
                "inputs": np.array([t.encode() for t in TEXTS], object),
                "beam_size": np.int32(BEAM),
                "max_length": np.int32(device.max_length),
                "length_penalty": np.float32(0.0),
                "coverage_penalty": np.float32(0.0),
            },
        )
    got = search(device, TEXTS, "beam", beam_size=BEAM, max_length=device.max_length)
    assert got["outputs"] == [[x.decode() for x in row] for row in want["outputs"]]
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-4)
    assert all(a == "" or is_iso_date(a) for row in got["outputs"] for a in row)
    assert got["outputs"][1] == [""] * BEAM  # 1789: a year outside the range trained on
    # The run's export carries the step signatures: --stream runs on it.
    code, out, err, _ = keras_attn_command("translate", str(export), TEXTS[0], "--stream")
    assert code == 0 and err == "", err

    # The same version again: refused before Keras or TensorFlow load, naming the flag.
    code, out, err, loaded = keras_attn_command("export", str(dates_run), str(export))
    assert code == 2 and out == "" and loaded == []
    assert f"{export / '1'} already exists: --overwrite replaces it" in err
    # A check that runs out of time says so.
    code, out, err, _ = keras_attn_command("check", str(export), "--timeout", "0.5")
    assert code == 2 and "The check timed out" in err and "--timeout 0.5" in err, err


def test_settings_a_device_cannot_carry_are_refused_before_loading(tmp_path):
    """A model file's export with `--litert` and word rules: refused before the model loads
    (the file, empty, is never read: loading it would fail otherwise), naming the setting."""
    model, vocab = tmp_path / "m.keras", tmp_path / "vocab.txt"
    model.write_bytes(b"")
    vocab.write_text("a\n")
    argv = ("export", str(model), str(vocab), str(tmp_path / "e"), "--litert", "x.tflite")
    code, out, err, _ = keras_attn_command(*argv, "--word-rules")
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert "--litert: A .tflite file holds the model's two halves only: word_rules" in err
    assert not os.path.exists(tmp_path / "e")
