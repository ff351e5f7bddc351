"""The position-wise feed-forward block of the Transformer."""

import keras

from keras_attn import _checks
from keras_attn.layers import rng
from keras_attn.layers.base import (
    check_float_tensor,
    check_positive_int,
    check_rate,
    config_of,
    feature_dim,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class PositionwiseFeedForward(keras.layers.Layer):
    """Position-wise feed-forward network (Vaswani et al. 2017, section 3.3).

    `FFN(x) = W_2 dropout(act(x W_1 + b_1)) + b_2`, applied to every position
    (every vector along the last axis) independently.

    Args:
        intermediate_dim: width of the hidden layer (`d_ff` in the paper).
        output_dim: width of the output; defaults to the input's last dimension,
            so that the block can sit inside a residual connection.
        activation: activation of the hidden layer (name or callable).
        dropout: dropout rate on the hidden activations (training only).
            The Transformer layers apply their own dropout to this block's
            output before the residual addition.
        use_bias: whether both projections have a bias.

    Call arguments: `inputs [..., D]` (any rank >= 2), `training`.
    Returns `[..., output_dim]`. A Keras mask on `inputs` passes through
    unchanged (masked positions are computed like the others, not zeroed).

    Weights, in order: `kernel_1 [D, intermediate_dim]`, `bias_1`,
    `kernel_2 [intermediate_dim, output_dim]`, `bias_2` (no biases when
    `use_bias=False`), held by the sublayers `intermediate_dense` and
    `output_dense`.
    """

    def __init__(
        self,
        intermediate_dim,
        output_dim=None,
        activation="relu",
        dropout=0.0,
        use_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_dim = check_positive_int("intermediate_dim", intermediate_dim)
        self.output_dim = check_positive_int("output_dim", output_dim, allow_none=True)
        try:
            self.activation = keras.activations.get(activation)
        except ValueError as e:
            raise ValueError(
                f"`activation` must be a Keras activation name or a callable. "
                f"Received: activation={activation!r}"
            ) from e
        self.dropout = check_rate("dropout", dropout)
        self.use_bias = _checks.check_bool("use_bias", use_bias)
        self.supports_masking = True

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        self.input_dim = feature_dim(input_shape, "inputs")
        out_dim = self.output_dim or self.input_dim
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            use_bias=self.use_bias,
            dtype=self.dtype_policy,
            name="intermediate_dense",
        )
        self.intermediate_dense.build(input_shape)
        self.dropout_layer = rng.Dropout(self.dropout, dtype=self.dtype_policy, name="dropout")
        self.output_dense = keras.layers.Dense(
            out_dim, use_bias=self.use_bias, dtype=self.dtype_policy, name="output_dense"
        )
        self.output_dense.build(input_shape[:-1] + (self.intermediate_dim,))
        self.built = True

    def call(self, inputs, training=None):
        check_float_tensor("inputs", inputs)
        if len(inputs.shape) < 2 or inputs.shape[-1] != self.input_dim:
            raise ValueError(
                f"`inputs` must have shape [..., {self.input_dim}], as when the layer was built. "
                f"Received: inputs.shape={tuple(inputs.shape)}"
            )
        hidden = self.activation(self.intermediate_dense(inputs))
        if self.dropout > 0:
            hidden = self.dropout_layer(hidden, training=training)
        return self.output_dense(hidden)

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        return input_shape[:-1] + (self.output_dim or input_shape[-1],)

    def get_config(self):
        activation = keras.activations.serialize(self.activation)
        config_values = config_of(
            self, PositionwiseFeedForward.__init__, values={"activation": activation}
        )
        return {**super().get_config(), **config_values}
