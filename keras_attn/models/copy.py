"""Copy attention (the pointer-generator of See et al. 2017) for the encoder-decoder models.

At each target step `t` a gate decides between generating from the vocabulary and copying a
source token through the attention weights `a_t` the decoder already computes:

    p_gen = sigmoid(w_c . c_t + w_s . s_t + w_x . x_t + b)
    P(w)  = p_gen * P_vocab(w) + (1 - p_gen) * sum_{i: x_i = w} a_ti

with `c_t = sum_i a_ti h_i` the context over the encoder memory `h`, `s_t` the decoder's
output at step `t`, `x_t` the decoder's input embedding and `P_vocab = softmax(logits)`. Source
and target share one vocabulary (one SentencePiece model), so a source token id is a target
token id. The models return `log P` where they returned logits: `log_softmax(log P) = log P`,
so `MaskedSequenceLoss`, label smoothing, greedy, beam and sampling searches, export and the
served alignments use it unchanged (see docs/real_data.md).

Optional coverage loss (See et al. section 2.3): `coverage_weight * sum_t sum_i min(a_ti,
c_ti)` with `c_t = sum_{t' < t} a_t'` (`keras_attn.losses.coverage_penalty`), added with
`add_loss` when training.
"""

import keras
import numpy as np
from keras import ops

from keras_attn import _checks, losses
from keras_attn.layers.base import config_of

# P is clipped here before the log: a word neither generated nor in the source would otherwise
# get log 0 = -inf, which a search may add to a beam score (it never wins, and inf - inf = NaN).
_MIN_PROBABILITY = 1e-12


def copy_distribution(vocab_probs, p_gen, attention, source_ids):
    """`P = p_gen * vocab_probs + (1 - p_gen) * scatter(attention -> source_ids)`, float32.

    Args:
        vocab_probs: `[B, T, V]` or `[B, V]` the generator's distribution.
        p_gen: `[B, T, 1]` or `[B, 1]` in [0, 1].
        attention: `[B, T, S]` or `[B, S]` (each row sums to 1 over the real source positions;
            padded positions hold 0).
        source_ids: int `[B, S]` ids in the shared vocabulary (`[B]` rows, tiled to beams by the
            search with the rest of the state).
    """
    vocab_probs = ops.cast(vocab_probs, "float32")
    vocab_size = vocab_probs.shape[-1]
    one_step = len(attention.shape) == 2
    attention = ops.cast(attention, "float32")
    if one_step:
        attention = ops.expand_dims(attention, 1)
    ids = ops.cast(source_ids, "int32")
    # Padding (id 0) can hold attention only through a bug upstream; it is never copied.
    weights = ops.where(ops.expand_dims(ops.not_equal(ids, 0), 1), attention, 0.0)
    copied = _scatter_to_vocabulary(weights, ids, vocab_size)  # [B, T, V]
    if one_step:
        copied = ops.squeeze(copied, 1)
    p_gen = ops.cast(p_gen, "float32")
    return p_gen * vocab_probs + (1.0 - p_gen) * copied


def _scatter_to_vocabulary(weights, ids, vocab_size):
    """`copied[b, t, w] = sum of weights[b, t, i] over the i with ids[b, i] = w`: `weights`
    `[B, T, S]` added into a zero `[B, T, V]` at `(b, t, ids[b, i])` (repeated ids add up).
    A scatter of `B * T * S` values, where the same sum as a product with the one-hot `[B, S, V]`
    of the ids would multiply `B * T * S * V` (benchmarks/train_step_profile.py). On a GPU the
    additions into one cell (a token repeated in the source) may run in any order."""
    shape = ops.shape(weights)
    return ops.scatter(_vocabulary_index(ids, shape), weights, (shape[0], shape[1], vocab_size))


def _vocabulary_index(ids, shape):
    """The `[B, T, S, 3]` indices `(b, t, ids[b, i])` of a `[B, T, V]` tensor, for `shape` =
    `(B, T, S)`."""
    b, t, s = shape[0], shape[1], shape[2]
    grid = (b, t, s)
    return ops.stack(
        [
            ops.broadcast_to(ops.reshape(ops.arange(b, dtype="int32"), (-1, 1, 1)), grid),
            ops.broadcast_to(ops.reshape(ops.arange(t, dtype="int32"), (1, -1, 1)), grid),
            ops.broadcast_to(ops.expand_dims(ids, 1), grid),
        ],
        axis=-1,
    )


def copy_log_probs(logits, gate_logit, attention, source_ids):
    """`log max(P, 1e-12)` of `copy_distribution` with `vocab_probs = softmax(logits)` and
    `p_gen = sigmoid(gate_logit)`, float32, computed in log space: `log p_gen +
    log_softmax(logits)` (floored at `log 1e-12`) everywhere, and the mixture only at the
    `S` source ids of each row, added in place of that value.

    Args as for `copy_distribution`, with `logits` `[B, T, V]` or `[B, V]` and `gate_logit`
    `[B, T, 1]` or `[B, 1]`.

    The same values as the probability-space form (to float rounding), with one pass over the
    `[B, T, V]` tensors where the mixture makes several (the softmax, the copied mass, the sum,
    the logarithm) and as many again for the gradients. XLA fuses the passes, so on JAX it
    trains faster (benchmarks/RESULTS.md, "The translator's training epoch"); TensorFlow's
    graph runs each op alone, where the probability-space form is the faster one, and
    `CopyGenerator` uses each where it is faster. A row's repeated id is written by its first
    occurrence only (its mass is the sum over the equal ids), padding (id 0) by none.
    """
    logits = ops.cast(logits, "float32")
    gate_logit = ops.cast(gate_logit, "float32")
    attention = ops.cast(attention, "float32")
    one_step = len(attention.shape) == 2
    if one_step:
        logits, gate_logit, attention = (
            ops.expand_dims(x, 1) for x in (logits, gate_logit, attention)
        )
    ids = ops.cast(source_ids, "int32")  # [B, S]
    real = ops.not_equal(ids, 0)
    attention = ops.where(ops.expand_dims(real, 1), attention, 0.0)  # padding never copied
    shape = ops.shape(attention)
    log_total = ops.logsumexp(logits, axis=-1, keepdims=True)
    log_p_gen = ops.log_sigmoid(gate_logit)
    floor = float(np.log(_MIN_PROBABILITY))
    generated = ops.maximum(log_p_gen + (logits - log_total), floor)  # [B, T, V]
    same = ops.cast(ops.equal(ids[:, :, None], ids[:, None, :]), "float32")  # [B, S, S]
    copied = ops.einsum("btj,bij->bti", attention, same)  # the copy mass of ids[b, i]
    at_ids = ops.broadcast_to(ops.expand_dims(ids, 1), shape)
    log_vocab = ops.take_along_axis(logits, at_ids, axis=-1) - log_total  # [B, T, S]
    mixed = ops.log(
        ops.maximum(
            ops.sigmoid(gate_logit) * ops.exp(log_vocab) + ops.sigmoid(-gate_logit) * copied,
            _MIN_PROBABILITY,
        )
    )
    earlier = ops.triu(ops.ones((shape[2], shape[2]), "float32"), 1)  # [j, i]: j < i
    first = ops.logical_and(real, ops.sum(same * earlier[None], axis=1) == 0)  # [B, S]
    change = ops.where(
        ops.expand_dims(first, 1), mixed - ops.maximum(log_p_gen + log_vocab, floor), 0.0
    )
    vocab_size = logits.shape[-1]
    out = generated + ops.scatter(
        _vocabulary_index(ids, shape), change, (shape[0], shape[1], vocab_size)
    )
    return ops.squeeze(out, 1) if one_step else out


@keras.saving.register_keras_serializable(package="keras_attn")
class CopyGenerator(keras.layers.Layer):
    """The gate and the mixture of copy attention; see the module docstring.

    `call(logits, attention, source_ids, memory, decoder_output, decoder_input,
    target_mask=None, training=None)` -> `log P` in the compute dtype (computed in float32),
    the shape of `logits`: `[B, T, V]` in teacher forcing (`attention [B, T, S]`,
    `decoder_output [B, T, Ds]`, `decoder_input [B, T, Dx]`), `[N, V]` in a decoding step
    (`attention [N, S]`, `decoder_output [N, Ds]`, `decoder_input [N, Dx]`); `source_ids
    [B, S]`, `memory [B, S, Dc]`. A Keras mask on `logits` (the target mask) passes through.

    Args:
        coverage_weight: weight of the coverage loss (0: none); added in training only, over
            the real target steps (`target_mask`).
    """

    def __init__(self, coverage_weight=0.0, **kwargs):
        super().__init__(**kwargs)
        self.coverage_weight = _checks.check_non_negative("coverage_weight", coverage_weight)
        self.supports_masking = True  # the target mask passes through, as through the output Dense
        self.gate = keras.layers.Dense(1, dtype=self.dtype_policy, name="gate")

    def build(
        self,
        logits_shape=None,
        attention_shape=None,
        source_ids_shape=None,
        memory_shape=None,
        decoder_output_shape=None,
        decoder_input_shape=None,
    ):
        """The gate reads `[c_t; s_t; x_t]`: the last axes of memory, decoder output and input."""
        dims = [
            s[-1] if s is not None else None
            for s in (memory_shape, decoder_output_shape, decoder_input_shape)
        ]
        if any(d is None for d in dims):
            raise ValueError(
                "`memory_shape`, `decoder_output_shape` and `decoder_input_shape` must have a known last "
                f"axis. Received: memory_shape={memory_shape}, decoder_output_shape={decoder_output_shape}, "
                f"decoder_input_shape={decoder_input_shape}"
            )
        self.gate.build((None, int(sum(dims))))
        self.built = True

    def call(
        self,
        logits,
        attention,
        source_ids,
        memory,
        decoder_output,
        decoder_input,
        target_mask=None,
        training=None,
    ):
        dtype = decoder_output.dtype
        attention = ops.cast(attention, "float32")
        one_step = len(attention.shape) == 2
        a = ops.expand_dims(attention, 1) if one_step else attention
        context = ops.matmul(ops.cast(a, dtype), memory)  # c_t = sum_i a_ti h_i
        if one_step:
            context = ops.squeeze(context, 1)
        features = ops.concatenate(
            [context, decoder_output, ops.cast(decoder_input, dtype)], axis=-1
        )
        gate_logit = ops.cast(self.gate(features), "float32")
        if training and self.coverage_weight and not one_step:
            self.add_loss(self.coverage_weight * losses.coverage_penalty(attention, target_mask))
        if keras.backend.backend() == "jax":  # compiled by XLA: see `copy_log_probs`
            log_probs = copy_log_probs(logits, gate_logit, attention, source_ids)
        else:
            vocab_probs = ops.softmax(ops.cast(logits, "float32"), axis=-1)
            probs = copy_distribution(vocab_probs, ops.sigmoid(gate_logit), attention, source_ids)
            log_probs = ops.log(ops.maximum(probs, _MIN_PROBABILITY))
        return ops.cast(log_probs, self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), **config_of(self, CopyGenerator.__init__)}


def check_copy_arguments(copy_attention, coverage_weight, source_vocab_size, target_vocab_size):
    """The models' argument checks for copy attention."""
    _checks.check_bool("copy_attention", copy_attention)
    if copy_attention and source_vocab_size != target_vocab_size:
        raise ValueError(
            "`copy_attention=True` needs one vocabulary for source and target (equal sizes). "
            f"Received: source_vocab_size={source_vocab_size}, target_vocab_size={target_vocab_size}"
        )
    if coverage_weight and not copy_attention:
        raise ValueError(
            "`coverage_weight` is copy attention's coverage loss: set `copy_attention=True`. "
            f"Received: coverage_weight={coverage_weight!r}, copy_attention=False"
        )
