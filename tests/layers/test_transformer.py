import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import TransformerDecoderLayer, TransformerEncoderLayer
from tests.layers.checklist import check_padding_is_inert, run_layer_checklist

B, T, S, D, DE, H, F = 2, 6, 4, 8, 6, 2, 16
EPS = 1e-5
OPTIONS = dict(num_key_value_heads=1, use_gate=True, rotary_max_wavelength=50.0, sliding_window=2)


def _normal(seed, shape, scale=1.0):
    return (scale * np.random.RandomState(seed).normal(size=shape)).astype("float32")


def _np(x):
    return ops.convert_to_numpy(x)


def _randomize(layer, seed=11):
    """Random weights everywhere, LayerNorm gains/biases included."""
    r = np.random.RandomState(seed)
    layer.set_weights(
        [
            (r.normal(size=w.shape) * 0.4 + (1.0 if "gamma" in w.path else 0.0)).astype("float32")
            for w in layer.weights
        ]
    )


def _np_layer_norm(x, norm):
    gamma, beta = (_np(w) for w in norm.weights)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * gamma + beta


def _np_ffn(x, ffn):
    w1, b1, w2, b2 = (_np(w) for w in ffn.weights)
    return np.maximum(x @ w1 + b1, 0.0) @ w2 + b2


def _np_rotate(x, wavelength):
    """Rotary embedding of `x [B, T, heads, d]` at positions 0..T-1, from its formula."""
    d = x.shape[-1]
    angles = np.arange(x.shape[1])[:, None] * wavelength ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles)[None, :, None], np.sin(angles)[None, :, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def _np_attention(mha, q, v, mask):
    """Multi-head attention from its formula and the layer's weights (`mask [B, Tq, Tk]`):
    grouped key/value heads, rotary embeddings and the gate when the layer has them."""
    w = {p.path.split("/")[-2] + "/" + p.path.split("/")[-1]: _np(p) for p in mha.weights}
    qh = np.einsum("btd,dnh->btnh", q, w["query/kernel"]) + w["query/bias"]
    kh = np.einsum("bsd,dnh->bsnh", v, w["key/kernel"]) + w["key/bias"]
    vh = np.einsum("bsd,dnh->bsnh", v, w["value/kernel"]) + w["value/bias"]
    if mha.rotary_max_wavelength:
        qh, kh = (
            _np_rotate(qh, mha.rotary_max_wavelength),
            _np_rotate(kh, mha.rotary_max_wavelength),
        )
    repeat = qh.shape[2] // kh.shape[2]
    kh, vh = np.repeat(kh, repeat, axis=2), np.repeat(vh, repeat, axis=2)
    e = np.einsum("btnh,bsnh->bnts", qh, kh) / np.sqrt(qh.shape[-1])
    e = np.where(mask[:, None], e, -np.inf)
    top = np.max(np.where(mask[:, None], e, -1e30), -1, keepdims=True)
    a = np.where(mask[:, None], np.exp(e - top), 0.0)
    a = a / np.maximum(a.sum(-1, keepdims=True), 1e-30)
    ctx = np.einsum("bnts,bsnh->btnh", a, vh)
    if mha.use_gate:
        ctx = ctx / (
            1 + np.exp(-(np.einsum("btd,dnh->btnh", q, w["gate/kernel"]) + w["gate/bias"]))
        )
    out = np.tensordot(ctx, w["attention_output/kernel"], axes=[[2, 3], [0, 1]])
    return out + w["attention_output/bias"], a


def _band(t, window):
    i = np.arange(t)
    return np.abs(i[:, None] - i[None]) < window


def _key_mask(mask, tq):
    return np.broadcast_to(mask[:, None, :], (mask.shape[0], tq, mask.shape[1])).copy()


def _padding_mask(mask):
    """`[B, T, T]`: a Transformer layer's padding `mask [B, T]` in its self-attention, as
    queries and as keys (a padded row sees no key: zero context)."""
    return mask[:, :, None] & mask[:, None, :]


def _zeroed(x, mask):
    """The layer's input with its padded rows zeroed, as the layer does first."""
    return np.where(mask[..., None], x, 0.0).astype(x.dtype)


def _np_residual(x, sublayer, norm, norm_first):
    """The residual structure under test, written out in NumPy."""
    if norm_first:
        return x + sublayer(_np_layer_norm(x, norm))
    return _np_layer_norm(x + sublayer(x), norm)


# ----------------------------------------------------------------- checklist
def test_encoder_checklist():
    run_layer_checklist(
        TransformerEncoderLayer,
        {"num_heads": H, "intermediate_dim": F, "dropout": 0.1},
        {"inputs": _normal(0, (B, T, D))},
        call_kwargs={"return_attention_scores": True},
        build_shapes={"input_shape": (B, T, D)},
        expected_output_shapes=[(B, T, D), (B, H, T, T)],
        expected_num_trainable_weights=16,
    )


def test_decoder_checklist():
    run_layer_checklist(
        TransformerDecoderLayer,
        {"num_heads": H, "intermediate_dim": F, "dropout": 0.1, "norm_first": True},
        {"decoder_sequence": _normal(0, (B, T, D)), "encoder_sequence": _normal(1, (B, S, DE))},
        call_kwargs={"return_attention_scores": True},
        expected_output_shapes=[(B, T, D), (B, H, T, S)],
        expected_num_trainable_weights=26,
    )


def test_decoder_only_checklist():
    run_layer_checklist(
        TransformerDecoderLayer,
        # With every MultiHeadAttention option (the gate adds a kernel and a bias).
        {"num_heads": H, "intermediate_dim": F, "cross_attention": False, **OPTIONS},
        {"decoder_sequence": _normal(0, (B, T, D))},
        expected_output_shapes=[(B, T, D)],
        expected_num_trainable_weights=18,
        # Training and mixed precision go through the same code as above.
        run_training=False,
        run_mixed_precision=False,
    )


# ------------------------------------------------------- activation_dropout
@pytest.mark.parametrize("cls", [TransformerEncoderLayer, TransformerDecoderLayer])
def test_activation_dropout_drops_only_the_feed_forward_hidden_layer(cls):
    x, enc = _normal(30, (B, T, D)), _normal(31, (B, S, D))
    args = (x,) if cls is TransformerEncoderLayer else (x, enc)

    def make(**kwargs):
        layer = cls(H, 64, dropout=0.0, **kwargs)
        layer(*args)
        _randomize(layer)
        return layer

    # The default is the paper's placement: nothing random without `dropout`.
    layer = make()
    assert layer.activation_dropout == 0.0
    np.testing.assert_allclose(
        _np(layer(*args, training=True)), _np(layer(*args, training=False)), atol=1e-6
    )
    # With activation_dropout alone, training differs from inference, and only through the
    # FFN's hidden layer: the same layer with the feed-forward dropout switched off agrees.
    layer = make(activation_dropout=0.5)
    trained = _np(layer(*args, training=True))
    assert np.abs(trained - _np(layer(*args, training=False))).max() > 1e-3
    layer.feed_forward.dropout = 0.0
    np.testing.assert_allclose(
        _np(layer(*args, training=True)), _np(layer(*args, training=False)), atol=1e-6
    )

    config = layer.get_config()
    assert config["activation_dropout"] == 0.5
    assert cls.from_config(config).get_config() == config
    del config["activation_dropout"]  # a config saved before the argument existed
    assert cls.from_config(config).activation_dropout == 0.0
    with pytest.raises(ValueError, match="activation_dropout"):
        cls(H, F, activation_dropout=1.5)


# --------------------------------------------------------- NumPy references
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_residual_structure_against_numpy(norm_first):
    x = _normal(2, (B, T, D))
    pad = np.ones((B, T), bool)
    pad[1, 4:] = False
    layer = TransformerEncoderLayer(H, F, norm_first=norm_first)
    layer.build(x.shape)
    _randomize(layer)
    attn_mask = _padding_mask(pad)

    def attention(h):
        return _np_attention(layer.self_attention_layer, h, h, attn_mask)[0]

    x1 = _np_residual(_zeroed(x, pad), attention, layer.self_attention_layer_norm, norm_first)
    expected = _np_residual(
        x1, lambda h: _np_ffn(h, layer.feed_forward), layer.feed_forward_layer_norm, norm_first
    )
    got = _np(layer(x, padding_mask=pad))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    # Padded positions are invisible to the real ones.
    x2 = x.copy()
    x2[1, 4:] = 100.0
    np.testing.assert_allclose(
        _np(layer(x2, padding_mask=pad))[1, :4], got[1, :4], rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_residual_structure_against_numpy(norm_first):
    x = _normal(3, (B, T, D))
    enc = _normal(4, (B, S, DE))
    dec_pad = np.ones((B, T), bool)
    dec_pad[0, 5:] = False
    enc_pad = np.ones((B, S), bool)
    enc_pad[1, 2:] = False
    layer = TransformerDecoderLayer(H, F, norm_first=norm_first)
    layer.build(x.shape, enc.shape)
    _randomize(layer, seed=12)
    causal = np.tril(np.ones((T, T), bool))[None]
    self_mask = _padding_mask(dec_pad) & causal
    cross_mask = _key_mask(enc_pad, T)

    def self_attention(h):
        return _np_attention(layer.self_attention_layer, h, h, self_mask)[0]

    def cross_attention(h):
        return _np_attention(layer.cross_attention_layer, h, enc, cross_mask)[0]

    x1 = _np_residual(
        _zeroed(x, dec_pad), self_attention, layer.self_attention_layer_norm, norm_first
    )
    x2 = _np_residual(x1, cross_attention, layer.cross_attention_layer_norm, norm_first)
    expected = _np_residual(
        x2, lambda h: _np_ffn(h, layer.feed_forward), layer.feed_forward_layer_norm, norm_first
    )
    got, scores = layer(
        x,
        enc,
        decoder_padding_mask=dec_pad,
        encoder_padding_mask=enc_pad,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(_np(got), expected, rtol=1e-4, atol=1e-4)
    cross_query = _np_layer_norm(x1, layer.cross_attention_layer_norm) if norm_first else x1
    _, ref_scores = _np_attention(layer.cross_attention_layer, cross_query, enc, cross_mask)
    np.testing.assert_allclose(_np(scores), ref_scores, rtol=1e-4, atol=1e-5)
    scores = _np(scores)
    assert scores.shape == (B, H, T, S)
    np.testing.assert_allclose(scores.sum(-1), 1.0, rtol=1e-5)
    assert np.all(scores[1, :, :, 2:] == 0.0)
    # Causality: the future does not change the past.
    x_future = x.copy()
    x_future[:, 3:] += 5.0
    np.testing.assert_allclose(
        _np(layer(x_future, enc, encoder_padding_mask=enc_pad))[:, :3],
        _np(layer(x, enc, encoder_padding_mask=enc_pad))[:, :3],
        rtol=1e-4,
        atol=1e-4,
    )


def test_attention_options_reach_both_layers_against_numpy():
    # Grouped heads, gates, rotary and the window in the self-attention; the cross-attention
    # gets the heads and gates but no positions (rotary, window).
    x, enc = _normal(2, (B, T, D)), _normal(4, (B, S, DE))
    pad = np.ones((B, T), bool)
    pad[1, 4:] = False
    band = _band(T, 2)[None]
    encoder = TransformerEncoderLayer(H, F, **OPTIONS)
    encoder.build(x.shape)
    _randomize(encoder)
    norm = encoder.self_attention_layer_norm
    x1 = _np_residual(
        _zeroed(x, pad),
        lambda h: _np_attention(encoder.self_attention_layer, h, h, _padding_mask(pad) & band)[0],
        norm,
        False,
    )
    expected = _np_residual(
        x1, lambda h: _np_ffn(h, encoder.feed_forward), encoder.feed_forward_layer_norm, False
    )
    np.testing.assert_allclose(_np(encoder(x, padding_mask=pad)), expected, rtol=1e-4, atol=1e-4)
    decoder = TransformerDecoderLayer(H, F, **OPTIONS)
    decoder.build(x.shape, enc.shape)
    _randomize(decoder, seed=12)
    assert decoder.self_attention_layer._key_dense.kernel.shape == (D, 1, D // H)
    causal = np.tril(np.ones((T, T), bool))[None]
    x1 = _np_residual(
        x,
        lambda h: _np_attention(decoder.self_attention_layer, h, h, causal & band)[0],
        decoder.self_attention_layer_norm,
        False,
    )
    x2 = _np_residual(
        x1,
        lambda h: _np_attention(decoder.cross_attention_layer, h, enc, np.ones((B, T, S), bool))[0],
        decoder.cross_attention_layer_norm,
        False,
    )
    expected = _np_residual(
        x2, lambda h: _np_ffn(h, decoder.feed_forward), decoder.feed_forward_layer_norm, False
    )
    np.testing.assert_allclose(_np(decoder(x, enc)), expected, rtol=1e-4, atol=1e-4)
    config = decoder.get_config()
    assert {k: config[k] for k in OPTIONS} == OPTIONS
    assert TransformerDecoderLayer.from_config(config).get_config() == config


# ------------------------------------------------------------------- masks
def test_encoder_honours_keras_mask():
    x = _normal(5, (B, T, D))
    x[0, 4:] = 0.0
    inp = keras.Input((T, D))
    layer = TransformerEncoderLayer(H, F)
    model = keras.Model(inp, layer(keras.layers.Masking(0.0)(inp)))
    got = _np(model(x))
    pad = np.any(x != 0.0, axis=-1)
    np.testing.assert_allclose(got, _np(layer(x, padding_mask=pad)), rtol=1e-5, atol=1e-5)
    assert not np.allclose(got[0, :4], _np(layer(x))[0, :4], atol=1e-3)


def test_decoder_honours_keras_masks():
    x = _normal(6, (B, T, D))
    enc = _normal(7, (B, S, DE))
    x[1, 5:] = 0.0
    enc[0, 3:] = 0.0
    dec_in, enc_in = keras.Input((T, D)), keras.Input((S, DE))
    layer = TransformerDecoderLayer(H, F)
    out = layer(keras.layers.Masking(0.0)(dec_in), keras.layers.Masking(0.0)(enc_in))
    got = _np(keras.Model([dec_in, enc_in], out)([x, enc]))
    expected = _np(
        layer(
            x,
            enc,
            decoder_padding_mask=np.any(x != 0, -1),
            encoder_padding_mask=np.any(enc != 0, -1),
        )
    )
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(got[0], _np(layer(x, enc))[0], atol=1e-3)


def test_fully_masked_rows_give_finite_outputs():
    x = _normal(8, (B, T, D))
    enc = _normal(9, (B, S, DE))
    enc_pad = np.ones((B, S), bool)
    enc_pad[0] = False  # nothing to attend to in the first example
    dec = TransformerDecoderLayer(H, F, dropout=0.2)
    out, scores = dec(
        x, enc, encoder_padding_mask=enc_pad, return_attention_scores=True, training=True
    )
    assert np.all(np.isfinite(_np(out)))
    assert np.all(_np(scores)[0] == 0.0)
    # Same through the cross-attention cache.
    cross = dec.compute_cross_cache(enc)
    out_c, _ = dec(x, encoder_padding_mask=enc_pad, cross_attention_cache=cross)
    np.testing.assert_allclose(
        _np(out_c), _np(dec(x, enc, encoder_padding_mask=enc_pad)), rtol=1e-5, atol=1e-5
    )
    # Fully padded sequences in the encoder layer and the decoder's self-attention.
    pad = np.ones((B, T), bool)
    pad[1] = False
    enc_layer = TransformerEncoderLayer(H, F, norm_first=True)
    assert np.all(np.isfinite(_np(enc_layer(x, padding_mask=pad))))
    assert np.all(np.isfinite(_np(dec(x, enc, decoder_padding_mask=pad))))


@pytest.mark.parametrize("flash_attention", [None, True])
def test_padding_reaches_no_output_and_no_gradient(flash_attention):
    """NaN, inf, 1e30 or 300 in padded rows reach no output (the padded rows' own included)
    and no gradient, the weights' included (`check_padding_is_inert`): the layers zero padded
    rows first, and their self-attention takes the padding as queries too. The decoder's
    input and the encoder output it attends are both padded, in a full call and in a cached
    one; with the default attention path and the fused kernel's."""
    x = _normal(40, (B, T, D))
    enc = _normal(41, (B, S, DE))
    pad = np.ones((B, T), bool)
    pad[0, 4:] = False
    pad[1, 1] = False
    enc_pad = np.ones((B, S), bool)
    enc_pad[1, 2:] = False
    padded = np.broadcast_to(~pad[:, :, None], x.shape)
    enc_padded = np.broadcast_to(~enc_pad[:, :, None], enc.shape)

    def built(cls, seed, *shapes, **kwargs):
        def make():
            layer = cls(H, F, flash_attention=flash_attention, **kwargs)
            layer.build(*shapes)
            _randomize(layer, seed)
            return layer

        return make

    check_padding_is_inert(
        built(TransformerEncoderLayer, 42, x.shape, norm_first=True),
        {"inputs": x},
        {"inputs": padded},
        {"padding_mask": pad},
    )
    make_decoder = built(TransformerDecoderLayer, 43, x.shape, enc.shape)
    check_padding_is_inert(
        make_decoder,
        {"decoder_sequence": x, "encoder_sequence": enc},
        {"decoder_sequence": padded, "encoder_sequence": enc_padded},
        {"decoder_padding_mask": pad, "encoder_padding_mask": enc_pad},
    )
    decoder = make_decoder()
    keys, values = (np.zeros(c.shape, "float32") for c in decoder.init_cache(B, T))
    check_padding_is_inert(
        make_decoder,
        {"decoder_sequence": x, "encoder_sequence": enc},
        {"decoder_sequence": padded, "encoder_sequence": enc_padded},
        {
            "decoder_padding_mask": pad,
            "encoder_padding_mask": enc_pad,
            "self_attention_cache": (keys, values),
            "self_attention_cache_index": 0,
        },
    )


# ----------------------------------------------------------- cached decoding
def _decode_in_chunks(layers, x, enc, enc_pad, bounds, dec_pad=None):
    caches = [layer.init_cache(B, T) for layer in layers]
    cross = [layer.compute_cross_cache(enc) if layer.cross_attention else None for layer in layers]
    outs = []
    for start, stop in bounds:
        h = x[:, start:stop]
        for i, layer in enumerate(layers):
            kwargs = {}
            if layer.cross_attention:
                kwargs = {"cross_attention_cache": cross[i], "encoder_padding_mask": enc_pad}
            h, (caches[i], same_cross) = layer(
                h,
                self_attention_cache=caches[i],
                self_attention_cache_index=start,
                decoder_padding_mask=dec_pad,
                **kwargs,
            )
            if cross[i] is not None:  # the cross-attention cache comes back as given
                for got_c, given_c in zip(same_cross, cross[i]):
                    np.testing.assert_array_equal(_np(got_c), _np(given_c))
            else:
                assert same_cross is None
        outs.append(_np(h))
    return np.concatenate(outs, axis=1), caches


def _full(layers, x, enc, enc_pad, dec_pad=None):
    h = x
    for layer in layers:
        if layer.cross_attention:
            h = layer(h, enc, encoder_padding_mask=enc_pad, decoder_padding_mask=dec_pad)
        else:
            h = layer(h, decoder_padding_mask=dec_pad)
    return _np(h)


def test_cached_decoding_equals_full_causal_call():
    # Pre-norm here; the two-layer stack below also covers post-norm.
    x = _normal(10, (B, T, D))
    enc = _normal(11, (B, S, DE))
    enc_pad = np.ones((B, S), bool)
    enc_pad[1, 3:] = False
    layer = TransformerDecoderLayer(H, F, norm_first=True)
    full = _full([layer], x, enc, enc_pad)
    one_by_one, caches = _decode_in_chunks([layer], x, enc, enc_pad, [(t, t + 1) for t in range(T)])
    np.testing.assert_allclose(one_by_one, full, rtol=1e-4, atol=1e-5)
    chunks, _ = _decode_in_chunks([layer], x, enc, enc_pad, [(0, 1), (1, 4), (4, 6)])
    np.testing.assert_allclose(chunks, full, rtol=1e-4, atol=1e-5)
    key_cache, value_cache = caches[0]
    assert tuple(key_cache.shape) == (B, T, H, D // H)
    assert tuple(value_cache.shape) == (B, T, H, D // H)
    # The cache holds the projected keys of the whole sequence.
    normed = _np_layer_norm(x, layer.self_attention_layer_norm)
    expected_keys, _ = layer.self_attention_layer.compute_cache(normed)
    np.testing.assert_allclose(_np(key_cache), _np(expected_keys), rtol=1e-4, atol=1e-5)


def test_cached_decoding_with_decoder_padding_mask():
    x = _normal(12, (B, T, D))
    enc = _normal(13, (B, S, DE))
    enc_pad = np.ones((B, S), bool)
    dec_pad = np.ones((B, T), bool)
    dec_pad[1, :2] = False  # left padding
    dec_pad[0, 2] = dec_pad[0, 5] = False  # a hole, and right padding
    layer = TransformerDecoderLayer(H, F)
    full = _full([layer], x, enc, enc_pad, dec_pad)
    # Every position agrees, the padded ones too: a chunk's rows are padding as queries
    # (zeroed, zero context) by their rows of the cache's mask, as in the full call.
    for bounds in ([(t, t + 1) for t in range(T)], [(0, 1), (1, 4), (4, 6)]):
        steps, _ = _decode_in_chunks([layer], x, enc, enc_pad, bounds, dec_pad=dec_pad)
        np.testing.assert_allclose(steps, full, rtol=1e-4, atol=1e-5)
    assert not np.allclose(full[1], _full([layer], x, enc, enc_pad)[1], atol=1e-3)


def test_stack_of_two_layers_cached_in_a_loop():
    x = _normal(14, (B, T, D))
    enc = _normal(15, (B, S, DE))
    enc_pad = np.ones((B, S), bool)
    enc_pad[0, 1:] = False
    layers = [TransformerDecoderLayer(H, F), TransformerDecoderLayer(H, F, norm_first=True)]
    full = _full(layers, x, enc, enc_pad)
    chunked, _ = _decode_in_chunks(layers, x, enc, enc_pad, [(0, 3), (3, 4), (4, 6)])
    np.testing.assert_allclose(chunked, full, rtol=1e-4, atol=1e-5)

    # One step at a time inside a while_loop: the cache index is a tensor.
    cross = [layer.compute_cross_cache(enc) for layer in layers]
    xt = ops.convert_to_tensor(x)

    def body(t, state):
        caches, out = state
        h = ops.slice(xt, (0, t, 0), (B, 1, D))
        new = []
        for layer, cache, cross_cache in zip(layers, caches, cross):
            h, (cache, _) = layer(
                h,
                self_attention_cache=cache,
                self_attention_cache_index=t,
                cross_attention_cache=cross_cache,
                encoder_padding_mask=enc_pad,
            )
            new.append(cache)
        out = ops.slice_update(out, (0, t, 0), h)
        return tuple(new), out

    init = (tuple(layer.init_cache(B, T) for layer in layers), ops.zeros((B, T, D)))
    _, looped = ops.fori_loop(0, T, body, init)
    np.testing.assert_allclose(_np(looped), full, rtol=1e-4, atol=1e-5)


def test_decoder_only_cached_decoding():
    x = _normal(16, (B, T, D))
    layer = TransformerDecoderLayer(H, F, cross_attention=False)
    full = _full([layer], x, None, None)
    steps, _ = _decode_in_chunks([layer], x, None, None, [(0, 2), (2, 3), (3, 6)])
    np.testing.assert_allclose(steps, full, rtol=1e-4, atol=1e-5)
    out, scores = layer(x, return_attention_scores=True)
    scores = _np(scores)
    assert scores.shape == (B, H, T, T)
    assert np.all(np.triu(np.ones((T, T)), 1)[None, None] * scores == 0.0)


def test_no_causal_mask_sees_the_future():
    x = _normal(17, (B, T, D))
    layer = TransformerDecoderLayer(H, F, cross_attention=False)
    x_future = x.copy()
    x_future[:, -1] += 5.0
    causal = _np(layer(x_future))[:, 0] - _np(layer(x))[:, 0]
    full = (
        _np(layer(x_future, use_causal_mask=False))[:, 0]
        - _np(layer(x, use_causal_mask=False))[:, 0]
    )
    assert np.allclose(causal, 0.0, atol=1e-5) and not np.allclose(full, 0.0, atol=1e-3)


# -------------------------------------------------------------- arguments
def test_key_dim_default_and_explicit():
    layer = TransformerEncoderLayer(H, F)
    layer.build((None, None, D))
    assert tuple(layer.self_attention_layer.weights[0].shape) == (D, H, D // H)
    layer = TransformerEncoderLayer(3, F, key_dim=5)
    out = layer(keras.Input((T, D)))
    assert tuple(out.shape) == (None, T, D)
    assert tuple(layer.self_attention_layer.weights[0].shape) == (D, 3, 5)


def test_bad_arguments():
    for cls in (TransformerEncoderLayer, TransformerDecoderLayer):
        with pytest.raises(ValueError, match="num_heads"):
            cls(0, F)
        with pytest.raises(ValueError, match="intermediate_dim"):
            cls(H, -1)
        with pytest.raises(ValueError, match="key_dim"):
            cls(H, F, key_dim=0)
        with pytest.raises(ValueError, match="dropout"):
            cls(H, F, dropout=1.0)
        with pytest.raises(ValueError, match="layer_norm_epsilon"):
            cls(H, F, layer_norm_epsilon=0.0)
        with pytest.raises(ValueError, match="norm_first"):
            cls(H, F, norm_first="yes")
        with pytest.raises(ValueError, match="activation"):
            cls(H, F, activation="no_such_activation")
    with pytest.raises(ValueError, match="cross_attention"):
        TransformerDecoderLayer(H, F, cross_attention=1)

    x = _normal(19, (B, T, D))
    enc = _normal(20, (B, S, DE))
    with pytest.raises(ValueError, match="num_heads=3"):
        TransformerEncoderLayer(3, F)(x)
    with pytest.raises(ValueError, match="inputs"):
        TransformerEncoderLayer(H, F)(x[:, 0])
    with pytest.raises(ValueError, match="padding_mask"):
        TransformerEncoderLayer(H, F)(x, padding_mask=np.ones((B, T + 1), bool))

    dec = TransformerDecoderLayer(H, F)
    with pytest.raises(ValueError, match="init_cache"):
        dec.init_cache(B, T)
    with pytest.raises(ValueError, match="encoder_sequence"):
        dec(x)
    dec(x, enc)
    with pytest.raises(ValueError, match="needs `encoder_sequence`"):
        dec(x)
    with pytest.raises(ValueError, match="self_attention_cache_index"):
        dec(x[:, :1], enc, self_attention_cache=dec.init_cache(B, T))
    with pytest.raises(ValueError, match="self_attention_cache"):
        dec(x[:, :1], enc, self_attention_cache_index=0)
    with pytest.raises(ValueError, match="encoder_padding_mask"):
        dec(x, enc, encoder_padding_mask=np.ones((B, S + 2), bool))
    with pytest.raises(ValueError, match="cross_attention_cache"):
        dec(x, cross_attention_cache=dec.compute_cross_cache(enc)[0])

    dec_only = TransformerDecoderLayer(H, F, cross_attention=False)
    with pytest.raises(ValueError, match="encoder_sequence"):
        dec_only(x, enc)
    dec_only(x)
    with pytest.raises(ValueError, match="cross_attention=False"):
        dec_only.compute_cross_cache(enc)


def test_decoder_takes_the_encoder_arguments_from_one_table():
    # One table: the encoder's constructor. The decoder names only `cross_attention` and
    # shows the rest (help(), inspect.signature) from that table, in its order.
    import inspect

    encoder = inspect.signature(TransformerEncoderLayer).parameters
    decoder = inspect.signature(TransformerDecoderLayer).parameters
    assert list(decoder) == [*list(encoder)[:-1], "cross_attention", "kwargs"]
    for name, parameter in encoder.items():
        assert decoder[name].default == parameter.default, name
    # By position as in the encoder, the rest by keyword; every one reaches the config.
    layer = TransformerDecoderLayer(H, F, 4, 0.1, "gelu", cross_attention=False, sliding_window=3)
    config = layer.get_config()
    expected = dict(key_dim=4, dropout=0.1, activation="gelu", sliding_window=3)
    assert {k: config[k] for k in expected} == expected
    assert config["cross_attention"] is False
    clone = TransformerDecoderLayer.from_config(config)
    assert clone.get_config() == config
    with pytest.raises(ValueError, match="cross_attention"):
        TransformerDecoderLayer(H, F, cross_attention="yes")
