"""Decoding strategies: how the next tokens are chosen and how finished rows are kept.

A strategy subclasses `Strategy` and provides what the engine (`engine.decode`) asks of it,
nothing more (docs/decoding.md, "What a strategy must provide"):

- `width`: hypotheses per example (K), a Python int or an int32 scalar tensor;
- `scores_in_loop`: True when the strategy keeps each row's final score in its own buffer
  `"scores"` (the beam: it ranks by it); False and the engine scores the rows after the loop;
- `prepare(setup)`: loop invariants, computed once before the loop from a `Setup` (called
  first);
- `initial_state(n_rows)`: the strategy's own per-hypothesis buffers (`{name: [N, ...]}`),
  carried by the engine and reordered along the parents with the others;
- `select(inputs)`: one step's choice, from a `StepInputs`, as a `Selection`;
- `row_top_k` (optional, default None): k when the strategy reads each row's k best logits
  (`StepInputs.top`), taken once by the engine where no token is banned.

A search builds its strategy with `of(config)` (default `cls()`): from the call's validated
`DecodingConfig`, whose knobs it takes as they are. A strategy built by hand has its knobs
checked by a `DecodingConfig` too, so each range is checked in one place.

The strategy knows nothing of the loop, the model's state or XLA shapes: the engine does.
Four ship with the package, side by side:

- `Greedy()`: the most likely allowed token (ties: the lowest id); finished rows keep
  themselves. Where no token is banned it is the row's best logit, which the engine's
  `top_k` with k = 1 gives (`row_top_k`), the log-softmax reading its maximum off it.
- `Forced(targets)`: the given tokens, then the end token (the model's log-probability of
  given sequences: `forced_search`).
- `Sampling(temperature, top_k, top_p, seed)`: a draw from the allowed tokens'
  `softmax(log_probs / temperature)`, restricted to the `top_k` most likely and then to the
  smallest set whose probability reaches `top_p` (ties at either boundary are kept).
- `Beam(beam_size)`: each live hypothesis offers its V extensions scored by the GNMT score it
  would have if it ended there, each finished one offers only itself (its score unchanged);
  the K best of each example's `K * V` candidates are kept. At step 0 only beam 0 offers
  candidates (all K are identical). The K best of an example are among the K best of each of
  its rows (the penalties are the same for every token of a row), so a `top_k` over each
  row's logits, then one over the example's `K * K` scored candidates, keeps them, and no
  `[N, V]` candidates are written. With constraints it keeps the K by dynamic beam
  allocation (banks by constraint tokens met), from the `[N, V]` candidates.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, NamedTuple

from keras import ops

from keras_attn.decoding import backend as kb
from keras_attn.decoding import penalties, shapes
from keras_attn.decoding.config import DecodingConfig

NEG = penalties.NEG
Tensor = Any  # a backend tensor (or a Python number where the graph knows it)


class Setup(NamedTuple):
    """What a strategy may read once, before the loop (`Strategy.prepare`).

    Attributes:
      batch: B, the examples (a Python int when known, else a scalar tensor).
      n_rows: N = B * K, the hypotheses.
      vocab: V, the logits' width.
      end_token: the end token's id (-1: none), a Python int or an int32 scalar.
      plain_scores: True when a row's score is its cumulative log-prob (no length, EOS or
        coverage penalty, known when tracing): a strategy need not keep scores of its own.
    """

    batch: Tensor
    n_rows: Tensor
    vocab: Tensor
    end_token: Tensor
    plain_scores: bool = False


class Banks(NamedTuple):
    """The constraint tokens each candidate would have met (dynamic beam allocation reads it).

    A candidate `(n, v)` is in bank `ordinary[n]` unless `v` is one of `tokens[n]`, a token of
    the row's phrases, whose bank is then the matching entry of `token_banks[n]`.

    Attributes:
      ordinary: `[N]` int32, the bank of a row's candidates that are no phrase token.
      tokens: `[N, M]` int32, the row's phrase tokens, each once (-1: none).
      token_banks: `[N, M]` int32, the bank of each of them.
      count: how many banks there are (a Python int where the shapes are static, as under
        XLA, else an int32 scalar).
    """

    ordinary: Tensor
    tokens: Tensor
    token_banks: Tensor
    count: Tensor


class StepInputs(NamedTuple):
    """What a strategy may read at one step (`Strategy.select`).

    Attributes:
      step: int32 scalar, the 0-based index of the token being chosen.
      first: Python bool, True at step 0 (the K rows of an example are then one hypothesis).
      log_probs: `[N, V]` float32, the step's log-probabilities after the controls.
      allowed: `[N, V]` bool (False: banned by a control or a constraint), or None (all).
      hypotheses: the engine's `[N, ...]` buffers before the step: `"log_probs"` `[N]`
        (cumulative), `"finished"` `[N]` bool, `"sequences"` `[N, T]`, and the strategy's own.
      alpha, gamma: the length and EOS penalties (Python floats or float32 scalars).
      coverage_penalty: `() -> [N] float32 or 0.0`, each row's coverage penalty if it ended
        now (computed only when called).
      source_lengths: `[N, 1]` float32, |X| of each row.
      banks: the constraint tokens each candidate would have met (`Banks`), or None without
        phrases (dynamic beam allocation reads it).
      logits: `[N, V]` float32, the logits whose log-softmax `log_probs` are (they order a
        row's tokens as its log-probs do, without the log-probs written out), or None (use
        `log_probs`).
      top: `(values, ids)` `[N, row_top_k]`, each row's best `logits` (ties: the lowest id),
        where the strategy asks for them (`Strategy.row_top_k`) and no token is banned
        (`allowed` None); else None.
    """

    step: Tensor
    first: bool
    log_probs: Tensor
    allowed: Tensor | None
    hypotheses: dict[str, Tensor]
    alpha: Tensor
    gamma: Tensor
    coverage_penalty: Callable[[], Tensor]
    source_lengths: Tensor
    banks: Banks | None = None
    logits: Tensor | None = None
    top: tuple[Tensor, Tensor] | None = None


class Selection(NamedTuple):
    """What `Strategy.select` returns.

    Attributes:
      parents: `[N]` int32, the row each new hypothesis extends, or None (each its own row:
        the engine then gathers nothing).
      tokens: `[N]` int32, the chosen tokens (the engine writes `end_token` on rows that stop).
      log_probs: `[N]` float32, the new cumulative log-probabilities (a finished parent's are
        ignored: the engine keeps its own).
      empty: `[N]` bool, True where no possible token was left (the row becomes empty), or
        None (never).
      buffers: the strategy's own buffers of `initial_state`, updated (`{}` if none).
      final: True when `log_probs` already hold a finished parent's own cumulative log-prob
        and a value <= NEG / 2 where the row is empty: the engine then takes them as they are
        (two ops less per step). Default False.
    """

    parents: Tensor | None
    tokens: Tensor
    log_probs: Tensor
    empty: Tensor | None
    buffers: dict[str, Tensor]
    final: bool = False


class Strategy(abc.ABC):
    """The base of a decoding strategy: what `engine.decode` asks of one (module docstring)."""

    #: hypotheses per example (K)
    width: Tensor = 1
    #: True: the strategy keeps the final scores in its buffer "scores"
    scores_in_loop: bool = False
    #: k: the strategy reads each row's k best logits (`StepInputs.top`), set by `prepare`;
    #: None: it does not
    row_top_k: Tensor | None = None
    #: names of the strategy's tensor attributes that have a batch axis first (`[B, ...]`):
    #: the compiled search (compiled.py) pads them with the batch; its other tensors have none
    batch_arrays: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: DecodingConfig) -> Strategy:
        """The strategy of a search called with `config` (validated: the knobs it reads are
        taken as they are, not checked again). Default: `cls()`, a strategy without knobs."""
        return cls()

    def initial_state(self, n_rows: Tensor) -> dict[str, Tensor]:
        """The strategy's own per-hypothesis buffers, `{name: [n_rows, ...]}` (default none)."""
        return {}

    def prepare(self, setup: Setup) -> None:  # noqa: B027 (optional hook)
        """Loop invariants, computed once before the loop (default: nothing)."""

    @abc.abstractmethod
    def select(self, inputs: StepInputs) -> Selection:
        """Chooses the next tokens of every row."""


def masked_log_probs(log_probs: Tensor, allowed: Tensor | None) -> Tensor:
    """Log-probs with impossible tokens (banned, or `-inf`) at the finite `NEG`."""
    out = ops.maximum(log_probs, NEG)
    if allowed is not None:
        out = ops.where(allowed, out, NEG)
    return out


def pick(inputs: StepInputs, choose: Callable[[Tensor], Tensor]) -> Selection:
    """One token per row (no parents): `choose(log_probs [N, V]) -> tokens [N]`, with the
    impossible tokens at `NEG`; a row whose chosen token is impossible becomes empty."""
    hyp = inputs.hypotheses
    if inputs.allowed is None:
        # every row has a possible token (a row of only -inf is an error upstream)
        tokens = choose(inputs.log_probs)
        chosen = kb.take_rows(inputs.log_probs, tokens)
        return Selection(None, tokens, hyp["log_probs"] + chosen, None, {})
    masked = masked_log_probs(inputs.log_probs, inputs.allowed)
    tokens = choose(masked)
    chosen = kb.take_rows(masked, tokens)
    empty = (chosen <= NEG / 2) & ~hyp["finished"]  # a finished row keeps itself
    return Selection(None, tokens, hyp["log_probs"] + chosen, empty, {})


class Greedy(Strategy):
    """The most likely allowed token of every row (ties: the lowest id)."""

    #: each row's best logit, where no token is banned: its id is the choice, its value the
    #: maximum the log-softmax reads (no reduction over V for either of its own)
    row_top_k = 1

    def select(self, inputs: StepInputs) -> Selection:
        if inputs.top is not None:  # (given only where no token is banned)
            token = kb.reshape(inputs.top[1], [-1])
            return pick(inputs, lambda _: token)
        return pick(inputs, lambda x: kb.argmax(x, axis=-1))


class Forced(Strategy):
    """The given tokens (teacher forcing): row n chooses `targets[n, t]` at step t and the end
    token after its last one, so the search's `log_probs` are the model's log-probability of
    `targets` followed by the end token.

    Args:
      targets: int32 `[B, L]` ids right-padded with -1, without the end token (ids of the
        vocabulary: checked when it is known).
    """

    batch_arrays = ("targets",)

    def __init__(self, targets: Any) -> None:
        self.targets = kb.check_id_tensor("targets", targets, 2, "[B, L]")

    def prepare(self, setup: Setup) -> None:
        end = setup.end_token
        static_end = kb.static_value(end)
        if static_end is not None and int(static_end) < 0:
            raise ValueError(
                "Forcing given sequences needs an end token (a row ends with it). "
                f"Received: end_token={static_end}"
            )
        targets = kb.check_batch_axis("targets", self.targets, setup.batch)
        ok = ops.all(targets < ops.cast(setup.vocab, "int32")) & ops.all(targets >= -1)
        if static_end is None:
            ok = ok & (ops.cast(end, "int32") >= 0)
        targets = kb.run_time_check(
            targets,
            ok,
            "`targets` must hold ids of the vocabulary (0 <= id < V) or -1 padding, and the "
            "search an end token.",
        )
        # the end token in place of the padding, and one column of it more: every row reads
        # its end after its last target, whatever the step
        padded = ops.pad(targets, [[0, 0], [0, 1]], constant_values=-1)
        self.tokens = ops.where(padded < 0, ops.cast(end, "int32"), padded)
        self.last = shapes.dim(targets, 1)

    def select(self, inputs: StepInputs) -> Selection:
        token = kb.take(self.tokens, ops.minimum(inputs.step, self.last), axis=1)
        return pick(inputs, lambda _: token)


class Sampling(Strategy):
    """A draw from `softmax(log_probs / temperature)`, restricted to the `top_k` most likely
    tokens (0: all) and then to the smallest set whose probability reaches `top_p`.

    Args:
      temperature: in [0.01, 100] (`KNOBS`); 0 is refused: that is `Greedy`.
      top_k: integer >= 0.
      top_p: in (0, 1].
      seed: an int, an int32 `[]` or `[2]` tensor, or None (a fresh seed). Step t draws with
        the seed folded with t (`backend.fold_in`): on TensorFlow `stateless_fold_in` and
        `stateless_categorical` (under XLA Gumbel-max over `keras_attn.layers.rng`), on JAX
        `jax.random.fold_in` and `jax.random.categorical`.
    """

    def __init__(
        self, temperature: Any = 1.0, top_k: Any = 0, top_p: Any = 1.0, seed: Any = None
    ) -> None:
        # the knobs checked where every knob is: the config
        config = DecodingConfig(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        self._take(config)

    @classmethod
    def of(cls, config: DecodingConfig) -> Sampling:
        sampling = cls.__new__(cls)
        sampling._take(config)
        return sampling

    def _take(self, config: DecodingConfig) -> None:
        self.temperature, self.top_k, self.top_p = config.temperature, config.top_k, config.top_p
        self.seed = kb.seed_tensor(config.seed)

    def select(self, inputs: StepInputs) -> Selection:
        return pick(inputs, lambda x: self.draw(x, inputs.step))

    def draw(self, masked: Tensor, step: Tensor) -> Tensor:
        """`[N]` tokens drawn from the restricted, temperature-scaled `masked` log-probs."""
        logits = masked / self.temperature
        use_k = not (isinstance(self.top_k, int) and self.top_k == 0)
        use_p = not (isinstance(self.top_p, float) and self.top_p == 1.0)
        if use_k or use_p:
            ordered = kb.sort_desc(logits)
            vocab = shapes.dim(logits, 1)
            count = kb.full(kb.shape_of(shapes.dim(logits, 0)), vocab, "int32")  # kept of `ordered`
            if use_k:
                k = ops.where(ops.equal(self.top_k, 0), vocab, ops.minimum(self.top_k, vocab))
                count = ops.minimum(count, k)
            if use_p:
                # probabilities of the top-k restricted, renormalised distribution
                rank = kb.range_(vocab)[None, :]
                in_k = rank < count[:, None]
                probs = ops.softmax(ops.where(in_k, ordered, NEG), axis=-1)
                before = kb.exclusive_cumsum(probs)
                nucleus = ops.sum(ops.cast(in_k & (before < self.top_p), "int32"), -1)
                count = ops.maximum(ops.minimum(count, nucleus), 1)
            threshold = kb.take_rows(ordered, count - 1)
            logits = ops.where(logits >= threshold[:, None], logits, NEG)
        return kb.categorical(logits, kb.fold_in(self.seed, step))


class Beam(Strategy):
    """Beam search over the GNMT score, `beam_size` hypotheses per example (K >= 1)."""

    scores_in_loop = True

    def __init__(self, beam_size: Any = 4) -> None:
        self.width = DecodingConfig(beam_size=beam_size).beam_size  # checked where every knob is

    @classmethod
    def of(cls, config: DecodingConfig) -> Beam:
        beam = cls.__new__(cls)
        beam.width = config.beam_size
        return beam

    def initial_state(self, n_rows: Tensor) -> dict[str, Tensor]:
        if not self.scores_in_loop:
            return {}  # the scores are the cumulative log-probs the engine keeps
        return {"scores": kb.zeros(kb.shape_of(n_rows), "float32")}

    def prepare(self, setup: Setup) -> None:
        """Loop invariants: the first row of each example's beam, the end token's column;
        without penalties no scores of its own (they would copy the log-probs)."""
        self.scores_in_loop = not setup.plain_scores
        k = self.width
        self.first_row = (kb.range_(setup.n_rows) // k) * k  # [N]
        self.row_offset = self.first_row * setup.vocab  # [N], where its candidates start
        self.flat_shape = kb.shape_of(setup.batch, -1)
        self.n = kb.shape_of(setup.n_rows)
        self.rows = kb.range_(setup.n_rows)
        self.vocab = setup.vocab
        # where a finished hypothesis offers itself: the end token's column, if the end token
        # is an id (-1, no end token, finishes only at max_length: nothing is offered then).
        # Resolved when tracing where the end token is known, so it adds no ops then.
        end = kb.static_value(setup.end_token)
        if end is not None:
            column = None if int(end) < 0 else kb.full(self.n, int(end), "int32")
            self.has_end = None
        else:
            column = kb.full(self.n, ops.maximum(setup.end_token, 0), "int32")
            self.has_end = setup.end_token >= 0
        self.end_slots = None  # (row, end token) of every row
        if column is not None:
            self.end_slots = kb.scatter_indices(self.rows, column)
            self.end_column = column[:, None]
        # each row's candidates kept before the example's top-k: K (V if fewer)
        k, v = self.width, setup.vocab
        if isinstance(k, int) and isinstance(v, int):
            self.row_top_k = min(k, v)
        else:
            self.row_top_k = ops.minimum(ops.cast(k, "int32"), ops.cast(v, "int32"))
        self.first_slot = ops.equal(kb.range_(self.row_top_k), 0)[None, :]

    def select(self, inputs: StepInputs) -> Selection:
        hyp = inputs.hypotheses
        finished = hyp["finished"]
        # A finished hypothesis (and at step 0 every beam but the first: all K are the same
        # hypothesis) offers no extension: its candidates start from -inf, which the NEG floor
        # turns into impossible ones, without a select over its candidates.
        closed = finished
        if inputs.first:
            closed = closed | ops.not_equal(self.rows, self.first_row)
        base = ops.where(closed, float("-inf"), hyp["log_probs"])
        # where a finished hypothesis offers itself, and its score there
        offer = offer_score = None
        if self.end_slots is not None:
            offer = finished if self.has_end is None else finished & self.has_end
            offer_score = hyp["scores"] if self.scores_in_loop else hyp["log_probs"]
            offer_score = ops.where(offer, offer_score, NEG)
        if inputs.banks is not None:
            return self.select_all(inputs, base, offer, offer_score)
        # Each row's best `row_top_k` tokens: every other token of the row is beaten by K
        # candidates of its own row (same base, same penalties), so it is not among the K kept.
        if inputs.top is not None:  # taken before the log-softmax, where no token is banned
            best, ids = inputs.top
        else:
            ranked = inputs.log_probs if inputs.logits is None else inputs.logits
            if inputs.allowed is not None:
                ranked = ops.where(inputs.allowed, ranked, float("-inf"))
            best, ids = kb.top_k(ranked, self.row_top_k)  # [N, k], ties: the lowest id
        log_probs = kb.take_rows(inputs.log_probs, ids)
        if inputs.allowed is not None:
            log_probs = ops.where(best > float("-inf"), log_probs, float("-inf"))
        cum, cand, cand_is_cum = self.scored(inputs, base, log_probs)
        if offer is not None:
            # a finished row offers itself in its first slot, with the end token (all its
            # slots are NEG: it is closed)
            slot = offer[:, None] & self.first_slot
            cand = ops.where(slot, offer_score[:, None], cand)
            ids = ops.where(slot, self.end_column, ids)
        # one top-k over the K * k scored candidates of each example
        values, indices = kb.top_k(kb.reshape(cand, self.flat_shape), self.width)
        values = kb.reshape(values, self.n)
        flat = kb.reshape(indices, self.n) + self.first_row * self.row_top_k  # into N * k
        tokens = kb.take(kb.reshape(ids, [-1]), flat)
        return self.selection(values, flat, self.row_top_k, tokens, cum, cand_is_cum)

    def selection(self, values, flat, width, tokens, cum, cand_is_cum) -> Selection:
        """The `Selection` of the kept candidates: their `[N]` scores `values`, their indices
        `flat` into the `[N, width]` candidates `cum` (cumulative log-probs), their tokens."""
        parents = flat // width
        buffers = {"scores": values} if self.scores_in_loop else {}
        if cand_is_cum:
            # no penalty term: a possible candidate's value is its cumulative log-prob, an
            # impossible one's NEG, a finished parent's its score, which is its log-prob
            return Selection(parents, tokens, values, values <= NEG / 2, buffers, True)
        # (a finished parent's is -inf here: the engine keeps its own log-prob)
        chosen = kb.take(kb.reshape(cum, [-1]), flat)
        return Selection(parents, tokens, chosen, values <= NEG / 2, buffers)

    def scored(self, inputs: StepInputs, base: Tensor, log_probs: Tensor):
        """`(cum, cand, cand_is_cum)` of extending each row by tokens of `log_probs` `[N, W]`:
        their cumulative log-probs, their GNMT scores (at least NEG: a `-inf` one is
        impossible, finite) and whether the scores are the cumulative log-probs (no penalty
        term, known when tracing)."""
        cum = base[:, None] + log_probs  # [N, W]
        cp = inputs.coverage_penalty()
        plain = penalties.is_zero(inputs.alpha) and penalties.is_zero(inputs.gamma)
        lengths = 1.0 if plain else ops.cast(inputs.step, "float32") + 1.0  # |Y|
        cand = penalties.score(
            cum,
            lengths,
            inputs.alpha,
            cp if isinstance(cp, float) else cp[:, None],
            inputs.source_lengths,
            inputs.gamma,
        )
        return cum, ops.maximum(cand, NEG), plain and penalties.is_zero(cp)

    def select_all(self, inputs, base, offer, offer_score) -> Selection:
        """The choice from all `[N, V]` candidates (dynamic beam allocation reads them)."""
        vocab = self.vocab
        cum, cand, cand_is_cum = self.scored(inputs, base, inputs.log_probs)
        if inputs.allowed is not None:
            cand = ops.where(inputs.allowed, cand, NEG)
        # a finished hypothesis offers itself once, in the end token's slot, its score
        # unchanged: a max with NEG everywhere else (every candidate is >= NEG)
        if offer is not None:
            cand = kb.scatter_max(cand, self.end_slots, offer_score)
        values, indices = self.allocate(cand, inputs.banks)
        values = kb.reshape(values, self.n)
        indices = kb.reshape(indices, self.n)  # into the example's K * V candidates
        flat = indices + self.row_offset  # into the N * V candidates
        return self.selection(values, flat, vocab, flat % vocab, cum, cand_is_cum)

    def allocate(self, cand: Tensor, banks: Banks) -> tuple[Tensor, Tensor]:
        """Dynamic beam allocation (Post & Vilar 2018): the K kept candidates of an example,
        taken round-robin from banks by constraint tokens met (the best of every bank, most
        met first, then the second best of every bank, ...), so hypotheses that met more
        constraint tokens are not crowded out by likelier ones that met fewer. A bank with
        fewer candidates leaves its turns to the others. `(values, indices)` `[B, K]`, the
        indices into the example's `K * V` candidates.

        Only a row's best `K + M` candidates and its M phrase tokens can be among the K best
        of any bank (a row's other candidates share one bank), so the banks are filled from
        that pool, not from all `K * V`."""
        k, vocab = self.width, self.vocab
        tokens = banks.tokens
        m = shapes.dim(tokens, 1)
        # the row's phrase tokens, at their banks
        token_values = kb.take_rows(cand, ops.maximum(tokens, 0))
        token_values = ops.where(tokens >= 0, token_values, NEG)
        # the row's best other candidates, at the row's bank
        width = k + m
        if not all(isinstance(x, int) for x in (k, m, vocab)):
            width = ops.minimum(ops.cast(width, "int32"), ops.cast(vocab, "int32"))
        elif width > vocab:
            width = vocab
        best, best_ids = kb.top_k(cand, width)
        is_token = ops.any(ops.equal(best_ids[:, :, None], tokens[:, None, :]), axis=2)
        best = ops.where(is_token, NEG, best)
        pool_values = ops.concatenate([best, token_values], axis=1)  # [N, P]
        pool_ids = ops.concatenate([best_ids, ops.maximum(tokens, 0)], axis=1)
        pool_banks = ops.concatenate(
            [kb.broadcast_to(banks.ordinary[:, None], kb.shape_like(best)), banks.token_banks],
            axis=1,
        )
        # per example: [B, K * P], the ids into its K * V candidates
        within = (self.rows - self.first_row) * vocab
        pool_ids = pool_ids + within[:, None]
        pool_values = kb.reshape(pool_values, self.flat_shape)
        pool_ids = kb.reshape(pool_ids, self.flat_shape)
        pool_banks = kb.reshape(pool_banks, self.flat_shape)
        bank_ids = kb.range_(banks.count)
        in_bank = ops.equal(pool_banks[:, None, :], bank_ids[None, :, None])  # [B, banks, KP]
        values, where = kb.top_k(ops.where(in_bank, pool_values[:, None], NEG), k)
        n_banks = ops.cast(banks.count, "int32")
        rank = kb.range_(k)[None, None, :]
        order = rank * n_banks + (n_banks - 1 - bank_ids)[None, :, None]  # most met first
        order = ops.where(values > NEG / 2, order, order + k * n_banks)  # impossible ones last
        flat = kb.shape_of(self.flat_shape[0], -1)
        _, turn = kb.top_k(-kb.reshape(order, flat), k)
        values = kb.take_rows(kb.reshape(values, flat), turn)
        where = kb.take_rows(kb.reshape(where, flat), turn)
        return values, kb.take_rows(pool_ids, where)
