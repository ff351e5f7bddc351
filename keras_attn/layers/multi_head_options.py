"""The constructor arguments of `MultiHeadAttention`, written once.

`MultiHeadAttention.__init__` lists them with their defaults: that signature is the one table
of the layer's arguments, from which its config is written (`base.config_of`, with the
attribute names of `ATTRIBUTES`). The checks of the arguments that take more than a type live
here. `GroupedQueryAttention` takes the same table under Keras' names for the layout (see
`grouped_query`).
"""

from keras_attn._checks import check_bool
from keras_attn.layers.base import check_positive_int

# Where the layer keeps the arguments stored under another attribute name (`base.config_of`).
ATTRIBUTES = {
    "output_shape": "_out_shape",
    # Keras' MultiHeadAttention gives it to each projection (not to itself).
    "activity_regularizer": "projection_activity_regularizer",
}


def check_output_shape(output_shape):
    if output_shape is None:
        return None
    if isinstance(output_shape, int) and not isinstance(output_shape, bool):
        output_shape = (output_shape,)
    if isinstance(output_shape, (list, tuple)) and len(output_shape) > 0:
        dims = tuple(output_shape)
        if all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
            return dims
    raise ValueError(
        "`output_shape` must be None, a positive integer or a non-empty tuple of positive "
        f"integers. Received: output_shape={output_shape!r}"
    )


def check_attention_axes(attention_axes):
    if attention_axes is None:
        return None
    if isinstance(attention_axes, int) and not isinstance(attention_axes, bool):
        return (attention_axes,)
    if (
        isinstance(attention_axes, (list, tuple))
        and attention_axes
        and all(isinstance(a, int) and not isinstance(a, bool) for a in attention_axes)
    ):
        return tuple(attention_axes)
    raise ValueError(
        "`attention_axes` must be None, an int or a non-empty tuple of ints. "
        f"Received: attention_axes={attention_axes!r}"
    )


def check_key_value_heads(num_heads, num_key_value_heads):
    groups = check_positive_int("num_key_value_heads", num_key_value_heads, allow_none=True)
    if groups is not None and num_heads % groups:
        raise ValueError(
            "`num_heads` must be divisible by `num_key_value_heads`. Received: "
            f"num_heads={num_heads}, num_key_value_heads={num_key_value_heads}"
        )
    return groups


def check_rotary_key_dim(rotary_max_wavelength, key_dim):
    if rotary_max_wavelength is not None and key_dim % 2:
        raise ValueError(
            "Rotary embeddings rotate pairs of features: `key_dim` must be even with "
            f"`rotary_max_wavelength`. Received: key_dim={key_dim}"
        )


def check_flash_attention(flash_attention, dropout):
    """`flash_attention` (None, True or False); True refuses attention dropout."""
    if flash_attention is not None:
        check_bool("flash_attention", flash_attention)
    if flash_attention and dropout > 0:
        raise ValueError(
            "`flash_attention=True` runs keras.ops.dot_product_attention, which has no "
            f"attention dropout: set dropout=0. Received: dropout={dropout}"
        )
    return flash_attention
