"""The decoding driver: one `while_loop` shared by every strategy, on TensorFlow and JAX.

`decode(step_fn, initial_state, start_tokens, end_token, strategy, config, ...)` owns
everything that is not "which token next" (docs/decoding.md, "The engine"):

- tiling: the initial state (batch B) is repeated to `N = B * K` rows, row `b * K + k` being
  hypothesis k of example b (K = `strategy.width`), except its per-example part: a state
  that is a dict with the key `"per_example"` keeps the nest under it with B rows, neither
  tiled nor gathered; the step reads those rows for the K hypotheses of each example
  (`K = N // B`; docs/decoding.md, "Per-example state"). A state without that key is tiled
  whole;
- the step: `step_fn(tokens [N], state, step)` is called once per step, its outputs checked
  (contract.py: shapes; a NaN or `+inf` logit, or a row of only `-inf`, is an
  `InvalidArgumentError` naming `step_fn`);
- the controls: `Controls.process` turns the logits into log-probs and allowed tokens
  (processors.py, one place, fixed order), then `ConstraintState.process` the forced prefix, the
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

Backends: the engine is written with `keras.ops`; what `keras.ops` lacks (the loop itself on
TensorFlow, sizes unknown while tracing, scatters with a max / min, stateless random draws,
graph assertions) is in `backend.py`, whose docstring lists where and why. On JAX the loop is
`keras.ops.while_loop` (`jax.lax.while_loop`), so the values inside it are traced even
eagerly: the NaN check is carried as the `"invalid"` flag on JAX always; eagerly it raises
`ValueError` naming `step_fn` after the loop, and under `jax.jit` (where nothing can raise)
every row of the result comes back empty (`-inf` scores, length 0) when the flag is set, the
flag itself returned with `report_invalid=True`. Importing and running the searches on JAX
imports no TensorFlow. Called eagerly on JAX, `run` hands the whole search to `compiled.py`:
one jitted program per (step function, static settings, padded shapes), kept and reused, the
step's variables and the numeric knobs as its arguments (docs/decoding.md, "What compiles
when").

The searches are not converted by AutoGraph (tracing stays fast), so neither is the step
function called inside: write its tensor-dependent control flow with `keras.ops.cond` /
`keras.ops.where` (on TensorFlow `tf.cond` / `tf.where` too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from keras import ops

from keras_attn.decoding import backend as kb
from keras_attn.decoding import call, compiled, contract, modes, penalties, processors, shapes
from keras_attn.decoding.config import DecodingConfig
from keras_attn.decoding.constraints import ConstraintState
from keras_attn.decoding.strategies import Setup, StepInputs, Strategy

if TYPE_CHECKING:
    from typing_extensions import Unpack

NEG = penalties.NEG
INVALID_LOGITS = contract.INVALID_LOGITS

StepFunction = Callable[[Any, Any, Any], tuple]


def _start_tokens(start_tokens):
    start_tokens = kb.convert(start_tokens)
    if kb.rank(start_tokens) != 1:
        raise ValueError(
            f"`start_tokens` must have shape [B]. Received: start_tokens.shape={start_tokens.shape}"
        )
    if not kb.is_integer(start_tokens):
        raise ValueError(
            "`start_tokens` must be integer ids. "
            f"Received: start_tokens.dtype={kb.dtype_name(start_tokens)}"
        )
    return ops.cast(start_tokens, "int32")


class Inputs(NamedTuple):
    """A search's step function and what it starts from: the first arguments of every search
    (docs/decoding.md) and the source mask."""

    step_fn: StepFunction
    initial_state: Any
    start_tokens: Any
    end_token: Any
    source_mask: Any = None


def search(
    inputs: Inputs,
    how: str | Strategy,
    config: DecodingConfig,
    constraints: call.Constraints | None,
    k_axis: bool = True,
) -> dict[str, Any]:
    """The body every search shares, once its call is resolved (`call.resolve`): `how` is a
    mode of `modes.MODES` (its strategy built from the validated `config`, nothing checked
    again, and the K axis for an n-best mode only) or a `Strategy` (the K axis as `k_axis`
    says)."""
    strategy = how
    if not isinstance(how, Strategy):
        mode = modes.mode(how)
        strategy, k_axis = mode.strategy_for(config), mode.n_best
    return run(inputs, strategy, config, constraints, k_axis)


def mode_search(
    mode: str,
    inputs: Inputs,
    config: DecodingConfig | None,
    constraints: call.Constraints | None,
    keywords: Mapping[str, Any],
) -> dict[str, Any]:
    """The body of the search function of `mode` (the function `modes.MODES` names for it:
    `beam_search`, `greedy_search`, `sample_search`): its call resolved by the rule
    (`call.resolve`, the function named in messages), then `search`."""
    config, constraints = call.resolve(modes.mode(mode).search, mode, config, constraints, keywords)
    return search(inputs, mode, config, constraints)


@kb.do_not_convert
def decode(
    step_fn: StepFunction,
    initial_state: Any,
    start_tokens: Any,
    end_token: Any,
    strategy: Strategy,
    config: DecodingConfig | None = None,
    source_mask: Any = None,
    *,
    constraints: call.Constraints | None = None,
    **keywords: Unpack[call.EngineKeywords],
) -> dict[str, Any]:
    """Runs `strategy` over `step_fn`; returns the searches' output dict with a K axis.

    Args:
      step_fn, initial_state, start_tokens, end_token, source_mask: as in `beam_search`.
      strategy: a `Strategy` (its `width` K is the beam; the config's `beam_size` is not read).
      config: a `DecodingConfig` (None: the defaults); the engine reads `max_length`, the
        penalties, the controls and `report_invalid`.
      constraints: a `call.Constraints` (prefix, phrases, alternatives, suppressions, budgets;
        None: none, and their code adds no op to the loop).
      **keywords: overrides of `config` and `constraints` from the table `call.KEYWORDS`
        (those the engine reads: not the strategy's own); a keyword given wins.

    Returns `sequences [B, K, T]`, `lengths [B, K]`, `scores [B, K]`, `log_probs [B, K]`,
    `token_log_probs [B, K, T]`, `alignments [B, K, T, S]` when the step returns attention and
    `constraints_met [B, K]` with `constraint_ids`. With a beam they are sorted best first
    (with constraints: those that met them all first).
    """
    if not isinstance(strategy, Strategy):
        raise ValueError(f"`strategy` must be a Strategy. Received: strategy={strategy!r}")
    config, constraints = call.resolve("decode", None, config, constraints, keywords)
    inputs = Inputs(step_fn, initial_state, start_tokens, end_token, source_mask)
    return search(inputs, strategy, config, constraints)


def run(
    inputs: Inputs,
    strategy: Strategy,
    config: DecodingConfig,
    constraints: call.Constraints | None,
    k_axis: bool = True,
) -> dict[str, Any]:
    """`decode` once its config and constraints are resolved (the searches call it);
    `k_axis=False` returns the outputs without the K axis (a strategy of width 1)."""
    inputs = inputs._replace(start_tokens=_start_tokens(inputs.start_tokens))
    if not kb.is_tf():
        # JAX, called eagerly: one program per (step, settings, padded shapes), kept
        out = compiled.decode(inputs, strategy, config, constraints, k_axis)
        if out is not None:
            return out
    step_fn, initial_state, start_tokens, end_token, source_mask = inputs
    search = _Search(step_fn, strategy, config, shapes.dim(start_tokens, 0))
    out = search.loop(
        *search.start(initial_state, start_tokens, end_token, source_mask, constraints)
    )
    if k_axis:
        return out
    return {
        key: value if key in contract.SCALAR_OUTPUTS else value[:, 0] for key, value in out.items()
    }


def _end_token(end_token):
    """The end token as an int32 scalar; on JAX a value known now stays a Python int, so what
    depends on it (no end token: no end slot to offer) is resolved when tracing, as on
    TensorFlow, where a constant is known while tracing."""
    if not kb.is_tf():
        value = kb.static_value(end_token)
        if (
            value is not None
            and np.ndim(value) == 0
            and np.issubdtype(np.asarray(value).dtype, np.integer)
        ):
            return int(value)
    return kb.convert(end_token, "int32")


def _passed_through(new_state, state):
    """Per leaf (flattened order): the step returned the very tensor it was given."""
    return [n is o for n, o in zip(kb.flatten(new_state), kb.flatten(state))]


class _Search:
    """One search's pieces: what `decode`'s loop calls, set up once (module docstring)."""

    def __init__(self, step_fn, strategy, config, batch):
        self.step_fn, self.strategy, self.config, self.batch = step_fn, strategy, config, batch
        self.controls = processors.Controls(config)
        self.k = strategy.width
        self.single = shapes.is_one(self.k)
        self.n_rows = shapes.mul(batch, self.k)

    def call_step(self, tokens, state, step):
        return contract.step_outputs(self.step_fn(tokens, state, step), self.n_rows)

    def start(self, initial_state, start_tokens, end_token, source_mask, constraints):
        """The inputs checked and tiled, then the first step, peeled out of the loop (it tells
        the vocabulary and the attention width): `(tokens, state, hyp, per_example,
        invariant)`, the last two per leaf of the state (flattened order): kept with B rows,
        and never gathered (the per-example leaves and the tiled leaves the step passes
        through, whose K rows per example stay equal)."""
        batch = self.batch
        state = shapes.as_tensor_nest(initial_state)
        state = kb.map_structure(lambda x: kb.check_batch_axis("initial_state", x, batch), state)
        state = shapes.tile_nest(state, self.k)
        tokens = start_tokens if self.single else ops.repeat(start_tokens, self.k, axis=0)
        if source_mask is not None:
            source_mask = kb.check_batch_axis("source_mask", source_mask, batch)
        constraints = ConstraintState.of(constraints, batch, self.config.max_length)
        step0 = kb.convert(0, "int32")
        logits, new_state, attention = self.call_step(tokens, state, step0)
        per_example = shapes.per_example_leaves(state)
        invariant = [a or b for a, b in zip(per_example, _passed_through(new_state, state))]
        state = contract.check_state_shapes(new_state, state)
        hyp = self.setup(logits, attention, _end_token(end_token), source_mask, constraints)
        tokens, state, hyp = self.advance(step0, logits, attention, state, hyp, True, invariant)
        return tokens, state, hyp, per_example, invariant

    def loop(self, tokens, state, hyp, per_example, invariant):
        """Steps 1 to `max_length - 1` in one while loop, then the outputs (with a K axis)."""
        # Without an end token (-1, known when tracing) no row ends before max_length, so the
        # loop runs its `max_length - 1` iterations: on JAX its condition is then the
        # iteration count alone, a loop XLA knows the trip count of (on a GPU, no predicate
        # read back to the host each step). A row left without a possible token is frozen
        # either way.
        static_end = kb.static_value(self.end_token)
        stop_after = self.config.stop_after
        fixed = (
            static_end is not None and int(static_end) < 0 and not kb.is_tf() and stop_after is None
        )
        max_length = self.config.max_length

        def cond(step, tokens, state, hyp):
            if fixed:
                return True
            going = ops.logical_and(step < max_length, ops.logical_not(ops.all(hyp["finished"])))
            return going if stop_after is None else ops.logical_and(going, step < stop_after)

        def body(step, tokens, state, hyp):
            logits, new_state, attention = self.call_step(tokens, state, step)
            if (attention is not None) != self.has_attention:
                raise ValueError(
                    "`step_fn` must return attention at every step or at none "
                    f"(it returned it at step 0: {self.has_attention})."
                )
            # unchanged by every step so far (step 0 too): its rows per example are still equal
            passed = _passed_through(new_state, state)
            still = [e or (a and b) for e, a, b in zip(per_example, invariant, passed)]
            new_state = shapes.keep_shapes(new_state, state)
            loop_out = self.advance(step, logits, attention, new_state, hyp, False, still)
            loop_out = shapes.keep_shapes(loop_out, (tokens, state, hyp))
            return (step + 1, *loop_out)

        step, _, _, hyp = kb.while_loop(
            cond,
            body,
            (kb.convert(1, "int32"), tokens, state, hyp),
            maximum_iterations=max_length - 1,
        )
        out = self.result(hyp)
        if stop_after is not None:  # where it stopped, and whether it ended by itself there
            out["done"] = ops.logical_or(step >= max_length, ops.all(hyp["finished"]))
            out["steps"] = step
        return out

    def _per_row(self, x):
        """A per-example tensor `[B, ...]` repeated for the K hypotheses of each example."""
        return x if self.single or x is None else ops.repeat(x, self.k, axis=0)

    def setup(self, logits0, attention0, end_token, source_mask, constraints):
        """After the first step: the checks that need V, the loop invariants, the buffers."""
        config, n_rows, length = self.config, self.n_rows, self.config.max_length
        self.vocab = vocab = shapes.dim(logits0, 1)
        self.end_token = end_token = kb.check_end_token(end_token, vocab)
        self.controls.check_vocab(vocab)
        self.constraints = None
        if constraints is not None:
            self.constraints = constraints.checked(vocab, end_token, self.k)
        self.has_attention = attention0 is not None
        mask, source_lengths = penalties.source_info(source_mask, attention0, self.batch)
        self.mask, self.source_lengths = self._per_row(mask), self._per_row(source_lengths)
        self.source_column = self.source_lengths[:, None]  # [N, 1], broadcast over candidates
        self.use_coverage = self.has_attention and not penalties.is_zero(config.coverage_penalty)
        # XLA drops Assert ops, and JAX has none: the NaN check is carried as a flag (not
        # reordered) and returned for the caller to assert on (on JAX: checked after the
        # loop, module docstring).
        self.on_tf = kb.is_tf()
        if self.on_tf:
            from keras_attn.layers import rng

            self.track_invalid = config.report_invalid and rng.in_xla()
        else:
            self.track_invalid = True
        # loop invariants: which column of `sequences` / `alignments` a step writes
        columns = kb.range_(length)
        self.sequence_columns, self.alignment_columns = columns[None, :], columns[None, :, None]
        self.cumulative_rows = columns[:, None]
        self.n = n = kb.shape_of(n_rows)
        hyp = {
            "sequences": kb.full(kb.shape_of(n_rows, length), end_token, "int32"),
            # time-major: a step writes a row of it with no reshape of the [N] log-probs
            "cumulative": kb.zeros(kb.shape_of(length, n_rows), "float32"),
            "log_probs": kb.zeros(n, "float32"),
            "finished": kb.zeros(n, "bool"),
        }
        if self.has_attention:
            width = shapes.dim(attention0, 1)
            hyp["alignments"] = kb.zeros(kb.shape_of(n_rows, length, width), "float32")
            if self.use_coverage:
                hyp["coverage"] = kb.zeros(kb.shape_of(n_rows, width), "float32")
        if self.track_invalid:
            # NaN marks, never reordered: NaN in a slot once some step's log-probs held a NaN
            # there (a sum carries it on; see `contract.nan_marks`), read after the loop
            hyp["invalid"] = kb.zeros(n, "float32")
        plain = penalties.is_zero(config.length_penalty) and penalties.is_zero(config.eos_penalty)
        self.strategy.prepare(
            Setup(
                batch=self.batch,
                n_rows=n_rows,
                vocab=vocab,
                end_token=end_token,
                plain_scores=plain and not self.use_coverage,
            )
        )
        hyp.update(self.strategy.initial_state(n_rows))
        hyp.update(self.controls.initial_state(n_rows, length))
        if self.constraints is not None:
            hyp.update(self.constraints.initial_state(n_rows))
        return hyp

    def select(self, step, logits, attention, hyp, first):
        """The controls, the constraints and the strategy's choice: `(Selection, (log_probs,
        probe), coverage)` (`probe`: `backend.log_softmax`'s NaN probe, or None)."""
        # the strategy's `row_top_k` best logits of each row, where no control or constraint
        # bans a token (the log-softmax reads its maximum off them)
        top_k = self.strategy.row_top_k if self.constraints is None else None
        log_probs, allowed, probe, logits, top = self.controls.process(
            logits, hyp, step, self.end_token, self.vocab, with_probe=True, top_k=top_k
        )
        log_probs = contract.check_log_probs(log_probs, step, probe)
        banks = None
        if self.constraints is not None:
            allowed, banks = self.constraints.process(
                hyp, step, allowed, self.vocab, self.end_token
            )
        if allowed is not None:
            allowed = kb.broadcast_to(allowed, kb.shape_like(log_probs))
        coverage = hyp["coverage"] + attention if self.use_coverage else None

        def candidate_cp():
            if coverage is None:
                return 0.0
            return penalties.coverage_penalty(coverage, self.config.coverage_penalty, self.mask)

        inputs = StepInputs(
            step=step,
            first=first,
            log_probs=log_probs,
            allowed=allowed,
            hypotheses=hyp,
            alpha=self.config.length_penalty,
            gamma=self.config.eos_penalty,
            coverage_penalty=candidate_cp,
            source_lengths=self.source_column,
            banks=banks,
            logits=logits,
            top=top,
        )
        return self.strategy.select(inputs), (log_probs, probe), coverage

    def advance(self, step, logits, attention, state, hyp, first, invariant):
        """One step: the choice, then the buffers and the state along the parents."""
        selection, (log_probs, probe), coverage = self.select(step, logits, attention, hyp, first)
        parents, tokens, new_log_probs, empty, own = selection[:5]
        # the strategy's own buffers come back new; the NaN marks stay in their slots
        old = {
            key: shapes.gather_rows(value, parents, axis=1 if key == "cumulative" else 0)
            for key, value in hyp.items()
            if key not in own and key != "invalid"
        }
        done = old["finished"]  # the parent was finished: this row is frozen
        # `empty` (None: none) is True where the strategy found no possible candidate: an
        # empty row (a finished parent is not empty only if the strategy kept it)
        stop = done if empty is None else done | empty
        tokens = ops.where(stop, self.end_token, tokens)
        new = dict(old)
        new.update(own)
        if selection.final:
            new["log_probs"] = new_log_probs
        else:
            new["log_probs"] = ops.where(done, old["log_probs"], new_log_probs)
            if empty is not None:
                new["log_probs"] = ops.where(empty, NEG, new["log_probs"])
        # `tokens` hold `end_token` wherever the row stopped (a row that reaches max_length is
        # not flagged: the loop ends there, nothing reads it)
        new["finished"] = ops.equal(tokens, self.end_token)
        write = ops.equal(self.sequence_columns, step)
        new["sequences"] = ops.where(write, tokens[:, None], old["sequences"])
        new["cumulative"] = ops.where(
            self.cumulative_rows == step, new["log_probs"], old["cumulative"]
        )
        if self.has_attention:
            new["alignments"] = ops.where(
                ops.equal(self.alignment_columns, step),
                ops.where(~stop[:, None], shapes.gather_rows(attention, parents), 0.0)[:, None],
                old["alignments"],
            )
        if coverage is not None:
            new["coverage"] = ops.where(
                done[:, None], old["coverage"], shapes.gather_rows(coverage, parents)
            )
        new.update(self.controls.update(new, tokens, step))
        if self.constraints is not None:
            new.update(self.constraints.update(new, tokens, stop))
        if self.track_invalid:
            new["invalid"] = hyp["invalid"] + contract.nan_marks(log_probs, probe)
        return tokens, self.reorder(state, parents, invariant), new

    @staticmethod
    def reorder(state, parents, invariant):
        """The model's state along the parents; a leaf the step passes through is kept."""
        if parents is None:
            return state
        leaves = [
            x if keep else shapes.gather_rows(x, parents)
            for x, keep in zip(kb.flatten(state), invariant)
        ]
        return kb.pack(state, leaves)

    def result(self, hyp):
        """The loop's buffers -> the searches' outputs (lengths, scores, the K axis, best
        first; empty rows and, on JAX, a failed NaN check reported)."""
        out = self.outputs(hyp)
        if not shapes.is_one(self.k):
            # Already best first by construction; a stable sort keeps that honest.
            order = kb.argsort_desc(out["scores"])
            if "constraints_met" in out:
                # those that met every phrase first, by score within each group
                met = kb.take_rows(ops.cast(out["constraints_met"], "int32"), order)
                order = kb.take_rows(order, kb.argsort_desc(met))
            out = {key: kb.take_rows(value, order) for key, value in out.items()}
        return self.reported(out, hyp)

    def outputs(self, hyp):
        """The outputs `[B, K, ...]` in the loop's order: lengths, scores, per-token log-probs."""
        config, length = self.config, self.config.max_length
        sequence_columns = kb.range_(length)[None, :]
        # |Y|: up to the first end token (a row stops by writing it; columns past hold it too),
        # else all T columns
        ended = ops.equal(hyp["sequences"], self.end_token)
        lengths = kb.reduce_min(ops.where(ended, sequence_columns + 1, length), axis=1)
        if self.strategy.scores_in_loop:
            scores = hyp["scores"]
        else:
            cp = 0.0
            if self.use_coverage:
                cp = penalties.coverage_penalty(hyp["coverage"], config.coverage_penalty, self.mask)
            scores = penalties.score(
                hyp["log_probs"],
                lengths,
                config.length_penalty,
                cp,
                self.source_lengths,
                config.eos_penalty,
            )
        cumulative = ops.transpose(hyp["cumulative"])
        previous = ops.pad(cumulative[:, :-1], [[0, 0], [1, 0]])
        out = {
            "sequences": hyp["sequences"],
            "lengths": lengths,
            "scores": scores,
            "log_probs": hyp["log_probs"],
            "token_log_probs": ops.where(
                sequence_columns < lengths[:, None], cumulative - previous, 0.0
            ),
        }
        if self.has_attention:
            out["alignments"] = hyp["alignments"]
        if self.constraints is not None and self.constraints.has_phrases:
            out["constraints_met"] = self.constraints.met(hyp)
        return {
            key: kb.reshape(value, kb.shape_of(self.batch, self.k, *kb.dynamic_shape(value)[1:]))
            for key, value in out.items()
        }

    def reported(self, out, hyp):
        """`out` with its empty rows (and, on JAX, every row when the NaN check failed) as
        `-inf` scores and log-probs, length 0, `end_token`; `"invalid"` where asked for."""
        real = out["log_probs"] > NEG / 2
        invalid = None
        if self.track_invalid:
            invalid = ops.any(ops.isnan(hyp["invalid"]))
            if not self.on_tf:
                # JAX: no graph assertion; eagerly an error, under jax.jit empty rows (docstring)
                kb.run_time_check(None, ~invalid, contract.INVALID_LOGITS)
                real = real & ~invalid
        neg_inf = kb.full(kb.shape_like(out["scores"]), float("-inf"), "float32")
        result = {
            "sequences": ops.where(real[:, :, None], out["sequences"], self.end_token),
            "lengths": ops.where(real, out["lengths"], 0),
            "scores": ops.where(real, out["scores"], neg_inf),
            "log_probs": ops.where(real, out["log_probs"], neg_inf),
            "token_log_probs": ops.where(real[:, :, None], out["token_log_probs"], 0.0),
        }
        if self.has_attention:
            result["alignments"] = ops.where(real[:, :, None, None], out["alignments"], 0.0)
        if "constraints_met" in out:
            result["constraints_met"] = out["constraints_met"] & real
        if self.track_invalid and self.config.report_invalid:
            result["invalid"] = invalid
        return result
