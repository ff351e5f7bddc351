"""keras_attn.layers.rng: the draws behind every dropout and hard-attention sample.

On TensorFlow there are two generators (TensorFlow's Philox kernel outside XLA, a keyed integer
hash inside an XLA compilation), so each statistical check runs both ways there; on JAX `dropout`
draws with the same keyed hash and `uniform` is keras.random's, run eagerly.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import rng

TF = keras.backend.backend() == "tensorflow"
MODES = ["eager", "graph", "xla"] if TF else ["eager"]


def _run(fn, mode):
    if mode == "eager":
        return keras.ops.convert_to_numpy(fn())
    import tensorflow as tf

    return tf.function(fn, jit_compile=(mode == "xla"))().numpy()


def _corr(a, b):
    a = a.astype("float64").ravel()
    b = b.astype("float64").ravel()
    return float(np.corrcoef(a, b)[0, 1])


@pytest.mark.skipif(not TF, reason="the XLA-context switch exists on TensorFlow only")
def test_xla_context_is_detected():
    import tensorflow as tf

    seen = {}

    def probe(mode):
        def fn():
            seen[mode] = rng.in_xla()
            return tf.constant(0.0)

        return fn

    assert rng.in_xla() is False
    tf.function(probe("graph"))()
    tf.function(probe("xla"), jit_compile=True)()

    @tf.function(jit_compile=True)
    def outer():
        return tf.while_loop(lambda i: i < 2, lambda i: (i + probe("nested")() * 0 + 1,), [0.0])

    outer()
    assert seen == {"graph": False, "xla": True, "nested": True}


@pytest.mark.parametrize("mode", MODES)
def test_dropout_keep_rate_scale_and_independence(mode):
    rate = 0.3
    n = 1000
    gen = keras.random.SeedGenerator(5)
    x = ops.ones((n, n))

    first = _run(lambda: rng.dropout(x, rate, seed=gen), mode)
    second = _run(lambda: rng.dropout(x, rate, seed=gen), mode)
    for out in (first, second):
        kept = out != 0
        # 1e6 Bernoulli(0.7) draws: 5 sigma = 0.0023.
        assert abs(kept.mean() - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / n / n)
        np.testing.assert_allclose(out[kept], 1 / (1 - rate), rtol=1e-6)
        # Neighbours along both axes are uncorrelated (|r| < 5 / sqrt(N)).
        assert abs(_corr(kept[:, 1:], kept[:, :-1])) < 5e-3
        assert abs(_corr(kept[1:], kept[:-1])) < 5e-3
    # Successive draws from one generator are different and uncorrelated.
    assert (first != second).any()
    assert abs(_corr(first != 0, second != 0)) < 5e-3


def test_dropout_rates_drawn_in_16_bits_and_the_others():
    # (The 16-bit draws are TensorFlow's path outside XLA; elsewhere the same checks hold.)
    # 16 bits where round(rate * 2^16) / 2^16 is within 0.1% of the rate, else a float draw.
    assert rng._rate_in_16_bits(0.1) == 6554
    assert all(rng._rate_in_16_bits(k / 100) is not None for k in range(1, 100))
    assert rng._rate_in_16_bits(0.001) is None and rng._rate_in_16_bits(1e-6) is None
    n = 1000
    gen = keras.random.SeedGenerator(7)
    for rate in (0.05, 0.002):  # 16 bits, then the float32 fallback
        draw = lambda r=rate: rng.dropout(ops.ones((n, n)), r, seed=gen)  # noqa: E731
        kept = _run(draw, "graph" if TF else "eager") != 0
        assert abs(kept.mean() - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / n / n)
        assert abs(_corr(kept[:, 1:], kept[:, :-1])) < 5e-3  # the two halves of a word


@pytest.mark.parametrize("mode", MODES)
def test_dropout_same_seed_same_mask(mode):
    x = ops.ones((64, 64))
    gens = [keras.random.SeedGenerator(s) for s in (11, 11, 12)]
    a, b, c = (_run(lambda g=g: rng.dropout(x, 0.5, seed=g), mode) for g in gens)
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()


@pytest.mark.parametrize("mode", MODES)
def test_dropout_noise_shape_shares_the_mask(mode):
    x = ops.ones((8, 50, 16))
    gen = keras.random.SeedGenerator(3)
    out = _run(lambda: rng.dropout(x, 0.5, noise_shape=(None, 1, 16), seed=gen), mode)
    assert (out == out[:, :1, :]).all()
    assert 0 < (out == 0).mean() < 1


@pytest.mark.parametrize("mode", MODES)
def test_uniform_is_uniform(mode):
    gen = keras.random.SeedGenerator(9)
    u = _run(lambda: rng.uniform((200_000,), minval=-2.0, maxval=3.0, seed=gen), mode)
    assert u.min() >= -2.0 and u.max() < 3.0
    counts, _ = np.histogram(u, bins=20, range=(-2.0, 3.0))
    expected = len(u) / 20
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # 19 degrees of freedom: P(chi2 > 50) < 1e-4.
    assert chi2 < 50, counts
    assert abs(_corr(u[1:], u[:-1])) < 5 / np.sqrt(len(u))


@pytest.mark.parametrize("mode", MODES)
def test_dropout_edge_rates_and_dtypes(mode):
    x = ops.ones((4, 4), dtype="float16")
    assert (_run(lambda: rng.dropout(x, 1.0), mode) == 0).all()
    np.testing.assert_array_equal(_run(lambda: rng.dropout(x, 0.0), mode), np.ones((4, 4)))
    gen = keras.random.SeedGenerator(1)
    out = _run(lambda: rng.dropout(x, 0.5, seed=gen), mode)
    assert out.dtype == np.float16
    assert set(np.unique(out)) <= {0.0, 2.0}


def test_bad_seed_is_a_clear_error():
    # Ours on TensorFlow, keras.random's on other backends: a ValueError naming `seed`.
    draws = (
        lambda: rng.uniform((2,), seed="abc"),
        lambda: rng.dropout(ops.ones((2,)), 0.5, seed=1.5),
    )
    for draw in draws:
        with pytest.raises(ValueError, match="seed"):
            draw()


def _lowbias32(v):
    v = v ^ (v >> np.uint32(16))
    v = v * np.uint32(0x7FEB352D)
    v = v ^ (v >> np.uint32(15))
    v = v * np.uint32(0x846CA68B)
    return v ^ (v >> np.uint32(16))


def test_hashed_words_follow_the_formula_on_every_backend():
    # The keyed hash behind dropout under XLA (TensorFlow) and on JAX, written out in NumPy:
    # word i = mix(mix(i ^ k0) + k1), k0 = mix(s0 * golden + c), k1 = mix((s1 ^ k0) + golden).
    words = np.array([12345, 678], np.uint32)
    golden = np.uint32(0x9E3779B9)
    with np.errstate(over="ignore"):
        k0 = _lowbias32(words[0] * golden + np.uint32(0x85EBCA6B))
        k1 = _lowbias32((words[1] ^ k0) + golden)
        index = np.arange(6 * 7, dtype=np.uint32)
        expected = _lowbias32(_lowbias32(index ^ k0) + k1).reshape(6, 7)
    seed = ops.convert_to_tensor(words.astype("int32" if TF else "uint32"))
    got = keras.ops.convert_to_numpy(rng._hash_bits((6, 7), seed))
    np.testing.assert_array_equal(got.astype(np.uint32), expected)


@pytest.mark.skipif(TF, reason="the hash is TensorFlow's XLA path, checked in `mode='xla'` above")
def test_jax_dropout_is_the_hash_and_compiles_into_the_step():
    import jax

    gen = keras.random.SeedGenerator(21)
    x = ops.ones((300, 400))
    out = keras.ops.convert_to_numpy(rng.dropout(x, 0.25, seed=keras.random.SeedGenerator(21)))
    # The mask is the keyed hash of the generator's first seed, kept where >= 0.25 * 2^32.
    bits = keras.ops.convert_to_numpy(rng._hash_bits((300, 400), gen.next()))
    np.testing.assert_array_equal(out != 0, bits >= np.uint32(2**30))
    # Under jax.jit with the seed as an argument: the same mask, no retrace for a new seed.
    traces = []

    @jax.jit
    def step(seed, x):
        traces.append(1)
        return rng.dropout(x, 0.25, seed=seed)

    gen = keras.random.SeedGenerator(21)
    first = step(gen.next(), x)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(first), out)
    second = step(gen.next(), x)
    assert len(traces) == 1 and (np.asarray(first) != np.asarray(second)).any()


def test_dropout_layer_is_keras_dropout_with_our_draws():
    layer = rng.Dropout(0.25, noise_shape=(None, 1), seed=4)
    assert isinstance(layer, keras.layers.Dropout)
    clone = rng.Dropout.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is rng.Dropout
    x = ops.ones((6, 1000))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x)), np.ones((6, 1000)))
    out = keras.ops.convert_to_numpy(layer(x, training=True))
    assert (out == out[:, :1]).all()  # noise_shape (None, 1): one draw per row
    assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)}


def test_an_int_seed_is_the_stateless_pair_of_it_and_zero():
    # keras.random's reading of an int seed: the pair [seed, 0] (TensorFlow: a [2] tensor;
    # JAX: a [2] array), so both forms draw the same numbers.
    x = ops.ones((64,))
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        pair = tf.constant([7, 0], tf.int32)
        assert np.array_equal(rng.uniform((64,), seed=7), rng.uniform((64,), seed=pair))
        assert not np.array_equal(rng.uniform((64,), seed=8), rng.uniform((64,), seed=pair))
    else:
        import jax.numpy as jnp

        pair = jnp.asarray([7, 0], jnp.int32)
    kept = np.asarray(rng.dropout(x, 0.5, seed=7))
    assert np.array_equal(kept, np.asarray(rng.dropout(x, 0.5, seed=pair)))
    assert not np.array_equal(kept, np.asarray(rng.dropout(x, 0.5, seed=8)))
