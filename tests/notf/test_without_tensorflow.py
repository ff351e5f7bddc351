"""The library where TensorFlow is not installed (`make test-notf`: `.venv-notf`, built from
requirements-jax.lock, KERAS_BACKEND=jax): the TensorFlow-free modules import, the models build,
train, decode and save, SentencePiece text round-trips through the byte-piece decoder, the
tokenizers that need TensorFlow say so, and the translator recipe trains a smoke run."""

import importlib
import importlib.util
import json
import os
import pkgutil
import subprocess
import sys

import keras
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Modules that must import without TensorFlow (the rest of the package may need it).
TENSORFLOW_FREE = [
    "keras_attn",
    "keras_attn.layers",
    "keras_attn.losses",
    "keras_attn.models",
    "keras_attn.decoding",
    "keras_attn.data",
    "keras_attn.train",
    "keras_attn.training",
    "keras_attn.text",
    "keras_attn.text.placeholders",
    "keras_attn.text.byte_pieces",
    "keras_attn.train.numpy_text",
]
# The modules whose purpose is TensorFlow's: the graph tokenizers and the SavedModel export.
TENSORFLOW_ONLY_PREFIXES = (
    "keras_attn.serving.",
    "keras_attn.text.base",
    "keras_attn.text.char",
    "keras_attn.text.sentencepiece_tokenizer",
)


def test_tensorflow_is_not_installed():
    for module in ("tensorflow", "tensorflow_text", "keras_hub"):
        assert importlib.util.find_spec(module) is None, f"{module} is installed here"
    assert keras.backend.backend() == "jax"


def test_every_module_imports_or_needs_tensorflow():
    import keras_attn

    failed = {}
    for info in pkgutil.walk_packages(keras_attn.__path__, "keras_attn."):
        try:
            importlib.import_module(info.name)
        except ImportError as error:
            failed[info.name] = error
    for name in TENSORFLOW_FREE:
        assert name not in failed, (name, failed.get(name))
        importlib.import_module(name)
    for name, error in failed.items():
        assert name.startswith(TENSORFLOW_ONLY_PREFIXES), (name, error)
        assert "tensorflow" in str(error).lower(), (name, error)
    assert not any(m.split(".")[0].startswith("tensorflow") for m in sys.modules)


@pytest.mark.parametrize(
    "name, needs",
    [
        ("CharTokenizer", '"keras-attn[tensorflow]"'),
        ("SentencePieceTokenizer", '"tensorflow-text"'),
    ],
)
def test_the_graph_tokenizers_name_the_install_command(name, needs):
    import keras_attn.text

    with pytest.raises(ImportError, match="needs TensorFlow") as err:
        getattr(keras_attn.text, name)
    assert "pip install" in str(err.value) and needs in str(err.value)
    assert keras_attn.text.END_ID == 2 and keras_attn.text.PAD_ID == 0


def _pairs():
    source = np.array([[5, 6, 7, 2], [8, 9, 2, 0]])
    target = np.array([[1, 10, 11, 2], [1, 12, 2, 0]])
    return source, target


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_models_train_decode_and_save(kind, tmp_path):
    from keras_attn import models
    from keras_attn.decoding import generate

    source, target = _pairs()
    target_in, target_out = models.teacher_forcing(target)
    if kind == "transformer":
        model = models.Transformer(20, 20, 1, 8, 2, 16, num_key_value_heads=1)
    else:
        model = models.RNNSeq2Seq(20, 20, 8, 8, attention="bahdanau")
    x = {"source": source, "target_in": target_in}
    model(x)
    model.compile(optimizer="adam", loss=models.MaskedSequenceLoss())
    before = [np.array(w) for w in model.get_weights()]
    model.fit(x, target_out, batch_size=2, epochs=1, verbose=0)
    assert any(not np.allclose(a, b) for a, b in zip(before, model.get_weights()))

    greedy = generate(model, source, start_token=1, end_token=2, search="greedy", max_length=5)
    beam = generate(
        model, source, start_token=1, end_token=2, search="beam", max_length=5, beam_size=3
    )
    greedy_ids = np.asarray(greedy["sequences"])
    beam_ids = np.asarray(beam["sequences"])
    assert greedy_ids.shape == (2, 5)
    assert beam_ids.shape[0] == 2 and beam_ids.shape[-1] == 5
    for ids in (greedy_ids, beam_ids):
        assert ids.min() >= 0 and ids.max() < 20

    path = str(tmp_path / f"{kind}.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(model(x)), atol=1e-5)


def test_sentencepiece_text_and_byte_pieces_without_tensorflow():
    from keras_attn.text import byte_pieces, placeholders
    from keras_attn.train.numpy_text import SentencePieceText

    words = "red green blue cat dog bird sun moon tree river stone cloud".split()
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=5)) for _ in range(200)]
    text = SentencePieceText.train(texts, vocab_size=320, byte_fallback=True)

    sentence = "red cat 東京"  # characters the model never saw: spelled as UTF-8 byte pieces
    ids = text.tokenize([sentence], add_end=True).to_list()[0]
    values = byte_pieces.byte_values(processor=text.processor)
    spelled = [i for i in ids if values[i] >= 0]
    assert len(spelled) == len("東京".encode())
    assert text.detokenize(np.array([ids]))[0].decode("utf-8") == sentence

    # cut inside the second character: its first byte alone completes nothing
    cut = ids[: ids.index(spelled[4])]
    assert "\ufffd" in text.processor.decode(cut)  # SentencePiece alone writes U+FFFD
    answer = byte_pieces.decode(text.processor, cut, values)
    assert answer == "red cat 東" and "\ufffd" not in answer

    kept = placeholders.extract_placeholders("Failed to add %{smart_count} files to {name}")
    assert kept == ["%{smart_count}", "{name}"]


def test_the_translator_recipe_trains_a_smoke_run(tmp_path):
    words = "red green blue cat dog bird sun moon tree river".split()
    rng = np.random.default_rng(1)
    lines = []
    for _ in range(200):
        phrase = list(rng.choice(words, size=int(rng.integers(1, 6))))
        lines.append(" ".join(phrase) + "\t" + " ".join(reversed(phrase)).upper())
    data = tmp_path / "pairs.tsv"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    argv = ["--smoke", "--data", str(data), "--out", str(out), "--model", "transformer"]
    argv += ["--epochs", "1", "--steps-per-epoch", "2", "--n-val", "8", "--heatmaps", "1"]
    argv += ["--schedule", "constant", "--verbose", "2"]
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "train_translator.py"), *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    # heat maps asked for, matplotlib absent here (as on many JAX machines): said, not a crash
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "Attention heat maps skipped: matplotlib is not installed" in proc.stdout
    for name in ("run_config.json", "tokenizer.model", "final.weights.h5", "metrics.jsonl"):
        assert (out / name).exists(), name
    with open(out / "metrics.jsonl", encoding="utf-8") as f:
        metrics = [json.loads(line) for line in f if line.strip()]
    assert [m["epoch"] for m in metrics] == [1]
    assert 0.0 <= metrics[0]["val_chrf"] <= 100.0


def _pins(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        lines = [line.split("#")[0].strip() for line in f]
    pairs = [line.split("==") for line in lines if line]
    return {package.lower().replace("_", "-"): version for package, version in pairs}


def test_the_lock_is_the_main_lock_without_tensorflow():
    ours, main = _pins("requirements-jax.lock"), _pins("requirements.lock")
    assert {p: main.get(p) for p in ours} == ours  # the same versions as the tested set
    assert not [p for p in ours if p.startswith(("tensorflow", "keras-hub", "tf-"))]
