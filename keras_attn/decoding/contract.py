"""The step contract, checked: what a step function must return, and the NaN check.

    step_fn(tokens [N] int32, state, step) -> (logits [N, V], state, attention [N, S] or None)

`N = B * K` rows; the state comes back with the shapes it was given; attention is returned at
every step or at none. A NaN or `+inf` logit, or a row of only `-inf`, is an error naming
`step_fn` (`InvalidArgumentError` on TensorFlow, `ValueError` on JAX where the values are
known: docs/decoding.md, "Backends"), never an empty or NaN answer.
"""

from keras import ops

from keras_attn.decoding import backend as kb

# The outputs that are scalars of the whole call, not per row: the NaN check's flag
# (`report_invalid`) and where a search with `stop_after` stopped. Cutting rows (no K axis, a
# padded batch) leaves them as they are.
SCALAR_OUTPUTS = ("invalid", "done", "steps")

INVALID_LOGITS = (
    "`step_fn` returned NaN or +inf logits, or a row of only -inf (a broken model or weights)."
)


def _check_rows(what, x, n_rows):
    """`x` must have `n_rows` rows (static check, else a run-time assertion)."""
    message = f"`step_fn` must return {what} with one row per hypothesis (N = batch * beam_size)."
    static_n = n_rows if isinstance(n_rows, int) else None
    if static_n is not None and x.shape[0] is not None:
        if x.shape[0] != static_n:
            raise ValueError(f"{message} Received: {what}.shape={x.shape}, N={static_n}")
        return x
    # TensorFlow with a size unknown while tracing (JAX shapes are static)
    import tensorflow as tf

    check = tf.debugging.assert_equal(
        tf.shape(x)[0], tf.cast(n_rows, tf.int32), message=f"{message} Received: {what} rows != N"
    )
    with tf.control_dependencies([check]):
        # A gather of N rows: the row count is then a run-time size, so shape inference
        # cannot fail at tracing before the assertion has a chance to run.
        return tf.gather(x, tf.range(tf.cast(n_rows, tf.int32)))


def step_outputs(outputs, n_rows):
    """What a step function returns, checked: `(logits [N, V] float32, state, attention
    [N, S] float32 or None)`."""
    if not isinstance(outputs, (tuple, list)) or len(outputs) != 3:
        raise ValueError(
            "`step_fn` must return a tuple `(logits, state, attention)` (attention may be "
            f"None). Received: {type(outputs).__name__} of length "
            f"{len(outputs) if isinstance(outputs, (tuple, list)) else 'n/a'}"
        )
    logits, state, attention = outputs
    logits = kb.convert(logits)
    if kb.rank(logits) != 2:
        raise ValueError(
            f"`step_fn` must return logits of shape [N, V]. Received: logits.shape={logits.shape}"
        )
    logits = ops.cast(_check_rows("logits", logits, n_rows), "float32")
    if attention is not None:
        attention = kb.convert(attention, "float32")
        if kb.rank(attention) != 2:
            raise ValueError(
                "`step_fn` must return attention of shape [N, S] or None. "
                f"Received: attention.shape={attention.shape}"
            )
        attention = _check_rows("attention", attention, n_rows)
    return logits, state, attention


def check_state_shapes(new, old):
    """After the first step: the state keeps the shapes of the (tiled) initial state."""

    def check(n, o):
        n, o = kb.convert(n), kb.convert(o)
        if not kb.compatible(n.shape, o.shape):
            raise ValueError(
                "`step_fn` must return the state with the same shapes it receives "
                "(preallocate caches to max length). "
                f"Received: state shape {n.shape}, expected {o.shape}"
            )

    kb.assert_same_structure(new, old)
    kb.map_structure(check, new, old)
    return new


def nan_marks(log_probs, probe=None):
    """What the search adds up, step after step, to learn whether some step's `log_probs`
    (never `+inf`) held a NaN: values that are NaN exactly then, and otherwise finite or
    `-inf` (never `+inf`), so that a running sum turns NaN at the first NaN and stays NaN.
    With the log-softmax's `probe` (`backend.log_softmax`: `[N, 1]`, NaN exactly in those
    rows, 0 elsewhere; taken by the maximum's own reduction) its rows `[N]`: one add per row,
    where a flag (`isnan` over `[N, V]`, then an `any`, then an `or`) costs passes of its own
    in every step.
    Without it, the sum of `log_probs` (NaN exactly where one of them is: a `-inf` makes it
    `-inf`), a scalar."""
    if probe is not None:
        return probe[:, 0]
    return ops.sum(log_probs)


def check_log_probs(log_probs, step, probe=None):
    """A NaN or `+inf` logit, or a row of only `-inf`, makes its log-softmax NaN: an
    `InvalidArgumentError` naming `step_fn` (TensorFlow); on JAX a `ValueError` where the
    values are known now (inside the loop they are not: the engine checks its flag after it).
    `probe`: as in `nan_marks`."""
    # `x >= -inf` is False for NaN only: one op for "no NaN" on the (never +inf) sum
    return kb.run_time_check(
        log_probs,
        ops.sum(log_probs if probe is None else probe) >= float("-inf"),
        INVALID_LOGITS + " Received them at step",
        step,
    )
