"""Constrained decoding: a forced prefix, required phrases, suppressed sequences, budgets.

A search takes its constraints as one `call.Constraints` (validated when built); the engine
builds a `ConstraintState` from it only when one of `prefix_ids`, `constraint_ids`,
`suppress_ids` or a budget (`budget_ids`, `budget_costs`, `budgets`) is given (otherwise none
of this adds an op to the loop). Every step, after the
controls, `process` turns the allowed tokens into those the constraints allow, and `update`
advances the constraint state with the chosen tokens; the state is per hypothesis, carried in
the engine's buffers and reordered along the beam parents like the others.

Phrase matching is one automaton for the phrases and the suppressed sequences: per row and
phrase, `match [N, C, L]` bool, `match[c, j]` True when the last `j` tokens are the phrase's
first `j` (`match[c, 0]` always). A token `x` gives `match'[c, j + 1] = match[c, j] and
phrase[c, j] == x`; the phrase is met when `match'[c, len_c]` would be True (kept in `met
[N, C]`, which never turns False again).

The guarantee (the row's prefix and phrases fit in `max_length`: the returned sequence meets
them all) comes from one rule, for every strategy: a candidate token is allowed only if the
tokens still needed after it fit in what is left, `need <= max_length - step - 1`, with

    need = sum of the lengths of the unmet phrases - the progress of the furthest started one

and the end token only once every phrase is met. Some token always lowers `need` by one (the
next token of the furthest started phrase, or the first of an unmet one), so a row that
starts within the limit stays within it. When a control bans every token the rule allows
(a phrase holding a banned token, say), the row falls back to the controls' choice and
`constraints_met` says False. With one hypothesis per example (greedy, sampling) a started
phrase is also forced to its end. Beam search reads `banks` (the constraint tokens each
candidate would have met, `strategies.Banks`) for dynamic beam allocation
(strategies.Beam.allocate).

A budget caps what a hypothesis may spend: token `budget_ids[u]` costs `budget_costs[u, r]`
of each of R resources (every other token costs nothing), and a hypothesis of example b never
spends more than `budgets[b, r]` of resource r: a token whose cost would overrun what is left
is not allowed (`spent [N, R]` is carried per hypothesis). The serving exports count the
characters that open and close placeholders and markup this way, so a translation holds no
placeholder its source lacks. A budget is a hard rule, like a suppressed sequence: it applies
before the phrases' feasibility, and it reserves nothing for them: a hypothesis that spends on
other tokens what a phrase needs can no longer meet it (`constraints_met` False; a beam keeps
other hypotheses that did not). Only the forced prefix overrides it (its tokens are counted).

A phrase given several times (a placeholder that occurs twice in the source) must occur as
many times: a token that completes several equal phrases at once meets only the first unmet
one (`_one_per_occurrence`); the next occurrence meets the next.

`need` counts as if phrases shared no tokens: with overlapping phrases (one ends the way the
other starts) a hypothesis may be kept near `max_length` from reaching them through the
overlap; the guarantee above still holds.
"""

from __future__ import annotations

import numpy as np
from keras import ops

from keras_attn.decoding import backend as kb
from keras_attn.decoding import processors, shapes
from keras_attn.decoding.strategies import Banks


def _static(x):
    value = kb.static_value(x)
    return None if value is None else np.asarray(value)


def _lengths(ids):
    """Count of the non-negative entries along the last axis (the padding is -1)."""
    return ops.sum(ops.cast(ids >= 0, "int32"), axis=-1)


def _run_time(x, ok, message):
    return kb.run_time_check(x, ok, message)


def accepts(phrases, alts, tokens):
    """Where each phrase position accepts `tokens` (broadcast against `phrases`): its own id,
    or its alternative id (`alts`, -1: none; None: no alternatives)."""
    hit = ops.equal(phrases, tokens)
    if alts is not None:
        hit = hit | (ops.equal(alts, tokens) & (alts >= 0))
    return hit


def advance_matches(match, phrases, lengths, tokens, alts=None):
    """One automaton step. `match` `[N, C, L]` bool, `phrases` `[N or 1, C, L]`, `lengths`
    `[N or 1, C]`, `tokens` `[N]` -> `(match', completed [N, C])`; `alts` like `phrases`: a
    second id accepted at each position."""
    hit = match & accepts(phrases, alts, tokens[:, None, None])
    true = ops.ones_like(hit[:, :, :1])
    new = ops.concatenate([true, hit[:, :, :-1]], axis=2)
    last = kb.range_(shapes.dim(phrases, 2))[None, None, :] == (lengths - 1)[:, :, None]
    completed = ops.any(hit & last, axis=2) & (lengths > 0)
    return new, completed


class ConstraintState:
    """The prefix, phrases and suppressed sequences of one search (module docstring)."""

    def __init__(self, prefix, phrases, suppress, batch, max_length, budget=None, alts=None):
        self.prefix, self.phrases, self.suppress = prefix, phrases, suppress
        self.alts = alts  # None or [B, C, L]: a second id accepted at each phrase position
        self.budget = budget  # None or (ids [U], costs [U, R], limits [B, R])
        self.batch, self.max_length = batch, max_length
        self.has_phrases = phrases is not None
        self.force_started = False

    # ----------------------------------------------------------------- building, checks
    @classmethod
    def of(cls, constraints, batch, max_length) -> ConstraintState | None:
        """The state of a search's constraints (`call.Constraints`, validated when built), or
        None without any: the batch axes checked against `batch`, the prefix and the phrases
        against `max_length`."""
        if constraints is None or constraints.empty:
            return None
        static_max = kb.static_value(max_length)
        budget = constraints.budget
        if budget is not None:
            ids, costs, limits = budget
            budget = ids, costs, kb.check_batch_axis("budgets", limits, batch)
        prefix = phrases = alts = None
        for name, what in (("prefix_ids", "a prefix"), ("constraint_ids", "a phrase")):
            ids = getattr(constraints, name)
            if ids is None:
                continue
            ids = kb.check_batch_axis(name, ids, batch)
            value = _static(ids)
            longest = None if value is None else int((value >= 0).sum(-1).max(initial=0))
            if longest is not None and static_max is not None and longest > static_max:
                must = (
                    f"fit in max_length={static_max} tokens"
                    if name == "prefix_ids"
                    else f"hold phrases of at most max_length={static_max} tokens"
                )
                raise ValueError(f"`{name}` must {must}. Received: {what} of {longest} tokens")
            if name == "prefix_ids":
                prefix = ids
            else:
                phrases = ids
        if constraints.constraint_alt_ids is not None:
            alts = kb.check_batch_axis("constraint_alt_ids", constraints.constraint_alt_ids, batch)
        return cls(prefix, phrases, constraints.suppress_ids, batch, max_length, budget, alts)

    def checked(self, vocab, end_token, k) -> ConstraintState:
        """Once the vocabulary is known: ids in [0, V), no end token in the prefix or phrases;
        then the per-example tensors tiled to the K hypotheses of each example."""
        static_vocab = vocab if isinstance(vocab, int) else None
        static_end = kb.static_value(end_token)

        def check(name, x, end_allowed):
            value = _static(x)
            if value is not None and static_vocab is not None:
                if value.size and value.max() >= static_vocab:
                    raise ValueError(
                        f"`{name}` must hold ids of the vocabulary (0 <= id < {static_vocab}). "
                        f"Received: {name} with {int(value.max())}"
                    )
                if not end_allowed and static_end is not None and static_end >= 0:
                    if np.any(value == static_end):
                        raise ValueError(
                            f"`{name}` must not hold the end token ({int(static_end)}): "
                            f"{'a prefix' if name == 'prefix_ids' else 'a phrase'} holding it "
                            f"would end the sequence. Received: {name}={value.tolist()}"
                        )
                return x
            ok = ops.all(x < ops.cast(vocab, "int32")) & ops.all(x >= -1)
            message = f"`{name}` must hold ids of the vocabulary (0 <= id < V) or -1 padding."
            if not end_allowed:
                ok = ok & ~ops.any(ops.equal(x, end_token) & (end_token >= 0))
                message += " It must not hold the end token."
            return _run_time(x, ok, message)

        tile = (lambda x: x) if shapes.is_one(k) else (lambda x: ops.repeat(x, k, axis=0))
        out = ConstraintState(None, None, None, self.batch, self.max_length)
        if self.budget is not None:
            ids, costs, limits = self.budget
            ids = check("budget_ids", ids, True)
            ok = ops.all(costs >= 0) & ops.all(limits >= 0)
            costs = _run_time(costs, ok, "`budget_costs` and `budgets` must be >= 0.")
            out.budget = (ids, costs, tile(limits))
        out.has_phrases = self.has_phrases
        out.force_started = shapes.is_one(k)
        if self.prefix is not None:
            prefix = check("prefix_ids", self.prefix, False)
            out.prefix = tile(prefix)
            out.prefix_lengths = _lengths(out.prefix)
        if self.phrases is not None:
            phrases = check("constraint_ids", self.phrases, False)
            alts = None
            if self.alts is not None:
                alts = check("constraint_alt_ids", self.alts, False)
                alts = ops.where(phrases >= 0, alts, -1)  # none where the phrase has no token
            c, n = phrases.shape[1], phrases.shape[2]
            if c is None or n is None or c == 0 or n == 0:
                # one more phrase of only padding, so no reduction is over an empty axis (C = 0)
                phrases = ops.pad(phrases, [[0, 0], [0, 1], [0, 1]], constant_values=-1)
                if alts is not None:
                    alts = ops.pad(alts, [[0, 0], [0, 1], [0, 1]], constant_values=-1)
            out.phrases = tile(phrases)
            out.alts = None if alts is None else tile(alts)
            c, n = shapes.dim(out.phrases, 1), shapes.dim(out.phrases, 2)
            out.bank_count = shapes.mul(c, n) + 1  # a row meets at most C * L tokens
            out.phrase_lengths = _lengths(out.phrases)  # [N, C]
            out.total = ops.sum(out.phrase_lengths, axis=1)  # [N]
            # equal[n, a, b]: phrases a < b of row n are the same ids (and not empty)
            same = ops.all(ops.equal(out.phrases[:, :, None], out.phrases[:, None]), axis=-1)
            if out.alts is not None:
                same = same & ops.all(ops.equal(out.alts[:, :, None], out.alts[:, None]), axis=-1)
            order = kb.range_(c)[:, None] < kb.range_(c)[None, :]
            out.equal_earlier = same & order[None] & (out.phrase_lengths > 0)[:, :, None]
        if self.suppress is not None:
            suppress = check("suppress_ids", self.suppress, True)
            out.suppress = suppress[None]  # [1, S, L], shared by every row
            out.suppress_lengths = _lengths(out.suppress)
        return out

    # ----------------------------------------------------------------------- the state
    def initial_state(self, n_rows) -> dict:
        """The automata's state of every hypothesis: nothing matched, no phrase met."""
        state = {}

        def start(x):  # [N, C, L] bool: only the empty prefix matched
            c, n = shapes.dim(x, 1), shapes.dim(x, 2)
            first = ops.equal(kb.range_(n)[None, None, :], 0)
            return first & kb.ones(kb.shape_of(n_rows, c, n), "bool")

        if self.phrases is not None:
            state["phrase_match"] = start(self.phrases)
            state["phrase_met"] = ops.equal(self.phrase_lengths, 0)  # no phrase: met
        if self.suppress is not None:
            state["suppress_match"] = start(self.suppress)
        if self.budget is not None:
            state["budget_spent"] = ops.zeros_like(self.budget[2])  # [N, R]
        return state

    def update(self, hyp, tokens, stop) -> dict:
        """The state after `tokens` (the rows already reordered along the parents)."""
        new = {}
        if self.phrases is not None:
            match, completed = advance_matches(
                hyp["phrase_match"], self.phrases, self.phrase_lengths, tokens, self.alts
            )
            new["phrase_match"] = match
            met = hyp["phrase_met"]
            newly = self._one_per_occurrence(completed & ~stop[:, None] & ~met)
            new["phrase_met"] = met | newly
        if self.suppress is not None:
            match, _ = advance_matches(
                hyp["suppress_match"], self.suppress, self.suppress_lengths, tokens
            )
            new["suppress_match"] = match
        if self.budget is not None:
            ids, costs, _ = self.budget
            chosen = ops.equal(tokens[:, None], ids[None, :]) & ~stop[:, None]  # [N, U]
            spent = ops.sum(ops.cast(chosen, "int32")[:, :, None] * costs[None], axis=1)
            new["budget_spent"] = hyp["budget_spent"] + spent
        return new

    def _one_per_occurrence(self, newly, candidates=False):
        """`newly [N, C]` (or `[N, M, C]` with `candidates`: phrases completed now, not met
        before) with each phrase that an equal earlier phrase completed at the same token
        removed: one occurrence meets one."""
        equal = self.equal_earlier  # [N, C, C]
        if candidates:
            equal = equal[:, None]
        blocked = ops.any(newly[..., :, None] & equal, axis=-2)
        return newly & ~blocked

    def met(self, hyp):
        """`[N]` bool: every phrase of the row is met."""
        return ops.all(hyp["phrase_met"], axis=1)

    # ---------------------------------------------------------------------- one step
    def _need(self, match, met):
        """`[..., C]` state -> tokens still needed (`[...]`) and the furthest progress."""
        lengths = self.phrase_lengths
        extra = len(match.shape) - 3  # candidate axes between N and C
        for _ in range(extra):
            lengths = lengths[:, None]
        unmet = ops.sum(ops.where(met, 0, lengths), axis=-1)
        j = kb.range_(shapes.dim(match, len(match.shape) - 1))
        live = match & (j < lengths[..., None]) & ~met[..., None]
        progress = kb.reduce_max(ops.where(live, j, 0), axis=-1)  # [..., C]
        furthest = ops.maximum(kb.reduce_max(progress, axis=-1), 0)  # 0 without phrases
        return unmet - furthest, progress

    def process(self, hyp, step, allowed, vocab, end_token):
        """`(allowed [N, V] bool, banks)` after the constraints (`strategies.Banks`, or None
        without phrases)."""
        ids = kb.range_(vocab)
        n_rows = shapes.dim(hyp["finished"], 0)
        full = kb.shape_of(n_rows, vocab)
        banks = None
        if self.suppress is not None:
            # the last token of every sequence whose other tokens end the row is banned
            s_len = self.suppress_lengths  # [1, S]
            at_last = ops.equal(
                kb.range_(shapes.dim(self.suppress, 2))[None, None, :], (s_len - 1)[:, :, None]
            )  # [1, S, L]
            last = kb.reduce_max(ops.where(at_last, self.suppress, -1), axis=2)  # [1, S]
            ready = ops.any(hyp["suppress_match"] & at_last, axis=2) & (s_len > 0)
            banned = processors.token_mask(
                kb.broadcast_to(last, kb.shape_like(ready)), ready, vocab
            )
            allowed = ~banned if allowed is None else allowed & ~banned
        if self.budget is not None:
            budget_ids, costs, limits = self.budget
            left = limits - hyp["budget_spent"]  # [N, R]
            over = ops.any(costs[None, :, :] > left[:, None, :], axis=2)  # [N, U]
            every = kb.broadcast_to(budget_ids[None, :], kb.shape_like(over))
            banned = processors.token_mask(every, over, vocab)
            allowed = ~banned if allowed is None else allowed & ~banned
        if self.phrases is not None:
            feasible, banks = self._feasible(hyp, step, ids, full, end_token)
            base = kb.ones(full, "bool") if allowed is None else kb.broadcast_to(allowed, full)
            both = base & feasible
            any_ok = ops.any(both, axis=1, keepdims=True)
            allowed = ops.where(any_ok, both, base)
        if self.prefix is not None:
            width = shapes.dim(self.prefix, 1)
            column = ops.minimum(step, ops.maximum(width - 1, 0))
            forced_token = kb.take(
                ops.pad(self.prefix, [[0, 0], [0, 1]], constant_values=-1), column, axis=1
            )
            in_prefix = step < self.prefix_lengths  # [N]
            forced = ops.equal(ids[None, :], forced_token[:, None])
            if allowed is None:
                allowed = kb.ones(full, "bool")
            allowed = ops.where(in_prefix[:, None], forced, kb.broadcast_to(allowed, full))
        return allowed, banks

    def _feasible(self, hyp, step, ids, full, end_token):
        """`[N, V]` bool: the token leaves room for the unmet phrases; and the banks."""
        match, met = hyp["phrase_match"], hyp["phrase_met"]
        _, progress = self._need(match, met)  # [N, C]
        n_rows = shapes.dim(match, 0)
        # every token of every phrase is a candidate of its own; every other token resets
        # the progress and leaves `unmet` as it is
        unmet = ops.sum(ops.where(met, 0, self.phrase_lengths), axis=-1)  # [N]
        width = shapes.dim(self.phrases, 2)
        cl = shapes.mul(shapes.dim(self.phrases, 1), width)
        special = kb.reshape(self.phrases, kb.shape_of(n_rows, cl))  # [N, CL]
        alts = None if self.alts is None else self.alts[:, None]
        if alts is not None:  # the alternatives are candidates too: [N, 2 CL]
            special = ops.concatenate(
                [special, kb.reshape(self.alts, kb.shape_of(n_rows, cl))], axis=1
            )
        hit = match[:, None] & accepts(self.phrases[:, None], alts, special[:, :, None, None])
        new_match = ops.concatenate([ops.ones_like(hit[..., :1]), hit[..., :-1]], axis=-1)
        last = kb.range_(width)[None, None, None, :] == (self.phrase_lengths - 1)[:, None, :, None]
        completed = ops.any(hit & last, axis=-1) & (self.phrase_lengths > 0)[:, None]
        newly = self._one_per_occurrence(completed & ~met[:, None], candidates=True)
        special_need, _ = self._need(new_match, met[:, None] | newly)  # [N, CL]
        rows = kb.broadcast_to(kb.range_(n_rows)[:, None], kb.shape_like(special))
        valid = special >= 0
        values = ops.where(valid, special_need, unmet[:, None])
        indices = kb.scatter_indices(rows, ops.where(valid, special, 0))
        need_after = kb.scatter_min(kb.broadcast_to(unmet[:, None], full), indices, values)
        left = ops.cast(self.max_length, "int32") - step - 1  # tokens after this one
        feasible = need_after <= left
        feasible = feasible & ~(ops.equal(ids, end_token)[None, :] & (unmet > 0)[:, None])
        if self.force_started:
            # one hypothesis per example: a started phrase is finished first
            furthest = kb.argmax(progress, axis=1)
            started = kb.reduce_max(progress, axis=1) > 0
            column = kb.take_rows(progress, furthest)
            phrase = kb.take_rows(self.phrases, furthest)
            next_token = kb.take_rows(phrase, column)
            forced = ops.equal(ids[None, :], next_token[:, None])
            if self.alts is not None:
                next_alt = kb.take_rows(kb.take_rows(self.alts, furthest), column)
                forced = forced | (
                    ops.equal(ids[None, :], next_alt[:, None]) & (next_alt >= 0)[:, None]
                )
            feasible = ops.where(started[:, None], forced & feasible, feasible)
        # each phrase token once per row (the bank of a candidate is one number)
        m = shapes.dim(special, 1)
        earlier = kb.range_(m)[None, :] < kb.range_(m)[:, None]  # [j, i]: i before j
        repeated = ops.any(
            ops.equal(special[:, :, None], special[:, None, :]) & earlier[None], axis=2
        )
        banks = Banks(
            ordinary=self.total - unmet,
            tokens=ops.where(repeated, -1, special),
            token_banks=self.total[:, None] - special_need,
            count=self.bank_count,
        )
        return feasible, banks
