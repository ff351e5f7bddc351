"""Toy step functions for the decoding tests, each with a NumPy twin.

`HashModel`: the next-token distribution and the attention depend on the
whole prefix `[start, y_1, ..., y_t]` through a rolling hash
`h <- (31 * h + token + 1) mod R`, looked up in fixed random tables. Two
step functions compute it:
  - `step_hash` carries the running hash `[N]` in the state;
  - `step_buffer` carries the prefix itself in `[N, T]` / `[N, T, 2]`
    buffers (like a key/value cache) and re-hashes it every step, so it only
    gives the right answer if the search hands every beam its own history.
`reference(...)` recomputes log-probs, attention and the documented score
of any hypothesis in NumPy; `brute_force(...)` enumerates every complete
hypothesis.
"""

import itertools

import numpy as np
import tensorflow as tf

R = 211  # table rows (prime)


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def np_score(log_prob, length, coverage, mask, alpha, beta, gamma, source_length):
    """The GNMT score of docs/decoding.md, written out."""
    lp = ((5.0 + length) / 6.0) ** alpha
    cp = beta * np.sum(np.where(mask, np.log(np.clip(coverage, 1e-10, 1.0)), 0.0))
    ep = gamma * source_length / length
    return log_prob / lp + cp + ep


class HashModel:
    def __init__(self, vocab, width, max_length, seed=0, scale=2.0):
        rng = np.random.RandomState(seed)
        self.vocab, self.width, self.max_length = vocab, width, max_length
        self.logits = (rng.randn(R, vocab) * scale).astype(np.float32)
        att = rng.randn(R, width).astype(np.float32) * 1.5
        self.attention = np.exp(att) / np.exp(att).sum(-1, keepdims=True)
        self.attention = self.attention.astype(np.float32)

    # ----------------------------------------------------------- NumPy twin
    @staticmethod
    def np_hash(h, token):
        return (31 * h + token + 1) % R

    def trace(self, h0, start, tokens):
        """Per-step log-softmax rows and attention rows along `tokens`."""
        h, prev, rows, atts = h0, start, [], []
        for tok in tokens:
            h = self.np_hash(h, prev)
            rows.append(log_softmax(self.logits[h].astype(np.float64)))
            atts.append(self.attention[h].astype(np.float64))
            prev = tok
        return rows, atts

    def reference(self, h0, start, tokens, mask, alpha, beta, gamma, with_attention=True):
        rows, atts = self.trace(h0, start, tokens)
        log_prob = sum(row[tok] for row, tok in zip(rows, tokens))
        coverage = np.sum(atts, axis=0)
        if mask is None:
            mask = np.ones(self.width, bool)
        if with_attention:
            score = np_score(log_prob, len(tokens), coverage, mask, alpha, beta, gamma, mask.sum())
        else:
            score = np_score(log_prob, len(tokens), coverage, mask, alpha, 0.0, gamma, 0.0)
        return log_prob, np.array(atts), score

    def brute_force(self, h0, start, end, mask, alpha, beta, gamma):
        """Every complete hypothesis (ended by `end`, or `max_length` long), best first."""
        hyps = []
        others = [v for v in range(self.vocab) if v != end]
        for length in range(1, self.max_length + 1):
            for body in itertools.product(others, repeat=length - 1):
                hyps.append(list(body) + [end])
        hyps += [list(b) for b in itertools.product(others, repeat=self.max_length)]
        scored = []
        for y in hyps:
            log_prob, _, score = self.reference(h0, start, y, mask, alpha, beta, gamma)
            scored.append((score, log_prob, y))
        scored.sort(key=lambda item: -item[0])
        return scored

    # ------------------------------------------------------- step functions
    def step_hash(self, tokens, state, step):
        table = tf.constant(self.logits)
        att = tf.constant(self.attention)
        h = (31 * state + tokens + 1) % R
        return tf.gather(table, h), h, tf.gather(att, h)

    def initial_buffer_state(self, h0):
        h0 = tf.constant(h0, tf.int32)
        batch = h0.shape[0]
        return {
            "h0": h0,
            "cache": (
                tf.zeros([batch, self.max_length], tf.int32),
                tf.zeros([batch, self.max_length, 2], tf.float32),
            ),
        }

    def step_buffer(self, tokens, state, step):
        """Writes the fed token at column `step`, then hashes the whole buffer."""
        table = tf.constant(self.logits)
        att = tf.constant(self.attention)
        token_buf, key_buf = state["cache"]
        column = tf.equal(tf.range(self.max_length), step)
        token_buf = tf.where(column[None, :], tokens[:, None], token_buf)
        key_value = tf.stack([tf.cast(tokens, tf.float32), -tf.cast(tokens, tf.float32)], -1)
        key_buf = tf.where(column[None, :, None], key_value[:, None, :], key_buf)
        h_tok = state["h0"]
        h_key = state["h0"]
        for j in range(self.max_length):
            live = j <= step
            h_tok = tf.where(live, (31 * h_tok + token_buf[:, j] + 1) % R, h_tok)
            from_keys = tf.cast(tf.round(key_buf[:, j, 0]), tf.int32)
            h_key = tf.where(live, (31 * h_key + from_keys + 1) % R, h_key)
        new_state = {"h0": state["h0"], "cache": (token_buf, key_buf)}
        # logits from the token cache, attention from the key cache
        return tf.gather(table, h_tok), new_state, tf.gather(att, h_key)
