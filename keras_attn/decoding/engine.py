"""The decoding driver: one `tf.while_loop` shared by every strategy.

`decode(step_fn, initial_state, start_tokens, end_token, strategy, config, ...)` owns
everything that is not "which token next" (docs/decoding.md, "The engine"):

- tiling: the initial state (batch B) is repeated to `N = B * K` rows, row `b * K + k` being
  hypothesis k of example b (K = `strategy.width`);
- the step: `step_fn(tokens [N], state, step)` is called once per step, its outputs checked
  (contract.py: shapes; a NaN or `+inf` logit, or a row of only `-inf`, is an
  `InvalidArgumentError` naming `step_fn`);
- the controls: `Controls.process` turns the logits into log-probs and allowed tokens
  (processors.py, one place, fixed order), then `Constraints.process` the forced prefix, the
  suppressed sequences and the required phrases (constraints.py; absent without them);
- the choice: `strategy.select` (strategies.py) on a `StepInputs`, answering a `Selection`;
- bookkeeping, in flat `[N, ...]` buffers reordered with one gather per buffer when the
  strategy has parents: tokens, cumulative log-probs (per step, for `token_log_probs`),
  coverage, alignments, finished flags, the controls' and the constraints' state (the lengths
  are read off `sequences` after the loop: the first `end_token` column); a finished row is
  frozen (never extended; its length, log-prob, score and alignments never change); a row
  with no possible token left becomes empty;
- the model's state: every leaf gathered along the parents (beam) or left alone (greedy,
  sampling); a leaf the step returns unchanged (the very tensor it was given: encoder memory,
  cross-attention keys, the source mask) is never gathered: it was tiled, so the K rows of an
  example hold the same values, and beam parents never leave their example;
- XLA shapes: `sequences` always have `T = max_length` columns (columns past `lengths` hold
  `end_token`), buffers are preallocated after the first step, which is peeled out of the
  loop (it tells the vocabulary size and the attention width);
- the result: scores by the GNMT formula (penalties.py), empty rows reported as `-inf` scores
  and log-probs, length 0;
- under XLA (`jit_compile=True`), which drops `tf.debugging.Assert`, the NaN check cannot raise:
  with `report_invalid=True` the result also holds `"invalid"`, a bool scalar, True when the
  check would have failed, for the caller to assert on outside the compiled function.

The searches are not converted by AutoGraph (tracing stays fast), so neither is the step
function called inside: write its tensor-dependent control flow with `tf.cond` / `tf.where`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from keras_attn import _checks
from keras_attn.decoding import contract, penalties, processors, shapes
from keras_attn.decoding.config import DecodingConfig
from keras_attn.decoding.constraints import Constraints
from keras_attn.decoding.strategies import Setup, StepInputs, Strategy
from keras_attn.layers import rng

NEG = penalties.NEG
INVALID_LOGITS = contract.INVALID_LOGITS

StepFunction = Callable[[tf.Tensor, Any, tf.Tensor], tuple]


def _start_tokens(start_tokens):
    start_tokens = tf.convert_to_tensor(start_tokens)
    if start_tokens.shape.rank != 1:
        raise ValueError(
            f"`start_tokens` must have shape [B]. Received: start_tokens.shape={start_tokens.shape}"
        )
    if not start_tokens.dtype.is_integer:
        raise ValueError(
            "`start_tokens` must be integer ids. "
            f"Received: start_tokens.dtype={start_tokens.dtype.name}"
        )
    return tf.cast(start_tokens, tf.int32)


@tf.autograph.experimental.do_not_convert
def decode(
    step_fn: StepFunction,
    initial_state: Any,
    start_tokens: Any,
    end_token: Any,
    strategy: Strategy,
    config: DecodingConfig | None = None,
    source_mask: Any = None,
    prefix_ids: Any = None,
    constraint_ids: Any = None,
    suppress_ids: Any = None,
) -> dict[str, tf.Tensor]:
    """Runs `strategy` over `step_fn`; returns the searches' output dict with a K axis.

    Args:
      step_fn, initial_state, start_tokens, end_token, source_mask: as in `beam_search`.
      strategy: a `Strategy` (its `width` K is the beam; the config's `beam_size` is not read).
      config: a `DecodingConfig` (None: the defaults); the engine reads `max_length`, the
        penalties, the controls and `report_invalid`.
      prefix_ids, constraint_ids, suppress_ids: the constraints of docs/decoding.md (None:
        none, and their code adds no op to the loop).

    Returns `sequences [B, K, T]`, `lengths [B, K]`, `scores [B, K]`, `log_probs [B, K]`,
    `token_log_probs [B, K, T]`, `alignments [B, K, T, S]` when the step returns attention and
    `constraints_met [B, K]` with `constraint_ids`. With a beam they are sorted best first
    (with constraints: those that met them all first).
    """
    if not isinstance(strategy, Strategy):
        raise ValueError(f"`strategy` must be a Strategy. Received: strategy={strategy!r}")
    config = DecodingConfig() if config is None else config
    if not isinstance(config, DecodingConfig):
        raise ValueError(f"`config` must be a DecodingConfig. Received: config={config!r}")
    controls = processors.Controls(config=config)
    length = max_length = config.max_length
    alpha, beta, gamma = config.length_penalty, config.coverage_penalty, config.eos_penalty
    start_tokens = _start_tokens(start_tokens)
    end_token = tf.cast(tf.convert_to_tensor(end_token), tf.int32)
    batch = shapes.dim(start_tokens, 0)
    k = strategy.width
    single = shapes.is_one(k)
    n_rows = shapes.mul(batch, k)

    state = shapes.as_tensor_nest(initial_state)
    state = tf.nest.map_structure(
        lambda x: _checks.check_batch_axis("initial_state", x, batch), state
    )
    state = shapes.tile_nest(state, k)
    tokens = start_tokens if single else tf.repeat(start_tokens, k, axis=0)
    if source_mask is not None:
        source_mask = _checks.check_batch_axis("source_mask", source_mask, batch)
    constraints = Constraints.of(prefix_ids, constraint_ids, suppress_ids, batch, max_length)

    def call_step(tokens, state, step):
        return contract.step_outputs(step_fn(tokens, state, step), n_rows)

    def passed_through(new_state, state):
        # per leaf (flattened order): the step returned the tensor it was given
        return [n is o for n, o in zip(tf.nest.flatten(new_state), tf.nest.flatten(state))]

    step0 = tf.constant(0, tf.int32)
    logits0, state0, attention0 = call_step(tokens, state, step0)
    invariant0 = passed_through(state0, state)
    state = contract.check_state_shapes(state0, state)
    vocab = shapes.dim(logits0, 1)
    end_token = _checks.check_end_token(end_token, vocab)
    controls.check_vocab(vocab)
    if constraints is not None:
        constraints = constraints.checked(vocab, end_token, k)
    has_attention = attention0 is not None
    mask, source_lengths = penalties.source_info(source_mask, attention0, batch)
    if not single:
        source_lengths = tf.repeat(source_lengths, k, axis=0)
        if mask is not None:
            mask = tf.repeat(mask, k, axis=0)
    use_coverage = has_attention and not penalties.is_zero(beta)

    n = tf.reshape(n_rows, [1])
    hyp = {
        "sequences": tf.fill(tf.stack([n_rows, length]), end_token),
        "cumulative": tf.zeros(tf.stack([n_rows, length]), tf.float32),
        "log_probs": tf.zeros(n, tf.float32),
        "finished": tf.zeros(n, tf.bool),
    }
    if has_attention:
        width = shapes.dim(attention0, 1)
        hyp["alignments"] = tf.zeros(tf.stack([n_rows, length, width]), tf.float32)
    if use_coverage:
        hyp["coverage"] = tf.zeros(tf.stack([n_rows, width]), tf.float32)
    # XLA drops Assert ops: the NaN check is carried as a flag (the same in every row, so the
    # gathers along parents keep it) and returned for the caller to assert on.
    track_invalid = config.report_invalid and rng.in_xla()
    if track_invalid:
        hyp["invalid"] = tf.zeros(n, tf.bool)
    hyp.update(strategy.initial_state(n_rows))
    hyp.update(controls.initial_state(n_rows, length))
    if constraints is not None:
        hyp.update(constraints.initial_state(n_rows))
    strategy.prepare(Setup(batch=batch, n_rows=n_rows, vocab=vocab, end_token=end_token))

    source_column = source_lengths[:, None]  # [N, 1], broadcast over the candidates
    # loop invariants: which column of `sequences` / `alignments` a step writes
    columns = tf.range(length)
    sequence_columns, alignment_columns = columns[None, :], columns[None, :, None]

    def advance(step, logits, attention, state, hyp, first, invariant):
        """One step's bookkeeping."""
        log_probs, allowed = controls.process(logits, hyp, step, end_token, vocab)
        log_probs = contract.check_log_probs(log_probs, step)
        banks = None
        if constraints is not None:
            allowed, banks = constraints.process(hyp, step, allowed, vocab, end_token)
        if allowed is not None:
            allowed = tf.broadcast_to(allowed, tf.shape(log_probs))
        if use_coverage:
            coverage = hyp["coverage"] + attention

        def candidate_cp():
            return penalties.coverage_penalty(coverage, beta, mask) if use_coverage else 0.0

        inputs = StepInputs(
            step=step,
            first=first,
            log_probs=log_probs,
            allowed=allowed,
            hypotheses=hyp,
            alpha=alpha,
            gamma=gamma,
            coverage_penalty=candidate_cp,
            source_lengths=source_column,
            banks=banks,
        )
        parents, tokens, new_log_probs, empty, own = strategy.select(inputs)
        # the strategy's own buffers come back new; the NaN flag is the same in every row
        old = {
            key: shapes.gather_rows(value, parents)
            for key, value in hyp.items()
            if key not in own and key != "invalid"
        }
        done = old["finished"]  # the parent was finished: this row is frozen
        # `empty` (None: none) is True where the strategy found no possible candidate: an
        # empty row (a finished parent is not empty only if the strategy kept it)
        stop = done if empty is None else done | empty
        tokens = tf.where(stop, end_token, tokens)
        new = dict(old)
        new.update(own)
        new["log_probs"] = tf.where(done, old["log_probs"], new_log_probs)
        if empty is not None:
            new["log_probs"] = tf.where(empty, NEG, new["log_probs"])
        # `tokens` hold `end_token` wherever the row stopped (a row that reaches max_length is
        # not flagged: the loop ends there, nothing reads it)
        new["finished"] = tf.equal(tokens, end_token)
        write = tf.equal(sequence_columns, step)
        new["sequences"] = tf.where(write, tokens[:, None], old["sequences"])
        new["cumulative"] = tf.where(write, new["log_probs"][:, None], old["cumulative"])
        if has_attention:
            step_attention = shapes.gather_rows(attention, parents)
            active = ~stop[:, None]
            new["alignments"] = tf.where(
                tf.equal(alignment_columns, step),
                tf.where(active, step_attention, 0.0)[:, None, :],
                old["alignments"],
            )
        if use_coverage:
            new["coverage"] = tf.where(
                done[:, None], old["coverage"], shapes.gather_rows(coverage, parents)
            )
        new.update(controls.update(new, tokens, step))
        if constraints is not None:
            new.update(constraints.update(new, tokens, stop))
        if track_invalid:
            bad = tf.reduce_any(hyp["invalid"]) | contract.any_nan(log_probs)
            new["invalid"] = tf.fill(n, bad)
        if parents is not None:
            leaves = tf.nest.flatten(state)
            leaves = [
                x if keep else shapes.gather_rows(x, parents) for x, keep in zip(leaves, invariant)
            ]
            state = tf.nest.pack_sequence_as(state, leaves)
        return tokens, state, new

    tokens, state, hyp = advance(step0, logits0, attention0, state, hyp, True, invariant0)

    def cond(step, tokens, state, hyp):
        return tf.logical_and(step < length, tf.logical_not(tf.reduce_all(hyp["finished"])))

    def body(step, tokens, state, hyp):
        logits, new_state, attention = call_step(tokens, state, step)
        if (attention is not None) != has_attention:
            raise ValueError(
                "`step_fn` must return attention at every step or at none "
                f"(it returned it at step 0: {has_attention})."
            )
        # unchanged by every step so far (step 0 too): its rows per example are still equal
        invariant = [a and b for a, b in zip(invariant0, passed_through(new_state, state))]
        new_state = shapes.keep_shapes(new_state, state)
        loop_out = advance(step, logits, attention, new_state, hyp, False, invariant)
        loop_out = shapes.keep_shapes(loop_out, (tokens, state, hyp))
        return (step + 1, *loop_out)

    _, _, _, hyp = tf.while_loop(
        cond,
        body,
        (tf.constant(1, tf.int32), tokens, state, hyp),
        maximum_iterations=length - 1,
    )
    return _result(
        hyp,
        strategy,
        constraints,
        config,
        batch=batch,
        k=k,
        end_token=end_token,
        has_attention=has_attention,
        coverage_mask=(mask,) if use_coverage else None,
        source_lengths=source_lengths,
        track_invalid=track_invalid,
    )


def _result(
    hyp,
    strategy,
    constraints,
    config,
    *,
    batch,
    k,
    end_token,
    has_attention,
    coverage_mask,
    source_lengths,
    track_invalid,
):
    """The loop's buffers -> the searches' outputs (lengths, scores, the K axis, best first)."""
    length, alpha, gamma = config.max_length, config.length_penalty, config.eos_penalty
    sequence_columns = tf.range(length)[None, :]
    # |Y|: up to the first end token (a row stops by writing it; columns past hold it too),
    # else all T columns
    ended = tf.equal(hyp["sequences"], end_token)
    lengths = tf.reduce_min(tf.where(ended, sequence_columns + 1, length), axis=1)
    if strategy.scores_in_loop:
        scores = hyp["scores"]
    else:
        cp = 0.0
        if coverage_mask is not None:
            cp = penalties.coverage_penalty(
                hyp["coverage"], config.coverage_penalty, *coverage_mask
            )
        scores = penalties.score(hyp["log_probs"], lengths, alpha, cp, source_lengths, gamma)
    cumulative = hyp["cumulative"]
    previous = tf.pad(cumulative[:, :-1], [[0, 0], [1, 0]])
    out = {
        "sequences": hyp["sequences"],
        "lengths": lengths,
        "scores": scores,
        "log_probs": hyp["log_probs"],
        "token_log_probs": tf.where(
            sequence_columns < lengths[:, None], cumulative - previous, 0.0
        ),
    }
    if has_attention:
        out["alignments"] = hyp["alignments"]
    if constraints is not None and constraints.has_phrases:
        out["constraints_met"] = constraints.met(hyp)
    split = tf.stack([batch, k])
    out = {
        key: tf.reshape(value, tf.concat([split, tf.shape(value)[1:]], 0))
        for key, value in out.items()
    }
    if not shapes.is_one(k):
        # Already best first by construction; a stable sort keeps that honest.
        order = tf.argsort(out["scores"], axis=1, direction="DESCENDING", stable=True)
        if "constraints_met" in out:
            # those that met every phrase first, by score within each group
            met = tf.gather(tf.cast(out["constraints_met"], tf.int32), order, batch_dims=1)
            order = tf.gather(
                order, tf.argsort(met, axis=1, direction="DESCENDING", stable=True), batch_dims=1
            )
        out = {key: tf.gather(value, order, batch_dims=1) for key, value in out.items()}
    real = out["log_probs"] > NEG / 2
    neg_inf = tf.fill(tf.shape(out["scores"]), float("-inf"))
    result = {
        "sequences": tf.where(real[:, :, None], out["sequences"], end_token),
        "lengths": tf.where(real, out["lengths"], 0),
        "scores": tf.where(real, out["scores"], neg_inf),
        "log_probs": tf.where(real, out["log_probs"], neg_inf),
        "token_log_probs": tf.where(real[:, :, None], out["token_log_probs"], 0.0),
    }
    if has_attention:
        result["alignments"] = tf.where(real[:, :, None, None], out["alignments"], 0.0)
    if "constraints_met" in out:
        result["constraints_met"] = out["constraints_met"] & real
    if track_invalid:
        result["invalid"] = tf.reduce_any(hyp["invalid"])
    return result
