"""The decoding driver: one `tf.while_loop` shared by beam search, greedy search and sampling.

`decode(step_fn, initial_state, start_tokens, end_token, strategy, ...)` owns everything
that is not "which token next" (docs/decoding.md, "The engine"):

- tiling: the initial state (batch B) is repeated to `N = B * K` rows, row `b * K + k` being
  hypothesis k of example b (K = `strategy.width`);
- the step: `step_fn(tokens [N], state, step)` is called once per step, its outputs checked
  (shapes; a NaN or `+inf` logit, or a row of only `-inf`, is an `InvalidArgumentError`
  naming `step_fn`);
- the controls: `Controls.process` turns the logits into log-probs and allowed tokens
  (processors.py, one place, fixed order);
- the choice: `strategy.select` (strategies.py);
- bookkeeping, in flat `[N, ...]` buffers reordered with one gather per buffer when the
  strategy has parents: tokens, cumulative log-probs, coverage, alignments, finished flags
  (the lengths are read off `sequences` after the loop: the first `end_token` column); a
  finished row is frozen (never extended; its length, log-prob, score and alignments never
  change); a row with no possible token left becomes empty;
- the state: every leaf gathered along the parents (beam) or left alone (greedy, sampling);
  a leaf the step returns unchanged (the very tensor it was given: encoder memory,
  cross-attention keys, the source mask) is never gathered: it was tiled, so the K rows of
  an example hold the same values, and beam parents never leave their example;
- XLA shapes: `sequences` always have `T = max_length` columns (columns past `lengths` hold
  `end_token`), buffers are preallocated after the first step, which is peeled out of the
  loop (it tells the vocabulary size and the attention width);
- the result: scores by the GNMT formula (penalties.py), empty rows reported as
  `-inf` scores and log-probs, length 0;
- under XLA (`jit_compile=True`), which drops `tf.debugging.Assert`, the NaN check cannot raise:
  a search called with `report_invalid=True` then returns `"invalid"` too, a bool scalar, True
  when the check would have failed, for the caller to assert on outside the compiled function
  (keras_attn.serving does); otherwise, and outside XLA, the result keys are the usual ones.

The searches are not converted by AutoGraph (tracing stays fast), so neither is the step
function called inside: write its tensor-dependent control flow with `tf.cond` / `tf.where`.
"""

from typing import Any, NamedTuple

import tensorflow as tf

from keras_attn.decoding import _common, penalties, processors
from keras_attn.layers import rng

NEG = _common.NEG


class _Context:
    """What a strategy may read at one step (see strategies.py)."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def _gather(x, parents):
    """Rows of `x` `[N, ...]` along `parents` `[N]`; keeps the static shape."""
    if parents is None:
        return x
    out = tf.gather(x, parents)
    if not tf.executing_eagerly():
        out.set_shape(x.shape)
    return out


INVALID_LOGITS = (
    "`step_fn` returned NaN or +inf logits, or a row of only -inf (a broken model or weights)."
)


class Settings(NamedTuple):
    """The arguments every search passes through to `decode` unchanged (docs/decoding.md):
    the penalties, the controls, `source_mask`, and `report_invalid`. A search builds them
    with `Settings.of(locals())`, so the list is written here only."""

    max_length: Any = 50
    length_penalty: Any = 0.0
    coverage_penalty: Any = 0.0
    eos_penalty: Any = 0.0
    source_mask: Any = None
    min_length: Any = 0
    no_repeat_ngram_size: Any = 0
    repetition_penalty: Any = 1.0
    bad_token_ids: Any = None
    report_invalid: bool = False

    @classmethod
    def of(cls, arguments):
        """The settings among a search's arguments (a dict such as its `locals()`)."""
        return cls(**{name: arguments[name] for name in cls._fields})


def _any_nan(log_probs):
    """Whether `log_probs` (never `+inf`) hold a NaN: their sum is NaN exactly then (a `-inf`
    makes it `-inf`, never NaN), one pass over `[N, V]` instead of two."""
    return tf.math.is_nan(tf.reduce_sum(log_probs))


def _check_log_probs(log_probs, step):
    """A NaN or `+inf` logit, or a row of only `-inf`, makes its log-softmax NaN: an error
    (InvalidArgumentError naming `step_fn`), never an empty or NaN answer."""
    # `x >= -inf` is False for NaN only: one op for "no NaN" on the (never +inf) sum
    check = tf.debugging.Assert(
        tf.reduce_sum(log_probs) >= float("-inf"),
        [INVALID_LOGITS + " Received them at step", step],
    )
    with tf.control_dependencies([check]):
        return tf.identity(log_probs)


@tf.autograph.experimental.do_not_convert
def decode(step_fn, initial_state, start_tokens, end_token, strategy, settings=None):
    """Runs `strategy` over `step_fn` with `settings` (a `Settings`); returns the searches'
    output dict with a K axis.

    Outputs: `sequences [B, K, T]`, `lengths [B, K]`, `scores [B, K]`, `log_probs [B, K]`
    and `alignments [B, K, T, S]` when the step returns attention. With a beam they are
    sorted best first.
    """
    settings = Settings() if settings is None else settings
    controls = processors.Controls(
        settings.min_length,
        settings.no_repeat_ngram_size,
        settings.repetition_penalty,
        settings.bad_token_ids,
        settings.max_length,
    )
    max_length, alpha, beta, gamma, start_tokens, end_token = _common.check_search_args(
        settings.max_length,
        settings.length_penalty,
        settings.coverage_penalty,
        settings.eos_penalty,
        start_tokens,
        end_token,
    )
    source_mask = settings.source_mask
    batch = _common.dim(start_tokens, 0)
    k = strategy.width
    n_rows = _common.mul(batch, k)
    length = max_length

    state = _common.as_tensor_nest(initial_state)
    state = tf.nest.map_structure(lambda x: _common.check_batch("initial_state", x, batch), state)
    state = _common.tile_nest(state, k)
    tokens = start_tokens if isinstance(k, int) and k == 1 else tf.repeat(start_tokens, k, axis=0)
    if source_mask is not None:
        source_mask = _common.check_batch("source_mask", source_mask, batch)

    def call_step(tokens, state, step):
        logits, new_state, attention = _common.step_outputs(step_fn(tokens, state, step), n_rows)
        return logits, new_state, attention

    def passed_through(new_state, state):
        # per leaf (flattened order): the step returned the tensor it was given
        return [n is o for n, o in zip(tf.nest.flatten(new_state), tf.nest.flatten(state))]

    step0 = tf.constant(0, tf.int32)
    logits0, state0, attention0 = call_step(tokens, state, step0)
    invariant0 = passed_through(state0, state)
    state = _common.check_state_shapes(state0, state)
    vocab = _common.dim(logits0, 1)
    end_token = _common.check_end_token(end_token, vocab)
    controls.check_vocab(vocab)
    has_attention = attention0 is not None
    mask, source_lengths = _common.source_info(source_mask, attention0, batch)
    if not (isinstance(k, int) and k == 1):
        source_lengths = tf.repeat(source_lengths, k, axis=0)
        if mask is not None:
            mask = tf.repeat(mask, k, axis=0)
    use_coverage = has_attention and not (isinstance(beta, float) and beta == 0.0)

    n = tf.reshape(n_rows, [1])
    hyp = {
        "sequences": tf.fill(tf.stack([n_rows, length]), end_token),
        "log_probs": tf.zeros(n, tf.float32),
        "finished": tf.zeros(n, tf.bool),
    }
    if has_attention:
        width = _common.dim(attention0, 1)
        hyp["alignments"] = tf.zeros(tf.stack([n_rows, length, width]), tf.float32)
    if use_coverage:
        hyp["coverage"] = tf.zeros(tf.stack([n_rows, width]), tf.float32)
    # XLA drops Assert ops: the NaN check is carried as a flag (the same in every row, so the
    # gathers along parents keep it) and returned for the caller to assert on.
    track_invalid = bool(settings.report_invalid) and rng.in_xla()
    if track_invalid:
        hyp["invalid"] = tf.zeros(n, tf.bool)
    hyp.update(strategy.initial_state(n_rows))
    hyp.update(controls.initial_state(n_rows, length))
    strategy.prepare(_Context(batch=batch, n_rows=n_rows, vocab=vocab, end_token=end_token))

    source_column = source_lengths[:, None]  # [N, 1], broadcast over the candidates
    # loop invariants: which column of `sequences` / `alignments` a step writes
    columns = tf.range(length)
    sequence_columns, alignment_columns = columns[None, :], columns[None, :, None]

    def advance(step, next_step, logits, attention, state, hyp, first, invariant):
        """One step's bookkeeping; `next_step` is `step + 1` (the caller's, computed once)."""
        log_probs, allowed = controls.process(logits, hyp, step, end_token, vocab)
        log_probs = _check_log_probs(log_probs, step)
        if allowed is not None:
            allowed = tf.broadcast_to(allowed, tf.shape(log_probs))
        if use_coverage:
            coverage = hyp["coverage"] + attention

        def candidate_cp():
            return penalties.coverage_penalty(coverage, beta, mask) if use_coverage else 0.0

        ctx = _Context(
            step=step,
            log_probs=log_probs,
            allowed=allowed,
            hyp=hyp,
            vocab=vocab,
            n_rows=n_rows,
            alpha=alpha,
            gamma=gamma,
            first=first,
            candidate_cp=candidate_cp,
            source_lengths=source_column,
        )
        parents, tokens, new_log_probs, empty, extra = strategy.select(ctx)
        # the strategy's own buffers come back new; the NaN flag is the same in every row
        old = {
            key: _gather(value, parents)
            for key, value in hyp.items()
            if key not in extra and key != "invalid"
        }
        done = old["finished"]  # the parent was finished: this row is frozen
        # `empty` (None: none) is True where the strategy found no possible candidate: an
        # empty row (a finished parent is not empty only if the strategy kept it)
        stop = done if empty is None else done | empty
        tokens = tf.where(stop, end_token, tokens)
        new = dict(old)
        new.update(extra)
        new["log_probs"] = tf.where(done, old["log_probs"], new_log_probs)
        if empty is not None:
            new["log_probs"] = tf.where(empty, NEG, new["log_probs"])
        # `tokens` hold `end_token` wherever the row stopped (a row that reaches max_length is
        # not flagged: the loop ends there, nothing reads it)
        new["finished"] = tf.equal(tokens, end_token)
        new["sequences"] = tf.where(
            tf.equal(sequence_columns, step), tokens[:, None], old["sequences"]
        )
        if has_attention:
            step_attention = _gather(attention, parents)
            active = ~stop[:, None]
            new["alignments"] = tf.where(
                tf.equal(alignment_columns, step),
                tf.where(active, step_attention, 0.0)[:, None, :],
                old["alignments"],
            )
        if use_coverage:
            new["coverage"] = tf.where(done[:, None], old["coverage"], _gather(coverage, parents))
        new.update(controls.update(new, tokens, step))
        if track_invalid:
            bad = tf.reduce_any(hyp["invalid"]) | _any_nan(log_probs)
            new["invalid"] = tf.fill(n, bad)
        if parents is not None:
            leaves = tf.nest.flatten(state)
            leaves = [x if keep else _gather(x, parents) for x, keep in zip(leaves, invariant)]
            state = tf.nest.pack_sequence_as(state, leaves)
        return tokens, state, new

    step1 = tf.constant(1, tf.int32)
    tokens, state, hyp = advance(step0, step1, logits0, attention0, state, hyp, True, invariant0)

    def cond(step, tokens, state, hyp):
        return tf.logical_and(step < length, tf.logical_not(tf.reduce_all(hyp["finished"])))

    def body(step, tokens, state, hyp):
        logits, new_state, attention = call_step(tokens, state, step)
        if (attention is not None) != has_attention:
            raise ValueError(
                "`step_fn` must return attention at every step or at none "
                "(it returned it at step 0: %s)." % has_attention
            )
        # unchanged by every step so far (step 0 too): its rows per example are still equal
        invariant = [a and b for a, b in zip(invariant0, passed_through(new_state, state))]
        new_state = _common.keep_shapes(new_state, state)
        next_step = step + 1
        loop_out = advance(step, next_step, logits, attention, new_state, hyp, False, invariant)
        loop_out = _common.keep_shapes(loop_out, (tokens, state, hyp))
        return (next_step,) + tuple(loop_out)

    _, _, _, hyp = tf.while_loop(
        cond,
        body,
        (step1, tokens, state, hyp),
        maximum_iterations=length - 1,
    )

    # |Y|: up to the first end token (a row stops by writing it; columns past hold it too),
    # else all T columns
    ended = tf.equal(hyp["sequences"], end_token)
    hyp["lengths"] = tf.reduce_min(tf.where(ended, sequence_columns + 1, length), axis=1)
    if strategy.scores_in_loop:
        scores = hyp["scores"]
    else:
        cp = penalties.coverage_penalty(hyp["coverage"], beta, mask) if use_coverage else 0.0
        scores = penalties.score(hyp["log_probs"], hyp["lengths"], alpha, cp, source_lengths, gamma)
    out = {
        "sequences": hyp["sequences"],
        "lengths": hyp["lengths"],
        "scores": scores,
        "log_probs": hyp["log_probs"],
    }
    if has_attention:
        out["alignments"] = hyp["alignments"]
    split = tf.stack([batch, k])
    out = {
        key: tf.reshape(value, tf.concat([split, tf.shape(value)[1:]], 0))
        for key, value in out.items()
    }
    if not (isinstance(k, int) and k == 1):
        # Already best first by construction; a stable sort keeps that honest.
        order = tf.argsort(out["scores"], axis=1, direction="DESCENDING", stable=True)
        out = {key: tf.gather(value, order, batch_dims=1) for key, value in out.items()}
    real = out["log_probs"] > NEG / 2
    neg_inf = tf.fill(tf.shape(out["scores"]), float("-inf"))
    result = {
        "sequences": tf.where(real[:, :, None], out["sequences"], end_token),
        "lengths": tf.where(real, out["lengths"], 0),
        "scores": tf.where(real, out["scores"], neg_inf),
        "log_probs": tf.where(real, out["log_probs"], neg_inf),
    }
    if has_attention:
        result["alignments"] = tf.where(real[:, :, None, None], out["alignments"], 0.0)
    if track_invalid:
        result["invalid"] = tf.reduce_any(hyp["invalid"])
    return result
