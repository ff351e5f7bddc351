"""`constraint_alt_ids`: a second id accepted at each position of a required phrase (another
spelling of it). A phrase is met by any sequence of positions each holding its id or its
alternative. Checked against brute force (the beam with room for every sequence returns as
met exactly those that hold every phrase in some spelling), greedy finishing a phrase started
with an alternative, repeated phrases, bad arguments, and eager == tf.function == XLA.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search, greedy_search
from tests.decoding.test_constraints import bigram_step
from tests.decoding.toy import HashModel

END = 0


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): nothing here builds Keras objects."""
    yield


def spellings(phrase, alt):
    """Every spelling of a phrase: at each position its id or (where given) its alternative."""
    options = [[p] + ([a] if a >= 0 else []) for p, a in zip(phrase, alt) if p >= 0]
    return [list(s) for s in itertools.product(*options)]


def holds(sequence, phrase, alt):
    body = sequence[:-1] if sequence and sequence[-1] == END else sequence
    return any(body[i : i + len(s)] == s for s in spellings(phrase, alt) for i in range(len(body)))


@pytest.mark.parametrize(
    "seed,phrases,alts",
    [
        (0, [[1, 2]], [[3, -1]]),  # "1 2" or "3 2"
        (1, [[2], [1]], [[4], [-1]]),  # "2" or "4", and "1"
        (2, [[1, 3]], [[2, 4]]),  # four spellings
        (3, [[2], [2]], [[3], [3]]),  # the same phrase twice: two occurrences, any spelling
    ],
)
def test_exhaustive_beam_meets_exactly_the_sequences_with_some_spelling(seed, phrases, alts):
    vocab, max_length = 5, 3
    model = HashModel(vocab, 3, max_length, seed=seed)
    others = [v for v in range(vocab) if v != END]
    space = [
        list(b) + [END] for n in range(max_length) for b in itertools.product(others, repeat=n)
    ]
    space += [list(b) for b in itertools.product(others, repeat=max_length)]

    def meets(y):
        if len(phrases) == 2 and phrases[0] == phrases[1]:  # two distinct occurrences
            body = y[:-1] if y[-1] == END else y
            spelled = spellings(phrases[0], alts[0])
            starts = [i for i in range(len(body)) for s in spelled if body[i : i + len(s)] == s]
            return len(set(starts)) >= 2
        return all(holds(y, p, a) for p, a in zip(phrases, alts))

    expected = sorted(
        (model.reference(5, 1, y, None, 0.6, 0.3, 0.2)[2], y) for y in space if meets(y)
    )[::-1]
    out = beam_search(
        model.step_hash,
        tf.constant([5]),
        tf.constant([1]),
        END,
        beam_size=len(space),
        max_length=max_length,
        length_penalty=0.6,
        coverage_penalty=0.3,
        eos_penalty=0.2,
        constraint_ids=np.array([phrases], np.int32),
        constraint_alt_ids=np.array([alts], np.int32),
    )
    met = out["constraints_met"].numpy()[0] & (out["lengths"].numpy()[0] > 0)
    lengths, scores = out["lengths"].numpy()[0], out["scores"].numpy()[0]
    got = [list(out["sequences"].numpy()[0, k, : lengths[k]]) for k in np.flatnonzero(met)]
    assert sorted(map(tuple, got)) == sorted(tuple(y) for _, y in expected)
    np.testing.assert_allclose(scores[met], [s for s, _ in expected], atol=1e-4)
    assert met[0]  # met first


def test_greedy_finishes_a_phrase_started_with_its_alternative():
    # the model likes 3 first, then 4 forever; the phrase is "2 1" or "3 1"
    table = np.full((6, 6), -5.0, np.float32)
    table[1, 3] = 5.0  # after the start token 1: 3
    table[3, 4] = 5.0
    table[4, 4] = 5.0
    table[2, 4] = 5.0
    step = bigram_step(table)
    phrases, alts = np.array([[[2, 1]]], np.int32), np.array([[[3, -1]]], np.int32)
    out = greedy_search(
        step,
        tf.zeros((1, 1)),
        tf.constant([1]),
        END,
        max_length=5,
        constraint_ids=phrases,
        constraint_alt_ids=alts,
    )
    y = list(out["sequences"].numpy()[0, : out["lengths"].numpy()[0]])
    assert y[:2] == [3, 1]  # started by the alternative, finished at once
    assert out["constraints_met"].numpy()[0]
    # without the alternative the 3 starts nothing: the phrase "2 1" is written later
    plain = greedy_search(
        step, tf.zeros((1, 1)), tf.constant([1]), END, max_length=5, constraint_ids=phrases
    )
    z = list(plain["sequences"].numpy()[0, : plain["lengths"].numpy()[0]])
    assert z[:2] != [3, 1] and holds(z, [2, 1], [-1, -1])


def test_eager_function_and_xla_agree():
    model = HashModel(6, 3, 6, seed=2)
    h0, start = tf.constant([2, 15], tf.int32), tf.constant([1, 2], tf.int32)
    phrases = np.array([[[2, 3], [5, -1]], [[4, -1], [-1, -1]]], np.int32)
    alts = np.array([[[1, -1], [-1, -1]], [[3, -1], [-1, -1]]], np.int32)

    def run(phrases, alts):
        out = beam_search(
            model.step_hash,
            h0,
            start,
            END,
            beam_size=3,
            max_length=6,
            length_penalty=0.5,
            constraint_ids=phrases,
            constraint_alt_ids=alts,
        )
        return {k: out[k] for k in ("sequences", "scores", "constraints_met")}

    eager = run(phrases, alts)
    spec = [tf.TensorSpec([None, None, None], tf.int32)] * 2
    graph = tf.function(run, input_signature=spec, autograph=False)
    xla = tf.function(run, autograph=False, jit_compile=True)
    for name, fn in (("graph", graph), ("xla", xla)):
        out = fn(tf.constant(phrases), tf.constant(alts))
        for key in eager:
            np.testing.assert_allclose(
                out[key].numpy(), eager[key].numpy(), atol=1e-5, err_msg=f"{name} {key}"
            )
    assert eager["constraints_met"].numpy()[:, 0].all()


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(constraint_alt_ids=[[[1]]]), r"needs `constraint_ids`"),
        (dict(constraint_ids=[[[1, 2]]], constraint_alt_ids=[[[1]]]), r"must have the shape"),
        (dict(constraint_ids=[[[1, -1]]], constraint_alt_ids=[[[2, 3]]]), r"only where"),
        (dict(constraint_ids=[[[1]]], constraint_alt_ids=[[[9]]]), r"`constraint_alt_ids` must"),
        (dict(constraint_ids=[[[1]]], constraint_alt_ids=[[[-2]]]), r"`constraint_alt_ids` must"),
        (dict(constraint_ids=[[[1]]], constraint_alt_ids=[[[0]]]), r"end token"),
        (dict(constraint_ids=[[[1]]], constraint_alt_ids=[[1]]), r"must have shape \[B, C, L\]"),
    ],
)
def test_bad_alternatives_are_refused_naming_the_argument(kwargs, needle):
    model = HashModel(6, 3, 6, seed=0)
    kwargs = {key: np.asarray(value, np.int32) for key, value in kwargs.items()}
    for search in (beam_search, greedy_search):
        with pytest.raises(ValueError, match=needle):
            search(model.step_hash, tf.constant([3]), tf.constant([1]), END, max_length=6, **kwargs)
