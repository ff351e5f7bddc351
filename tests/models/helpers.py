"""The checks every example model goes through (tests/models/test_*.py).

`run_model_checklist(make_model, x, y, source_key)`:
1. teacher-forced call -> logits `[B, T, V]`, finite;
2. cached decoding: `encode` + `initial_decode_state` + `decode_step` fed the teacher-forced
   target token by token gives the teacher-forced logits (unpadded steps), and a `[B, S]`
   attention row that sums to 1 over the unmasked source and is 0 on padding;
3. `.keras` save/load gives the same logits (and a fresh model from the config does not);
4. one short `fit` runs, gives a finite loss and changes the weights; `evaluate`'s loss and
   masked accuracy equal the cross-entropy and accuracy over the non-padding tokens, in NumPy;
5. greedy and beam search from keras_attn.decoding with the documented shapes; the best beam's
   `log_probs` equal the teacher-forced log-likelihood of the returned sequence (computed with
   the model's own `call`, in NumPy), so the step function is right under beam tiling/reordering.
"""

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

from keras_attn.decoding import beam_search, greedy_search
from keras_attn.models import MaskedSequenceAccuracy, MaskedSequenceLoss

START, END = 1, 2


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def run_model_checklist(
    model, x, y, source_key="source", fit_eagerly=True, max_length=6, beam_size=3, normalized=True
):
    """`normalized=False`: attention rows may sum to less than 1 (Luong local-p's Gaussian)."""
    source = x[source_key]
    target_in = x["target_in"]
    batch, steps = target_in.shape
    logits = np.asarray(model(x))
    assert logits.shape == (batch, steps, model_vocab(model))
    assert np.all(np.isfinite(logits))

    # 2. cached decoding == teacher forcing
    encoded = model.encode(source)
    source_mask = np.asarray(encoded["source_mask"])
    assert source_mask.dtype == bool and source_mask.shape[0] == batch
    state = model.initial_decode_state(encoded, steps + 1)
    step_logits = []
    for t in range(steps):
        out, state, attention = model.decode_step(tf.constant(target_in[:, t]), state, t)
        step_logits.append(np.asarray(out))
        attention = np.asarray(attention)
        assert attention.shape == source_mask.shape
        if normalized:
            np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-5)
        else:
            assert np.all(attention.sum(-1) > 0.0) and np.all(attention.sum(-1) <= 1.0 + 1e-5)
        assert np.all(attention[~source_mask] == 0.0)
    step_logits = np.stack(step_logits, 1)
    real = target_in != 0
    np.testing.assert_allclose(step_logits[real], logits[real], atol=2e-5, rtol=1e-5)

    # 3. save / load
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
    np.testing.assert_allclose(np.asarray(loaded(x)), logits, atol=1e-6)
    assert loaded.get_config() == model.get_config()
    fresh = model.__class__.from_config(model.get_config())
    assert not np.allclose(np.asarray(fresh(x)), logits, atol=1e-3)

    # 4. one short fit
    before = [np.array(w) for w in model.trainable_weights]
    model.compile(
        keras.optimizers.Adam(0.01),
        MaskedSequenceLoss(),
        metrics=[MaskedSequenceAccuracy()],
        run_eagerly=fit_eagerly,
        jit_compile=False,
    )
    history = model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
    assert all(np.isfinite(v) for v in history.history["loss"])
    after = [np.array(w) for w in model.trainable_weights]
    assert any(not np.allclose(a, b) for a, b in zip(before, after))
    # The compiled loss and accuracy (inference mode) against NumPy on the model's own logits.
    evaluated = model.evaluate(x, y, batch_size=batch, verbose=0, return_dict=True)
    ll = log_softmax(np.asarray(model(x), "float64"))
    real = y != 0
    nll = -np.take_along_axis(ll, y[..., None].astype("int64"), -1)[..., 0]
    np.testing.assert_allclose(evaluated["loss"], nll[real].mean(), rtol=1e-4)
    hits = ll.argmax(-1) == y
    np.testing.assert_allclose(evaluated["masked_accuracy"], hits[real].mean(), atol=1e-6)

    # 5. greedy and beam search
    encoded = model.encode(source)
    mask = encoded["source_mask"]
    start = tf.fill([batch], START)

    # Padding (id 0) inside a hypothesis would be masked by the teacher-forced check below,
    # so the searches run on the model's logits with id 0 ruled out (the check does the same).
    def step_fn(tokens, state, step):
        logits, state, attention = model.decode_step(tokens, state, step)
        return no_pad(logits), state, attention

    greedy = greedy_search(
        step_fn,
        model.initial_decode_state(encoded, max_length),
        start,
        END,
        max_length=max_length,
        source_mask=mask,
    )
    assert tuple(greedy["sequences"].shape) == (batch, max_length)
    assert tuple(greedy["alignments"].shape) == (batch, max_length, source_mask.shape[1])
    beam = beam_search(
        step_fn,
        model.initial_decode_state(encoded, max_length),
        start,
        END,
        beam_size=beam_size,
        max_length=max_length,
        source_mask=mask,
    )
    k = beam_size
    assert tuple(beam["sequences"].shape) == (batch, k, max_length)
    for name in ("lengths", "scores", "log_probs"):
        assert tuple(beam[name].shape) == (batch, k)
    assert tuple(beam["alignments"].shape) == (batch, k, max_length, source_mask.shape[1])
    scores = np.asarray(beam["scores"])
    assert np.all(np.diff(scores, axis=1) <= 1e-6)  # best first
    # The best hypothesis' log-prob, recomputed with the teacher-forced call.
    seqs = np.asarray(beam["sequences"])[:, 0]
    lengths = np.asarray(beam["lengths"])[:, 0]
    t_in = np.zeros((batch, max_length), "int32")
    t_in[:, 0] = START
    for b in range(batch):
        t_in[b, 1 : lengths[b]] = seqs[b, : lengths[b] - 1]
    xx = dict(x)
    xx["target_in"] = t_in
    ll = log_softmax(np.asarray(no_pad(model(xx)), "float64"))
    expected = [sum(ll[b, t, seqs[b, t]] for t in range(lengths[b])) for b in range(batch)]
    np.testing.assert_allclose(np.asarray(beam["log_probs"])[:, 0], expected, atol=1e-4, rtol=1e-4)
    return model


def no_pad(logits):
    logits = tf.convert_to_tensor(logits)
    vocab = tf.shape(logits)[-1]
    return tf.where(tf.equal(tf.range(vocab), 0), tf.constant(-1e9, logits.dtype), logits)


def model_vocab(model):
    return getattr(model, "target_vocab_size", None) or model.vocab_size
