"""Position encodings added to a sequence: sinusoidal (fixed) or learned."""

import keras
import numpy as np
from keras import ops

from keras_attn import _checks
from keras_attn.layers.base import (
    check_choice,
    check_float_tensor,
    check_positive_int,
    config_of,
    feature_dim,
)

MODES = ("sinusoidal", "learned")


def sinusoidal_table(positions, depth, base=10000.0):
    """`PE[p, 2i] = sin(p / base^(2i/d))`, `PE[p, 2i+1] = cos(p / base^(2i/d))`.

    `positions` is a float32 vector `[T]`; returns float32 `[T, depth]`
    (columns interleaved sin, cos; an odd `depth` ends with a sin column).
    """
    channels = ops.arange(depth, dtype="int32")
    even = ops.cast((channels // 2) * 2, "float32")  # 2i for columns 2i and 2i+1
    denominators = ops.power(ops.cast(base, "float32"), even / float(depth))
    angles = ops.expand_dims(ops.cast(positions, "float32"), -1) / denominators
    is_sin = ops.equal(channels % 2, 0)
    return ops.where(is_sin, ops.sin(angles), ops.cos(angles))


def _known_int(x):
    """The value of a scalar tensor when it has one now (eager), else None (traced)."""
    try:
        return int(np.asarray(ops.convert_to_numpy(x)))
    except Exception:  # a symbolic / traced tensor: no value yet
        return None


@keras.saving.register_keras_serializable(package="keras_attn")
class PositionalEncoding(keras.layers.Layer):
    """Adds a position encoding: `inputs + PE[start_index : start_index + T]`.

    Args:
        mode: `"sinusoidal"` (Vaswani et al. 2017, fixed, any length) or
            `"learned"` (a trainable `[max_length, d]` table).
        max_length: the most positions; required for `"learned"`. For
            `"sinusoidal"` it is optional and, when given, also a limit.
        base: the wavelength base of the sinusoids (default 10000).

    Call arguments:
        inputs: `[..., T, d]` (the sequence axis is the second-to-last).
        start_index: position of the first row, a Python int or an int
            scalar tensor (e.g. the step inside a decoding `while_loop`).

    A Keras mask on `inputs` is passed on unchanged. A `ValueError` names
    `start_index` when it is negative or `start_index + T > max_length`,
    whenever its value is known: a Python int, or a tensor holding a value
    (eager). Inside a traced function (`tf.function`, XLA, `jax.jit`) a
    tensor's value is not known when the check would run; there a learned
    table clamps explicitly, on every backend, so the rows used are
    `PE[s : s + T]` with `s = clip(start_index, 0, max_length - T)` (the
    last `T` rows of the table for a start past it).
    """

    def __init__(self, mode="sinusoidal", max_length=None, base=10000.0, **kwargs):
        super().__init__(**kwargs)
        self.mode = check_choice("mode", mode, MODES)
        self.max_length = check_positive_int("max_length", max_length, allow_none=True)
        if mode == "learned" and max_length is None:
            raise ValueError(
                "`max_length` is required when `mode='learned'`. Received: max_length=None"
            )
        self.base = _checks.check_positive("base", base)
        self.supports_masking = True

    def build(self, inputs_shape):
        self.depth = feature_dim(inputs_shape, "inputs")
        if self.mode == "learned":
            self.embeddings = self.add_weight(
                name="embeddings",
                shape=(self.max_length, self.depth),
                initializer="glorot_uniform",
            )
        self.built = True

    def call(self, inputs, start_index=0):
        check_float_tensor("inputs", inputs)
        if len(inputs.shape) < 2 or inputs.shape[-1] != self.depth:
            raise ValueError(
                f"`inputs` must have shape [..., length, {self.depth}], as when the layer was "
                f"built. Received: inputs.shape={tuple(inputs.shape)}"
            )
        length = inputs.shape[-2]
        if isinstance(start_index, bool) or isinstance(start_index, float):
            raise ValueError(
                f"`start_index` must be an int or an int scalar tensor. Received: start_index={start_index!r}"
            )
        if not isinstance(start_index, int):
            shape = tuple(getattr(start_index, "shape", ()))
            dtype = keras.backend.standardize_dtype(getattr(start_index, "dtype", "int32"))
            if shape or "int" not in dtype:
                raise ValueError(
                    "`start_index` must be an int or an int scalar tensor. "
                    f"Received: start_index with shape={shape} and dtype={dtype}"
                )
            known = _known_int(start_index)
            if known is not None:
                start_index = known  # checked below like a Python int
        static_start = isinstance(start_index, int)
        if static_start and start_index < 0:
            raise ValueError(f"`start_index` must be >= 0. Received: start_index={start_index}")
        if self.max_length is not None and length is not None:
            end = start_index + length if static_start else length
            if end > self.max_length:
                where = (
                    f"positions {start_index} to {end - 1}"
                    if static_start
                    else f"{length} positions"
                )
                raise ValueError(
                    f"The input needs {where}, more than `max_length`={self.max_length} allows. "
                    f"Received: inputs.shape={tuple(inputs.shape)}, start_index={start_index!r}"
                )
        num = ops.shape(inputs)[-2]
        start = ops.cast(start_index, "int32")
        if self.mode == "learned":
            embeddings = ops.convert_to_tensor(self.embeddings)
            if not static_start:  # traced: clamp explicitly (see the class docstring)
                start = ops.clip(start, 0, self.max_length - num)
            table = ops.slice(embeddings, [start, ops.zeros((), "int32")], [num, self.depth])
        else:
            positions = ops.cast(start + ops.arange(num, dtype="int32"), "float32")
            table = sinusoidal_table(positions, self.depth, self.base)
        return inputs + ops.cast(table, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), **config_of(self, PositionalEncoding.__init__)}
