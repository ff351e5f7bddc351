import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import (
    AttentionDecoder,
    AttentionRNNCell,
    BahdanauAttention,
    HardAttention,
    LuongAttention,
)
from tests.layers.checklist import check_padding_is_inert, run_layer_checklist

B, T, S, DIN, DV, H, U, A = 3, 4, 5, 3, 6, 5, 4, 7


def _np(x):
    return ops.convert_to_numpy(x)


def _data(seed=0):
    r = np.random.RandomState(seed)
    x = r.normal(size=(B, T, DIN)).astype("float32")
    memory = r.normal(size=(B, S, DV)).astype("float32")
    mask = np.ones((B, S), bool)
    mask[1, 3:] = False
    return x, memory, mask


def _rnn_cell(kind, units=H):
    return {
        "lstm": keras.layers.LSTMCell,
        "gru": keras.layers.GRUCell,
        "simple": keras.layers.SimpleRNNCell,
    }[kind](units)


def _cell(style, kind="lstm", attention=None, **kwargs):
    if attention is None:
        attention = BahdanauAttention(U)
    return AttentionRNNCell(_rnn_cell(kind), attention, style=style, **kwargs)


def _randomize(layer, seed):
    r = np.random.RandomState(seed)
    layer.set_weights(
        [r.normal(scale=0.5, size=w.shape).astype("float32") for w in layer.get_weights()]
    )


# ------------------------------------------------------------------ checklist
# The checklist's jit `fit` runs with LuongAttention's dot/general scores.
def test_checklist_luong_style_lstm():
    x, memory, _ = _data()
    cell = AttentionRNNCell(
        _rnn_cell("lstm"), LuongAttention(score="general"), style="luong", attention_dim=A
    )
    run_layer_checklist(
        AttentionDecoder,
        {"cell": keras.saving.serialize_keras_object(cell)},
        {"inputs": x, "memory": memory},
        expected_output_shapes=[(B, T, A)],
        # LSTM kernel, recurrent kernel, bias; Luong's W; W_c
        expected_num_trainable_weights=5,
    )


def test_checklist_bahdanau_style_gru_with_attention_and_states():
    x, memory, _ = _data()
    cell = AttentionRNNCell(
        _rnn_cell("gru"), LuongAttention(score="dot"), style="bahdanau", output_context=True
    )
    memory = memory[..., :H]  # "dot" needs Dq == Dk
    run_layer_checklist(
        AttentionDecoder,
        {
            "cell": keras.saving.serialize_keras_object(cell),
            "return_attention": True,
            "return_state": True,
        },
        {"inputs": x, "memory": memory},
        expected_output_shapes=[(B, T, H + H), (B, T, S), (B, H)],
        expected_num_trainable_weights=3,
    )


def test_dropout_inside_the_loop_under_jit_fit():
    x, memory, _ = _data(10)
    cell = AttentionRNNCell(
        keras.layers.LSTMCell(H, dropout=0.3, recurrent_dropout=0.3),
        LuongAttention(score="general", dropout=0.5),
        style="luong",
    )
    decoder = AttentionDecoder(cell)
    xi, mi = keras.Input((None, DIN)), keras.Input((None, DV))
    model = keras.Model([xi, mi], decoder(xi, mi))
    model.compile(optimizer="adam", loss="mse", jit_compile=True)
    history = model.fit([x, memory], np.zeros((B, T, H), "float32"), epochs=1, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    inference = _np(decoder(x, memory))
    train = _np(decoder(x, memory, training=True))
    assert np.all(np.isfinite(train)) and not np.allclose(train, inference)


@pytest.mark.parametrize(
    "attention",
    [
        lambda: BahdanauAttention(U, normalize=True),
        lambda: LuongAttention(score="concat", alignment="local-p", window=1),
        lambda: HardAttention(units=U, seed=3),
    ],
    ids=["bahdanau-normalized", "concat-local-p", "hard"],
)
def test_every_attention_trains_under_jit_fit_inside_the_loop(attention):
    # XLA must compile the gradient of the whole decoder loop: no op in the
    # attention may need run-time shape values there (tensordot, broadcast_to).
    x, memory, mask = _data(11)
    decoder = AttentionDecoder(_cell("luong", "gru", attention=attention()))
    xi, mi = keras.Input((T, DIN)), keras.Input((S, DV))
    mki = keras.Input((S,), dtype="bool")
    model = keras.Model([xi, mi, mki], decoder(xi, mi, memory_mask=mki))
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse", jit_compile=True)
    before = [_np(w) for w in model.trainable_weights]
    history = model.fit([x, memory, mask], np.zeros((B, T, H), "float32"), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    after = [_np(w) for w in model.trainable_weights]
    assert any(not np.allclose(b, a) for b, a in zip(before, after))


# ------------------------------------------------------- stepping by hand
@pytest.mark.parametrize(
    "style, kind, input_feeding",
    [("bahdanau", "lstm", True), ("luong", "lstm", True), ("luong", "gru", False)],
)
def test_stepping_by_hand_equals_the_whole_sequence(style, kind, input_feeding):
    x, memory, mask = _data(1)
    cell = _cell(style, kind, input_feeding=input_feeding)
    decoder = AttentionDecoder(cell, return_attention=True, return_state=True)
    cell.build((B, DIN), (B, S, DV))
    _randomize(cell, 3)  # non-trivial weights
    r = np.random.RandomState(2)
    start = [r.normal(size=(B, n)).astype("float32") for n in cell.state_size]
    outs, weights, *final = decoder(x, memory, memory_mask=mask, initial_state=start)

    keys = cell.project_memory(memory)
    states = list(start)
    assert len(states) == len(cell.state_size) == len(final)
    for t in range(T):
        out, states, w = cell(
            x[:, t], states, memory, memory_mask=mask, projected_key=keys, position=t
        )
        np.testing.assert_allclose(_np(out), _np(outs)[:, t], atol=1e-5)
        np.testing.assert_allclose(_np(w), _np(weights)[:, t], atol=1e-5)
    for got, want in zip(states, final):
        np.testing.assert_allclose(_np(got), _np(want), atol=1e-5)
    # Without the precomputed keys the step gives the same answer.
    out2, _, _ = cell(x[:, 0], start, memory, memory_mask=mask)
    np.testing.assert_allclose(_np(out2), _np(outs)[:, 0], atol=1e-5)


def test_state_layout_and_initial_state():
    lstm_luong = _cell("luong", "lstm", attention_dim=A)
    assert lstm_luong.state_size == [H, H, A]
    zeros = lstm_luong.get_initial_state(2)
    assert [tuple(z.shape) for z in zeros] == [(2, H), (2, H), (2, A)]
    assert all(np.all(_np(z) == 0) for z in zeros)
    assert _cell("luong", "gru", input_feeding=False).state_size == [H]
    assert _cell("bahdanau", "lstm").state_size == [H, H]


def test_one_dtype_policy_for_the_whole_step():
    cell = AttentionRNNCell(keras.layers.GRUCell(H, dtype="mixed_float16"), BahdanauAttention(U))
    assert cell.dtype_policy.name == "mixed_float16"
    assert cell.attention.dtype_policy.name == "mixed_float16"
    decoder = AttentionDecoder(cell)
    assert decoder.dtype_policy.name == "mixed_float16"
    decoder = AttentionDecoder(_cell("luong", "gru"), dtype="mixed_bfloat16")
    for layer in (decoder.cell, decoder.cell.cell, decoder.cell.attention):
        assert layer.dtype_policy.name == "mixed_bfloat16"
    revived = AttentionDecoder.from_config(decoder.get_config())
    assert revived.cell.cell.dtype_policy.name == "mixed_bfloat16"


# ------------------------------------------------------------ NumPy references
def _np_softmax(e, mask):
    e = np.where(mask, e, -1e30)
    x = np.where(mask, np.exp(e - e.max(-1, keepdims=True)), 0.0)
    s = x.sum(-1, keepdims=True)
    return np.divide(x, s, out=np.zeros_like(x), where=s > 0)


def _np_bahdanau(query, memory, mask, wq, wk, v):
    e = np.tanh((query @ wq)[:, None, :] + memory @ wk) @ v  # [B, S]
    a = _np_softmax(e, mask)
    return np.einsum("bs,bsd->bd", a, memory), a


def test_bahdanau_style_against_numpy():
    x, memory, mask = _data(2)
    cell = _cell("bahdanau", "simple", output_context=True)
    decoder = AttentionDecoder(cell, return_attention=True, return_state=True)
    cell.build((B, DIN), (B, S, DV))
    _randomize(cell, 4)
    outs, weights, final = decoder(x, memory, memory_mask=mask)
    kernel, recurrent, bias = [_np(w) for w in cell.cell.weights]
    wq, wk, v = [_np(w) for w in cell.attention.weights]
    assert kernel.shape == (DIN + DV, H)
    s = np.zeros((B, H), "float32")
    for t in range(T):
        c, a = _np_bahdanau(s, memory, mask, wq, wk, v)  # attend with s_{t-1}
        s = np.tanh(np.concatenate([x[:, t], c], -1) @ kernel + s @ recurrent + bias)
        np.testing.assert_allclose(_np(weights)[:, t], a, atol=1e-5)
        np.testing.assert_allclose(_np(outs)[:, t], np.concatenate([s, c], -1), atol=1e-5)
    np.testing.assert_allclose(_np(final), s, atol=1e-5)


@pytest.mark.parametrize("input_feeding", [True, False])
def test_luong_style_against_numpy(input_feeding):
    x, memory, mask = _data(3)
    cell = _cell("luong", "simple", attention_dim=A, input_feeding=input_feeding)
    decoder = AttentionDecoder(cell, return_attention=True, return_state=True)
    cell.build((B, DIN), (B, S, DV))
    _randomize(cell, 5)
    outs, weights, *final = decoder(x, memory, memory_mask=mask)
    w_c = _np(cell.attentional_kernel)
    assert w_c.shape == (DV + H, A)
    kernel, recurrent, bias = [_np(w) for w in cell.cell.weights]
    wq, wk, v = [_np(w) for w in cell.attention.weights]
    h = np.zeros((B, H), "float32")
    h_tilde = np.zeros((B, A), "float32")
    for t in range(T):
        y = np.concatenate([x[:, t], h_tilde], -1) if input_feeding else x[:, t]
        h = np.tanh(y @ kernel + h @ recurrent + bias)
        c, a = _np_bahdanau(h, memory, mask, wq, wk, v)  # attend with the new h_t
        h_tilde = np.tanh(np.concatenate([c, h], -1) @ w_c)
        np.testing.assert_allclose(_np(weights)[:, t], a, atol=1e-5)
        np.testing.assert_allclose(_np(outs)[:, t], h_tilde, atol=1e-5)
    np.testing.assert_allclose(_np(final[0]), h, atol=1e-5)
    if input_feeding:
        np.testing.assert_allclose(_np(final[1]), h_tilde, atol=1e-5)
    else:
        assert len(final) == 1


# ------------------------------------------------------------------- masks
@pytest.mark.parametrize("style, training", [("bahdanau", False), ("luong", True)])
def test_attention_weights_sum_to_one_zero_when_memory_fully_masked(style, training):
    x, memory, mask = _data(4)
    mask[2] = False  # example 2 has no memory at all
    attention = BahdanauAttention(U, dropout=0.3)  # weights are returned before dropout
    decoder = AttentionDecoder(_cell(style, "gru", attention=attention), return_attention=True)
    outs, w = decoder(x, memory, memory_mask=mask, training=training)
    outs, w = _np(outs), _np(w)
    assert w.shape == (B, T, S)
    assert np.all(np.isfinite(w)) and np.all(np.isfinite(outs))
    np.testing.assert_allclose(w[:2].sum(-1), 1.0, rtol=1e-5)
    assert np.all(w[1, :, 3:] == 0)
    assert np.all(w[2] == 0)


def test_memory_keras_mask_is_honoured():
    x, memory, _ = _data(5)
    memory[0, 2:] = 0.0
    xi = keras.Input((None, DIN))
    mi = keras.Input((None, DV))
    decoder = AttentionDecoder(_cell("bahdanau", "gru"), return_attention=True)
    _, w = decoder(xi, keras.layers.Masking(0.0)(mi))
    w = _np(keras.Model([xi, mi], w)([x, memory]))
    assert np.all(w[0, :, 2:] == 0)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("style", ["luong"])
def test_target_mask_freezes_states(style):
    x, memory, mask = _data(6)
    lengths = [4, 2, 3]
    target_mask = np.arange(T)[None, :] < np.array(lengths)[:, None]
    cell = _cell(style, "lstm")
    full = AttentionDecoder(cell, return_attention=True, return_state=True)
    outs, w, *final = full(x, memory, memory_mask=mask, mask=target_mask)
    outs, w = _np(outs), _np(w)
    last = AttentionDecoder(cell, return_sequences=False)
    last_out = _np(last(x, memory, memory_mask=mask, mask=target_mask))
    for b, n in enumerate(lengths):
        ref_outs, ref_w, *ref_final = full(
            x[b : b + 1, :n], memory[b : b + 1], memory_mask=mask[b : b + 1]
        )
        np.testing.assert_allclose(outs[b, :n], _np(ref_outs)[0], atol=1e-5)
        np.testing.assert_allclose(w[b, :n], _np(ref_w)[0], atol=1e-5)
        assert np.all(outs[b, n:] == 0) and np.all(w[b, n:] == 0)
        for got, want in zip(final, ref_final):
            np.testing.assert_allclose(_np(got)[b], _np(want)[0], atol=1e-5)
        np.testing.assert_allclose(last_out[b], _np(ref_outs)[0, n - 1], atol=1e-5)
    # The Keras mask of the target does the same as the explicit mask.
    xm = np.where(target_mask[..., None], x, 0.0).astype("float32")
    xi, mi = keras.Input((None, DIN)), keras.Input((None, DV))
    out = full(keras.layers.Masking(0.0)(xi), mi)[0]
    got = _np(keras.Model([xi, mi], out)([xm, memory]))
    ref = _np(full(xm, memory, mask=target_mask)[0])
    np.testing.assert_allclose(got, ref, atol=1e-5)


# ---------------------------------------------------------------- LuongAttention
def test_luong_style_with_luong_general_attention_by_hand():
    x, memory, mask = _data(7)
    cell = _cell("luong", "lstm", attention=LuongAttention(score="general"))
    decoder = AttentionDecoder(cell, return_attention=True)
    cell.build((B, DIN), (B, S, DV))
    _randomize(cell, 8)
    outs, weights = decoder(x, memory, memory_mask=mask)
    w_general = _np(cell.attention.weights[0])  # W [Dk, Dq]
    w_c = _np(cell.attentional_kernel)
    states = [np.zeros((B, H), "float32"), np.zeros((B, H), "float32"), np.zeros((B, H), "float32")]
    lstm = cell.cell
    for t in range(T):
        y = np.concatenate([x[:, t], states[2]], -1)
        h, (h, c) = lstm(y, states[:2])  # the wrapped cell itself, checked elsewhere by Keras
        h = _np(h)
        a = _np_softmax(np.einsum("bd,bsd->bs", h, memory @ w_general), mask)
        ctx = np.einsum("bs,bsd->bd", a, memory)
        h_tilde = np.tanh(np.concatenate([ctx, h], -1) @ w_c)
        np.testing.assert_allclose(_np(weights)[:, t], a, atol=1e-5)
        np.testing.assert_allclose(_np(outs)[:, t], h_tilde, atol=1e-5)
        states = [h, _np(c), h_tilde]


def test_step_index_is_forwarded_as_position_to_local_m():
    x, memory, _ = _data(9)
    attention = LuongAttention(score="general", alignment="local-m", window=1)
    decoder = AttentionDecoder(_cell("luong", "gru", attention=attention), return_attention=True)
    _, w = decoder(x, memory)
    w = _np(w)
    for t in range(T):
        outside = [s for s in range(S) if abs(s - t) > 1]
        assert np.all(w[:, t, outside] == 0)
        np.testing.assert_allclose(w[:, t].sum(-1), 1.0, rtol=1e-5)
    cell = decoder.cell
    keys = cell.project_memory(memory)
    states = cell.get_initial_state(B)
    for t in range(T):
        _, states, wt = cell(x[:, t], states, memory, projected_key=keys, position=t)
        np.testing.assert_allclose(_np(wt), w[:, t], atol=1e-5)


# ----------------------------------------------------------------- arguments
def test_bad_arguments():
    with pytest.raises(ValueError, match="style"):
        AttentionRNNCell(keras.layers.GRUCell(4), BahdanauAttention(4), style="bogus")
    with pytest.raises(ValueError, match="cell"):
        AttentionRNNCell(keras.layers.Dense(4), BahdanauAttention(4))
    with pytest.raises(ValueError, match="attention"):
        AttentionRNNCell(keras.layers.GRUCell(4), keras.layers.Attention())
    with pytest.raises(ValueError, match="cell"):
        AttentionRNNCell(
            keras.layers.StackedRNNCells([keras.layers.LSTMCell(4)]), BahdanauAttention(4)
        )
    with pytest.raises(ValueError, match="output_context"):
        AttentionRNNCell(
            keras.layers.GRUCell(4), BahdanauAttention(4), style="luong", output_context=True
        )
    with pytest.raises(ValueError, match="attention_dim"):
        AttentionRNNCell(keras.layers.GRUCell(4), BahdanauAttention(4), attention_dim=3)
    with pytest.raises(ValueError, match="attention_dim"):
        AttentionRNNCell(
            keras.layers.GRUCell(4), BahdanauAttention(4), style="luong", attention_dim=0
        )
    with pytest.raises(ValueError, match="input_feeding"):
        AttentionRNNCell(keras.layers.GRUCell(4), BahdanauAttention(4), input_feeding="yes")
    with pytest.raises(ValueError, match="cell"):
        AttentionDecoder(keras.layers.GRUCell(4))
    x, memory, _ = _data()
    cell = _cell("luong", "lstm")
    with pytest.raises(ValueError, match="states"):
        cell(x[:, 0], cell.get_initial_state(B)[:2], memory)
    with pytest.raises(ValueError, match="inputs"):
        AttentionDecoder(_cell("luong", "lstm"))(x[:, 0], memory)


# ------------------------------------------------------------ masks
@pytest.mark.parametrize(
    "style, attention",
    [
        ("bahdanau", lambda: BahdanauAttention(U)),
        ("luong", lambda: LuongAttention("general", "local-m", window=1)),
    ],
)
def test_padding_in_memory_and_targets_never_matters(style, attention):
    """NaN, inf, 1e30 or 300 in masked memory rows and in padded target steps reach no
    output and no gradient of the decoder."""
    x, memory, mask = _data(2)
    mask[2, 0] = False
    steps = np.ones((B, T), bool)
    steps[0, 2:] = False

    def make():
        decoder = AttentionDecoder(_cell(style, "gru", attention()), return_attention=True)
        decoder.build(x.shape, memory.shape)
        _randomize(decoder, 4)
        return decoder

    check_padding_is_inert(
        make,
        {"inputs": x, "memory": memory},
        {
            "memory": np.broadcast_to(~mask[:, :, None], memory.shape),
            "inputs": np.broadcast_to(~steps[:, :, None], x.shape),
        },
        {"memory_mask": mask, "mask": steps},
    )


def test_walk_layers_reaches_nested_lists_and_dicts_once():
    from keras_attn.layers.base import walk_layers

    inner = keras.layers.Dense(2)
    shared = keras.layers.Dense(3)
    outer = keras.layers.Layer()
    outer.blocks = [inner, {"again": shared}]
    outer.same = shared
    found = walk_layers(outer)
    assert found[0] is outer and len(found) == 3
    assert {id(x) for x in found[1:]} == {id(inner), id(shared)}
    assert outer not in walk_layers(outer, include_self=False)
