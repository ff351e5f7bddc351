"""Show, Attend and Tell (Xu et al. 2015): a small CNN encoder, an LSTM decoder with soft or hard attention.

    model = ShowAttendTell(vocab_size, embedding_dim=32, units=64, attention="soft")
    model.compile("adam", MaskedSequenceLoss(), metrics=[MaskedSequenceAccuracy()])
    model.fit({"image": images, "target_in": caption_in}, caption_out)

Encoder: `len(filters)` blocks of `Conv2D(f, 3, "same", relu)` + `MaxPool(pool)` over the
image `[B, H, W, C]`; the final grid `[B, h, w, D]` is flattened into `L = h * w` annotation
vectors `a` `[B, L, D]` (row-major: position `i * w + j` is grid cell `(i, j)`).

Decoder (one step `t`, previous word `y_{t-1}`, state `(h, c)`; `h_0, c_0 = tanh(Dense(mean_i a_i))`):

- soft: `z, alpha = BahdanauAttention(h_{t-1}, a)`, gated by `beta = sigmoid(W_b h_{t-1})`
  (a scalar per example): `z <- beta z`; in training the doubly stochastic penalty
  `penalty_weight * sum_i (1 - sum_t alpha_ti)^2` (batch mean, padded steps left out) is
  added to the loss (`keras_attn.losses.doubly_stochastic_penalty`, via `add_loss`).
- hard: `z = a_s`, `s ~ Categorical(alpha)` (`HardAttention`, additive score), trained with
  REINFORCE through `HardAttentionModel` (reward: the caption's log-likelihood); argmax at
  inference.
- `h_t, c_t = LSTM([E y_{t-1}; z], (h_{t-1}, c_{t-1}))`; deep output
  `logits = L_o(dropout(E y_{t-1} + L_h h_t + L_z z))`.

Inputs: `{"image": [B, H, W, C] float, "target_in": [B, T] int32}` (pad 0 masked); output logits
`[B, T, vocab_size]`. Decoding: `encode(images)` -> `{"annotations" [B, L, D], "source_mask"
[B, L] (all True)}`; `initial_decode_state(encoder_outputs, max_length)` -> `{"h", "c",
"annotations", "projected_key", "source_mask"}`; `decode_step(tokens, state, step)` ->
`(logits, state, alpha [N, L])`.
"""

import keras
from keras import ops

from keras_attn import losses as attn_losses
from keras_attn.layers import rng
from keras_attn.layers.bahdanau import BahdanauAttention
from keras_attn.layers.base import config_of, handed_on_signature
from keras_attn.layers.hard import HardAttention
from keras_attn.models import common
from keras_attn.models.hard_attention import HardAttentionModel

ATTENTIONS = ("soft", "hard")


@keras.saving.register_keras_serializable(package="keras_attn")
class ShowAttendTell(HardAttentionModel):
    """Image captioner with soft or hard attention. See the module docstring.

    Args:
        vocab_size: caption vocabulary size (0 = padding, 1 = start, 2 = end).
        embedding_dim: word embedding size (also the deep output's size).
        units: LSTM units (and attention units).
        filters: conv filters per encoder block (the last one is `D`).
        pool: max-pool size after each block (int).
        attention: `"soft"` or `"hard"`.
        penalty_weight: weight `lambda` of the doubly stochastic penalty (soft only).
        dropout: dropout before the output layer.
        seed: seed of hard attention's draws and of dropout.
        reinforce_weight, entropy_weight, soft_mix_probability, normalize_reward: hard
            attention's training, by keyword: `HardAttentionModel`'s arguments, handed on
            (its constructor is their one table; `__signature__` shows them here too).
    """

    def __init__(
        self,
        vocab_size,
        embedding_dim=64,
        units=128,
        filters=(32, 64),
        pool=2,
        attention="soft",
        penalty_weight=1.0,
        dropout=0.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = common.check_int("vocab_size", vocab_size, 4)
        self.embedding_dim = common.check_int("embedding_dim", embedding_dim)
        self.units = common.check_int("units", units)
        filters = list(filters) if isinstance(filters, (list, tuple)) else filters
        if not isinstance(filters, list) or not filters:
            raise ValueError(
                f"`filters` must be a non-empty list of positive ints. Received: filters={filters!r}"
            )
        for f in filters:
            common.check_int("filters", f)
        self.filters = filters
        self.pool = common.check_int("pool", pool)
        self.attention = common.check_choice("attention", attention, ATTENTIONS)
        self.penalty_weight = common.check_non_negative("penalty_weight", penalty_weight)
        self.dropout = common.check_rate("dropout", dropout)
        self.seed = seed

        policy = self.dtype_policy
        self.convs = [
            keras.layers.Conv2D(
                f, 3, padding="same", activation="relu", dtype=policy, name=f"conv_{i}"
            )
            for i, f in enumerate(filters)
        ]
        self.pools = [
            keras.layers.MaxPooling2D(pool, padding="same", dtype=policy, name=f"pool_{i}")
            for i in range(len(filters))
        ]
        self.init_h = keras.layers.Dense(units, activation="tanh", dtype=policy, name="init_h")
        self.init_c = keras.layers.Dense(units, activation="tanh", dtype=policy, name="init_c")
        self.embedding = keras.layers.Embedding(
            vocab_size, embedding_dim, dtype=policy, name="embedding"
        )
        if attention == "soft":
            self.attention_layer = BahdanauAttention(units, dtype=policy, name="attention")
            self.gate = keras.layers.Dense(1, activation="sigmoid", dtype=policy, name="beta")
        else:
            self.attention_layer = HardAttention(
                "additive", units=units, seed=seed, dtype=policy, name="attention"
            )
            self.gate = None
        self.lstm = keras.layers.LSTMCell(units, dtype=policy, name="lstm")
        self.out_h = keras.layers.Dense(embedding_dim, dtype=policy, name="out_h")
        self.out_z = keras.layers.Dense(embedding_dim, dtype=policy, name="out_z")
        self.dropout_layer = rng.Dropout(self.dropout, seed=seed, dtype=policy)
        self.output_layer = keras.layers.Dense(vocab_size, dtype=policy, name="logits")

    # ------------------------------------------------------------------ build
    def build(self, input_shape=None):
        if self.built:
            return
        channels = 1
        if isinstance(input_shape, dict) and input_shape.get("image") is not None:
            channels = input_shape["image"][-1]
        self.channels = channels
        shape = (None, None, None, channels)
        for conv, pool in zip(self.convs, self.pools):
            conv.build(shape)
            shape = (None, None, None, conv.filters)
            pool.build(shape)
        d = self.filters[-1]
        self.init_h.build((None, d))
        self.init_c.build((None, d))
        self.embedding.build((None, None))
        self.attention_layer.build((None, self.units), (None, None, d))
        if self.gate is not None:
            self.gate.build((None, self.units))
        self.lstm.build((None, self.embedding_dim + d))
        self.out_h.build((None, self.units))
        self.out_z.build((None, d))
        self.output_layer.build((None, self.embedding_dim))
        self.built = True

    def get_build_config(self):
        return {"input_shape": {"image": (None, None, None, getattr(self, "channels", 1))}}

    # ----------------------------------------------------------------- encode
    def encode(self, images, training=False):
        """`images [B, H, W, C]` -> `{"annotations" [B, L, D], "source_mask" [B, L] bool}`."""
        x = ops.cast(ops.convert_to_tensor(images), self.compute_dtype)
        for conv, pool in zip(self.convs, self.pools):
            x = pool(conv(x))
        shape = ops.shape(x)
        annotations = ops.reshape(x, (shape[0], shape[1] * shape[2], self.filters[-1]))
        mask = ops.ones((shape[0], shape[1] * shape[2]), dtype="bool")
        return {"annotations": annotations, "source_mask": mask}

    def initial_decode_state(self, encoder_outputs, max_length=None):
        a = encoder_outputs["annotations"]
        mean = ops.mean(a, axis=1)
        return {
            "h": self.init_h(mean),
            "c": self.init_c(mean),
            "annotations": a,
            "projected_key": self.attention_layer.project_keys(a),
            "source_mask": ops.cast(encoder_outputs["source_mask"], "bool"),
        }

    # ------------------------------------------------------------------- step
    def _step(self, y, state, training):
        """One decoder step on embedded words `y [N, E]`; returns `(logits, h, c, alpha)`."""
        h, c = state["h"], state["c"]
        z, alpha = self.attention_layer(
            h,
            state["annotations"],
            value_mask=state["source_mask"],
            projected_key=state["projected_key"],
            return_attention_scores=True,
            training=training,
        )[:2]
        if self.gate is not None:
            z = self.gate(h) * z
        out, (h, c) = self.lstm(
            ops.concatenate([y, ops.cast(z, y.dtype)], axis=-1), [h, c], training=training
        )
        deep = y + self.out_h(out) + self.out_z(z)
        logits = self.output_layer(self.dropout_layer(deep, training=training))
        return logits, h, c, alpha

    def decode_step(self, tokens, state, step):
        y = self.embedding(ops.cast(tokens, "int32"))
        logits, h, c, alpha = self._step(y, state, training=False)
        new_state = dict(state)
        new_state["h"], new_state["c"] = (
            ops.cast(h, state["h"].dtype),
            ops.cast(c, state["c"].dtype),
        )
        return logits, new_state, ops.cast(alpha, "float32")

    # ------------------------------------------------------------------- call
    def call(self, inputs, training=None):
        if not isinstance(inputs, dict) or "image" not in inputs or "target_in" not in inputs:
            raise ValueError(
                "Inputs must be a dict {'image': [B, H, W, C], 'target_in': [B, T]}. "
                f"Received: {sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__}"
            )
        encoded = self.encode(inputs["image"], training=training)
        state = self.initial_decode_state(encoded)
        target_in = ops.cast(inputs["target_in"], "int32")
        target_mask = ops.not_equal(target_in, common.PAD_ID)
        y = self.embedding(target_in)
        layer = self.attention_layer
        recording = bool(training) and self.attention == "hard" and layer.record_samples
        batch = ops.shape(y)[0]
        zero = ops.zeros((batch,), dtype="float32")
        logits0 = ops.zeros((batch, self.vocab_size), dtype=self.compute_dtype)
        alpha0 = ops.zeros(ops.shape(state["source_mask"]), dtype="float32")
        fixed = {k: state[k] for k in ("annotations", "projected_key", "source_mask")}

        def step(t, carry, y_t):
            h, c = carry
            logits, h, c, alpha = self._step(y_t, dict(fixed, h=h, c=c), training)
            records = layer.pop_sample_records() if recording else []
            log_prob = ops.reshape(records[0][0], (-1,)) if records else zero
            entropy = ops.reshape(records[0][1], (-1,)) if records else zero
            carry = (ops.cast(h, carry[0].dtype), ops.cast(c, carry[1].dtype))
            return carry, (logits, ops.cast(alpha, "float32"), log_prob, entropy)

        _, (logits, alphas, log_probs, entropies) = common.run_steps(
            step, (state["h"], state["c"]), y, (logits0, alpha0, zero, zero), owner=self
        )
        if recording:
            m = ops.cast(target_mask, "float32")
            layer._sample_records.append((log_probs * m, entropies * m))
        if training and self.attention == "soft" and self.penalty_weight > 0:
            penalty = attn_losses.doubly_stochastic_penalty(alphas, query_mask=target_mask)
            self.add_loss(self.penalty_weight * penalty)
        return logits

    def example_log_likelihood(self, x, y, y_pred, sample_weight=None):
        return common.sequence_reward(y, y_pred)

    # ----------------------------------------------------------------- config
    def get_config(self):
        config = {**super().get_config(), **config_of(self, ShowAttendTell.__init__)}
        config["filters"] = list(self.filters)
        return config


ShowAttendTell.__init__.__signature__ = handed_on_signature(
    ShowAttendTell.__init__, HardAttentionModel.__init__
)
