"""Rotary position embedding (RoFormer, Su et al. 2021), in KerasHub's convention.

The last axis (size `d`, even) is read as two halves `x = [x1, x2]`. Position
`p` rotates every pair `(x1[i], x2[i])` by the angle `p / scaling_factor *
max_wavelength^(-2i/d)`:

    out = x * cos(angle) + [-x2, x1] * sin(angle)

with `angle` repeated over the two halves. A query at position `m` and a key
at position `n` so rotated have a dot product that depends on `m - n` only,
which is what `MultiHeadAttention(rotary_max_wavelength=...)` uses it for
(docs/multi_head.md).
"""

import keras
from keras import ops

from keras_attn._checks import check_positive as _check_number
from keras_attn.layers.base import check_float_tensor, config_of


def _check_even_dim(x):
    dim = x.shape[-1]
    if dim is None or dim % 2:
        raise ValueError(
            "The last axis of the rotary embedding's input must have a known even size. "
            f"Received: inputs.shape={tuple(x.shape)}"
        )
    return dim


def rotate(x, positions, max_wavelength=10000.0, scaling_factor=1.0, position_axis=1):
    """`x` rotated by position: `positions` (int `[T]`) index `x`'s `position_axis`.

    The angles are computed in float32 and the result is in `x`'s dtype.
    """
    dim = _check_even_dim(x)
    half = dim // 2
    inverse_freq = 1.0 / ops.power(
        ops.cast(max_wavelength, "float32"),
        ops.arange(0, dim, 2, dtype="float32") / float(dim),
    )
    angles = ops.cast(positions, "float32")[:, None] / scaling_factor * inverse_freq[None]
    angles = ops.concatenate([angles, angles], axis=-1)  # [T, d]
    axis = position_axis % len(x.shape)
    shape = [1] * len(x.shape)
    shape[axis] = -1
    shape[-1] = dim
    cos = ops.cast(ops.reshape(ops.cos(angles), shape), x.dtype)
    sin = ops.cast(ops.reshape(ops.sin(angles), shape), x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + ops.concatenate([-x2, x1], axis=-1) * sin


@keras.saving.register_keras_serializable(package="keras_attn")
class RotaryEmbedding(keras.layers.Layer):
    """Rotary position embedding; no weights.

    Args:
        max_wavelength: the longest wavelength of the rotations (the base).
        scaling_factor: positions are divided by it (position interpolation:
            > 1 stretches a trained model to longer sequences).

    Call arguments:
        inputs: `[B, T, ..., d]` with `d` even; axis 1 is the position.
        start_index: position of `inputs[:, 0]` (an int or a scalar tensor,
            e.g. a decoding step).

    Returns the rotated inputs, same shape and dtype.
    """

    def __init__(self, max_wavelength=10000, scaling_factor=1.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = _check_number("max_wavelength", max_wavelength)
        self.scaling_factor = _check_number("scaling_factor", scaling_factor)
        self.supports_masking = True
        self.built = True

    def call(self, inputs, start_index=0):
        check_float_tensor("inputs", inputs)
        if len(inputs.shape) < 3:
            raise ValueError(
                "`inputs` must have shape [batch, length, ..., dim]. "
                f"Received: inputs.shape={tuple(inputs.shape)}"
            )
        positions = ops.arange(ops.shape(inputs)[1], dtype="int32") + ops.cast(start_index, "int32")
        return rotate(inputs, positions, self.max_wavelength, self.scaling_factor, 1)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), **config_of(self, RotaryEmbedding.__init__)}
