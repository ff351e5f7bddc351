"""The example models on the JAX backend: every model trains with `fit` (compiled, `jax.jit`)
and decodes through `encode` / `initial_decode_state` / `decode_step`.

Under `KERAS_BACKEND=jax` the checks run in this process; under any other backend the file runs
itself once with `KERAS_BACKEND=jax` in a subprocess (`python -m tests.models.test_models_jax`),
which prints one JSON line per model, and each test reads its model's line.

Per sequence model: the teacher-forced call is finite; the cached steps fed the teacher-forced
target give the teacher-forced logits and attention rows that sum to 1 over the real source
(0 on padding); `.keras` save/load gives the same logits; two compiled `fit` steps change the
weights, and `evaluate`'s loss is the masked cross-entropy of the model's own logits in NumPy.
Hard attention: `fit` moves the REINFORCE baseline and the draws' seed state (the samples came
out of the `scan` and reached the loss). HAN and the reader: attention rows, save/load, `fit`.
"""

import json
import os
import subprocess
import sys
import traceback

import pytest

SV = TV = 12
B, S, T = 3, 7, 5

SEQUENCE_MODELS = (
    "rnn-bahdanau-lstm",
    "rnn-luong-local-p-gru",
    "rnn-hard",
    "rnn-copy-luong",
    "transformer-gqa-rotary-ring-gate",
    "transformer-copy",
    "convs2s",
    "captioner-soft",
    "captioner-hard",
)
OTHER_MODELS = ("han", "aoa-reader")
MODELS = SEQUENCE_MODELS + OTHER_MODELS


def _make(name):
    from keras_attn import models

    if name == "rnn-bahdanau-lstm":
        return models.RNNSeq2Seq(SV, TV, 8, 8, attention="bahdanau")
    if name == "rnn-luong-local-p-gru":
        return models.RNNSeq2Seq(
            SV, TV, 8, 8, attention="luong", alignment="local-p", window=2, cell="gru"
        )
    if name == "rnn-hard":
        return models.RNNSeq2Seq(SV, TV, 8, 8, attention="hard", seed=3)
    if name == "rnn-copy-luong":
        return models.RNNSeq2Seq(
            SV, SV, 8, 8, attention="luong", copy_attention=True, coverage_weight=0.5
        )
    if name == "transformer-gqa-rotary-ring-gate":
        # sliding_window 3 < the decoding length: the self-attention cache is a ring.
        return models.Transformer(
            SV,
            TV,
            2,
            8,
            2,
            16,
            dropout=0.1,
            num_key_value_heads=1,
            rotary_max_wavelength=100.0,
            sliding_window=3,
            use_gate=True,
        )
    if name == "transformer-copy":
        return models.Transformer(
            SV, SV, 1, 8, 2, 16, dropout=0.1, copy_attention=True, coverage_weight=0.5
        )
    if name == "convs2s":
        return models.ConvS2S(
            SV, TV, embedding_dim=8, hidden_dim=8, num_layers=2, kernel_size=3, max_length=16
        )
    if name.startswith("captioner-"):
        return models.ShowAttendTell(
            TV, embedding_dim=8, units=8, filters=(4, 6), attention=name.split("-")[1], seed=3
        )
    if name == "han":
        return models.HierarchicalAttentionNetwork(20, 3, 8, 4, 4, 8)
    if name == "aoa-reader":
        return models.AttentionOverAttentionReader(20, 8, 4)
    raise ValueError(name)


def _sequence_data(name):
    import numpy as np

    r = np.random.default_rng(0)
    target = r.integers(4, TV, (B, T + 1)).astype("int32")
    target[:, 0] = 1  # start
    target[1, 3] = 2  # end of a short target
    target[1, 4:] = 0
    target[0, T] = target[2, T] = 2
    target_in = target[:, :-1].copy()
    target_in[target_in == 2] = 0
    y = target[:, 1:].copy()
    if name.startswith("captioner"):
        return {"image": r.random((B, 8, 16, 1)).astype("float32"), "target_in": target_in}, y
    source = r.integers(4, SV, (B, S)).astype("int32")
    source[0, 4:] = 0  # a padded source
    return {"source": source, "target_in": target_in}, y


def _log_softmax(x):
    import numpy as np

    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _round_trip(model, x, expected, tmp, **call_kwargs):
    import keras
    import numpy as np

    path = os.path.join(tmp, "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(np.asarray(loaded(x, **call_kwargs)), expected, atol=1e-6)


def _check_sequence_model(name, tmp):
    import keras
    import numpy as np

    from keras_attn.models import MaskedSequenceAccuracy, MaskedSequenceLoss

    model = _make(name)
    x, y = _sequence_data(name)
    source = x["image" if name.startswith("captioner") else "source"]
    target_in = x["target_in"]
    logits = np.asarray(model(x))
    assert logits.shape == (B, T, TV) and np.all(np.isfinite(logits))

    encoded = model.encode(source)
    source_mask = np.asarray(encoded["source_mask"])
    state = model.initial_decode_state(encoded, T + 1)
    stepped = []
    for t in range(T):
        out, state, attention = model.decode_step(target_in[:, t], state, t)
        stepped.append(np.asarray(out))
        attention = np.asarray(attention)
        assert attention.shape == source_mask.shape
        if "local-p" in name:  # the Gaussian of local-p leaves rows below 1
            assert np.all(attention.sum(-1) > 0.0) and np.all(attention.sum(-1) <= 1 + 1e-5)
        else:
            np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-5)
        assert np.all(attention[~source_mask] == 0.0)
    real = target_in != 0
    np.testing.assert_allclose(np.stack(stepped, 1)[real], logits[real], atol=2e-5, rtol=1e-5)

    _round_trip(model, x, logits, tmp)

    hard = name.endswith("hard")
    if hard:
        layer = model.attention_layer
        seeds_before = [np.array(v) for v in model.non_trainable_variables if "seed" in v.path]
        assert seeds_before and float(layer.baseline) == 0.0
    before = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    model.compile(
        keras.optimizers.Adam(0.01),
        MaskedSequenceLoss(),
        metrics=[MaskedSequenceAccuracy()],
        jit_compile=True,
    )
    history = model.fit(x, y, batch_size=B, epochs=2, verbose=0).history
    assert all(np.isfinite(v) for v in history["loss"])
    after = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    assert any(not np.allclose(a, b) for a, b in zip(before, after))
    if hard:
        assert float(layer.baseline) != 0.0
        seeds_after = [np.array(v) for v in model.non_trainable_variables if "seed" in v.path]
        assert any(not np.array_equal(a, b) for a, b in zip(seeds_before, seeds_after))
    evaluated = model.evaluate(x, y, batch_size=B, verbose=0, return_dict=True)
    ll = _log_softmax(np.asarray(model(x), "float64"))
    real = y != 0
    nll = -np.take_along_axis(ll, y[..., None].astype("int64"), -1)[..., 0]
    np.testing.assert_allclose(evaluated["loss"], nll[real].mean(), rtol=1e-4)
    np.testing.assert_allclose(
        evaluated["masked_accuracy"], (ll.argmax(-1) == y)[real].mean(), atol=1e-6
    )


def _check_other_model(name, tmp):
    import keras
    import numpy as np

    r = np.random.default_rng(0)
    model = _make(name)
    if name == "han":
        ids = r.integers(4, 20, (4, 3, 5)).astype("int32")
        ids[0, 2] = 0  # a padding sentence
        ids[1, :, 3:] = 0  # padding words
        x, y = ids, np.array([0, 1, 2, 0])
        logits, words, sentences = (np.asarray(t) for t in model(x, return_attention=True))
        real_sentence = (ids != 0).any(-1)
        np.testing.assert_allclose(sentences.sum(-1), 1.0, atol=1e-5)
        assert np.all(sentences[~real_sentence] == 0) and np.all(words[ids == 0] == 0)
        np.testing.assert_allclose(words.sum(-1)[real_sentence], 1.0, atol=1e-5)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    else:
        document = r.integers(4, 20, (4, 9)).astype("int32")
        document[2, 6:] = 0
        x = {
            "document": document,
            "query": r.integers(4, 20, (4, 4)).astype("int32"),
            "candidates": document[:, :3].copy(),
        }
        y = np.array([0, 1, 2, 0])
        logits, weights = (np.asarray(t) for t in model(x, return_attention=True))
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        assert np.all(weights[document == 0] == 0)
        assert np.all(logits >= 0) and np.all(logits.sum(-1) <= 1 + 1e-5)
        loss = keras.losses.SparseCategoricalCrossentropy()
    _round_trip(model, x, np.asarray(model(x)), tmp)
    before = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    model.compile(keras.optimizers.Adam(0.01), loss, jit_compile=True)
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0).history
    assert all(np.isfinite(v) for v in history["loss"])
    after = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    assert any(not np.allclose(a, b) for a, b in zip(before, after))


def check(name):
    """Run one model's checks on the current backend: `None` when they pass, else the error."""
    import tempfile

    import keras

    keras.utils.clear_session()
    keras.utils.set_random_seed(1234)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if name in SEQUENCE_MODELS:
                _check_sequence_model(name, tmp)
            else:
                _check_other_model(name, tmp)
    except Exception:  # reported to the test, which fails with it
        return traceback.format_exc()[-4000:]
    return None


@pytest.fixture(scope="module")
def results():
    if os.environ.get("KERAS_BACKEND") == "jax":
        return {name: check(name) for name in MODELS}
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(
        [sys.executable, "-m", "tests.models.test_models_jax", *MODELS],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith('{"model"')]
    assert lines, f"the JAX run printed no result (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return {line["model"]: line["error"] for line in lines}


@pytest.mark.processes
@pytest.mark.parametrize("name", MODELS)
def test_model_trains_and_decodes_on_jax(results, name):
    assert name in results, f"no result for {name} (the JAX run stopped before it)"
    assert results[name] is None, results[name]


# A JAX-only environment: a double of an install without TensorFlow, an import finder that
# refuses every `tensorflow*` module, before anything is imported.
WITHOUT_TENSORFLOW = r"""
import importlib.abc
import sys


class NoTensorFlowFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0].startswith("tensorflow"):
            raise ImportError(f"No module named {name!r}")
        return None


sys.meta_path.insert(0, NoTensorFlowFinder())

import os
import tempfile

import keras
import numpy as np

import keras_attn.models as models
from keras_attn.decoding import generate

assert keras.backend.backend() == "jax"
source = np.array([[5, 6, 7, 2], [8, 9, 2, 0]])
target_in, target_out = models.teacher_forcing(np.array([[1, 10, 11, 2], [1, 12, 2, 0]]))
made = {
    "transformer": models.Transformer(20, 20, 1, 8, 2, 16, num_key_value_heads=1),
    "rnn": models.RNNSeq2Seq(20, 20, 8, 8, attention="luong"),
}
for name, model in made.items():
    x = {"source": source, "target_in": target_in}
    model(x)
    model.compile(optimizer="adam", loss=models.MaskedSequenceLoss())
    before = [np.array(w) for w in model.get_weights()]
    model.fit(x, target_out, batch_size=2, epochs=1, verbose=0)
    assert any(not np.allclose(a, b) for a, b in zip(before, model.get_weights())), name
    out = generate(model, source, start_token=1, end_token=2, search="greedy", max_length=5)
    assert np.asarray(out["sequences"]).shape == (2, 5), name
    path = os.path.join(tempfile.mkdtemp(), name + ".keras")
    model.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(model(x)), atol=1e-5)
try:
    from keras_attn.text import CharTokenizer  # noqa: F401
except ImportError as error:
    assert "tensorflow" in str(error).lower(), error
else:
    raise AssertionError("keras_attn.text.CharTokenizer imported without TensorFlow")
assert not any(m.split(".")[0] == "tensorflow" for m in sys.modules), "TensorFlow was imported"
print("WITHOUT TENSORFLOW OK")
"""


@pytest.mark.processes
def test_models_build_train_decode_and_save_without_tensorflow():
    """`keras_attn.models` on JAX alone: import, a Transformer and an RNNSeq2Seq built, one
    `fit` epoch, a greedy decode, a `.keras` round trip; the tokenizers say they need
    TensorFlow."""
    env = dict(os.environ, KERAS_BACKEND="jax")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORFLOW],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "WITHOUT TENSORFLOW OK" in done.stdout, done.stderr[-4000:]


if __name__ == "__main__":
    import keras

    assert keras.backend.backend() == "jax", keras.backend.backend()
    for model_name in sys.argv[1:] or MODELS:
        print(json.dumps({"model": model_name, "error": check(model_name)}), flush=True)
