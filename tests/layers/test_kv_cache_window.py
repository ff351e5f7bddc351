"""The ring-buffer key/value cache of causal sliding-window self-attention (docs/multi_head.md,
"Sliding windows and the cache"): `init_cache(ring=True)` gives `sliding_window` rows whatever
`max_length`, a position `p` goes to row `p mod sliding_window`, rotary positions and the band
count true positions. References are the attention formula written out in NumPy over the
whole sequence."""

import keras
import numpy as np
import pytest

from keras_attn.layers import MultiHeadAttention, TransformerDecoderLayer
from tests.layers.checklist import check_padding_is_inert

W = 3  # the window
T = 8  # > 2 W positions decoded one at a time


def _rotate(x, positions, wavelength):
    """KerasHub's rotary convention: the two halves of the last axis, `x [T, N, H]`."""
    half = x.shape[-1] // 2
    inv = wavelength ** (-np.arange(half) * 2.0 / x.shape[-1])
    angle = positions[:, None] * inv[None, :]  # [T, half]
    cos = np.concatenate([np.cos(angle)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(angle)] * 2, -1)[:, None, :]
    rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def _reference(layer, x, window, wavelength=None):
    """Causal sliding-window attention over the whole of `x [B, T, D]`, in NumPy."""
    wq, bq, wk, bk, wv, bv, wo, bo = [np.asarray(w, np.float64) for w in layer.get_weights()]
    x = np.asarray(x, np.float64)
    out = np.zeros(x.shape[:2] + (wo.shape[-1],))
    heads, groups, h = wq.shape[1], wk.shape[1], wq.shape[2]
    pos = np.arange(x.shape[1], dtype=np.float64)
    for b in range(x.shape[0]):
        q = np.einsum("td,dnh->tnh", x[b], wq) + bq
        k = np.einsum("td,dnh->tnh", x[b], wk) + bk
        v = np.einsum("td,dnh->tnh", x[b], wv) + bv
        if wavelength is not None:
            q, k = _rotate(q, pos, wavelength), _rotate(k, pos, wavelength)
        for i in range(x.shape[1]):
            context = np.zeros((heads, v.shape[-1]))
            seen = [j for j in range(x.shape[1]) if j <= i and i - j < window]
            for n in range(heads):
                g = n // (heads // groups)
                s = np.array([q[i, n] @ k[j, g] for j in seen]) / np.sqrt(h)
                p = np.exp(s - s.max())
                p /= p.sum()
                context[n] = sum(pj * v[j, g] for pj, j in zip(p, seen))
            out[b, i] = np.einsum("nh,nho->o", context, wo) + bo
    return out


def _layer(**kwargs):
    layer = MultiHeadAttention(num_heads=4, key_dim=4, sliding_window=W, **kwargs)
    layer.build((2, T, 8))
    rng = np.random.default_rng(0)
    layer.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in layer.get_weights()])
    return layer


def _decode(layer, x, max_length):
    cache = layer.init_cache(x.shape[0], max_length, ring=True)
    outs = []
    for t in range(x.shape[1]):
        out, cache = layer(x[:, t : t + 1], cache=cache, cache_index=t, use_causal_mask=True)
        outs.append(np.asarray(out))
    return np.concatenate(outs, 1), cache


@pytest.mark.parametrize(
    "options",
    [{}, {"rotary_max_wavelength": 100.0, "num_key_value_heads": 2}],
    ids=["plain", "rotary+gqa"],
)
def test_ring_decoding_equals_windowed_attention(options):
    layer = _layer(**options)
    x = np.random.default_rng(1).normal(size=(2, T, 8)).astype("float32")
    out, cache = _decode(layer, x, max_length=T)
    # The cache holds the window only, however long the generation.
    groups = options.get("num_key_value_heads", 4)
    assert tuple(cache[0].shape) == (2, W, groups, 4)
    expected = _reference(layer, x, W, options.get("rotary_max_wavelength"))
    np.testing.assert_allclose(out, expected, atol=1e-4)
    # The same as the layer's own uncached causal sliding-window attention.
    full = layer(x, use_causal_mask=True)
    np.testing.assert_allclose(out, np.asarray(full), atol=1e-4)


def test_cache_size_does_not_depend_on_max_length():
    layer = _layer()
    for max_length in (W, 10, 1000):
        keys, values = layer.init_cache(2, max_length, ring=True)
        assert tuple(keys.shape) == (2, W, 4, 4) and tuple(values.shape) == (2, W, 4, 4)
    # Shorter than the window: an ordinary cache of max_length rows.
    assert tuple(layer.init_cache(2, 2, ring=True)[0].shape) == (2, 2, 4, 4)
    # Without ring=True: max_length rows, for chunked writes such as a prompt.
    assert tuple(layer.init_cache(2, 10)[0].shape) == (2, 10, 4, 4)


def test_a_chunk_goes_into_a_ring_only_while_it_fits():
    layer = _layer()
    cache = layer.init_cache(2, T, ring=True)
    x = np.random.default_rng(2).normal(size=(2, W, 8)).astype("float32")
    out, _ = layer(x, cache=cache, cache_index=0, use_causal_mask=True)
    np.testing.assert_allclose(
        np.asarray(out), np.asarray(layer(x, use_causal_mask=True)), atol=1e-4
    )
    with pytest.raises(ValueError, match="must fit in the cache"):
        layer(x[:, :2], cache=cache, cache_index=W - 1, use_causal_mask=True)


def _ring_slot_mask(padding, index):
    """The `[B, W]` padding mask over a ring's slots after the write at `index`: slot `r`
    holds position `index - ((index - r) mod W)`; a slot not written yet counts as real (the
    band never reaches it)."""
    slots = np.arange(W)
    positions = index - (index - slots) % W
    return np.where(positions >= 0, padding[:, np.maximum(positions, 0)], True)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_decoder_layer_ring_with_padding_equals_the_full_call(norm_first):
    """A decoder layer decoding one position at a time into a ring cache, its padding given
    over the ring's slots, answers at every position (padded ones included) as the uncached
    call given the padding over the positions: a padded row is zero as a query and unseen
    as a key, whichever slot it landed in."""
    keras.utils.set_random_seed(3)
    layer = TransformerDecoderLayer(
        2, 16, cross_attention=False, sliding_window=W, norm_first=norm_first
    )
    x = np.random.default_rng(4).normal(size=(3, T, 8)).astype("float32")
    padding = np.ones((3, T), bool)
    padding[0, :2] = False  # left padding
    padding[1, 3] = padding[1, 5] = False  # holes, one of them in a slot written again later
    padding[2, 6:] = False  # right padding
    full = np.asarray(layer(x, decoder_padding_mask=padding))
    cache = layer.init_cache(3, T, ring=True)
    assert tuple(cache[0].shape)[1] == W
    outs = []
    for t in range(T):
        out, (cache, _) = layer(
            x[:, t : t + 1],
            self_attention_cache=cache,
            self_attention_cache_index=t,
            decoder_padding_mask=_ring_slot_mask(padding, t),
        )
        outs.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(outs, 1), full, rtol=1e-4, atol=1e-5)
    # The padding changes the answers (the comparison above is not the unpadded one).
    assert not np.allclose(full, np.asarray(layer(x)), atol=1e-3)


def test_ring_with_padding_over_its_slots():
    """A multi-head layer decoding into a ring cache with a `[B, W]` `value_mask` over the
    ring's slots answers at the real rows as the uncached call given the padding over the
    positions; and a new row the mask hides is zeroed before it is projected and written, so
    what it holds (NaN, inf) reaches no output and no gradient, the projections' included."""
    layer = _layer()
    x = np.random.default_rng(5).normal(size=(2, T, 8)).astype("float32")
    padding = np.ones((2, T), bool)
    padding[0, 1] = padding[0, 4] = False  # holes, the first one's slot written again
    padding[1, :2] = False  # left padding
    cache = layer.init_cache(2, T, ring=True)
    outs = []
    for t in range(T):
        out, cache = layer(
            x[:, t : t + 1],
            cache=cache,
            cache_index=t,
            use_causal_mask=True,
            query_mask=padding[:, t : t + 1],
            value_mask=_ring_slot_mask(padding, t),
        )
        outs.append(np.asarray(out))
    full = layer(x, use_causal_mask=True, query_mask=padding, value_mask=padding)
    np.testing.assert_allclose(
        np.concatenate(outs, 1)[padding], np.asarray(full)[padding], atol=1e-4
    )

    # One step past the ring's first turn (slot 1), its new key/value row padded in example 0.
    index = 4
    keys, values = (np.asarray(c) for c in cache)
    hidden = np.zeros((2, 1, 8), bool)
    hidden[0] = True
    check_padding_is_inert(
        _layer,
        {"query": x[:, index : index + 1], "value": x[:, index : index + 1] + 1.0},
        {"value": hidden},
        {
            "cache": (keys, values),
            "cache_index": index,
            "use_causal_mask": True,
            "value_mask": _ring_slot_mask(padding, index),
        },
    )


# The while_loop / XLA part is TensorFlow's (decoding runs on TensorFlow); the layer tests
# above run on both backends.
if keras.backend.backend() == "tensorflow":

    def test_decoder_layer_ring_in_xla_while_loop():
        """TransformerDecoderLayer stack of ring caches in a `tf.while_loop` under XLA, against the
        layers run uncached over the whole sequence (causal sliding-window self-attention)."""
        import tensorflow as tf

        keras.utils.set_random_seed(0)
        layers = [
            TransformerDecoderLayer(2, 16, sliding_window=W, rotary_max_wavelength=100.0)
            for _ in range(2)
        ]
        enc = tf.random.normal([2, 5, 8])
        x = tf.random.normal([2, T, 8])
        h = x
        for layer in layers:
            h = layer(h, enc)
        expected = h.numpy()
        caches = [layer.init_cache(2, 10_000, ring=True) for layer in layers]
        assert all(tuple(c[0].shape) == (2, W, 2, 4) for c in caches)
        cross = [layer.compute_cross_cache(enc) for layer in layers]

        @tf.function(jit_compile=True)
        def run(x, caches):
            def body(t, outs, caches):
                h = tf.gather(x, [t], axis=1)
                new = []
                for layer, cache, cr in zip(layers, caches, cross):
                    h, (c, _) = layer(
                        h,
                        self_attention_cache=cache,
                        self_attention_cache_index=t,
                        cross_attention_cache=cr,
                    )
                    new.append(c)
                return t + 1, outs.write(t, h[:, 0]), new

            outs = tf.TensorArray(tf.float32, size=T)
            _, outs, _ = tf.while_loop(lambda t, *_: t < T, body, (tf.constant(0), outs, caches))
            return tf.transpose(outs.stack(), (1, 0, 2))

        np.testing.assert_allclose(run(x, caches).numpy(), expected, atol=1e-4)
