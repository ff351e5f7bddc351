"""Convolutional sequence to sequence learning (ConvS2S, Gehring et al. 2017).

    model = ConvS2S(source_vocab_size, target_vocab_size, embedding_dim=64, hidden_dim=128,
                    num_layers=4, kernel_size=3)
    model.compile("adam", MaskedSequenceLoss(), metrics=[MaskedSequenceAccuracy()])
    model.fit({"source": src, "target_in": tgt_in}, tgt_out)

Architecture: token embedding + learned position embedding (`E`) for source and target;
encoder: `E -> H` projection, `num_layers` blocks of [convolution (`kernel_size`, 2H channels,
"same" padding) -> GLU -> residual, scaled by `sqrt(0.5)`], `H -> E` projection giving `z`;
attention values are `z + e` (`e` the source embedding). Decoder: `E -> H` projection,
`num_layers` blocks of [causal convolution -> GLU -> `MultiStepAttention(h, g, z, e)` -> `E -> H`
projection of the context added to `h` (scaled by `sqrt(0.5)`) -> residual (scaled by
`sqrt(0.5)`)], then `H -> E -> V` logits. Every decoder layer attends on its own, with
`g` the target embedding. Source padding is zeroed before every encoder convolution and masked in
the attention. (The paper's weight normalisation and its gradient scaling of the encoder are left
out; dropout is applied to embeddings and before every convolution.)

Decoding: `encode(source_ids)` -> `{"memory" z, "source_embedding" e, "source_mask"}`;
`initial_decode_state(encoder_outputs, max_length)` adds `"conv_states"`: for each decoder layer
its last `kernel_size - 1` inputs `[B, kernel_size - 1, H]` (zeros: the causal padding);
`decode_step(tokens, state, step)` embeds the token at position `step`, runs each layer's
convolution on its state plus the new input (one output position), shifts the states and returns
the logits `[N, V]`, the state and the last layer's attention `[N, S]`. Fed the teacher-forced
target token by token this gives the teacher-forced logits. The searches in `keras_attn.decoding`
and the exporter in `keras_attn.serving` use it as they use the other translators.
"""

import math

import keras
from keras import ops

from keras_attn.layers import rng
from keras_attn.layers.base import config_of
from keras_attn.layers.multi_step import MultiStepAttention
from keras_attn.models import common

_HALF = math.sqrt(0.5)


@keras.saving.register_keras_serializable(package="keras_attn")
class ConvS2S(common.Translator):
    """ConvS2S encoder-decoder. See the module docstring.

    Args:
        source_vocab_size, target_vocab_size: vocabulary sizes (0 = padding).
        embedding_dim: `E`, token and position embeddings, attention space.
        hidden_dim: `H`, the convolution channels.
        num_layers: convolution blocks in the encoder and in the decoder (each).
        kernel_size: convolution width (odd, so the encoder's "same" padding is centred).
        dropout: dropout rate.
        max_length: longest source / target (the position tables' size).
    """

    def __init__(
        self,
        source_vocab_size,
        target_vocab_size,
        embedding_dim=64,
        hidden_dim=128,
        num_layers=4,
        kernel_size=3,
        dropout=0.1,
        max_length=256,
        **kwargs,
    ):
        super().__init__(source_vocab_size, target_vocab_size, **kwargs)
        self.embedding_dim = common.check_int("embedding_dim", embedding_dim)
        self.hidden_dim = common.check_int("hidden_dim", hidden_dim)
        self.num_layers = common.check_int("num_layers", num_layers)
        self.kernel_size = common.check_int("kernel_size", kernel_size)
        if kernel_size % 2 == 0:
            raise ValueError(f"`kernel_size` must be odd. Received: kernel_size={kernel_size}")
        self.dropout = common.check_rate("dropout", dropout)
        self.max_length = common.check_int("max_length", max_length)
        policy = self.dtype_policy
        e, h, k = embedding_dim, hidden_dim, kernel_size
        self.source_embedding = keras.layers.Embedding(
            source_vocab_size, e, dtype=policy, name="source_embedding"
        )
        self.target_embedding = keras.layers.Embedding(
            target_vocab_size, e, dtype=policy, name="target_embedding"
        )
        self.source_positions = keras.layers.Embedding(
            max_length, e, dtype=policy, name="source_positions"
        )
        self.target_positions = keras.layers.Embedding(
            max_length, e, dtype=policy, name="target_positions"
        )
        self.encoder_in = keras.layers.Dense(h, dtype=policy, name="encoder_in")
        self.encoder_convs = [
            keras.layers.Conv1D(2 * h, k, padding="same", dtype=policy, name=f"encoder_conv_{i}")
            for i in range(num_layers)
        ]
        self.encoder_out = keras.layers.Dense(e, dtype=policy, name="encoder_out")
        self.decoder_in = keras.layers.Dense(h, dtype=policy, name="decoder_in")
        self.decoder_convs = [
            keras.layers.Conv1D(2 * h, k, padding="valid", dtype=policy, name=f"decoder_conv_{i}")
            for i in range(num_layers)
        ]
        self.attentions = [
            MultiStepAttention(dtype=policy, name=f"attention_{i}") for i in range(num_layers)
        ]
        self.context_out = [
            keras.layers.Dense(h, dtype=policy, name=f"context_out_{i}") for i in range(num_layers)
        ]
        self.decoder_out = keras.layers.Dense(e, dtype=policy, name="decoder_out")
        self.output_layer = keras.layers.Dense(target_vocab_size, dtype=policy, name="logits")
        self.drop = rng.Dropout(dropout, dtype=policy)

    def build(self, input_shape=None):
        if self.built:
            return
        e, h, k = self.embedding_dim, self.hidden_dim, self.kernel_size
        for layer in (
            self.source_embedding,
            self.target_embedding,
            self.source_positions,
            self.target_positions,
        ):
            layer.build((None, None))
        self.encoder_in.build((None, None, e))
        self.decoder_in.build((None, None, e))
        for i in range(self.num_layers):
            self.encoder_convs[i].build((None, None, h))
            self.decoder_convs[i].build((None, k, h))
            self.attentions[i].build(
                (None, None, h), (None, None, e), (None, None, e), (None, None, e)
            )
            self.context_out[i].build((None, None, e))
        self.encoder_out.build((None, None, h))
        self.decoder_out.build((None, None, h))
        self.output_layer.build((None, None, e))
        self.built = True

    # --------------------------------------------------------------------- pieces
    def _embed(self, table, positions, ids, start_index=0, training=None):
        length = ops.shape(ids)[1]
        index = ops.arange(length, dtype="int32") + ops.cast(start_index, "int32")
        index = ops.minimum(index, self.max_length - 1)
        x = table(ids) + ops.expand_dims(positions(index), 0)
        return self.drop(x, training=training)

    @staticmethod
    def _glu(x):
        a, b = ops.split(x, 2, axis=-1)
        return a * ops.sigmoid(b)

    def _decoder_layer(self, i, x, window, g, encoded, training):
        """One decoder block. `window` = the convolution's input `[B, T + k - 1, H]`."""
        h = self._glu(self.decoder_convs[i](self.drop(window, training=training)))
        c, a = self.attentions[i](
            h,
            g,
            encoded["memory"],
            encoded["source_embedding"],
            source_mask=encoded["source_mask"],
            return_attention_scores=True,
        )
        h = (h + self.context_out[i](c)) * _HALF
        return (h + x) * _HALF, a

    # -------------------------------------------------------------------- encode
    def encode(self, source_ids, training=False):
        """`source_ids [B, S]` -> `{"memory" z [B, S, E], "source_embedding" e, "source_mask" [B, S]}`."""
        source_ids, mask = common.source_ids_and_mask(source_ids)
        keep = ops.expand_dims(ops.cast(mask, self.compute_dtype), -1)
        e = self._embed(self.source_embedding, self.source_positions, source_ids, training=training)
        x = self.encoder_in(e)
        for conv in self.encoder_convs:
            y = self._glu(conv(self.drop(x * keep, training=training)))
            x = (y + x) * _HALF
        z = self.encoder_out(x) * keep
        return {"memory": z, "source_embedding": e * keep, "source_mask": mask}

    # ---------------------------------------------------------------------- call
    def call(self, inputs, training=None):
        encoded, target_in, _ = self._teacher_forced_inputs(inputs, training)
        g = self._embed(self.target_embedding, self.target_positions, target_in, training=training)
        x = self.decoder_in(g)
        pad = self.kernel_size - 1
        for i in range(self.num_layers):
            window = ops.pad(x, ((0, 0), (pad, 0), (0, 0)))  # causal: position t sees t-k+1..t
            x, _ = self._decoder_layer(i, x, window, g, encoded, training)
        return self.output_layer(self.drop(self.decoder_out(x), training=training))

    # ------------------------------------------------------------------ decoding
    def initial_decode_state(self, encoder_outputs, max_length=None):
        memory = encoder_outputs["memory"]
        zeros = ops.zeros(
            (ops.shape(memory)[0], self.kernel_size - 1, self.hidden_dim), dtype=memory.dtype
        )
        return {
            "memory": memory,
            "source_embedding": encoder_outputs["source_embedding"],
            "source_mask": ops.cast(encoder_outputs["source_mask"], "bool"),
            "conv_states": [zeros for _ in range(self.num_layers)],
        }

    def decode_step(self, tokens, state, step):
        tokens = ops.expand_dims(ops.cast(tokens, "int32"), 1)
        g = self._embed(
            self.target_embedding, self.target_positions, tokens, start_index=step, training=False
        )
        x = self.decoder_in(g)
        new_states, attention = [], None
        for i in range(self.num_layers):
            window = ops.concatenate(
                [ops.cast(state["conv_states"][i], x.dtype), x], axis=1
            )  # [N, k, H]
            new_states.append(window[:, 1:])
            x, attention = self._decoder_layer(i, x, window, g, state, False)
        logits = self.output_layer(self.decoder_out(x))[:, 0, :]
        new_state = dict(state)
        new_state["conv_states"] = new_states
        return logits, new_state, ops.cast(attention[:, 0, :], "float32")

    def get_config(self):
        return {**super().get_config(), **config_of(self, ConvS2S.__init__)}
