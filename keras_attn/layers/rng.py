"""Random numbers that stay fast under XLA on CPUs: `uniform`, `dropout`, `Dropout`.

Why this exists: Keras' TensorFlow backend draws with `tf.random.stateless_uniform` and the
default algorithm (`auto_select`). Under `jit_compile=True` on a CPU, XLA expands that algorithm
into code far slower than TensorFlow's own kernel, and even Philox asked for by name compiles to
code slower than the kernel (single-threaded), so a Transformer with dropout trained slower with
XLA than without (benchmarks/RESULTS.md, "XLA: one training step", has the numbers, regenerated
by `make bench`).

What these functions draw with, on the TensorFlow backend:
- outside XLA: `tf.random.stateless_uniform(..., alg="philox")`, TensorFlow's own kernel. A
  dropout mask needs fewer bits than a float: where `rate * 2^16` is within 0.1% of an integer
  (any rate from 0.01 to 0.99) an entry is kept iff 16 random bits (half a Philox word) are
  >= `round(rate * 2^16)`, so the keep probability is within 2^-17 of `1 - rate` and the draw
  costs half the Philox words of a float32 uniform (the no-XLA column of
  benchmarks/RESULTS.md, "XLA: one training step", times it against Keras' Dropout); other
  rates compare a float32 uniform;
- inside an XLA compilation (`jit_compile=True`, or a function nested in one): a counter-based
  generator, each element's 32 random bits a hash of its flat index keyed by the seed (two
  rounds of the `lowbias32` integer hash of Chris Wellons' hash-prospector, a bijection of
  32-bit words with near-ideal avalanche). It is plain element-wise integer arithmetic that XLA
  fuses into the consumer (timed against Keras' dropout in benchmarks/RESULTS.md, section 5).
  `tests/layers/test_rng.py` checks its keep rate, uniformity and the independence of
  neighbouring elements and of successive draws.

On JAX, `dropout` draws with the same keyed hash (every JAX function runs compiled by XLA, and
`jax.random`'s threefry draw of a mask, which `keras.random.dropout` makes, took several times
the dense layers it follows in a CPU training step: benchmarks/RESULTS.md, "JAX vs TensorFlow on
the CPU"); `uniform` is `keras.random.uniform` there. On other backends both are
`keras.random.uniform` / `keras.random.dropout` unchanged.

Seeds come from a `keras.random.SeedGenerator` (or an int, None for the global one, or a stateless
`[2]` integer tensor on TensorFlow or JAX) exactly as
for `keras.random`; the numbers drawn differ from Keras' for the same seed (another algorithm),
their distribution does not.
"""

import keras
from keras import ops


def _seed_value(seed, is_pair, pair_words, int_mask):
    """`seed` as `keras.random` takes it: a `SeedGenerator`'s next state, the global
    generator's for None, `[seed & int_mask, 0]` (a list) for a Python int, a stateless `[2]`
    integer pair (`is_pair(seed)`) as it is; anything else refused (`pair_words`: what the
    backend calls such a pair)."""
    if isinstance(seed, keras.random.SeedGenerator):
        return seed.next()
    if seed is None:
        return _global_seed()
    if isinstance(seed, int) and not isinstance(seed, bool):
        return [seed & int_mask, 0]
    if is_pair(seed):
        return seed
    raise ValueError(
        "`seed` must be an integer, None, a keras.random.SeedGenerator or an integer "
        f"{pair_words} of shape [2]. Received: seed={seed!r}"
    )


def _tf_seed(seed):
    """A `[2]` int32 seed for TensorFlow's stateless ops, drawn as `keras.random` draws it (a
    stateless `[2]` seed, e.g. from `tf.random.experimental.stateless_fold_in`, as it is)."""
    import tensorflow as tf

    def is_pair(x):
        return tf.is_tensor(x) and x.dtype.is_integer and x.shape.as_list() == [2]

    seed = _seed_value(seed, is_pair, "tensor", 0x7FFFFFFF)
    seed = tf.convert_to_tensor(seed, tf.int64 if isinstance(seed, list) else None)
    if seed.dtype != tf.int32:
        # The generator's state is int64; the stateless ops want int32 (as in Keras).
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    return seed


def _global_seed():
    from keras_attn._keras_compat import global_seed_generator

    return global_seed_generator().next(ordered=False)


def in_xla():
    """Whether TensorFlow is tracing a function that XLA will compile."""
    import tensorflow as tf

    if tf.executing_eagerly():
        return False
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - moved in some future TensorFlow
        return False
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


_GOLDEN = 0x9E3779B9


class _TFBits:
    """The integer ops of the hash below, on TensorFlow."""

    def __init__(self):
        import tensorflow as tf

        self.xor, self.shift = tf.bitwise.bitwise_xor, tf.bitwise.right_shift
        self.word = lambda value: tf.constant(value, tf.uint32)
        self.seed = lambda seed: tf.bitcast(_tf_seed(seed), tf.uint32)
        self.size = lambda shape: tf.reduce_prod(tf.convert_to_tensor(shape, tf.int32))
        self.index = lambda size: tf.bitcast(tf.range(size, dtype=tf.int32), tf.uint32)
        self.reshape = lambda words, shape: tf.reshape(words, shape)


class _JAXBits:
    """The integer ops of the hash below, on JAX (static shapes)."""

    def __init__(self):
        import jax.numpy as jnp
        import numpy as np

        self.xor, self.shift = jnp.bitwise_xor, jnp.right_shift
        self.word = jnp.uint32
        self.seed = _jax_seed
        self.size = lambda shape: int(np.prod(shape))
        self.index = lambda size: jnp.arange(size, dtype=jnp.uint32)
        self.reshape = lambda words, shape: jnp.reshape(words, tuple(shape))


def _mix(v, bits):
    """lowbias32: a bijection of uint32 words whose every output bit depends on every input bit."""
    v = bits.xor(v, bits.shift(v, bits.word(16)))
    v = v * bits.word(0x7FEB352D)
    v = bits.xor(v, bits.shift(v, bits.word(15)))
    v = v * bits.word(0x846CA68B)
    return bits.xor(v, bits.shift(v, bits.word(16)))


def _hash_bits(shape, seed):
    """uint32 random words of `shape`: element `i` (flat index) is `mix(mix(i ^ k0) + k1)` with
    the keys `k0, k1` hashed from the two seed words (so seeds differing in one bit, as a
    SeedGenerator's successive seeds do, give unrelated keys). The same words on TensorFlow
    and JAX for the same seed words."""
    bits = _TFBits() if keras.backend.backend() == "tensorflow" else _JAXBits()
    words = bits.seed(seed)
    golden = bits.word(_GOLDEN)
    k0 = _mix(words[0] * golden + bits.word(0x85EBCA6B), bits)
    k1 = _mix(bits.xor(words[1], k0) + golden, bits)
    index = bits.index(bits.size(shape))
    return bits.reshape(_mix(_mix(bits.xor(index, k0), bits) + k1, bits), shape)


def _jax_seed(seed):
    """The two uint32 seed words on JAX, drawn as `keras.random` draws them."""
    import jax
    import jax.numpy as jnp

    def is_pair(x):
        return (
            isinstance(x, jax.Array)
            and jnp.issubdtype(x.dtype, jnp.integer)
            and tuple(x.shape) == (2,)
        )

    seed = _seed_value(seed, is_pair, "array", 0xFFFFFFFF)
    return jnp.asarray(seed).astype(jnp.uint32)


def _rate_in_16_bits(rate):
    """`round(rate * 2^16)` when that threshold drops a share of 16-bit words within 0.1% of
    `rate` (every rate from 0.01 to 0.99 and more), else None."""
    threshold = int(round(rate * 65536.0))
    if 0 < threshold < 65536 and abs(threshold / 65536.0 - rate) <= 1e-3 * rate:
        return threshold
    return None


def _philox_bits16(shape, seed):
    """uint16 random words of `shape` from TensorFlow's Philox kernel: each 32-bit word it draws
    split into two (bitcast, no copy), so half the words of a float32 draw of `shape`."""
    import tensorflow as tf

    shape = tf.convert_to_tensor(shape, tf.int32)
    size = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform(
        tf.reshape((size + 1) // 2, [1]),
        seed=_tf_seed(seed),
        minval=None,
        maxval=None,
        dtype=tf.uint32,
        alg="philox",
    )
    halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])
    static = tf.get_static_value(size)
    if static is None or static % 2:
        halves = halves[:size]  # (a copy, so only where the size may be odd)
    return tf.reshape(halves, shape)


def uniform(shape, minval=0.0, maxval=1.0, dtype="float32", seed=None):
    """Uniform floats in `[minval, maxval)` of `shape`, as `keras.random.uniform`."""
    if keras.backend.backend() != "tensorflow":
        return keras.random.uniform(shape, minval=minval, maxval=maxval, dtype=dtype, seed=seed)
    import tensorflow as tf

    if in_xla():
        # The top 24 bits: every float32 in [0, 1) on the grid 2^-24, as exact as the kernel's.
        unit = tf.cast(tf.bitwise.right_shift(_hash_bits(shape, seed), 8), tf.float32)
        unit = tf.cast(unit * (1.0 / (1 << 24)), dtype)
        return tf.cast(minval, dtype) + unit * tf.cast(maxval - minval, dtype)
    return tf.random.stateless_uniform(
        shape,
        seed=_tf_seed(seed),
        minval=tf.cast(minval, dtype),
        maxval=tf.cast(maxval, dtype),
        dtype=dtype,
        alg="philox",
    )


def dropout(inputs, rate, noise_shape=None, seed=None):
    """`keras.random.dropout(inputs, rate, noise_shape, seed)`: each entry (or each slice along
    the axes where `noise_shape` is 1) kept with probability `1 - rate` and scaled by
    `1 / (1 - rate)`, else 0."""
    if rate == 0.0:
        return inputs
    if rate == 1.0:
        return ops.zeros_like(inputs)
    if keras.backend.backend() == "jax":
        return _jax_dropout(inputs, rate, noise_shape, seed)
    if keras.backend.backend() != "tensorflow":
        return keras.random.dropout(inputs, rate, noise_shape=noise_shape, seed=seed)
    import tensorflow as tf

    inputs = tf.convert_to_tensor(inputs)
    shape = tf.shape(inputs)
    if noise_shape is None:
        noise = shape
    else:
        # None entries of `noise_shape` take the input's size (as in Keras).
        noise = tf.stack(
            [shape[i] if d is None else tf.constant(d, tf.int32) for i, d in enumerate(noise_shape)]
        )
    if in_xla():
        threshold = tf.constant(_hash_threshold(rate), tf.uint32)
        keep = _hash_bits(noise, seed) >= threshold
    elif _rate_in_16_bits(rate) is not None:
        # Keep iff 16 random bits >= rate * 2^16: half the Philox words of a float draw.
        threshold = tf.constant(_rate_in_16_bits(rate), tf.uint16)
        keep = _philox_bits16(noise, seed) >= threshold
    else:
        # A float32 draw whatever the input's type: a float16 uniform has too few values for
        # an exact keep probability.
        keep = uniform(noise, seed=seed, dtype="float32") >= rate
    scaled = inputs * tf.cast(1.0 / (1.0 - rate), inputs.dtype)
    return tf.where(keep, scaled, tf.zeros((), inputs.dtype))


def _hash_threshold(rate):
    """Keep iff 32 random bits >= this: the keep rate exact to 2^-32."""
    return min(int(round(rate * 2.0**32)), 2**32 - 1)


def _jax_dropout(inputs, rate, noise_shape, seed):
    """`dropout` on JAX: the keyed hash, which XLA fuses into the consumer (jax.random's
    threefry draw costs several times the step's own dense layers on a CPU)."""
    import jax.numpy as jnp

    inputs = jnp.asarray(inputs)
    noise = inputs.shape
    if noise_shape is not None:
        # None entries of `noise_shape` take the input's size (as in Keras).
        noise = tuple(inputs.shape[i] if d is None else d for i, d in enumerate(noise_shape))
    keep = _hash_bits(noise, seed) >= jnp.uint32(_hash_threshold(rate))
    scaled = inputs * jnp.asarray(1.0 / (1.0 - rate), inputs.dtype)
    return jnp.where(keep, scaled, jnp.zeros((), inputs.dtype))


@keras.saving.register_keras_serializable(package="keras_attn")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with the same arguments and config, drawing with `dropout` above
    (fast under XLA on TensorFlow CPUs). Used inside keras_attn's layers and models."""

    def call(self, inputs, training=False):
        if training and self.rate > 0:
            return dropout(
                inputs, self.rate, noise_shape=self.noise_shape, seed=self.seed_generator
            )
        return inputs
