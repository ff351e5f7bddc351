"""Decoding strategies: how the next tokens are chosen and how finished rows are kept.

A strategy knows nothing about the loop, the model's state, the buffers or XLA shapes (that
is `engine.decode`'s job). It has a `width` (hypotheses per example, K) and one method,
`select(ctx)`, that turns the step's processed log-probabilities into the next tokens:

    parents  [N] int32 or None   the hypothesis each new one extends (None: each its own row)
    tokens   [N] int32           the chosen tokens (the driver writes `end_token` on finished rows)
    log_probs [N] float32        the new cumulative log-probabilities
    valid    [N] bool            False where no possible token was left (the row becomes empty)
    extra    dict                the strategy's own per-hypothesis buffers, updated

- `Greedy`: the most likely allowed token (ties: the lowest id); finished rows keep
  themselves.
- `Sampling(temperature, top_k, top_p, seed)`: a draw from the allowed tokens'
  `softmax(log_probs / temperature)`, restricted to the `top_k` most likely and then to the
  smallest set whose probability reaches `top_p` (ties at either boundary are kept).
- `Beam(k)`: each live hypothesis offers its V extensions scored by the GNMT score it would
  have if it ended there, each finished one offers only itself (in the end token's slot,
  its score unchanged); one `top_k` over the `K * V` candidates of each example keeps the K
  best. At step 0 only beam 0 offers candidates (all K are identical).
"""

import tensorflow as tf

from keras_attn.decoding import _common, penalties
from keras_attn.layers import rng

NEG = _common.NEG


def _masked(log_probs, allowed):
    """Log-probs with impossible tokens (banned, or `-inf`) at the finite `NEG`."""
    out = tf.maximum(log_probs, NEG)
    if allowed is not None:
        out = tf.where(allowed, out, NEG)
    return out


class Greedy:
    width = 1
    scores_in_loop = False

    def initial_state(self, n_rows):
        return {}

    def prepare(self, ctx):
        """Loop invariants, computed once before the loop."""

    def choose(self, masked, step):
        return tf.argmax(masked, axis=-1, output_type=tf.int32)

    def select(self, ctx):
        if ctx.allowed is None:
            # every row has a possible token (a row of only -inf is an error upstream)
            tokens = self.choose(ctx.log_probs, ctx.step)
            chosen = tf.gather(ctx.log_probs, tokens, batch_dims=1)
            return None, tokens, ctx.hyp["log_probs"] + chosen, None, {}
        masked = _masked(ctx.log_probs, ctx.allowed)
        tokens = self.choose(masked, ctx.step)
        chosen = tf.gather(masked, tokens, batch_dims=1)
        valid = (chosen > NEG / 2) | ctx.hyp["finished"]  # a finished row keeps itself
        return None, tokens, ctx.hyp["log_probs"] + chosen, valid, {}


class Sampling(Greedy):
    def __init__(self, temperature=1.0, top_k=0, top_p=1.0, seed=None):
        self.temperature = _common.check_knob("temperature", temperature)
        self.top_k = _common.check_int("top_k", top_k, 0)
        self.top_p = _common.check_knob("top_p", top_p)
        self.seed = _common.check_seed(seed)

    def choose(self, masked, step):
        logits = masked / self.temperature
        use_k = not (isinstance(self.top_k, int) and self.top_k == 0)
        use_p = not (isinstance(self.top_p, float) and self.top_p == 1.0)
        if use_k or use_p:
            ordered = tf.sort(logits, axis=-1, direction="DESCENDING")
            vocab = tf.shape(logits)[-1]
            count = tf.fill(tf.shape(logits)[:1], vocab)  # how many of `ordered` to keep
            if use_k:
                k = tf.where(tf.equal(self.top_k, 0), vocab, tf.minimum(self.top_k, vocab))
                count = tf.minimum(count, k)
            if use_p:
                # probabilities of the top-k restricted, renormalised distribution
                rank = tf.range(vocab)[None, :]
                in_k = rank < count[:, None]
                probs = tf.nn.softmax(tf.where(in_k, ordered, NEG), axis=-1)
                before = tf.cumsum(probs, axis=-1, exclusive=True)
                nucleus = tf.reduce_sum(tf.cast(in_k & (before < self.top_p), tf.int32), -1)
                count = tf.maximum(tf.minimum(count, nucleus), 1)
            threshold = tf.gather(ordered, count - 1, batch_dims=1)
            logits = tf.where(logits >= threshold[:, None], logits, NEG)
        step_seed = tf.random.experimental.stateless_fold_in(self.seed, step)
        if rng.in_xla():
            # XLA:CPU compiles stateless_categorical's generator into slow code (7x TF's
            # kernel at [32, 8000]); Gumbel-max over keras_attn's fused draws samples the same
            # distribution: argmax(logits + G), G = -log(-log(U)).
            uniform = rng.uniform(tf.shape(logits), minval=1e-20, maxval=1.0, seed=step_seed)
            gumbel = -tf.math.log(-tf.math.log(uniform))
            return tf.argmax(logits + gumbel, axis=-1, output_type=tf.int32)
        return tf.random.stateless_categorical(logits, 1, step_seed, dtype=tf.int32)[:, 0]


class Beam:
    scores_in_loop = True

    def __init__(self, beam_size):
        self.width = _common.check_int("beam_size", beam_size, 1)

    def initial_state(self, n_rows):
        return {"scores": tf.zeros(tf.reshape(n_rows, [1]), tf.float32)}

    def prepare(self, ctx):
        """Loop invariants: the first row of each example's beam, the end token's column."""
        k = self.width
        self.first_row = (tf.range(ctx.n_rows) // k) * k  # [N]
        self.flat_shape = tf.stack([ctx.batch, -1])
        self.n = tf.reshape(ctx.n_rows, [1])
        # where a finished hypothesis offers itself: the end token's column, if the end token
        # is an id (-1, no end token, finishes only at max_length: nothing is offered then).
        # Resolved when tracing where the end token is known, so it adds no ops then.
        end = _common.static_value(ctx.end_token)
        if end is not None:
            self.end_column = None if int(end) < 0 else tf.fill(self.n, int(end))
            self.has_end = None
        else:
            self.end_column = tf.fill(self.n, tf.maximum(ctx.end_token, 0))
            self.has_end = ctx.end_token >= 0

    def select(self, ctx):
        vocab, hyp = ctx.vocab, ctx.hyp
        finished = hyp["finished"]
        # A finished hypothesis (and at step 0 every beam but the first: all K are the same
        # hypothesis) offers no extension: its candidates start from -inf, which the NEG floor
        # below turns into impossible ones, without a [N, V] select.
        closed = finished
        if ctx.first:
            closed = closed | tf.not_equal(tf.range(ctx.n_rows), self.first_row)
        base = tf.where(closed, float("-inf"), hyp["log_probs"])
        cum = base[:, None] + ctx.log_probs  # [N, V]
        cp = ctx.candidate_cp()
        if _needs_lengths(ctx.alpha, ctx.gamma):
            lengths = tf.cast(ctx.step, tf.float32) + 1.0  # |Y| of every candidate
        else:
            lengths = 1.0  # not read by the formula
        cand = penalties.score(
            cum,
            lengths,
            ctx.alpha,
            cp if isinstance(cp, float) else cp[:, None],
            ctx.source_lengths,
            ctx.gamma,
        )
        cand = tf.maximum(cand, NEG)  # -inf logits -> impossible, finite
        if ctx.allowed is not None:
            cand = tf.where(ctx.allowed, cand, NEG)
        # a finished hypothesis offers itself once, in the end token's slot, its score
        # unchanged: a max with NEG everywhere else (every candidate is >= NEG)
        if self.end_column is not None:
            offer = finished if self.has_end is None else finished & self.has_end
            cand = tf.tensor_scatter_nd_max(
                cand,
                tf.stack([tf.range(ctx.n_rows), self.end_column], axis=1),
                tf.where(offer, hyp["scores"], NEG),
            )
        # one top-k over the K * V candidates of each example
        values, indices = tf.math.top_k(
            tf.reshape(cand, self.flat_shape), k=self.width, sorted=True
        )
        values = tf.reshape(values, self.n)
        indices = tf.reshape(indices, self.n)  # into the example's K * V candidates
        flat = indices + self.first_row * vocab  # into the N * V candidates
        parents = flat // vocab
        # (a finished parent's value is -inf here: the engine keeps its own log-prob)
        chosen = tf.gather(tf.reshape(cum, [-1]), flat)
        return parents, flat % vocab, chosen, values > NEG / 2, {"scores": values}


def _needs_lengths(alpha, gamma):
    """Whether the GNMT score reads |Y| (a length or EOS penalty that is not a Python 0)."""
    return not (penalties.is_zero(alpha) and penalties.is_zero(gamma))
