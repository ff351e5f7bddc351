"""keras_attn.losses against NumPy formulas. Backend-neutral: TF and JAX."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn import losses


def _np(x):
    return ops.convert_to_numpy(x)


def _grads(fn, *args):
    """Gradients of the scalar `fn(*args)` w.r.t. every argument (NumPy arrays)."""
    if keras.backend.backend() == "jax":
        import jax

        return [np.asarray(g) for g in jax.grad(fn, argnums=tuple(range(len(args))))(*args)]
    import tensorflow as tf

    ts = [tf.constant(a) for a in args]
    with tf.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        out = fn(*ts)
    return [np.zeros_like(a) if g is None else g.numpy() for a, g in zip(args, tape.gradient(out, ts))]


def test_reinforce_surrogate_value_and_gradient():
    r = np.random.RandomState(0)
    reward = r.normal(size=(5,)).astype("float32")
    log_prob = -np.abs(r.normal(size=(5, 3))).astype("float32")
    entropy = np.abs(r.normal(size=(5, 3))).astype("float32")
    baseline = np.float32(0.3)
    got = _np(losses.reinforce_surrogate(reward, log_prob, baseline, entropy, 0.25))
    ref = -np.mean(((reward - baseline)[:, None] * log_prob).sum(1) + 0.25 * entropy.sum(1))
    np.testing.assert_allclose(got, ref, rtol=1e-5)

    g_reward, g_logp, g_base, g_ent = _grads(
        lambda a, b, c, d: losses.reinforce_surrogate(a, b, c, d, 0.25),
        reward, log_prob, baseline, entropy,
    )
    # Reward and baseline carry no gradient; log_prob gets -(r - b) / B, entropy -w / B.
    assert np.all(g_reward == 0) and np.all(g_base == 0)
    np.testing.assert_allclose(g_logp, -np.repeat(((reward - baseline) / 5)[:, None], 3, 1), rtol=1e-5)
    np.testing.assert_allclose(g_ent, np.full((5, 3), -0.25 / 5), rtol=1e-5)


def test_reinforce_surrogate_per_sample_rewards_and_no_entropy():
    r = np.random.RandomState(1)
    reward = r.normal(size=(4, 2)).astype("float32")
    log_prob = -np.abs(r.normal(size=(4, 2))).astype("float32")
    got = _np(losses.reinforce_surrogate(reward, log_prob))
    np.testing.assert_allclose(got, -np.mean((reward * log_prob).sum(1)), rtol=1e-5)
    one_d = _np(losses.reinforce_surrogate(reward[:, 0], log_prob[:, 0], baseline=reward[:, 1]))
    np.testing.assert_allclose(one_d, -np.mean((reward[:, 0] - reward[:, 1]) * log_prob[:, 0]), rtol=1e-5)


def test_reinforce_surrogate_bad_arguments():
    with pytest.raises(ValueError, match="entropy"):
        losses.reinforce_surrogate(np.ones(3, "float32"), np.ones(3, "float32"), entropy_weight=0.1)
    with pytest.raises(ValueError, match="log_prob"):
        losses.reinforce_surrogate(np.float32(1.0), np.float32(-1.0))
    with pytest.raises(ValueError, match="entropy_weight"):
        losses.reinforce_surrogate(np.ones(3, "float32"), np.ones(3, "float32"), entropy_weight="x")


def test_doubly_stochastic_penalty_against_numpy():
    r = np.random.RandomState(2)
    b, tq, tv = 3, 4, 5
    w = r.uniform(size=(b, tq, tv)).astype("float32")
    w /= w.sum(-1, keepdims=True)
    # sum_i (1 - sum_t alpha_ti)^2, t over query steps, i over source positions.
    ref = np.mean([sum((1 - sum(w[n, t, i] for t in range(tq))) ** 2 for i in range(tv)) for n in range(b)])
    np.testing.assert_allclose(_np(losses.doubly_stochastic_penalty(w)), ref, rtol=1e-5)

    mask = np.ones((b, tv), bool)
    mask[0, 3:] = False
    qmask = np.ones((b, tq), bool)
    qmask[1, 2:] = False
    ref_m = np.mean([
        sum((1 - sum(w[n, t, i] for t in range(tq) if qmask[n, t])) ** 2 for i in range(tv) if mask[n, i])
        for n in range(b)
    ])
    got = _np(losses.doubly_stochastic_penalty(w, mask=mask, query_mask=qmask))
    np.testing.assert_allclose(got, ref_m, rtol=1e-5)
    with pytest.raises(ValueError, match="weights"):
        losses.doubly_stochastic_penalty(w[:, 0])


def _np_log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_masked_sequence_loss_and_log_likelihood():
    r = np.random.RandomState(3)
    logits = r.normal(size=(2, 4, 6)).astype("float32")
    y = r.randint(0, 6, size=(2, 4))
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], bool)
    ll = np.take_along_axis(_np_log_softmax(logits), y[..., None], -1)[..., 0]
    np.testing.assert_allclose(
        _np(losses.masked_sequence_loss(y, logits, mask)), -ll[mask].mean(), rtol=1e-5
    )
    np.testing.assert_allclose(_np(losses.masked_sequence_loss(y, logits)), -ll.mean(), rtol=1e-5)
    probs = np.exp(_np_log_softmax(logits))
    np.testing.assert_allclose(
        _np(losses.masked_sequence_loss(y, probs, mask, from_logits=False)), -ll[mask].mean(), rtol=1e-4
    )
    np.testing.assert_allclose(
        _np(losses.sequence_log_likelihood(y, logits, mask)), (ll * mask).sum(1), rtol=1e-5
    )
    none = _np(losses.masked_sequence_loss(y, logits, np.zeros((2, 4), bool)))
    assert none == 0.0
