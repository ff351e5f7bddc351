"""The library where TensorFlow is not installed (`make test-notf`: `.venv-notf`, built from
requirements-jax.lock, KERAS_BACKEND=jax): the TensorFlow-free modules import, the models build,
train, decode and save, SentencePiece text round-trips through the byte-piece decoder, and what
needs TensorFlow (the graph tokenizers, export, the command's export) says so in one line with
the pip command; the lock is the main lock without TensorFlow."""

import importlib
import importlib.util
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
        if info.name.endswith(".__main__"):  # `python -m` entry points run when imported
            continue
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


# What each entry point that needs TensorFlow says where it is not installed: one line, the
# pip command the `keras-attn` command prints for the same modules.
EXPORT = 'pip install "keras-attn[serving]" "tensorflow-serving-api"'
NEEDS_TENSORFLOW = [
    (
        "from keras_attn.text import CharTokenizer",
        'keras_attn.text.CharTokenizer needs `tensorflow`, not installed here: pip install "keras-attn[tensorflow]"',
    ),
    (
        "from keras_attn.text import SentencePieceTokenizer",
        "keras_attn.text.SentencePieceTokenizer needs `tensorflow`, `tensorflow_text`, not "
        'installed here: pip install "keras-attn[tensorflow]" "tensorflow-text"',
    ),
    (
        "import keras_attn.text.base",
        'keras_attn.text.base needs `tensorflow`, not installed here: pip install "keras-attn[tensorflow]"',
    ),
    (
        "from keras_attn.serving import export_text_model",
        "keras_attn.serving.export_text_model needs `tensorflow`, `tensorflow_serving`, not "
        f"installed here: {EXPORT}",
    ),
    (
        "from keras_attn.serving import export_image_model",
        "keras_attn.serving.export_image_model needs `tensorflow`, `tensorflow_serving`, not "
        f"installed here: {EXPORT}",
    ),
    (
        "from keras_attn.train import export_run",
        "keras_attn.train.export_run needs `tensorflow`, `tensorflow_serving`, not installed "
        f"here: {EXPORT}",
    ),
]


@pytest.mark.parametrize("statement, message", NEEDS_TENSORFLOW)
def test_what_needs_tensorflow_names_the_install_command_in_one_line(statement, message):
    proc = subprocess.run(  # a fresh interpreter: nothing imported before the statement
        [sys.executable, "-c", statement], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == f"ImportError: {message}", proc.stderr[-2000:]


def test_the_command_line_export_names_the_same_install_command(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "keras_attn.cli", "export", str(run), str(tmp_path / "export")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "keras-attn export: error: this command needs `tensorflow`, `tensorflow_serving`, not "
        f"installed here: {EXPORT}\n"
    )


def test_the_text_package_still_gives_its_reserved_ids():
    import keras_attn.text

    assert (keras_attn.text.PAD_ID, keras_attn.text.START_ID, keras_attn.text.END_ID) == (0, 1, 2)
    with pytest.raises(ImportError, match="not installed here"):
        keras_attn.text.CharTokenizer  # noqa: B018


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


def _pins(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        lines = [line.split("#")[0].strip() for line in f]
    pairs = [line.split("==") for line in lines if line]
    return {package.lower().replace("_", "-"): version for package, version in pairs}


def test_the_lock_is_the_main_lock_without_tensorflow():
    ours, main = _pins("requirements-jax.lock"), _pins("requirements.lock")
    assert {p: main.get(p) for p in ours} == ours  # the same versions as the tested set
    assert not [p for p in ours if p.startswith(("tensorflow", "keras-hub", "tf-"))]
