"""The decoding controls, applied to every step's logits in one place, in a fixed order.

Every search calls `Controls.process` once per step, between the model's step and the
strategy's choice (docs/decoding.md, "Controls"):

1. `repetition_penalty` (CTRL, Keskar et al. 2019): the logit of every token already
   generated in the row is divided by the penalty if positive, multiplied by it if not;
2. `log_softmax`: these log-probabilities are what `log_probs` and `scores` sum up;
3. bans (a token gets the impossible score `NEG`; the others keep their log-probability):
   the end token before `min_length` tokens, `bad_token_ids`, and every token that would
   complete an n-gram of size `no_repeat_ngram_size` already in the row.

Sampling's own `temperature`, `top_k` and `top_p` come after these, in the sampling
strategy. Everything is a fixed-shape tensor computation (no data-dependent shapes), so it
compiles under XLA; each row only reads its own history, so batch rows stay independent.

The n-gram ban keeps, per hypothesis, `run [N, T]`: `run[j]` is the length of the longest
common suffix of the tokens up to `j` and of the whole prefix. A new token `x` at position
`t` gives `run'[j] = run[j - 1] + 1 if y[j] == x else 0` (for `j <= t`), so the tokens that
would repeat an n-gram are the `y[m]` (`m < t`) with `run[m - 1] >= n - 1` (`run[-1] = 0`).
That costs O(T) per hypothesis and step and works for a run-time `n`.
"""

import numpy as np
from keras import ops

from keras_attn.decoding import backend as kb
from keras_attn.decoding import penalties, shapes

NEG = penalties.NEG


def _active(value, neutral):
    """False only when `value` is known now (a Python number, a constant tensor, a JAX array
    that is no tracer) and is the neutral value (the control is off); a traced value is on."""
    static = kb.static_value(value)
    return static is None or bool(static != neutral)


def token_mask(tokens, keep, vocab):
    """`[N, V]` bool: `mask[i, v]` is True when `tokens[i, j] == v` for some kept `j`.

    One segment sum over `N * T` ids (fixed shapes, fine under XLA).
    """
    n = shapes.dim(tokens, 0)
    if not isinstance(vocab, int):
        vocab = ops.cast(vocab, "int32")
    keep = keep & (tokens >= 0) & (tokens < vocab)
    dump = shapes.mul(n, vocab)  # dropped ids go to one extra segment
    ids = ops.where(keep, kb.range_(n)[:, None] * vocab + tokens, dump)
    counts = kb.segment_sum(ops.ones_like(ids, "float32"), ids, dump + 1)
    return kb.reshape(counts[:-1] > 0.0, kb.shape_of(n, vocab))


class Controls:
    """The logits processors of docs/decoding.md, "Controls" (see the module docstring).

    Built from a validated `DecodingConfig` (`Controls(config)`, as the engine does: the
    controls are its fields, checked there).
    """

    def __init__(self, config):
        self.min_length = config.min_length
        self.ngram = config.no_repeat_ngram_size
        self.penalty = config.repetition_penalty
        ids = config.bad_token_ids
        self.bad_token_ids = np.asarray(ids, np.int32) if isinstance(ids, tuple) else ids
        if self.bad_token_ids is not None and kb.is_tensor(self.bad_token_ids):
            self.bad_token_ids = ops.cast(self.bad_token_ids, "int32")
        self.use_min_length = _active(self.min_length, 0)
        self.use_ngram = _active(self.ngram, 0)
        self.use_penalty = _active(self.penalty, 1.0)

    def check_vocab(self, vocab):
        """Once the vocabulary size is known: `bad_token_ids` must be ids of it."""
        ids = self.bad_token_ids
        if ids is None:
            return
        if isinstance(ids, np.ndarray) and isinstance(vocab, int):
            if ids.min() < 0 or ids.max() >= vocab:
                raise ValueError(
                    f"`bad_token_ids` must be ids of the vocabulary (0 <= id < {vocab}). "
                    f"Received: bad_token_ids={ids.tolist()}"
                )
            return
        ids = kb.convert(ids)
        self.bad_token_ids = kb.run_time_check(
            ids,
            ops.all((ids >= 0) & (ids < ops.cast(vocab, "int32"))),
            "`bad_token_ids` must be ids of the vocabulary (0 <= id < V). Received:",
            ids,
        )

    # -------------------------------------------------------------- per-hypothesis state
    def initial_state(self, n_rows, length):
        """Extra per-hypothesis buffers the driver carries (and reorders with the beams)."""
        if self.use_ngram:
            return {"ngram_run": kb.zeros(kb.shape_of(n_rows, length), "int32")}
        return {}

    def update(self, hyp, tokens, step):
        """After the driver wrote `tokens` at column `step` of `hyp["sequences"]` (reordered)."""
        if not self.use_ngram:
            return {}
        run = hyp["ngram_run"]
        prev = ops.pad(run[:, :-1], [[0, 0], [1, 0]])  # run[j - 1], run[-1] = 0
        length = shapes.dim(run, 1)
        live = (kb.range_(length) <= step)[None, :]
        same = ops.equal(hyp["sequences"], tokens[:, None]) & live
        return {"ngram_run": ops.where(same, prev + 1, 0)}

    # ------------------------------------------------------------------- the processors
    @property
    def any_ban(self):
        return self.use_min_length or self.bad_token_ids is not None or self.use_ngram

    def process(self, logits, hyp, step, end_token, vocab, with_probe=False, top_k=None):
        """`(log_probs [N, V] float32, allowed [N, V] / [1, V] bool or None)` in the documented
        order. Only the controls that are on add ops to the step. `with_probe=True` adds two
        values: the probe, `[N, 1]`, NaN exactly where a row's log-probs hold a NaN, or None
        where the backend does not give it (`backend.log_softmax`), and the logits whose
        log-softmax `log_probs` are (float32, after the repetition penalty: they rank a row's
        tokens as its log-probs do, and are at hand without a pass of their own).
        `top_k=k` (with `with_probe`): where no control bans a token, also `(values, ids)` of
        each row's k largest of those logits (`[N, k]`, ties: the lowest id), whose first is
        the row's maximum the log-softmax then reads (no reduction of its own); else None."""
        logits = ops.cast(logits, "float32")
        sequences = hyp["sequences"]
        if self.use_penalty or self.use_ngram:
            length = shapes.dim(sequences, 1)
            generated = (kb.range_(length) < step)[None, :]  # columns 0..step-1 hold the prefix
        if self.use_penalty:
            seen = token_mask(
                sequences, kb.broadcast_to(generated, kb.shape_like(sequences)), vocab
            )
            penalty = ops.cast(self.penalty, "float32")
            penalised = ops.where(logits > 0.0, logits / penalty, logits * penalty)
            logits = ops.where(seen, penalised, logits)
        top = None
        if top_k is not None and not self.any_ban:
            top = kb.top_k(logits, top_k)
        # (the maximum of the k values, not their first column: a slice of a top-k's values
        # turns XLA's top-k back into a sort of the whole row)
        x_max = None if top is None else kb.reduce_max(top[0], axis=-1, keepdims=True)
        log_probs, probe = kb.log_softmax(logits, x_max)

        def out(allowed):
            if with_probe:
                return log_probs, allowed, probe, logits, top
            return log_probs, allowed

        if not self.any_ban:
            return out(None)
        allowed = None

        def both(a, b):
            return b if a is None else a & b

        ids = kb.range_(vocab)
        if self.use_min_length:
            early = step < ops.cast(self.min_length, "int32")
            allowed = both(allowed, ~(ops.equal(ids, end_token) & early)[None, :])
        if self.bad_token_ids is not None:
            bad = ops.any(ops.equal(ids[:, None], kb.convert(self.bad_token_ids)[None, :]), 1)
            allowed = both(allowed, ~bad[None, :])
        if self.use_ngram:
            n = ops.cast(self.ngram, "int32")
            prev = ops.pad(hyp["ngram_run"][:, :-1], [[0, 0], [1, 0]])
            repeat = generated & (prev >= n - 1) & (n > 0)
            allowed = both(allowed, ~token_mask(sequences, repeat, vocab))
        return out(allowed)
