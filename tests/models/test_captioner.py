import numpy as np
import pytest

from keras_attn.models import ShowAttendTell
from tests.models.helpers import END, START, run_model_checklist

B, T, V = 3, 5, 14


def _data(seed=0):
    r = np.random.default_rng(seed)
    images = r.random((B, 8, 16, 1)).astype("float32")
    target_in = r.integers(4, V, (B, T)).astype("int32")
    target_in[:, 0] = START
    target_in[1, 3:] = 0
    target_out = r.integers(4, V, (B, T)).astype("int32")
    target_out[1, 2] = END
    target_out[1, 3:] = 0
    return {"image": images, "target_in": target_in}, target_out


def _model(attention, **kwargs):
    return ShowAttendTell(
        V, embedding_dim=8, units=8, filters=(4, 6), attention=attention, seed=3, **kwargs
    )


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_captioner_checklist(attention):
    x, y = _data()
    model = _model(attention)
    # Hard attention's fit runs in graph mode: REINFORCE samples must leave the decoder loop.
    run_model_checklist(model, x, y, source_key="image", fit_eagerly=attention == "soft")
    grid = model.encode(x["image"])["annotations"]
    assert tuple(grid.shape) == (B, 2 * 4, 6)  # 8x16 pooled twice by 2 -> 2x4 cells, D = 6
    if attention == "hard":
        assert float(model.attention_layer.baseline) != 0.0


def test_soft_adds_the_doubly_stochastic_penalty():
    x, _ = _data()
    model = _model("soft", penalty_weight=0.5)
    model(x, training=True)
    (penalty,) = model.losses
    # The alphas of every step, from the decoding interface, and Xu et al. eq. 14 in NumPy.
    state = model.initial_decode_state(model.encode(x["image"]))
    alphas = []
    for t in range(T):
        _, state, alpha = model.decode_step(x["target_in"][:, t], state, t)
        alphas.append(np.asarray(alpha))
    alphas = np.stack(alphas, 1) * (x["target_in"] != 0)[..., None]
    expected = 0.5 * np.mean(np.sum((1.0 - alphas.sum(1)) ** 2, axis=-1))
    np.testing.assert_allclose(float(penalty), expected, rtol=1e-5)
    model(x)  # inference adds nothing
    assert not model.losses


def test_soft_gate_scales_the_context():
    x, _ = _data()
    model = _model("soft")
    model(x)
    state = model.initial_decode_state(model.encode(x["image"]))
    tokens = x["target_in"][:, 0]
    logits_open, _, _ = model.decode_step(tokens, state, 0)
    gate_bias = model.gate.bias
    gate_bias.assign(np.full((1,), -50.0, "float32"))  # beta -> 0: the context is switched off
    logits_shut, _, _ = model.decode_step(tokens, state, 0)
    # beta gates the context fed to the LSTM: shutting it must change the step's logits.
    assert not np.allclose(np.asarray(logits_open), np.asarray(logits_shut))


def test_hard_records_masked_samples():
    x, _ = _data()
    model = _model("hard", soft_mix_probability=0.0)
    model(x, training=True)
    ((log_prob, entropy),) = model.attention_layer.pop_sample_records()
    log_prob = np.asarray(log_prob)
    real = x["target_in"] != 0
    assert log_prob.shape == (B, T)
    assert np.all(log_prob[~real] == 0) and np.all(log_prob[real] <= 0)
    assert np.all(np.asarray(entropy)[real] > 0)


@pytest.mark.parametrize(
    "kwargs",
    [dict(attention="local"), dict(filters=()), dict(penalty_weight=-1.0), dict(pool=0)],
)
def test_bad_arguments(kwargs):
    base = dict(embedding_dim=8, units=8)
    base.update(kwargs)
    with pytest.raises(ValueError, match="Received"):
        ShowAttendTell(V, **base)
