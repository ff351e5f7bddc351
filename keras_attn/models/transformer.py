"""Transformer encoder-decoder (Vaswani et al. 2017) built from keras_attn layers.

    model = Transformer(source_vocab_size, target_vocab_size, num_layers=2, d_model=128,
                        num_heads=4, intermediate_dim=256, dropout=0.1)
    model.compile("adam", MaskedSequenceLoss(), metrics=[MaskedSequenceAccuracy()])
    model.fit({"source": src, "target_in": tgt_in}, tgt_out)

Architecture: token embeddings scaled by `sqrt(d_model)` + `PositionalEncoding(positions)`
+ dropout; `num_layers` post-norm `TransformerEncoderLayer`s (source padding masked);
`num_layers` `TransformerDecoderLayer`s (causal self-attention, target padding masked,
cross-attention over the encoder output); logits `Dense(target_vocab_size)`.
`share_embeddings=True` uses one embedding table for source and target and ties the output
projection to it (`logits = x E^T + b`); the vocabularies must then have the same size.

Inputs: `{"source": [B, S] int32, "target_in": [B, T] int32}` (pad id 0 masked).
Output: logits `[B, T, target_vocab_size]`.

Decoding: `encode(source_ids)` -> `{"memory", "source_mask"}`;
`initial_decode_state(encoder_outputs, max_length)` -> `{"self_cache": [(k, v)] per layer
([B, max_length, heads, head_dim], zeros; with `sliding_window` w < max_length a ring of w
rows, docs/multi_head.md), "per_example": {"cross_cache": [(k, v)] per layer (the encoder
output projected once), "source_mask"}}` (one row per example, read by its K hypotheses,
docs/decoding.md; with copy attention also `"memory"` and `"source_ids"`, tiled);
`decode_step(tokens, state, step)` feeds one token at
position `step`, writes its keys/values into the caches at index `step`, and returns the
logits, the state and the last layer's cross-attention averaged over heads `[N, S]`.
With `positions="learned"` the search's `max_length` must not exceed the model's `max_length`.
"""

import math

import keras
from keras import ops

from keras_attn.decoding import steps
from keras_attn.layers import rng
from keras_attn.layers.base import config_of
from keras_attn.layers.positional import PositionalEncoding
from keras_attn.layers.transformer import (
    AttentionOptions,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)
from keras_attn.models import common
from keras_attn.models.copy import CopyGenerator, check_copy_arguments

POSITIONS = ("sinusoidal", "learned")


@keras.saving.register_keras_serializable(package="keras_attn")
class Transformer(common.Translator):
    """Transformer encoder-decoder. See the module docstring.

    Args:
        source_vocab_size, target_vocab_size: vocabulary sizes (0 = padding).
        num_layers: encoder layers and decoder layers (each).
        d_model: model width (divisible by `num_heads`).
        num_heads: attention heads.
        intermediate_dim: feed-forward width.
        dropout: dropout everywhere the paper uses it (embedding sums, attention weights,
            each sublayer's output before the residual addition).
        activation_dropout: dropout on the feed-forward blocks' hidden activations (not in
            the paper, default 0; docs/layers.md).
        positions: `"sinusoidal"` or `"learned"`.
        share_embeddings: one table for source, target and the output projection.
        max_length: longest source/target sequence (the learned position table's size;
            with sinusoids only a limit).
        norm_first: pre-norm layers (then each stack ends with a LayerNorm).
        num_key_value_heads, sliding_window, use_gate, rotary_max_wavelength,
        flash_attention: `MultiHeadAttention` options of every layer
            (docs/multi_head.md); the decoder's self-attention cache then holds
            `num_key_value_heads` heads.
        copy_attention: mix copying source tokens through the last layer's cross-attention
            (averaged over heads) into the output (`keras_attn.models.copy`, See et al. 2017);
            needs one shared vocabulary. The model then returns log-probabilities.
        coverage_weight: copy attention's coverage loss weight (0: none).
    """

    def __init__(
        self,
        source_vocab_size,
        target_vocab_size,
        num_layers=2,
        d_model=128,
        num_heads=4,
        intermediate_dim=256,
        dropout=0.1,
        positions="sinusoidal",
        share_embeddings=False,
        max_length=256,
        norm_first=False,
        num_key_value_heads=None,
        sliding_window=None,
        use_gate=False,
        rotary_max_wavelength=None,
        flash_attention=None,
        copy_attention=False,
        coverage_weight=0.0,
        activation_dropout=0.0,
        **kwargs,
    ):
        super().__init__(source_vocab_size, target_vocab_size, **kwargs)
        self.num_layers = common.check_int("num_layers", num_layers)
        self.d_model = common.check_int("d_model", d_model)
        self.num_heads = common.check_int("num_heads", num_heads)
        options = AttentionOptions(
            num_key_value_heads, sliding_window, use_gate, rotary_max_wavelength, flash_attention
        )
        self.attention_options = options.checked(num_heads)
        if d_model % num_heads:
            raise ValueError(
                f"`d_model` must be divisible by `num_heads`. Received: d_model={d_model}, num_heads={num_heads}"
            )
        self.intermediate_dim = common.check_int("intermediate_dim", intermediate_dim)
        self.dropout = common.check_rate("dropout", dropout)
        self.activation_dropout = common.check_rate("activation_dropout", activation_dropout)
        self.positions = common.check_choice("positions", positions, POSITIONS)
        common.check_bool("share_embeddings", share_embeddings)
        if share_embeddings and source_vocab_size != target_vocab_size:
            raise ValueError(
                "`share_embeddings=True` needs equal vocabulary sizes. Received: "
                f"source_vocab_size={source_vocab_size}, target_vocab_size={target_vocab_size}"
            )
        self.share_embeddings = share_embeddings
        self.max_length = common.check_int("max_length", max_length)
        self.norm_first = common.check_bool("norm_first", norm_first)
        check_copy_arguments(copy_attention, coverage_weight, source_vocab_size, target_vocab_size)
        self.copy_attention = copy_attention
        self.coverage_weight = coverage_weight

        self._make_layers()

    def _make_layers(self):
        """The embeddings and positions, the encoder and decoder stacks (with their final
        norms when pre-norm), the copy generator and the output projection."""
        policy, d_model = self.dtype_policy, self.d_model
        self.source_embedding = keras.layers.Embedding(
            self.source_vocab_size, d_model, dtype=policy, name="source_embedding"
        )
        self.target_embedding = (
            self.source_embedding
            if self.share_embeddings
            else keras.layers.Embedding(
                self.target_vocab_size, d_model, dtype=policy, name="target_embedding"
            )
        )
        self.source_positions = PositionalEncoding(
            self.positions, max_length=self.max_length, dtype=policy, name="source_positions"
        )
        self.target_positions = PositionalEncoding(
            self.positions, max_length=self.max_length, dtype=policy, name="target_positions"
        )
        self.embedding_dropout = rng.Dropout(self.dropout, dtype=policy)
        layer_args = dict(
            num_heads=self.num_heads,
            intermediate_dim=self.intermediate_dim,
            dropout=self.dropout,
            activation_dropout=self.activation_dropout,
            norm_first=self.norm_first,
            dtype=policy,
            **self.attention_options.arguments(),
        )
        self.encoder_layers = [
            TransformerEncoderLayer(name=f"encoder_{i}", **layer_args)
            for i in range(self.num_layers)
        ]
        self.decoder_layers = [
            TransformerDecoderLayer(name=f"decoder_{i}", **layer_args)
            for i in range(self.num_layers)
        ]
        if self.norm_first:
            self.encoder_norm = keras.layers.LayerNormalization(
                epsilon=1e-5, dtype=policy, name="encoder_norm"
            )
            self.decoder_norm = keras.layers.LayerNormalization(
                epsilon=1e-5, dtype=policy, name="decoder_norm"
            )
        if self.copy_attention:
            self.copy_generator = CopyGenerator(self.coverage_weight, dtype=policy, name="copy")
        if self.share_embeddings:
            self.output_layer = None
        else:
            self.output_layer = keras.layers.Dense(
                self.target_vocab_size, dtype=policy, name="logits"
            )

    # ------------------------------------------------------------------ build
    def build(self, input_shape=None):
        if self.built:
            return
        shape = (None, None, self.d_model)
        self.source_embedding.build((None, None))
        if not self.share_embeddings:
            self.target_embedding.build((None, None))
        self.source_positions.build(shape)
        self.target_positions.build(shape)
        for layer in self.encoder_layers:
            layer.build(shape)
        for layer in self.decoder_layers:
            layer.build(shape, shape)
        if self.norm_first:
            self.encoder_norm.build(shape)
            self.decoder_norm.build(shape)
        if self.share_embeddings:
            self.output_bias = self.add_weight(
                name="output_bias", shape=(self.target_vocab_size,), initializer="zeros"
            )
        else:
            self.output_layer.build(shape)
        if self.copy_attention:
            self.copy_generator.build(
                memory_shape=shape, decoder_output_shape=shape, decoder_input_shape=shape
            )
        self.built = True

    def _embed(self, embedding, positions, ids, start_index=0, training=None):
        x = embedding(ids) * ops.cast(math.sqrt(self.d_model), self.compute_dtype)
        x = positions(x, start_index=start_index)
        return self.embedding_dropout(x, training=training)

    def _logits(self, x):
        if self.share_embeddings:
            table = ops.cast(self.source_embedding.embeddings, x.dtype)
            return ops.matmul(x, ops.transpose(table)) + ops.cast(self.output_bias, x.dtype)
        return self.output_layer(x)

    # ----------------------------------------------------------------- encode
    def encode(self, source_ids, training=False):
        """`source_ids [B, S]` -> `{"memory" [B, S, d_model], "source_mask" [B, S] bool}`."""
        source_ids, source_mask = common.source_ids_and_mask(source_ids)
        x = self._embed(self.source_embedding, self.source_positions, source_ids, training=training)
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=source_mask, training=training)
        if self.norm_first:
            x = self.encoder_norm(x)
        result = {"memory": x, "source_mask": source_mask}
        if self.copy_attention:
            result["source_ids"] = source_ids
        return result

    # ------------------------------------------------------------------- call
    def call(self, inputs, training=None):
        encoded, target_in, target_mask = self._teacher_forced_inputs(inputs, training)
        x = inputs_x = self._embed(
            self.target_embedding, self.target_positions, target_in, training=training
        )
        for i, layer in enumerate(self.decoder_layers):
            scores = self.copy_attention and i == self.num_layers - 1
            x = layer(
                x,
                encoded["memory"],
                decoder_padding_mask=target_mask,
                encoder_padding_mask=encoded["source_mask"],
                return_attention_scores=scores,
                training=training,
            )
            if scores:  # the last layer's cross-attention, averaged over heads: [B, T, S]
                x, weights = x[0], ops.mean(ops.cast(x[1], "float32"), axis=1)
        if self.norm_first:
            x = self.decoder_norm(x)
        if not self.copy_attention:
            return self._logits(x)
        return self.copy_generator(
            self._logits(x),
            weights,
            encoded["source_ids"],
            encoded["memory"],
            x,
            inputs_x,
            target_mask=target_mask,
            training=training,
        )

    # --------------------------------------------------------------- decoding
    # The decoding protocol (keras_attn.decoding.protocol); the step itself is the one
    # Transformer step of keras_attn.decoding.steps, shared with `transformer_step`.
    def initial_decode_state(self, encoder_outputs, max_length):
        memory = encoder_outputs["memory"]
        state = steps.transformer_initial_state(
            self.decoder_layers,
            ops.shape(memory)[0],
            max_length,
            memory,
            encoder_outputs["source_mask"],
        )
        if self.copy_attention:  # copy attention reads the memory and the ids it copies from
            state["memory"] = memory
            state["source_ids"] = ops.cast(encoder_outputs["source_ids"], "int32")
        return state

    def _decode_embed(self, ids, step):
        return self._embed(
            self.target_embedding, self.target_positions, ids, start_index=step, training=False
        )

    def _decode_project(self, x):
        return self._logits(self.decoder_norm(x) if self.norm_first else x)

    def decode_step(self, tokens, state, step):
        if not self.copy_attention:
            return steps.transformer_decode_step(
                self.decoder_layers, self._decode_embed, self._decode_project, tokens, state, step
            )
        # Copy attention: the same step, keeping the decoder output to gate and mix with.
        hidden, new_state, weights = steps.transformer_decode_step(
            self.decoder_layers,
            self._decode_embed,
            lambda x: self.decoder_norm(x) if self.norm_first else x,
            tokens,
            state,
            step,
        )
        x = self._decode_embed(ops.expand_dims(ops.cast(tokens, "int32"), 1), step)[:, 0, :]
        log_p = self.copy_generator(
            self._logits(hidden), weights, state["source_ids"], state["memory"], hidden, x
        )
        return log_p, new_state, weights

    # ----------------------------------------------------------------- config
    def get_config(self):
        config_values = config_of(
            self, Transformer.__init__, values=self.attention_options.arguments()
        )
        return {**super().get_config(), **config_values}
