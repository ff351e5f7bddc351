"""A phrase required twice must occur twice: one occurrence meets one phrase.

The step model prefers every other token to the phrases' tokens (they are the least likely),
so the search places a phrase token only where a constraint forces it: the count of each
phrase in the answer is the count the constraints demand, not one."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search, greedy_search, sample_search

END, V = 0, 8
# token preferences: 3 best, then the end token, the phrase tokens 5, 6, 7 worst
PREFERENCE = np.array([1.0, -2.0, -2.0, 4.0, -2.0, -8.0, -9.0, -10.0], np.float32)


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): nothing here builds Keras objects."""
    yield


def step(tokens, state, step_index):
    logits = tf.broadcast_to(PREFERENCE, [tf.shape(tokens)[0], V])
    return logits, state, None


def count(row, phrase):
    row, n = list(row), len(phrase)
    return sum(row[i : i + n] == phrase for i in range(len(row) - n + 1))


def run(search, phrases, max_length=10):
    phrases = tf.constant(phrases, tf.int32)
    batch = phrases.shape[0]
    state = tf.zeros([batch, 1])
    start = tf.ones([batch], tf.int32)
    kwargs = dict(max_length=max_length, constraint_ids=phrases)
    if search == "beam":
        out = beam_search(step, state, start, END, beam_size=3, **kwargs)
        return out["sequences"][:, 0], out["constraints_met"][:, 0]
    if search == "greedy":
        out = greedy_search(step, state, start, END, **kwargs)
    else:
        out = sample_search(step, state, start, END, seed=1, top_k=2, **kwargs)
    return out["sequences"], out["constraints_met"]


def until_end(row):
    row = list(row)
    return row[: row.index(END)] if END in row else row


@pytest.mark.parametrize("search", ["beam", "greedy", "sample"])
@pytest.mark.parametrize("jit", [False, True])
def test_a_phrase_given_twice_occurs_twice(search, jit):
    # row 0: token 5 twice and 6 once; row 1: the two-token phrase "6 7" twice
    phrases = [[[5, -1], [5, -1], [6, -1]], [[6, 7], [-1, -1], [6, 7]]]
    fn = tf.function(lambda: run(search, phrases), jit_compile=True) if jit else None
    seqs, met = (x.numpy() for x in (fn() if jit else run(search, phrases)))
    assert met.all()
    first, second = until_end(seqs[0]), until_end(seqs[1])
    assert count(first, [5]) == 2 and count(first, [6]) == 1, first
    assert count(second, [6, 7]) == 2, second


def test_a_phrase_given_three_times_needs_room_for_three():
    """Three `5`s fit in 3 tokens and are all placed; the need counts each occurrence."""
    seqs, met = (x.numpy() for x in run("greedy", [[[5], [5], [5]]], max_length=3))
    assert met.all() and count(until_end(seqs[0]), [5]) == 3, seqs
