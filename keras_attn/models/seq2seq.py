"""RNN encoder-decoder with attention (Bahdanau et al. 2015; Luong et al. 2015; hard attention).

    model = RNNSeq2Seq(source_vocab_size, target_vocab_size, embedding_dim=64, units=128,
                       attention="luong", score="general", alignment="local-p", window=5)
    model.compile("adam", MaskedSequenceLoss(), metrics=[MaskedSequenceAccuracy()])
    model.fit({"source": src, "target_in": tgt_in}, tgt_out)   # see models.common.teacher_forcing

Architecture:
- encoder: `Embedding(source_vocab_size, embedding_dim)` -> bidirectional LSTM/GRU (`units`
  per direction, source padding masked) -> `Dense(units)` over `[forward; backward]`: the
  memory `[B, S, units]` the decoder attends to (one size, so the Luong dot score works);
- bridge: the decoder's initial states are `tanh(Dense([h_fwd_last; h_bwd_first]))`
  (for an LSTM also the cell state, from the encoder's cell states);
- decoder: `Embedding(target_vocab_size, embedding_dim)` -> `AttentionRNNCell` over the
  memory. `attention="bahdanau"`: `BahdanauAttention`, Bahdanau style (attend with
  `s_{i-1}`), logits `Dense(V)([s_i; c_i])`. `attention="luong"`: `LuongAttention(score,
  alignment, window)`, Luong style with input feeding, logits `Dense(V)(h~_t)`.
  `attention="hard"`: `HardAttention(score)` in Bahdanau style, trained with REINFORCE
  (the model is a `HardAttentionModel`: plain `fit` adds the REINFORCE term; the reward is
  the log-likelihood of the target, `models.common.sequence_reward`).

Inputs (teacher forcing): `{"source": [B, S] int32, "target_in": [B, T] int32}`, pad id 0
masked on both sides. Output: logits `[B, T, target_vocab_size]`.

Decoding interface (`keras_attn.decoding` searches and `keras_attn.serving` export):
`encode(source_ids)` -> `{"memory", "source_mask", "initial_states"...}`;
`initial_decode_state(encoder_outputs, max_length)` -> `{"cell": [...], "per_example":
{"memory", "source_mask", "projected_key"}}` (keys projected once; one row per example, read
by its K hypotheses; beside `"cell"` and tiled with Luong local-m, hard or copy attention,
docs/decoding.md); `decode_step(tokens, state, step)`
-> `(logits [N, V], state, attention [N, S])`.
"""

import keras
from keras import ops

from keras_attn.decoding import steps
from keras_attn.layers import rng
from keras_attn.layers.attention_cell import AttentionDecoder, AttentionRNNCell
from keras_attn.layers.bahdanau import BahdanauAttention
from keras_attn.layers.base import config_of, handed_on_signature
from keras_attn.layers.hard import HardAttention
from keras_attn.layers.luong import ALIGNMENTS, LUONG_SCORES, LuongAttention
from keras_attn.layers.scoring import SCORES as HARD_SCORES
from keras_attn.models import common
from keras_attn.models.copy import CopyGenerator, check_copy_arguments
from keras_attn.models.hard_attention import HardAttentionModel

CELLS = ("lstm", "gru")
ATTENTIONS = ("bahdanau", "luong", "hard")


@keras.saving.register_keras_serializable(package="keras_attn")
class RNNSeq2Seq(common.Translator, HardAttentionModel):
    """Bidirectional RNN encoder, attention RNN decoder. See the module docstring.

    Args:
        source_vocab_size, target_vocab_size: vocabulary sizes (ids 0..V-1, 0 = padding).
        embedding_dim: size of both embeddings.
        units: encoder units per direction, memory size and decoder units.
        cell: `"lstm"` or `"gru"` (encoder and decoder).
        attention: `"bahdanau"`, `"luong"` or `"hard"`.
        score: Luong: `"dot"`, `"general"` (default) or `"concat"`; hard: `"additive"`
            (default), `"dot"`, `"general"` or `"concat"`; Bahdanau: None or `"additive"`.
        alignment: Luong only: `"global"` (default), `"local-m"` or `"local-p"`.
        window: Luong local window half-width `D` (default 10).
        dropout: dropout on the embeddings and on the decoder outputs before the logits.
        seed: seed of hard attention's draws.
        reinforce_weight, entropy_weight, soft_mix_probability, normalize_reward: hard
            attention's training, by keyword, ignored by the other attentions:
            `HardAttentionModel`'s arguments, handed on (its constructor is their one table;
            `__signature__` shows them here too).
        copy_attention: mix copying source tokens through the attention into the output
            (`keras_attn.models.copy`, See et al. 2017); needs one shared vocabulary. The model
            then returns log-probabilities where it returned logits.
        coverage_weight: copy attention's coverage loss weight (0: none).
    """

    def __init__(
        self,
        source_vocab_size,
        target_vocab_size,
        embedding_dim=64,
        units=128,
        cell="lstm",
        attention="bahdanau",
        score=None,
        alignment="global",
        window=10,
        dropout=0.0,
        seed=None,
        copy_attention=False,
        coverage_weight=0.0,
        **kwargs,
    ):
        super().__init__(source_vocab_size, target_vocab_size, **kwargs)
        self.embedding_dim = common.check_int("embedding_dim", embedding_dim)
        self.units = common.check_int("units", units)
        self.cell = common.check_choice("cell", cell, CELLS)
        self.attention = common.check_choice("attention", attention, ATTENTIONS)
        self.alignment = common.check_choice("alignment", alignment, ALIGNMENTS)
        self.window = common.check_int("window", window)
        self.dropout = common.check_rate("dropout", dropout)
        self.seed = seed
        self.score = _checked_score(attention, score, alignment)
        check_copy_arguments(copy_attention, coverage_weight, source_vocab_size, target_vocab_size)
        if copy_attention and attention == "hard":
            raise ValueError(
                "`copy_attention=True` needs soft attention. Received: attention='hard'"
            )
        self.copy_attention = copy_attention
        self.coverage_weight = coverage_weight

        self._make_encoder()
        self._make_decoder()

    def _make_encoder(self):
        """The embeddings, the bidirectional encoder, the memory projection and the bridges
        to the decoder's initial states."""
        policy, units = self.dtype_policy, self.units
        self.source_embedding = keras.layers.Embedding(
            self.source_vocab_size, self.embedding_dim, dtype=policy, name="source_embedding"
        )
        self.target_embedding = keras.layers.Embedding(
            self.target_vocab_size, self.embedding_dim, dtype=policy, name="target_embedding"
        )
        rnn = keras.layers.LSTM if self.cell == "lstm" else keras.layers.GRU
        self.encoder_rnn = keras.layers.Bidirectional(
            rnn(units, return_sequences=True, return_state=True, dtype=policy),
            merge_mode="concat",
            dtype=policy,
            name="encoder_rnn",
        )
        self.memory_projection = keras.layers.Dense(units, dtype=policy, name="memory_projection")
        self.bridges = [
            keras.layers.Dense(units, activation="tanh", dtype=policy, name=f"bridge_{i}")
            for i in range(2 if self.cell == "lstm" else 1)
        ]

    def _make_decoder(self):
        """The attention layer, the attention cell and decoder over it, the copy generator
        and the output layer."""
        policy, units = self.dtype_policy, self.units
        decoder_cell = (keras.layers.LSTMCell if self.cell == "lstm" else keras.layers.GRUCell)(
            units, dtype=policy, name="decoder_cell"
        )
        if self.attention == "bahdanau":
            layer = BahdanauAttention(units, dtype=policy, name="attention")
            style = "bahdanau"
        elif self.attention == "luong":
            layer = LuongAttention(
                score=self.score,
                alignment=self.alignment,
                window=self.window,
                dtype=policy,
                name="attention",
            )
            style = "luong"
        else:
            layer = HardAttention(score=self.score, seed=self.seed, dtype=policy, name="attention")
            style = "bahdanau"
        self.attention_layer = layer
        self.decoder_cell = AttentionRNNCell(
            decoder_cell,
            layer,
            style=style,
            output_context=(style == "bahdanau"),
            dtype=policy,
            name="attention_cell",
        )
        self.decoder = AttentionDecoder(
            self.decoder_cell, return_attention=self.copy_attention, dtype=policy, name="decoder"
        )
        if self.copy_attention:
            self.copy_generator = CopyGenerator(self.coverage_weight, dtype=policy, name="copy")
        self.dropout_layer = rng.Dropout(self.dropout, seed=self.seed, dtype=policy)
        self.output_layer = keras.layers.Dense(self.target_vocab_size, dtype=policy, name="logits")

    # ------------------------------------------------------------------ build
    def build(self, input_shape=None):
        if self.built:
            return
        b = None
        self.source_embedding.build((b, None))
        self.target_embedding.build((b, None))
        self.encoder_rnn.build((b, None, self.embedding_dim))
        self.memory_projection.build((b, None, 2 * self.units))
        for bridge in self.bridges:
            bridge.build((b, 2 * self.units))
        memory_shape = (b, None, self.units)
        self.decoder_cell.build((b, self.embedding_dim), memory_shape)
        self.decoder.build((b, None, self.embedding_dim), memory_shape)
        self.output_layer.build((b, self.decoder_cell.output_size))
        if self.copy_attention:
            self.copy_generator.build(
                memory_shape=memory_shape,
                decoder_output_shape=(b, self.decoder_cell.output_size),
                decoder_input_shape=(b, self.embedding_dim),
            )
        self.built = True

    # ----------------------------------------------------------------- encode
    def encode(self, source_ids, training=False):
        """`source_ids [B, S]` -> `{"memory" [B, S, units], "source_mask" [B, S] bool,
        "state_0", ...}` (the decoder's initial cell states)."""
        source_ids, source_mask = common.source_ids_and_mask(source_ids)
        x = self.dropout_layer(self.source_embedding(source_ids), training=training)
        outputs = self.encoder_rnn(x, mask=source_mask, training=training)
        sequence, states = outputs[0], outputs[1:]
        memory = self.memory_projection(sequence)
        n = len(states) // 2  # forward states, then backward states
        forward, backward = states[:n], states[n:]
        result = {"memory": memory, "source_mask": source_mask}
        if self.copy_attention:
            result["source_ids"] = source_ids
        for i, bridge in enumerate(self.bridges):
            result[f"state_{i}"] = bridge(ops.concatenate([forward[i], backward[i]], axis=-1))
        return result

    def _initial_cell_states(self, encoder_outputs):
        states = [encoder_outputs[f"state_{i}"] for i in range(len(self.bridges))]
        extra = self.decoder_cell.state_size[len(states) :]  # Luong input feeding: h~_0 = 0
        batch = ops.shape(states[0])[0]
        states += [ops.zeros((batch, size), dtype=states[0].dtype) for size in extra]
        return states

    # ------------------------------------------------------------------- call
    def call(self, inputs, training=None):
        encoded, target_in, target_mask = self._teacher_forced_inputs(inputs, training)
        memory, source_mask = encoded["memory"], encoded["source_mask"]
        y = self.dropout_layer(self.target_embedding(target_in), training=training)
        states = self._initial_cell_states(encoded)
        if self.attention == "hard" and training:
            outputs = self._hard_decoder(y, memory, source_mask, target_mask, states, training)
        else:
            outputs = self.decoder(
                y,
                memory,
                memory_mask=source_mask,
                initial_state=states,
                mask=target_mask,
                training=training,
            )
        if not self.copy_attention:
            return self.output_layer(self.dropout_layer(outputs, training=training))
        outputs, weights = outputs
        logits = self.output_layer(self.dropout_layer(outputs, training=training))
        return self.copy_generator(
            logits,
            weights,
            encoded["source_ids"],
            memory,
            outputs,
            y,
            target_mask=target_mask,
            training=training,
        )

    def _hard_decoder(self, y, memory, source_mask, target_mask, states, training):
        """Teacher-forced loop for hard attention in training: carries each step's
        `(log_prob, entropy)` out of the loop and records them on the layer for
        `HardAttentionModel.compute_loss` (padded target steps count 0)."""
        cell, layer = self.decoder_cell, self.attention_layer
        keys = cell.project_memory(memory)
        batch = ops.shape(y)[0]
        recording = layer.record_samples
        zero = ops.zeros((batch,), dtype="float32")
        out0 = ops.zeros((batch, cell.output_size), dtype=self.compute_dtype)

        def step(t, carry, x_t):
            out, new_states, _ = cell.loop_step(x_t, carry, memory, source_mask, keys, t, training)
            records = layer.pop_sample_records() if recording else []
            log_prob = ops.reshape(records[0][0], (-1,)) if records else zero
            entropy = ops.reshape(records[0][1], (-1,)) if records else zero
            return tuple(new_states), (out, log_prob, entropy)

        _, (outs, log_probs, entropies) = common.run_steps(
            step, tuple(states), y, (out0, zero, zero), owner=self
        )
        if recording:
            m = ops.cast(target_mask, "float32")
            layer._sample_records.append((log_probs * m, entropies * m))
        return outs

    def example_log_likelihood(self, x, y, y_pred, sample_weight=None):
        return common.sequence_reward(y, y_pred)

    # --------------------------------------------------------------- decoding
    # The decoding protocol (keras_attn.decoding.protocol); the step itself is the one
    # RNN step of keras_attn.decoding.steps, shared with `rnn_step`.
    def initial_decode_state(self, encoder_outputs, max_length=None):
        state = steps.rnn_initial_state(
            self.decoder_cell,
            encoder_outputs["memory"],
            encoder_outputs["source_mask"],
            self._initial_cell_states(encoder_outputs),
            # copy attention mixes the memory into each hypothesis' output: kept tiled
            per_example=not self.copy_attention,
        )
        if self.copy_attention:  # the ids copied from, tiled to the beams with the rest
            state["source_ids"] = ops.cast(encoder_outputs["source_ids"], "int32")
        return state

    def decode_step(self, tokens, state, step):
        if not self.copy_attention:
            return steps.rnn_decode_step(
                self.decoder_cell, self.target_embedding, self.output_layer, tokens, state, step
            )
        # Copy attention: the same step, keeping the cell's output to gate and mix with.
        output, new_state, weights = steps.rnn_decode_step(
            self.decoder_cell, self.target_embedding, lambda out: out, tokens, state, step
        )
        log_p = self.copy_generator(
            self.output_layer(output),
            weights,
            state["source_ids"],
            state["memory"],
            output,
            self.target_embedding(ops.cast(tokens, "int32")),
        )
        return log_p, new_state, weights

    # ----------------------------------------------------------------- config
    def get_config(self):
        return {**super().get_config(), **config_of(self, RNNSeq2Seq.__init__)}


RNNSeq2Seq.__init__.__signature__ = handed_on_signature(
    RNNSeq2Seq.__init__, HardAttentionModel.__init__
)


def _checked_score(attention, score, alignment):
    """The score of `attention` (its default for None); a score or a local alignment that
    the attention does not have is refused."""
    if attention == "bahdanau":
        if score not in (None, "additive"):
            raise ValueError(
                "Bahdanau attention has only the additive score. "
                f"Received: score={score!r} with attention='bahdanau'"
            )
        score = None
    elif attention == "luong":
        score = common.check_choice("score", score or "general", LUONG_SCORES)
    else:
        score = common.check_choice("score", score or "additive", HARD_SCORES)
    if attention != "luong" and alignment != "global":
        raise ValueError(
            "Local alignments are Luong attention's. "
            f"Received: alignment={alignment!r} with attention={attention!r}"
        )
    return score
