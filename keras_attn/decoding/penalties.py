"""GNMT scoring of hypotheses (Wu et al. 2016; OpenNMT), docs/decoding.md.

    score = log_probs / lp + cp + ep
    lp    = ((5 + |Y|) / 6) ** alpha
    cp    = beta * sum_s log(clip(sum_t a_ts, 1e-10, 1))   over unmasked source positions s
    ep    = gamma * |X| / |Y|

`|Y|` counts the generated tokens including the end token, `a_ts` is the
attention of the step that produced token `t`, summed over the `|Y|`
generated steps (the "coverage"), `|X|` is the number of unmasked source
positions. This is the only place the formula is written; beam search,
greedy search and sampling all call `score`.

Everything here is plain TensorFlow on float32 tensors that broadcast. `source_info` gives
the formula its inputs from a search's arguments (the source mask and |X|).
"""

import tensorflow as tf

COVERAGE_EPSILON = 1e-10

# A large negative *finite* score: used instead of -inf for impossible candidates so no
# arithmetic on it can produce NaN. Real scores are assumed to stay above NEG / 2.
NEG = -1e9


def length_penalty(lengths, alpha):
    """`lp = ((5 + |Y|) / 6) ** alpha` (float32, same shape as `lengths`)."""
    lengths = tf.cast(lengths, tf.float32)
    alpha = tf.cast(alpha, tf.float32)
    return tf.pow((5.0 + lengths) / 6.0, alpha)


def coverage_penalty(coverage, beta, source_mask=None):
    """`cp = beta * sum_s log(clip(coverage_s, 1e-10, 1))` over unmasked `s`.

    Args:
      coverage: `[..., S]` float, the attention summed over the generated steps.
      beta: scalar.
      source_mask: bool `[..., S]` broadcastable to `coverage`, or None (all positions count).
    Returns `[...]` float32.
    """
    coverage = tf.cast(coverage, tf.float32)
    logs = tf.math.log(tf.clip_by_value(coverage, COVERAGE_EPSILON, 1.0))
    if source_mask is not None:
        logs = tf.where(tf.cast(source_mask, tf.bool), logs, tf.zeros_like(logs))
    return tf.cast(beta, tf.float32) * tf.reduce_sum(logs, axis=-1)


def eos_penalty(source_lengths, lengths, gamma):
    """`ep = gamma * |X| / |Y|` (float32, broadcast of the arguments)."""
    source_lengths = tf.cast(source_lengths, tf.float32)
    lengths = tf.cast(lengths, tf.float32)
    return tf.cast(gamma, tf.float32) * source_lengths / lengths


def score(log_probs, lengths, alpha, cp=0.0, source_lengths=0.0, gamma=0.0):
    """`log_probs / lp(lengths, alpha) + cp + gamma * source_lengths / lengths`.

    `cp` is an already computed `coverage_penalty` (so a caller can share it
    between the candidates of one beam). All arguments broadcast.
    """
    out = tf.cast(log_probs, tf.float32)
    # A knob that is a Python 0 adds no ops (x / 1 and x + 0 are exact: same numbers).
    if not is_zero(alpha):
        out = out / length_penalty(lengths, alpha)
    if not is_zero(cp):
        out = out + tf.cast(cp, tf.float32)
    if not is_zero(gamma):
        out = out + eos_penalty(source_lengths, lengths, gamma)
    return out


def is_zero(value):
    """Whether `value` is a Python 0 (a knob that is off: its term adds no ops)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


def source_info(source_mask, attention, batch):
    """`(mask [B, S] bool or None, |X| [B] float32)` for the coverage and EOS penalties.

    |X| is the number of unmasked source positions: from `source_mask` when given, else the
    attention width S, else 0 (no source is known, so the EOS penalty is 0).
    """
    if source_mask is not None:
        mask = tf.cast(tf.convert_to_tensor(source_mask), tf.bool)
        if mask.shape.rank != 2:
            raise ValueError(
                f"`source_mask` must have shape [B, S]. Received: source_mask.shape={mask.shape}"
            )
        if attention is not None:
            s_mask, s_att = mask.shape[1], attention.shape[1]
            if s_mask is not None and s_att is not None and s_mask != s_att:
                raise ValueError(
                    "`source_mask` must have as many positions as the attention the step "
                    f"returns ({s_att}). Received: source_mask.shape={mask.shape}"
                )
        return mask, tf.reduce_sum(tf.cast(mask, tf.float32), axis=-1)
    if attention is not None:
        width = tf.cast(tf.shape(attention)[1], tf.float32)
        return None, tf.fill(tf.reshape(batch, [1]), width)
    return None, tf.zeros(tf.reshape(batch, [1]), tf.float32)
