"""What the example models share: the masked sequence loss and accuracy for
`compile`, the teacher-forcing split, and a step loop that can carry extra
per-step outputs (hard attention's samples) out of the loop.

Data convention of every text model (ids from `keras_attn.text`: pad 0,
start 1, end 2, unk 3):

    x = {"source": source_ids [B, S], "target_in": [start, y_1, ..., y_n, pad...]}
    y = [y_1, ..., y_n, end, pad...]                                   # [B, T]

`teacher_forcing(target_ids)` splits `[start, y_1, ..., y_n, end, pad...]`
into `(target_in, target_out)`. The loss and the accuracy ignore positions
where `y == 0` (padding).

Backends and XLA: the models run on TensorFlow and on JAX (`fit`, `encode`,
`initial_decode_state`, `decode_step`; tests/models/test_models_jax.py); the exporters need
TensorFlow. On TensorFlow they train with `compile(jit_compile=True)` (checked by hand for
every attention, unknown batch size included; XLA compiles are too slow for the test suite);
on JAX `fit` compiles the step with `jax.jit` by default.
"""

import keras
from keras import ops

from keras_attn import losses as attn_losses
from keras_attn._checks import (  # noqa: F401  (the models' checks)
    check_bool,
    check_choice,
    check_int,
    check_non_negative,
    check_rate,
)
from keras_attn._ids import END_ID, PAD_ID, START_ID  # noqa: F401  (re-exported ids)


def bidirectional_gru(units, policy, name):
    """A bidirectional GRU encoder: each position's forward and backward states concatenated,
    `[B, T, 2 units]`."""
    return keras.layers.Bidirectional(
        keras.layers.GRU(units, return_sequences=True, dtype=policy), dtype=policy, name=name
    )


class Translator(keras.Model):
    """What the translation models (`RNNSeq2Seq`, `Transformer`, `ConvS2S`) share: the two
    vocabulary sizes, each >= 4 (padding, start, end and a token at least), checked; the
    teacher-forced call's inputs read (`_teacher_forced_inputs`); the source's ids and padding
    mask (`source_ids_and_mask`); every layer made from the constructor's arguments, so a
    loaded model is built from them."""

    def __init__(self, source_vocab_size, target_vocab_size, **kwargs):
        super().__init__(**kwargs)
        self.source_vocab_size = check_int("source_vocab_size", source_vocab_size, 4)
        self.target_vocab_size = check_int("target_vocab_size", target_vocab_size, 4)

    def get_build_config(self):
        return {"input_shape": None}

    def _teacher_forced_inputs(self, inputs, training):
        """`(encoded, target_in, target_mask)` of a teacher-forced call: the source encoded
        (`encode`), the int32 target ids fed and their mask (True off padding)."""
        source_ids, target_in = split_inputs(inputs)
        encoded = self.encode(source_ids, training=training)
        target_in = ops.cast(target_in, "int32")
        return encoded, target_in, ops.not_equal(target_in, PAD_ID)


def split_inputs(inputs):
    """`(source ids, target_in ids)` of a translation model's inputs: `{"source": ids,
    "target_in": ids}` or a pair."""
    if isinstance(inputs, dict):
        missing = [k for k in ("source", "target_in") if k not in inputs]
        if missing:
            raise ValueError(
                "Inputs must be a dict with 'source' and 'target_in'. "
                f"Received: keys={sorted(inputs)}"
            )
        return inputs["source"], inputs["target_in"]
    if isinstance(inputs, (list, tuple)) and len(inputs) == 2:
        return inputs[0], inputs[1]
    raise ValueError(
        "Inputs must be {'source': ids, 'target_in': ids} (or a pair). "
        f"Received: {type(inputs).__name__}"
    )


def source_ids_and_mask(source_ids):
    """`(ids, mask)`: `source_ids [B, S]` as int32 and its mask, True off padding."""
    source_ids = ops.cast(ops.convert_to_tensor(source_ids), "int32")
    return source_ids, ops.not_equal(source_ids, PAD_ID)


class WordIdModel(keras.Model):
    """What the models over word ids (`HierarchicalAttentionNetwork`,
    `AttentionOverAttentionReader`) share: `vocab_size` (>= 2: padding and a word),
    `embedding_dim` and `dropout` checked, the word embedding `embedding` and the
    `embedding_dropout` on its output; every layer made from the constructor's arguments, so
    a loaded model is built from them."""

    def __init__(self, vocab_size, embedding_dim, dropout, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = check_int("vocab_size", vocab_size, 2)
        self.embedding_dim = check_int("embedding_dim", embedding_dim)
        self.dropout = check_rate("dropout", dropout)
        policy = self.dtype_policy
        self.embedding = keras.layers.Embedding(
            vocab_size, embedding_dim, dtype=policy, name="embedding"
        )
        self.embedding_dropout = keras.layers.Dropout(dropout, dtype=policy)

    def get_build_config(self):
        return {"input_shape": None}


def teacher_forcing(target_ids):
    """`[B, T+1]` ids `start y_1 .. y_n end pad..` -> `(target_in, target_out)`, each `[B, T]`.

    `target_in` keeps everything but the last column and has the end token
    replaced by padding, so both halves have the same unpadded length.
    """
    target_ids = ops.convert_to_tensor(target_ids, "int32")
    if len(target_ids.shape) != 2:
        raise ValueError(
            f"`target_ids` must have shape [batch, length]. Received: target_ids.shape={tuple(target_ids.shape)}"
        )
    target_in = target_ids[:, :-1]
    target_in = ops.where(ops.equal(target_in, END_ID), PAD_ID, target_in)
    return target_in, target_ids[:, 1:]


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedSequenceLoss(keras.losses.Loss):
    """Sparse cross-entropy on logits `[B, T, V]`, averaged over the tokens with `y_true != pad_id`.

    Wraps `keras_attn.losses.masked_sequence_loss`. A batch with no real token has loss 0.
    `label_smoothing`: eps of the smoothed targets `(1 - eps) onehot + eps / V` (0: none).
    """

    def __init__(
        self,
        pad_id=PAD_ID,
        from_logits=True,
        label_smoothing=0.0,
        name="masked_sequence_loss",
        **kwargs,
    ):
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="sum_over_batch_size", **kwargs)
        self.pad_id = int(pad_id)
        self.from_logits = bool(from_logits)
        self.label_smoothing = check_rate("label_smoothing", label_smoothing)

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        mask = ops.not_equal(y_true, self.pad_id)
        return attn_losses.masked_sequence_loss(
            y_true,
            y_pred,
            mask=mask,
            from_logits=self.from_logits,
            label_smoothing=self.label_smoothing,
        )

    def get_config(self):
        config = super().get_config()
        config.pop("reduction", None)
        config.update(
            {
                "pad_id": self.pad_id,
                "from_logits": self.from_logits,
                "label_smoothing": self.label_smoothing,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedSequenceAccuracy(keras.metrics.Metric):
    """Token accuracy over the positions with `y_true != pad_id` (argmax of `y_pred [B, T, V]`)."""

    def __init__(self, pad_id=PAD_ID, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = int(pad_id)
        self.correct = self.add_variable(
            shape=(), initializer="zeros", name="correct", dtype="float32"
        )
        self.count = self.add_variable(shape=(), initializer="zeros", name="count", dtype="float32")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        mask = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        if sample_weight is not None:
            sw = ops.cast(sample_weight, "float32")
            while len(sw.shape) < len(mask.shape):
                sw = ops.expand_dims(sw, -1)
            mask = mask * sw
        hit = ops.cast(ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), y_true), "float32")
        self.correct.assign(self.correct + ops.sum(hit * mask))
        self.count.assign(self.count + ops.sum(mask))

    def result(self):
        return self.correct / ops.maximum(self.count, 1.0)

    def reset_state(self):
        self.correct.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        config = super().get_config()
        config["pad_id"] = self.pad_id
        return config


def sequence_reward(y_true, y_pred, pad_id=PAD_ID):
    """REINFORCE reward of a text model: `log p(y | x, s)` summed over the real tokens, `[B]`."""
    y_true = ops.cast(y_true, "int32")
    return attn_losses.sequence_log_likelihood(y_true, y_pred, mask=ops.not_equal(y_true, pad_id))


def run_steps(step, carry, inputs, output_templates, owner=None):
    """Run `step` over the time axis of `inputs` in one loop (XLA-friendly).

    On TensorFlow the loop is a `while_loop` with `maximum_iterations` writing each step
    into preallocated buffers (XLA can differentiate it); on JAX it is `ops.scan` (JAX
    cannot differentiate a `while_loop` with a dynamic trip count).

    Args:
        step: `step(t, carry, x_t) -> (carry, outputs)`, `outputs` a tuple of
            `[B, ...]` tensors shaped like `output_templates`.
        carry: a nest of tensors.
        inputs: `[B, T, ...]`.
        output_templates: tuple of zero tensors `[B, ...]` (shape and dtype of one step's outputs).
        owner: the layer (or model) whose variables `step` reads. On JAX its non-trainable
            variables (seed generators of dropout and of hard attention's draws) travel in
            the scan's carry and get their final values after the loop, since an update made
            inside `scan` must not escape it. Ignored on TensorFlow.

    Returns `(final_carry, outputs)` with each output stacked to `[B, T, ...]`.
    """
    if keras.backend.backend() == "jax":
        return _run_steps_scan(step, carry, inputs, output_templates, owner)
    length = ops.shape(inputs)[1]
    time_major = ops.moveaxis(inputs, 1, 0)
    buffers = tuple(
        ops.zeros((length,) + tuple(ops.shape(o)), dtype=o.dtype) for o in output_templates
    )

    def cond(t, carry, buffers):
        return t < length

    def body(t, carry, buffers):
        carry, outs = step(t, carry, ops.take(time_major, t, axis=0))
        row = ops.reshape(t, (1, 1))
        buffers = tuple(
            ops.scatter_update(b, row, ops.expand_dims(ops.cast(o, b.dtype), 0))
            for b, o in zip(buffers, outs)
        )
        return t + 1, carry, buffers

    t0 = ops.zeros((), dtype="int32")
    _, carry, buffers = ops.while_loop(cond, body, (t0, carry, buffers), maximum_iterations=length)
    return carry, tuple(ops.moveaxis(b, 0, 1) for b in buffers)


def _run_steps_scan(step, carry, inputs, output_templates, owner):
    length = ops.shape(inputs)[1]
    xs = (ops.arange(length, dtype="int32"), ops.moveaxis(inputs, 1, 0))
    carried = list(owner.non_trainable_variables) if owner is not None else []
    fixed = [(v, v.value) for v in owner.trainable_variables] if owner is not None else []

    def body(state, x):
        inner, values = state
        t, x_t = x
        with keras.StatelessScope(fixed + list(zip(carried, values))) as scope:
            inner, outs = step(t, inner, x_t)
        values = [
            ops.cast(scope.get_current_value(v), old.dtype) for v, old in zip(carried, values)
        ]
        outs = tuple(ops.cast(o, tmpl.dtype) for o, tmpl in zip(outs, output_templates))
        return (inner, values), outs

    (carry, values), outputs = ops.scan(body, (carry, [v.value for v in carried]), xs)
    for v, value in zip(carried, values):
        v.assign(value)
    return carry, tuple(ops.moveaxis(o, 0, 1) for o in outputs)
