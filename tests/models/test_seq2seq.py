import keras
import numpy as np
import pytest

from keras_attn.layers import HardAttention, LuongAttention
from keras_attn.models import (
    MaskedSequenceAccuracy,
    MaskedSequenceLoss,
    RNNSeq2Seq,
    teacher_forcing,
)
from tests.models.helpers import END, START, log_softmax, run_model_checklist

B, S, T, SV, TV = 3, 7, 5, 12, 10


def _data(seed=0, batch=B):
    r = np.random.default_rng(seed)
    source = r.integers(4, SV, (batch, S)).astype("int32")
    source[0, 4:] = 0  # a padded source
    target = r.integers(4, TV, (batch, T + 1)).astype("int32")
    target[:, 0] = START
    target[1, 3] = END
    target[1, 4:] = 0  # a short target
    target[0, T] = END
    target[2, T] = END
    target_in, target_out = (np.asarray(a) for a in teacher_forcing(target))
    return {"source": source, "target_in": target_in}, target_out


VARIANTS = {
    "bahdanau": dict(attention="bahdanau"),
    "luong-general-global": dict(attention="luong", score="general", alignment="global"),
    "luong-dot-local-m-gru": dict(
        attention="luong", score="dot", alignment="local-m", window=2, cell="gru"
    ),
    "luong-concat-local-p": dict(attention="luong", score="concat", alignment="local-p", window=2),
    "hard": dict(attention="hard", seed=3),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_rnn_checklist(name):
    model = RNNSeq2Seq(SV, TV, embedding_dim=8, units=8, **VARIANTS[name])
    x, y = _data()
    # The hard model's fit runs in graph mode: REINFORCE samples must leave the decoder loop.
    run_model_checklist(model, x, y, fit_eagerly=name != "hard", normalized="local-p" not in name)
    if name == "hard":
        assert float(model.attention_layer.baseline) != 0.0  # REINFORCE ran inside fit


def test_layers_match_arguments():
    m = RNNSeq2Seq(
        SV,
        TV,
        embedding_dim=8,
        units=8,
        attention="luong",
        score="concat",
        alignment="local-p",
        window=3,
    )
    assert isinstance(m.attention_layer, LuongAttention)
    assert (
        m.attention_layer.score_name,
        m.attention_layer.alignment,
        m.attention_layer.window,
    ) == ("concat", "local-p", 3)
    assert m.decoder_cell.style == "luong" and m.decoder_cell.input_feeding
    h = RNNSeq2Seq(SV, TV, embedding_dim=8, units=8, attention="hard", score="dot")
    assert isinstance(h.attention_layer, HardAttention) and h.attention_layer.score_name == "dot"
    assert h.decoder_cell.style == "bahdanau"


def test_source_padding_is_masked():
    model = RNNSeq2Seq(
        SV, TV, embedding_dim=8, units=8, attention="luong", alignment="local-p", window=2
    )
    x, _ = _data()
    padded = dict(x, source=np.pad(x["source"], ((0, 0), (0, 3))))
    np.testing.assert_allclose(np.asarray(model(padded)), np.asarray(model(x)), atol=1e-5)


def test_hard_records_masked_samples():
    model = RNNSeq2Seq(
        SV, TV, embedding_dim=8, units=8, attention="hard", seed=0, soft_mix_probability=0.0
    )
    x, _ = _data()
    model(x, training=True)
    ((log_prob, entropy),) = model.attention_layer.pop_sample_records()
    log_prob, entropy = np.asarray(log_prob), np.asarray(entropy)
    assert log_prob.shape == entropy.shape == (B, T)
    real = x["target_in"] != 0
    assert np.all(log_prob[~real] == 0) and np.all(entropy[~real] == 0)
    assert np.all(log_prob[real] < 0) and np.all(entropy[real] > 0)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(attention="additive"),
        dict(cell="rnn"),
        dict(attention="bahdanau", score="dot"),
        dict(attention="luong", score="additive"),
        dict(attention="bahdanau", alignment="local-m"),
        dict(units=0),
        dict(window=0, attention="luong"),
    ],
)
def test_bad_arguments(kwargs):
    base = dict(embedding_dim=8, units=8)
    base.update(kwargs)
    with pytest.raises(ValueError, match="Received"):
        RNNSeq2Seq(SV, TV, **base)


def test_bad_inputs():
    model = RNNSeq2Seq(SV, TV, embedding_dim=8, units=8)
    x, _ = _data()
    with pytest.raises(ValueError, match="target_in"):
        model({"source": x["source"]})


def test_teacher_forcing_split():
    target = np.array([[1, 5, 6, 2, 0], [1, 7, 2, 0, 0]], "int32")
    t_in, t_out = (np.asarray(a) for a in teacher_forcing(target))
    np.testing.assert_array_equal(t_in, [[1, 5, 6, 0], [1, 7, 0, 0]])
    np.testing.assert_array_equal(t_out, [[5, 6, 2, 0], [7, 2, 0, 0]])


def test_masked_loss_and_accuracy_against_numpy():
    r = np.random.default_rng(5)
    y = np.array([[4, 5, 2, 0], [6, 2, 0, 0]], "int32")
    logits = r.normal(size=(2, 4, 8)).astype("float32")
    real = y != 0
    ll = log_softmax(logits.astype("float64"))
    nll = -np.take_along_axis(ll, y[..., None], -1)[..., 0]
    expected = nll[real].mean()
    np.testing.assert_allclose(float(MaskedSequenceLoss()(y, logits)), expected, rtol=1e-5)
    metric = MaskedSequenceAccuracy()
    metric.update_state(y, logits)
    hits = (logits.argmax(-1) == y)[real]
    np.testing.assert_allclose(float(metric.result()), hits.mean(), rtol=1e-6)
    restored = MaskedSequenceLoss.from_config(MaskedSequenceLoss().get_config())
    np.testing.assert_allclose(float(restored(y, logits)), expected, rtol=1e-5)


def _reverse_data(n, seed, length=4, vocab=8):
    r = np.random.default_rng(seed)
    source = r.integers(4, vocab, (n, length)).astype("int32")
    target = np.concatenate(
        [np.full((n, 1), START), source[:, ::-1], np.full((n, 1), END)], axis=1
    ).astype("int32")
    t_in, t_out = (np.asarray(a) for a in teacher_forcing(target))
    return {"source": source, "target_in": t_in}, t_out


def test_bahdanau_learns_to_reverse():
    """Wiring check: a tiny Bahdanau model learns to reverse 4 symbols (chance is 1/4 per token)."""
    x, y = _reverse_data(512, seed=0)
    vx, vy = _reverse_data(128, seed=1)
    model = RNNSeq2Seq(8, 8, embedding_dim=8, units=16, attention="bahdanau")
    model.compile(
        keras.optimizers.Adam(0.02),
        MaskedSequenceLoss(),
        metrics=[MaskedSequenceAccuracy()],
        jit_compile=False,
    )
    model.fit(x, y, batch_size=64, epochs=8, verbose=0)
    _, accuracy = model.evaluate(vx, vy, batch_size=128, verbose=0)
    assert accuracy > 0.95  # a decoder that ignores the source cannot get near this


def test_functional_hard_attention_model_leaves_subclassed_models_working():
    """Keras rewrites a Model subclass's bases when it is used functionally; HardAttentionModel
    must not be rewritten, or RNNSeq2Seq (its subclass) breaks for the rest of the process."""
    from keras_attn.layers import HardAttention
    from keras_attn.models import HardAttentionModel

    q, v = keras.Input((1,)), keras.Input((4, 3))
    functional = HardAttentionModel([q, v], keras.layers.Dense(2)(HardAttention(units=4)(q, v)))
    assert isinstance(functional, HardAttentionModel)
    assert HardAttentionModel.__bases__ == (keras.Model,)
    model = RNNSeq2Seq(8, 8, embedding_dim=4, units=4)
    x, _ = _reverse_data(2, seed=0)
    assert tuple(model(x).shape) == (2, 5, 8)


@pytest.mark.parametrize("model_class", ["RNNSeq2Seq", "ShowAttendTell"])
def test_hard_attention_training_arguments_are_handed_on_from_one_table(model_class):
    # One table: HardAttentionModel's constructor. The models with hard attention name their own
    # arguments and show those (help(), inspect.signature) from that table; each reaches the
    # config and back.
    import inspect

    from keras_attn import models

    model_class = getattr(models, model_class)
    sizes = (12, 12) if model_class is RNNSeq2Seq else (12,)
    kinds = inspect.Parameter
    table = inspect.signature(models.HardAttentionModel.__init__).parameters
    table = {n: p.default for n, p in table.items() if p.kind == kinds.KEYWORD_ONLY}
    assert set(table) == {
        "reinforce_weight",
        "entropy_weight",
        "soft_mix_probability",
        "normalize_reward",
    }
    shown = inspect.signature(model_class).parameters
    assert {n: shown[n].default for n in table} == table
    assert all(shown[n].kind == kinds.KEYWORD_ONLY for n in table)
    given = dict(
        reinforce_weight=0.5, entropy_weight=0.1, soft_mix_probability=0.0, normalize_reward=True
    )
    config = model_class(*sizes, attention="hard", **given).get_config()
    assert {n: config[n] for n in given} == given
    clone = model_class.from_config(config)
    assert {n: getattr(clone, n) for n in given} == given
    with pytest.raises(ValueError, match="reinforce_weight"):
        model_class(*sizes, reinforce_weight=-1.0)
