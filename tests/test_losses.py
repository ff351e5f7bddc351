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
    return [
        np.zeros_like(a) if g is None else g.numpy() for a, g in zip(args, tape.gradient(out, ts))
    ]


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
        reward,
        log_prob,
        baseline,
        entropy,
    )
    # Reward and baseline carry no gradient; log_prob gets -(r - b) / B, entropy -w / B.
    assert np.all(g_reward == 0) and np.all(g_base == 0)
    np.testing.assert_allclose(
        g_logp, -np.repeat(((reward - baseline) / 5)[:, None], 3, 1), rtol=1e-5
    )
    np.testing.assert_allclose(g_ent, np.full((5, 3), -0.25 / 5), rtol=1e-5)


def test_reinforce_surrogate_per_sample_rewards_and_no_entropy():
    r = np.random.RandomState(1)
    reward = r.normal(size=(4, 2)).astype("float32")
    log_prob = -np.abs(r.normal(size=(4, 2))).astype("float32")
    got = _np(losses.reinforce_surrogate(reward, log_prob))
    np.testing.assert_allclose(got, -np.mean((reward * log_prob).sum(1)), rtol=1e-5)
    one_d = _np(losses.reinforce_surrogate(reward[:, 0], log_prob[:, 0], baseline=reward[:, 1]))
    np.testing.assert_allclose(
        one_d, -np.mean((reward[:, 0] - reward[:, 1]) * log_prob[:, 0]), rtol=1e-5
    )


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
    ref = np.mean(
        [sum((1 - sum(w[n, t, i] for t in range(tq))) ** 2 for i in range(tv)) for n in range(b)]
    )
    np.testing.assert_allclose(_np(losses.doubly_stochastic_penalty(w)), ref, rtol=1e-5)

    mask = np.ones((b, tv), bool)
    mask[0, 3:] = False
    qmask = np.ones((b, tq), bool)
    qmask[1, 2:] = False
    ref_m = np.mean(
        [
            sum(
                (1 - sum(w[n, t, i] for t in range(tq) if qmask[n, t])) ** 2
                for i in range(tv)
                if mask[n, i]
            )
            for n in range(b)
        ]
    )
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
        _np(losses.masked_sequence_loss(y, probs, mask, from_logits=False)),
        -ll[mask].mean(),
        rtol=1e-4,
    )
    np.testing.assert_allclose(
        _np(losses.sequence_log_likelihood(y, logits, mask)), (ll * mask).sum(1), rtol=1e-5
    )
    none = _np(losses.masked_sequence_loss(y, logits, np.zeros((2, 4), bool)))
    assert none == 0.0


def test_label_smoothing_against_numpy_and_masked_nan():
    r = np.random.RandomState(4)
    logits = r.normal(size=(2, 3, 7)).astype("float32")
    y = r.randint(0, 7, size=(2, 3))
    mask = np.array([[1, 1, 0], [1, 0, 0]], bool)
    eps = 0.2
    target = (1 - eps) * np.eye(7)[y] + eps / 7  # the smoothed distribution, written out
    ce = -(target * _np_log_softmax(logits)).sum(-1)
    got = _np(losses.masked_sequence_loss(y, logits, mask, label_smoothing=eps))
    np.testing.assert_allclose(got, ce[mask].mean(), rtol=1e-5)
    assert (
        abs(got - _np(losses.masked_sequence_loss(y, logits, mask))) > 1e-3
    )  # smoothing changes it
    poisoned = logits.copy()
    poisoned[~mask] = np.nan
    poisoned[0, 2, 0] = np.inf
    g = _grads(lambda z: losses.masked_sequence_loss(y, z, mask, label_smoothing=eps), poisoned)[0]
    assert np.all(np.isfinite(g)) and np.all(g[~mask] == 0)
    np.testing.assert_allclose(
        _np(losses.masked_sequence_loss(y, poisoned, mask, label_smoothing=eps)),
        ce[mask].mean(),
        rtol=1e-5,
    )
    from keras_attn.models import MaskedSequenceLoss

    loss = MaskedSequenceLoss(label_smoothing=eps)
    assert MaskedSequenceLoss.from_config(loss.get_config()).label_smoothing == eps
    for bad in (-0.1, 1.0, "0.1", True):
        with pytest.raises(ValueError, match="label_smoothing"):
            losses.masked_sequence_loss(y, logits, label_smoothing=bad)
        with pytest.raises(ValueError, match="label_smoothing"):
            MaskedSequenceLoss(label_smoothing=bad)


def _np_log_uniform(k, v):
    return (np.log(k + 2.0) - np.log(k + 1.0)) / np.log(v + 1.0)


def test_log_uniform_sampler_follows_zipf():
    v = 20
    draws = _np(losses.log_uniform_candidates(20000, v, seed=1))
    assert draws.dtype == np.int32 and draws.min() >= 0 and draws.max() < v
    freq = np.bincount(draws, minlength=v) / draws.size
    np.testing.assert_allclose(freq, _np_log_uniform(np.arange(v), v), atol=0.012)
    np.testing.assert_allclose(
        _np(losses.log_uniform_probabilities(np.arange(v), v)).sum(), 1.0, rtol=1e-5
    )


def test_sampled_softmax_value_and_expected_gradient_approach_full_softmax():
    r = np.random.RandomState(5)
    v, d, b = 40, 6, 5
    h = r.normal(size=(b, d)).astype("float32")
    w = (0.5 * r.normal(size=(d, v))).astype("float32")
    bias = (0.1 * r.normal(size=(v,))).astype("float32")
    labels = np.array([0, 3, 7, 20, 39])
    mask = np.array([1, 1, 1, 1, 0], bool)

    # the value on one fixed draw, against the formula written out
    cand = np.array([1, 3, 5, 5, 30])
    got = _np(
        losses.sampled_softmax_loss(labels, h, w, bias, num_sampled=5, mask=mask, sampled=cand)
    )
    full = h @ w + bias
    q = lambda k: 5 * _np_log_uniform(k, v)  # noqa: E731
    ref = []
    for i in np.flatnonzero(mask):
        logit = [full[i, labels[i]] - np.log(q(labels[i]))]
        logit += [-1e9 if c == labels[i] else full[i, c] - np.log(q(c)) for c in cand]
        logit = np.array(logit)
        ref.append(-(logit[0] - np.log(np.exp(logit - logit.max()).sum()) - logit.max()))
    np.testing.assert_allclose(got, np.mean(ref), rtol=1e-5)

    # the full softmax gradient w.r.t. the hidden states and the kernel (real rows only)
    p = np.exp(full - full.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    delta = (p - np.eye(v)[labels]) * mask[:, None] / mask.sum()
    full_gh, full_gw = delta @ w.T, h.T @ delta

    def loss(hh, ww, c):
        return losses.sampled_softmax_loss(
            labels, hh, ww, bias, int(c.shape[0]), mask=mask, sampled=c
        )

    if keras.backend.backend() == "jax":
        import jax

        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    else:
        import tensorflow as tf

        @tf.function
        def grad(hh, ww, c):
            with tf.GradientTape() as tape:
                tape.watch([hh, ww])
                out = loss(hh, ww, c)
            return tape.gradient(out, [hh, ww])

    def mean_gradient(n, draws):
        rng = np.random.RandomState(n)
        gh, gw = np.zeros_like(h), np.zeros_like(w)
        for _ in range(draws):  # candidates drawn in NumPy by the inverse CDF of Q
            c = np.minimum(
                np.floor(np.exp(rng.uniform(size=n) * np.log(v + 1.0))) - 1, v - 1
            ).astype("int32")
            g = grad(h, w, c)
            gh, gw = gh + np.asarray(g[0]) / draws, gw + np.asarray(g[1]) / draws
        return gh, gw

    def error(n):
        gh, gw = mean_gradient(n, 40)
        return max(
            np.abs(gh - full_gh).max() / np.abs(full_gh).max(),
            np.abs(gw - full_gw).max() / np.abs(full_gw).max(),
        )

    few, many = error(2), error(36)
    assert many < 0.15 and many < few / 2, (few, many)
    g = _grads(
        lambda hh: losses.sampled_softmax_loss(labels, hh, w, bias, 5, mask=mask, seed=0), h
    )[0]
    assert np.all(g[~mask] == 0)
    with pytest.raises(ValueError, match="num_sampled"):
        losses.sampled_softmax_loss(labels, h, w, bias, num_sampled=v)
