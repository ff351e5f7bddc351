"""Copy attention's log-space mixture (`keras_attn.models.copy.copy_log_probs`, what
`CopyGenerator` computes on JAX) against the probability-space one (`copy_distribution`, what
it computes on TensorFlow): the same log-probabilities and the same gradients, with repeated
source ids, padding, probabilities under the floor, in training's and decoding's layouts. Runs
on each backend (make test-jax-rest runs it on JAX)."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.models.copy import CopyGenerator, copy_distribution, copy_log_probs

FLOOR = np.log(1e-12)


def reference(logits, gate_logit, attention, ids):
    probs = copy_distribution(ops.softmax(logits, axis=-1), ops.sigmoid(gate_logit), attention, ids)
    return ops.log(ops.maximum(probs, 1e-12))


def inputs(seed=0, b=3, t=4, s=6, v=40):
    r = np.random.default_rng(seed)
    logits = (r.normal(size=(b, t, v)) * 8).astype("float32")  # some under the floor
    logits[0, 0, 5] = -200.0  # a copied id the generator gives nothing
    ids = np.array([[5, 7, 5, 9, 0, 0], [3, 3, 3, 8, 2, 1], [11, 12, 13, 14, 15, 16]], "int32")
    attention = r.uniform(size=(b, t, s)).astype("float32")
    attention[0, :, 4:] = 0.0  # padding gets no attention
    attention /= attention.sum(-1, keepdims=True)
    gate_logit = (r.normal(size=(b, t, 1)) * 3).astype("float32")
    gate_logit[1, 0, 0] = -120.0  # p_gen rounds to 0: all copied
    gate_logit[2, 1, 0] = 120.0  # p_gen rounds to 1: nothing copied
    return logits, gate_logit, attention, ids


def gradients(fn, args, cotangent):
    """The gradients of `sum(fn(*args) * cotangent)` w.r.t. the first three arguments."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.grad(lambda *a: ops.sum(fn(*a, args[3]) * cotangent), argnums=(0, 1, 2))(
            *args[:3]
        )
    import tensorflow as tf

    variables = [tf.constant(a) for a in args[:3]]
    with tf.GradientTape() as tape:
        tape.watch(variables)
        value = tf.reduce_sum(fn(*variables, args[3]) * cotangent)
    return tape.gradient(value, variables)


def test_the_same_log_probabilities_as_the_mixture_in_probabilities():
    args = inputs()
    got = np.asarray(copy_log_probs(*args))
    expected = np.asarray(reference(*args))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, atol=2e-5)
    # the repeated id's mass adds up, the floor holds, the rows are distributions
    logits, gate_logit, attention, ids = args
    p_gen = 1 / (1 + np.exp(-gate_logit[0, 0, 0]))
    mass = attention[0, 0, 0] + attention[0, 0, 2]
    assert got[0, 0, 5] == pytest.approx(np.log((1 - p_gen) * mass), abs=1e-5)
    assert got.min() == pytest.approx(FLOOR, abs=1e-4)
    np.testing.assert_allclose(np.exp(got).sum(-1), 1.0, atol=1e-4)


def test_one_decoding_step_is_a_row_of_teacher_forcing():
    logits, gate_logit, attention, ids = inputs()
    whole = np.asarray(copy_log_probs(logits, gate_logit, attention, ids))
    step = np.asarray(copy_log_probs(logits[:, 2], gate_logit[:, 2], attention[:, 2], ids))
    np.testing.assert_allclose(step, whole[:, 2], atol=1e-6)


def test_the_same_gradients_as_the_mixture_in_probabilities():
    args = inputs(seed=1)
    cotangent = np.random.default_rng(2).normal(size=args[0].shape).astype("float32")
    got = gradients(copy_log_probs, args, cotangent)
    expected = gradients(reference, args, cotangent)
    for name, g, e in zip(("logits", "gate_logit", "attention"), got, expected):
        g, e = np.asarray(g), np.asarray(e)
        assert np.isfinite(g).all(), name
        np.testing.assert_allclose(g, e, atol=1e-4 * max(1.0, np.abs(e).max()), err_msg=name)


def test_padding_ids_hold_nothing_whatever_their_attention():
    logits, gate_logit, attention, ids = inputs()
    leaked = attention.copy()
    clean = np.asarray(copy_log_probs(logits, gate_logit, attention, ids))
    for held in (5.0, np.nan):  # attention on padding (a bug upstream) is never copied
        leaked[0, :, 4:] = held
        got = np.asarray(copy_log_probs(logits, gate_logit, leaked, ids))
        np.testing.assert_allclose(got, clean, atol=1e-6)


def test_the_layer_answers_the_same_on_every_backend():
    # CopyGenerator picks the form by backend: its answer is the probability-space formula's
    layer = CopyGenerator()
    logits, gate_logit, attention, ids = inputs()
    b, t, s = attention.shape
    r = np.random.default_rng(3)
    memory = r.normal(size=(b, s, 5)).astype("float32")
    output = r.normal(size=(b, t, 6)).astype("float32")
    x = r.normal(size=(b, t, 3)).astype("float32")
    got = np.asarray(layer(logits, attention, ids, memory, output, x))
    features = np.concatenate([attention @ memory, output, x], axis=-1)
    gate = np.asarray(layer.gate(features))
    np.testing.assert_allclose(got, np.asarray(reference(logits, gate, attention, ids)), atol=2e-5)
