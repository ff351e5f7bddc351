"""HardAttention and HardAttentionModel. Backend-neutral: TF and JAX."""

import os
import tempfile

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn import losses
from keras_attn.layers import HardAttention
from keras_attn.models import HardAttentionModel
from tests.layers.checklist import check_padding_is_inert, run_layer_checklist

B, TQ, TV, DQ, DV, U = 3, 4, 6, 5, 7, 8


def _np(x):
    return ops.convert_to_numpy(x)


def _data(seed=0, dq=DQ):
    r = np.random.RandomState(seed)
    return (
        r.normal(size=(B, TQ, dq)).astype("float32"),
        r.normal(size=(B, TV, DV)).astype("float32"),
    )


def _np_softmax(e, mask):
    e = np.where(mask, e, -1e30)
    x = np.where(mask, np.exp(e - e.max(-1, keepdims=True)), 0.0)
    s = x.sum(-1, keepdims=True)
    return np.divide(x, s, out=np.zeros_like(x), where=s > 0)


def _np_additive(q, k, wq, wk, v):
    return np.tanh((q @ wq)[:, :, None, :] + (k @ wk)[:, None, :, :]) @ v


def _chi2_bound(df, z=4.753):
    """Upper 1e-6 quantile of chi-square(df) (Wilson-Hilferty, z = Phi^-1(1 - 1e-6))."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * np.sqrt(c)) ** 3


def _grad_of_trainable(layer, loss_of_outputs, args, kwargs):
    """Gradient of `loss_of_outputs(layer(*args, **kwargs))` w.r.t. the trainable weights."""
    if keras.backend.backend() == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def f(tv):
            out, _ = layer.stateless_call(tv, non_trainable, *args, **kwargs)
            return loss_of_outputs(out)

        return [np.asarray(g) for g in jax.grad(f)(trainable)]
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss = loss_of_outputs(layer(*args, **kwargs))
    return [g.numpy() for g in tape.gradient(loss, layer.trainable_variables)]


# --------------------------------------------------------------- checklist
def test_checklist():
    q, v = _data()
    run_layer_checklist(
        HardAttention,
        {"units": U, "seed": 0},
        {"query": q, "value": v},
        expected_output_shapes=[(B, TQ, DV)],
        expected_num_trainable_weights=3,
        expected_num_non_trainable_weights=1,  # the baseline
        # Xu et al.'s soft mix lets the plain-mse fit step reach the score weights.
        training_call_kwargs={"soft_mix_probability": 0.5},
    )


def test_checklist_with_scores_and_sample():
    q, v = _data(dq=DV)
    run_layer_checklist(
        HardAttention,
        {"score": "dot", "seed": 3},
        {"query": q, "value": v},
        call_kwargs={"return_attention_scores": True, "return_sample": True},
        expected_output_shapes=[(B, TQ, DV), (B, TQ, TV), (B, TQ), (B, TQ)],
        expected_num_trainable_weights=0,
        expected_num_non_trainable_weights=1,
    )


# ------------------------------------------------------------- the formulas
@pytest.mark.parametrize(
    "score, shapes",
    [("dot", []), ("general", [(DQ, DQ)]), ("concat", [(2 * DQ, U), (U,)])],
)
def test_other_scores_weights_and_config(score, shapes):
    q, v = _data(dq=DQ)
    v = v[..., :DQ]
    layer = HardAttention(score=score, units=U if score == "concat" else None, seed=4)
    ctx, pos = layer(q, v, return_sample=True, training=True)[:2]
    assert [tuple(w.shape) for w in layer.weights] == shapes + [()]
    np.testing.assert_array_equal(_np(ctx), v[np.arange(B)[:, None], _np(pos)])
    clone = HardAttention.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    assert (clone.score_name, clone.seed) == (score, 4)


def test_weight_order_and_inference_is_argmax():
    q, v = _data(1)
    mask = np.ones((B, TV), bool)
    mask[1, 2:] = False
    layer = HardAttention(units=U, seed=0)
    layer.build((B, TQ, DQ), (B, TV, DV))
    assert [tuple(w.shape) for w in layer.weights] == [(DQ, U), (DV, U), (U,), ()]
    assert [w.trainable for w in layer.weights] == [True, True, True, False]
    r = np.random.RandomState(2)
    wq, wk, vv = [r.normal(size=w.shape).astype("float32") for w in layer.trainable_weights]
    layer.set_weights([wq, wk, vv, np.float32(0.0)])
    alpha = _np_softmax(_np_additive(q, v, wq, wk, vv), mask[:, None, :])
    for training in (None, False):
        ctx, w, pos, logp = layer(
            q,
            v,
            value_mask=mask,
            return_attention_scores=True,
            return_sample=True,
            training=training,
        )
        np.testing.assert_allclose(_np(w), alpha, atol=1e-5)
        best = alpha.argmax(-1)
        np.testing.assert_array_equal(_np(pos), best)
        np.testing.assert_array_equal(_np(ctx), v[np.arange(B)[:, None], best])
        ref_logp = np.log(np.take_along_axis(alpha, best[..., None], -1)[..., 0])
        np.testing.assert_allclose(_np(logp), ref_logp, atol=1e-5)
        assert _np(pos).dtype == np.int32
    # The weights are the same distribution in training.
    _, w_train = layer(q, v, value_mask=mask, return_attention_scores=True, training=True)
    np.testing.assert_allclose(_np(w_train), alpha, atol=1e-5)


def test_sample_frequencies_match_the_weights_and_masked_never_drawn():
    # One example tiled N times; "dot" score so alpha = softmax(q . k) in NumPy.
    n = 20000
    q = np.array([[0.9, -0.3, 0.4]], "float32")
    k = np.array(
        [[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [5.0, 5.0, 5.0], [-1.0, 0.5, 0.0]]],
        "float32",
    )
    mask = np.array([[True, True, True, False, True]])  # position 3 would win if unmasked
    alpha = _np_softmax((k[0] @ q[0])[None], mask)[0]
    layer = HardAttention(score="dot", seed=11)
    ctx, pos, logp = layer(
        np.repeat(q, n, 0),
        np.repeat(k, n, 0),
        value_mask=np.repeat(mask, n, 0),
        return_sample=True,
        training=True,
    )
    pos, ctx, logp = _np(pos), _np(ctx), _np(logp)
    counts = np.bincount(pos, minlength=5)
    assert counts[3] == 0, counts
    keep = mask[0]
    expected = n * alpha[keep]
    chi2 = np.sum((counts[keep] - expected) ** 2 / expected)
    assert chi2 < _chi2_bound(keep.sum() - 1), (counts, expected, chi2)
    # The context is exactly the row of value at the drawn position.
    np.testing.assert_array_equal(ctx, k[0][pos])
    np.testing.assert_allclose(logp, np.log(alpha[pos]), atol=1e-5)


def test_seeded_reproducibility():
    q, v = _data(3)
    q = np.repeat(q, 20, 0)
    v = np.repeat(v, 20, 0)
    a = HardAttention(score="general", seed=7)
    b = HardAttention(score="general", seed=7)
    c = HardAttention(score="general", seed=8)
    a.build(q.shape, v.shape)
    for layer in (b, c):
        layer.build(q.shape, v.shape)
        layer.set_weights(a.get_weights())
    # Flat-ish weights so every position has real probability.
    pa1 = _np(a(q, v, return_sample=True, training=True)[1])
    pb1 = _np(b(q, v, return_sample=True, training=True)[1])
    pc1 = _np(c(q, v, return_sample=True, training=True)[1])
    np.testing.assert_array_equal(pa1, pb1)
    assert np.any(pa1 != pc1)
    pa2 = _np(a(q, v, return_sample=True, training=True)[1])
    pb2 = _np(b(q, v, return_sample=True, training=True)[1])
    np.testing.assert_array_equal(pa2, pb2)
    assert np.any(pa1 != pa2), "the seed generator did not advance"


@pytest.mark.parametrize("soft", [0.0, 1.0])
def test_fully_masked_rows_and_masked_queries(soft):
    q, v = _data(4)
    mask = np.zeros((B, TV), bool)
    mask[0, :3] = True
    mask[2, 4] = True
    qmask = np.ones((B, TQ), bool)
    qmask[0, 1] = False
    layer = HardAttention(units=U, seed=1)
    for training in (False, True):
        ctx, w, pos, logp = layer(
            q,
            v,
            value_mask=mask,
            query_mask=qmask,
            return_attention_scores=True,
            return_sample=True,
            training=training,
            soft_mix_probability=soft,
        )
        ctx, w, pos, logp = _np(ctx), _np(w), _np(pos), _np(logp)
        for x in (ctx, w, logp):
            assert np.all(np.isfinite(x))
        assert np.all(ctx[1] == 0) and np.all(w[1] == 0)
        assert np.all(pos[1] == 0) and np.all(logp[1] == 0)
        # example 2 has one valid position: it is always chosen, log prob 0.
        assert np.all(pos[2] == 4) and np.allclose(logp[2], 0.0, atol=1e-6)
        np.testing.assert_allclose(ctx[2], np.repeat(v[2, 4][None], TQ, 0), atol=1e-6)
        assert np.all(pos[0][qmask[0]] < 3)
        assert np.all(ctx[0, 1] == 0) and pos[0, 1] == 0 and logp[0, 1] == 0
        np.testing.assert_allclose(w[0].sum(-1), 1.0, rtol=1e-5)


def test_soft_mix_gives_the_expected_context():
    q, v = _data(5)
    layer = HardAttention(units=U, seed=2)
    ctx, w = layer(q, v, return_attention_scores=True, training=True, soft_mix_probability=1.0)
    np.testing.assert_allclose(_np(ctx), _np(w) @ v, atol=1e-5)
    # At inference the soft mix never applies: a row of value.
    ctx = _np(layer(q, v, training=False, soft_mix_probability=1.0))
    rows = [np.any(np.all(np.abs(v[b] - ctx[b, t]) == 0, -1)) for b in range(B) for t in range(TQ)]
    assert all(rows)


def test_single_step_query_shapes():
    q, v = _data(6)
    layer = HardAttention(units=U, seed=0)
    ctx, w, pos, logp = layer(
        q[:, 0], v, return_attention_scores=True, return_sample=True, training=True
    )
    assert [tuple(x.shape) for x in (ctx, w, pos, logp)] == [(B, DV), (B, TV), (B,), (B,)]
    np.testing.assert_array_equal(_np(ctx), v[np.arange(B), _np(pos)])


def test_update_baseline_moving_average():
    layer = HardAttention(baseline_decay=0.8)
    layer.build((B, DQ), (B, TV, DV))
    b = 0.0
    for reward in ([1.0, 3.0], [-2.0, -6.0, -1.0]):
        b = 0.8 * b + 0.2 * np.mean(reward)
        got = _np(layer.update_baseline(np.array(reward, "float32")))
        np.testing.assert_allclose(got, b, rtol=1e-6)
        np.testing.assert_allclose(_np(layer.baseline), b, rtol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="score"):
        HardAttention(score="cosine")
    with pytest.raises(ValueError, match="baseline_decay"):
        HardAttention(baseline_decay=1.0)
    with pytest.raises(ValueError, match="seed"):
        HardAttention(seed="a")
    with pytest.raises(ValueError, match="units"):
        HardAttention(units=0)
    q, v = _data()
    layer = HardAttention(seed=0)
    with pytest.raises(ValueError, match="soft_mix_probability"):
        layer(q, v, training=True, soft_mix_probability=1.5)
    with pytest.raises(ValueError, match="value_mask"):
        layer(q, v, value_mask=np.ones((B, TV + 1), bool))
    with pytest.raises(ValueError, match="soft_mix_probability"):
        HardAttentionModel(soft_mix_probability=-0.1)
    with pytest.raises(ValueError, match="entropy_weight"):
        HardAttentionModel(entropy_weight=-1.0)


# ---------------------------------------------------------- gradient check
def test_surrogate_gradient_matches_exact_gradient_by_enumeration():
    """Mean of the REINFORCE surrogate's gradient over many samples vs the exact one.

    Objective J(W) = mean_b sum_s alpha_bs(W) c_bs + lam * mean_b H(alpha_b), with
    the "general" score e_bs = k_bs W q_b, written out in NumPy by enumerating
    every source position. The surrogate (drawn through the layer, with a
    baseline) is to be minimised, so its gradient must estimate -dJ/dW.
    Tolerance: 6 standard errors of the Monte-Carlo mean, element-wise, the
    standard error computed exactly from the per-sample variance (by
    enumeration), plus 1e-5 for float32 round-off.
    """
    distinct, copies, tv, dq, dk = 3, 20000, 4, 3, 4
    r = np.random.RandomState(0)
    q0 = r.normal(size=(distinct, dq)).astype("float32")
    k0 = r.normal(size=(distinct, tv, dk)).astype("float32")
    c0 = r.normal(size=(distinct, tv)).astype("float32") * 2.0 + 1.0
    m0 = np.ones((distinct, tv), bool)
    m0[2, 1] = False
    W = (r.normal(size=(dk, dq)) * 0.7).astype("float32")
    baseline, lam = 0.4, 0.3
    n = distinct * copies
    q, k, c, m = (np.repeat(x, copies, 0) for x in (q0, k0, c0, m0))

    # Exact gradient of J, by enumeration.
    e = np.einsum("dtk,kq,dq->dt", k0, W, q0)
    a = _np_softmax(e, m0)
    loga = np.log(np.where(m0, a, 1.0))
    H = -np.sum(a * loga, -1)
    d_e = a * (c0 - np.sum(a * c0, -1, keepdims=True)) - lam * a * (loga + H[:, None])
    d_e = np.where(m0, d_e, 0.0) * copies / n
    exact = np.einsum("dt,dtk,dq->kq", d_e, k0, q0)
    # Per-sample variance of the score-function term (the entropy term is exact).
    kbar = np.einsum("dt,dtk->dk", a, k0)
    g = (c0 - baseline)[:, :, None, None] * np.einsum("dtk,dq->dtkq", k0 - kbar[:, None], q0)
    mean_g = np.einsum("dt,dtkq->dkq", a, g)
    var_g = np.einsum("dt,dtkq->dkq", a, g**2) - mean_g**2
    stderr = np.sqrt(np.sum(var_g, 0) * copies) / n

    layer = HardAttention(score="general", seed=5)
    layer.build((n, dq), (n, tv, dk))
    layer.set_weights([W, np.float32(0.0)])
    layer.record_samples = True
    c_t = ops.convert_to_tensor(c)

    def surrogate(outputs):
        _, pos, logp = outputs
        log_prob, entropy = layer.pop_sample_records()[-1]
        reward = ops.squeeze(ops.take_along_axis(c_t, ops.expand_dims(pos, -1), axis=-1), -1)
        return losses.reinforce_surrogate(reward, log_prob, baseline, entropy, lam)

    (grad,) = _grad_of_trainable(
        layer, surrogate, (q, k), {"value_mask": m, "return_sample": True, "training": True}
    )
    assert np.max(6 * stderr) < 0.3 * np.max(np.abs(exact)), "test too noisy to mean anything"
    np.testing.assert_array_less(np.abs(grad + exact), 6 * stderr + 1e-5)


# ------------------------------------------------------ training with fit
def _pointer_task(n, tv=6, vocab=5, seed=0):
    """The answer is the token at the one marked source position."""
    r = np.random.RandomState(seed)
    tokens = r.randint(0, vocab, size=(n, tv))
    where = r.randint(0, tv, size=n)
    value = np.zeros((n, tv, vocab + 1), "float32")
    value[np.arange(n)[:, None], np.arange(tv)[None], tokens] = 1.0
    value[np.arange(n), where, vocab] = 1.0
    query = np.ones((n, 1), "float32")
    return query, value, tokens[np.arange(n), where], where


def _pointer_model(tv=6, vocab=5, **model_kwargs):
    query = keras.Input((1,), name="query")
    value = keras.Input((tv, vocab + 1), name="value")
    context = HardAttention(units=8, seed=0, name="hard")(query, value)
    probs = keras.layers.Dense(vocab, activation="softmax", name="out")(context)
    return HardAttentionModel([query, value], probs, **model_kwargs)


def test_fit_learns_the_pointer_task_with_hard_attention_alone():
    # soft_mix_probability=0: every context is a sampled row of value, so the
    # score weights learn from the REINFORCE term only.
    q, v, y, where = _pointer_task(1024)  # 3 epochs of 32 steps
    model = _pointer_model(soft_mix_probability=0.0, entropy_weight=0.01)
    model.compile(
        keras.optimizers.Adam(0.05),
        "sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=True,
    )
    model.fit([q, v], y, epochs=3, batch_size=32, verbose=0)
    tq, tv_, ty, twhere = _pointer_task(500, seed=1)
    probs = _np(model.predict([tq, tv_], verbose=0))
    accuracy = np.mean(probs.argmax(-1) == ty)
    assert accuracy >= 0.95, accuracy
    _, weights = model.get_layer("hard")(tq, tv_, return_attention_scores=True)
    assert np.mean(_np(weights).argmax(-1) == twhere) >= 0.95
    # The baseline followed the rewards (log-likelihoods are <= 0).
    b = float(_np(model.get_layer("hard").baseline))
    assert -2.0 < b < 0.0, b
    # evaluate adds no REINFORCE term: its loss is the plain cross-entropy.
    loss = model.evaluate([tq, tv_], ty, verbose=0, return_dict=True)["loss"]
    ce = -np.mean(np.log(probs[np.arange(len(ty)), ty]))
    np.testing.assert_allclose(loss, ce, rtol=1e-4, atol=1e-5)
    # .keras round trip keeps the training arguments and the outputs.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hard.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    assert isinstance(loaded, HardAttentionModel) and type(loaded) is type(model)
    assert (loaded.soft_mix_probability, loaded.entropy_weight) == (0.0, 0.01)
    np.testing.assert_allclose(_np(loaded.predict([tq, tv_], verbose=0)), probs, atol=1e-6)


def test_compute_loss_adds_the_reinforce_term_and_moves_the_baseline():
    q, v, y, _ = _pointer_task(16, seed=3)
    model = _pointer_model(reinforce_weight=0.5, soft_mix_probability=0.0, entropy_weight=0.2)
    model.compile("sgd", "sparse_categorical_crossentropy")
    layer = model.get_layer("hard")
    layer.baseline.assign(-0.7)
    probs = model([q, v], training=True)
    p = _np(probs)
    reward = np.log(p[np.arange(len(y)), y])
    ((log_prob, entropy),) = layer._sample_records  # what compute_loss will use
    lp, ent = _np(log_prob)[:, 0], _np(entropy)[:, 0]
    alpha = _np(layer(q[:, None], v, return_attention_scores=True)[1])[:, 0]
    np.testing.assert_allclose(ent, -np.sum(alpha * np.log(alpha), -1), rtol=1e-4, atol=1e-6)
    assert np.all(lp < 0) and np.all(lp >= np.log(alpha.min(-1)) - 1e-5)
    # The value of the term compute_loss adds (its gradient is this term's).
    samples = [(layer, log_prob, entropy)]
    term = _np(model.reinforce_loss(ops.convert_to_tensor(reward), samples))
    ref = -np.mean(0.5 * (reward - (-0.7)) * lp + 0.2 * ent)
    np.testing.assert_allclose(term, ref, rtol=1e-5, atol=1e-6)
    b1 = 0.9 * -0.7 + 0.1 * reward.mean()
    np.testing.assert_allclose(_np(layer.baseline), b1, rtol=1e-5)
    # compute_loss: the reported value is the task loss, the records are
    # consumed and the baseline moves once more.
    loss = _np(model.compute_loss(x=[q, v], y=y, y_pred=probs, training=True))
    np.testing.assert_allclose(loss, -np.mean(reward), rtol=1e-5)
    np.testing.assert_allclose(_np(layer.baseline), 0.9 * b1 + 0.1 * reward.mean(), rtol=1e-5)
    assert layer._sample_records == []
    # A fresh forward pass clears stale records; no training, no records.
    model([q, v], training=True)
    model([q, v], training=True)
    assert len(layer._sample_records) == 1
    model([q, v])
    assert layer._sample_records == []


def test_normalize_reward_whitens_the_reward_in_the_reinforce_term():
    q, v, y, _ = _pointer_task(16, seed=4)
    model = _pointer_model(reinforce_weight=0.5, soft_mix_probability=0.0, normalize_reward=True)
    model.compile("sgd", "sparse_categorical_crossentropy")
    layer = model.get_layer("hard")
    layer.baseline.assign(-0.7)  # not used by the term when normalising, still moved
    probs = model([q, v], training=True)
    p = _np(probs)
    reward = np.log(p[np.arange(len(y)), y])
    ((log_prob, entropy),) = layer._sample_records
    lp = _np(log_prob)[:, 0]
    term = _np(model.reinforce_loss(ops.convert_to_tensor(reward), [(layer, log_prob, entropy)]))
    advantage = (reward - reward.mean()) / (reward.std() + 1e-6)
    np.testing.assert_allclose(term, -np.mean(0.5 * advantage * lp), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(_np(layer.baseline), 0.9 * -0.7 + 0.1 * reward.mean(), rtol=1e-5)
    assert model.get_config()["normalize_reward"] is True
    with pytest.raises(ValueError, match="normalize_reward"):
        _pointer_model(normalize_reward=1)


# ------------------------------------------------------------ masks
@pytest.mark.parametrize(
    "score, training, soft",
    [("general", False, 0.0), ("general", True, 0.0), ("additive", True, 0.5)],
)
def test_masked_memory_positions_never_matter(score, training, soft):
    """Padding holding 300 made `fit` NaN with the general score (exp overflowed at masked
    entries, and the gradient through `where` turned 0 * inf into NaN); NaN, inf and 1e30
    must not matter either: outputs, log-probabilities and every gradient stay the same."""
    q, v = _data(1, dq=DV if score == "general" else DQ)
    mask = np.ones((B, TV), bool)
    mask[0, 3:] = False
    mask[1, 0] = False
    mask[2, :] = False

    def make():
        layer = HardAttention(score, seed=3)
        layer.build(q.shape, v.shape)
        r = np.random.RandomState(2)
        layer.set_weights([r.normal(size=w.shape).astype("float32") for w in layer.get_weights()])
        return layer

    call = {
        "value_mask": mask,
        "return_attention_scores": True,
        "return_sample": True,
        "training": training,
        "soft_mix_probability": soft,
    }
    check_padding_is_inert(
        make, {"query": q, "value": v}, {"value": np.broadcast_to(~mask[:, :, None], v.shape)}, call
    )


def test_dropout_is_not_an_argument_of_hard_attention():
    with pytest.raises(
        ValueError, match=r"`dropout` is not an argument of HardAttention.*dropout=0\.5"
    ):
        HardAttention(dropout=0.5)
