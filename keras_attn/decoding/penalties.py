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

Everything here is `keras.ops` on float32 tensors that broadcast. `source_info` gives
the formula its inputs from a search's arguments (the source mask and |X|).
"""

from keras import ops

from keras_attn.decoding import backend as kb

COVERAGE_EPSILON = 1e-10

# A large negative *finite* score: used instead of -inf for impossible candidates so no
# arithmetic on it can produce NaN. Real scores are assumed to stay above NEG / 2.
NEG = -1e9


def length_penalty(lengths, alpha):
    """`lp = ((5 + |Y|) / 6) ** alpha` (float32, same shape as `lengths`)."""
    lengths = ops.cast(lengths, "float32")
    alpha = ops.cast(alpha, "float32")
    return ops.power((5.0 + lengths) / 6.0, alpha)


def coverage_penalty(coverage, beta, source_mask=None):
    """`cp = beta * sum_s log(clip(coverage_s, 1e-10, 1))` over unmasked `s`.

    Args:
      coverage: `[..., S]` float, the attention summed over the generated steps.
      beta: scalar.
      source_mask: bool `[..., S]` broadcastable to `coverage`, or None (all positions count).
    Returns `[...]` float32.
    """
    coverage = ops.cast(coverage, "float32")
    logs = ops.log(ops.clip(coverage, COVERAGE_EPSILON, 1.0))
    if source_mask is not None:
        logs = ops.where(ops.cast(source_mask, "bool"), logs, ops.zeros_like(logs))
    return ops.cast(beta, "float32") * ops.sum(logs, axis=-1)


def eos_penalty(source_lengths, lengths, gamma):
    """`ep = gamma * |X| / |Y|` (float32, broadcast of the arguments)."""
    source_lengths = ops.cast(source_lengths, "float32")
    lengths = ops.cast(lengths, "float32")
    return ops.cast(gamma, "float32") * source_lengths / lengths


def score(log_probs, lengths, alpha, cp=0.0, source_lengths=0.0, gamma=0.0):
    """`log_probs / lp(lengths, alpha) + cp + gamma * source_lengths / lengths`.

    `cp` is an already computed `coverage_penalty` (so a caller can share it
    between the candidates of one beam). All arguments broadcast.
    """
    out = ops.cast(log_probs, "float32")
    # A knob that is a Python 0 adds no ops (x / 1 and x + 0 are exact: same numbers).
    if not is_zero(alpha):
        out = out / length_penalty(lengths, alpha)
    if not is_zero(cp):
        out = out + ops.cast(cp, "float32")
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
        mask = kb.convert(source_mask, "bool")
        if kb.rank(mask) != 2:
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
        return mask, ops.sum(ops.cast(mask, "float32"), axis=-1)
    if attention is not None:
        width = ops.cast(kb.dim(attention, 1), "float32")
        return None, kb.full(kb.shape_of(batch), width, "float32")
    return None, kb.zeros(kb.shape_of(batch), "float32")
