"""`keras_attn.train.export_run`: a run trained on JAX, exported on TensorFlow from its output
directory alone; the export's greedy answers are the run's own greedy decode (test.hyp.txt)."""

import pytest
import tensorflow as tf

from tests.examples.helpers import read_json, run_script
from tests.examples.test_jax_training import _write_pairs, jax_env


@pytest.mark.processes
def test_a_jax_run_exported_from_its_directory_answers_as_it_decoded(tmp_path, monkeypatch):
    import tensorflow_text  # noqa: F401  (registers the TF Text ops the SavedModel holds)

    from keras_attn.train.export import export_run

    data, out, export = tmp_path / "pairs.tsv", tmp_path / "run", tmp_path / "export"
    _write_pairs(data)
    argv = ["--data", str(data), "--out", str(out), "--smoke", "--model", "bahdanau"]
    argv += ["--epochs", "2", "--heatmaps", "0", "--no-keep-placeholders"]
    monkeypatch.setattr("tests.examples.helpers.script_env", lambda: jax_env(1))
    run_script("train_translator.py", *argv)
    assert read_json(out / "run_config.json")["args"]["model"] == "bahdanau"
    assert not export.exists()

    path = export_run(str(out), str(export))
    assert path == str(export / "1")
    sources = [line.split("\t")[0] for line in (out / "data" / "test.tsv").read_text().splitlines()]
    hyps = (out / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    assert len(sources) == len(hyps) > 10
    served = tf.saved_model.load(path).signatures["greedy"](inputs=tf.constant(sources))
    texts = [x.decode("utf-8") for x in served["outputs"].numpy()]
    assert texts == hyps
    # a run directory without weights is refused by name
    (out / "final.weights.h5").unlink()
    for name in (out / "checkpoints").iterdir():
        name.unlink()
    with pytest.raises(ValueError, match="No weights"):
        export_run(str(out), str(tmp_path / "again"))
