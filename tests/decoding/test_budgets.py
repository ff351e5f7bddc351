"""Token budgets (`budget_ids`, `budget_costs`, `budgets`): a hypothesis of example b never
spends more than `budgets[b, r]` of resource r, where token `budget_ids[u]` costs
`budget_costs[u, r]`.

Checked against brute force over every sequence of a toy model (the beam with room for all of
them returns exactly those within the budget, scored as the NumPy twin scores them), greedy
against a NumPy greedy that skips the tokens that would overrun, the guarantee on random
models for every strategy, with phrases and a prefix, and eager == tf.function == XLA.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search, greedy_search, sample_search
from tests.decoding.toy import HashModel

END = 0


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): nothing here builds Keras objects."""
    yield


def spent(sequence, ids, costs):
    """What `sequence` (up to its end token) spends, written out."""
    table = {int(i): np.asarray(c) for i, c in zip(ids, costs) if i >= 0}
    total = np.zeros(np.asarray(costs).shape[1], np.int64)
    for token in sequence:
        total = total + table.get(int(token), 0)
    return total


def within(sequence, ids, costs, limits):
    return bool(np.all(spent(sequence, ids, costs) <= np.asarray(limits)))


def body(row, length):
    return [int(t) for t in row[:length]]


# token 1 costs one of resource 0, token 2 one of resource 1, token 3 one of each
IDS = np.array([1, 2, 3], np.int32)
COSTS = np.array([[1, 0], [0, 1], [1, 1]], np.int32)


@pytest.mark.parametrize(
    "seed,limits,phrases",
    [
        (0, [0, 0], None),  # only tokens 0 and 4: no cost at all
        (1, [1, 0], None),
        (2, [1, 1], None),
        (3, [2, 1], [[3]]),  # a required phrase that spends from the budget
    ],
)
def test_exhaustive_beam_holds_exactly_the_sequences_within_the_budget(seed, limits, phrases):
    vocab, max_length = 5, 3
    model = HashModel(vocab, 3, max_length, seed=seed)
    alpha, beta, gamma = 0.6, 0.3, 0.2
    others = [v for v in range(vocab) if v != END]
    space = [
        list(b) + [END] for n in range(max_length) for b in itertools.product(others, repeat=n)
    ]
    space += [list(b) for b in itertools.product(others, repeat=max_length)]

    def allowed(y):
        if not within(y, IDS, COSTS, limits):
            return False
        return phrases is None or all(
            any(y[i : i + len(p)] == p for i in range(len(y))) for p in phrases
        )

    expected = sorted(
        (model.reference(5, 1, y, None, alpha, beta, gamma)[2], y) for y in space if allowed(y)
    )[::-1]
    kwargs = {}
    if phrases is not None:
        kwargs["constraint_ids"] = np.array([phrases], np.int32)
    out = beam_search(
        model.step_hash,
        tf.constant([5]),
        tf.constant([1]),
        END,
        beam_size=len(space),
        max_length=max_length,
        length_penalty=alpha,
        coverage_penalty=beta,
        eos_penalty=gamma,
        budget_ids=IDS,
        budget_costs=COSTS,
        budgets=np.array([limits], np.int32),
        **kwargs,
    )
    lengths, scores = out["lengths"].numpy()[0], out["scores"].numpy()[0]
    real = lengths > 0
    if phrases is not None:
        real &= out["constraints_met"].numpy()[0]
    got = [body(out["sequences"].numpy()[0, k], lengths[k]) for k in np.flatnonzero(real)]
    assert sorted(map(tuple, got)) == sorted(tuple(y) for _, y in expected)
    np.testing.assert_allclose(scores[real], [s for s, _ in expected], atol=1e-4)


def numpy_greedy(model, h0, start, max_length, ids, costs, limits):
    """Greedy written out: the most likely token whose cost fits what is left."""
    y = []
    for _ in range(max_length):
        rows, _ = model.trace(h0, start, y + [END])
        row = rows[-1].copy()
        for token in range(model.vocab):
            if not within(y + [token], ids, costs, limits):
                row[token] = -np.inf
        y.append(int(np.argmax(row)))
        if y[-1] == END:
            break
    return y


def test_greedy_takes_the_best_token_that_fits():
    vocab, max_length = 6, 6
    ids = np.array([2, 4, 5], np.int32)
    costs = np.array([[1, 0], [2, 1], [0, 1]], np.int32)
    limits = np.array([[2, 1], [1, 0], [0, 0], [4, 2]], np.int32)
    for seed in range(4):
        model = HashModel(vocab, 3, max_length, seed=seed, scale=3.0)
        h0 = np.array([3, 17, 40, 88], np.int32)
        start = np.array([1, 2, 3, 1], np.int32)
        out = greedy_search(
            model.step_hash,
            tf.constant(h0),
            tf.constant(start),
            END,
            max_length=max_length,
            budget_ids=ids,
            budget_costs=costs,
            budgets=limits,
        )
        plain = greedy_search(
            model.step_hash, tf.constant(h0), tf.constant(start), END, max_length=max_length
        )
        for b in range(len(h0)):
            want = numpy_greedy(model, h0[b], start[b], max_length, ids, costs, limits[b])
            got = body(out["sequences"].numpy()[b], out["lengths"].numpy()[b])
            assert got == want, (seed, b)
        # the budget changed some answers (else this test would not see the mechanism)
        if seed == 0:
            assert not np.array_equal(out["sequences"].numpy(), plain["sequences"].numpy())


@pytest.mark.parametrize("search", ["beam", "greedy", "sample"])
def test_no_hypothesis_overruns_its_budget_with_phrases_and_a_prefix(search):
    vocab, max_length, batch = 7, 7, 3
    ids = np.array([1, 3, 4, -1], np.int32)  # -1: an unused entry
    costs = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 2], [5, 5, 5]], np.int32)
    limits = np.array([[1, 1, 2], [1, 0, 0], [0, 1, 4]], np.int32)
    prefix = np.array([[5, -1], [1, 1], [-1, -1]], np.int32)  # row 1's prefix overruns
    phrases = np.array([[[3, -1]], [[6, 2]], [[4, 4]]], np.int32)
    for seed in range(3):
        model = HashModel(vocab, 3, max_length, seed=seed)
        h0, start = tf.constant([4, 9, 23]), tf.constant([1, 2, 1])
        kwargs = dict(
            max_length=max_length,
            prefix_ids=prefix,
            constraint_ids=phrases,
            budget_ids=ids,
            budget_costs=costs,
            budgets=limits,
        )
        if search == "beam":
            out = beam_search(model.step_hash, h0, start, END, beam_size=4, **kwargs)
        elif search == "greedy":
            out = greedy_search(model.step_hash, h0, start, END, **kwargs)
        else:
            out = sample_search(model.step_hash, h0, start, END, seed=seed, **kwargs)
        seqs, lengths = out["sequences"].numpy(), out["lengths"].numpy()
        met = out["constraints_met"].numpy()
        if search != "beam":
            seqs, lengths, met = seqs[:, None], lengths[:, None], met[:, None]
        for b in range(batch):
            for k in range(seqs.shape[1]):
                if lengths[b, k] == 0:
                    continue
                y = body(seqs[b, k], lengths[b, k])
                p = [t for t in prefix[b] if t >= 0]
                assert y[: len(p)] == p  # the prefix is forced, budget or not
                # what follows the prefix never overruns what the prefix left
                after = spent(y, ids, costs) - spent(p, ids, costs)
                left = np.maximum(limits[b] - spent(p, ids, costs), 0)
                assert np.all(after <= left), (seed, b, k, y)
        # a phrase that costs nothing is met as without a budget (a phrase that costs is
        # not reserved its share: a hypothesis may spend it first, docs/decoding.md)
        assert met[1].all(), (seed, met)


def test_eager_function_and_xla_agree():
    model = HashModel(6, 3, 6, seed=2)
    h0, start = tf.constant([2, 15], tf.int32), tf.constant([1, 2], tf.int32)
    ids, costs = np.array([2, 3, 5], np.int32), np.array([[1], [1], [2]], np.int32)
    limits = np.array([[1], [2]], np.int32)

    def run(ids, costs, limits):
        out = beam_search(
            model.step_hash,
            h0,
            start,
            END,
            beam_size=3,
            max_length=6,
            length_penalty=0.5,
            budget_ids=ids,
            budget_costs=costs,
            budgets=limits,
        )
        return {k: out[k] for k in ("sequences", "scores", "lengths")}

    eager = run(ids, costs, limits)
    dynamic = [
        tf.TensorSpec([None], tf.int32),
        tf.TensorSpec([None, None], tf.int32),
        tf.TensorSpec([None, None], tf.int32),
    ]
    graph = tf.function(run, input_signature=dynamic, autograph=False)
    xla = tf.function(run, autograph=False, jit_compile=True)
    for name, fn in (("graph", graph), ("xla", xla)):
        out = fn(tf.constant(ids), tf.constant(costs), tf.constant(limits))
        for key in eager:
            np.testing.assert_allclose(
                out[key].numpy(), eager[key].numpy(), atol=1e-5, err_msg=f"{name} {key}"
            )
    for b in range(2):
        for k in range(3):
            y = body(eager["sequences"].numpy()[b, k], eager["lengths"].numpy()[b, k])
            assert within(y, ids, costs, limits[b])


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(budget_ids=[1], budget_costs=[[1]]), r"budgets=None"),
        (dict(budget_ids=[1, 2], budget_costs=[[1]], budgets=[[1]]), r"`budget_costs` must have"),
        (dict(budget_ids=[1], budget_costs=[[1, 1]], budgets=[[1]]), r"`budgets` must have one"),
        (dict(budget_ids=[1], budget_costs=[[-1]], budgets=[[1]]), r"`budget_costs` must be >= 0"),
        (dict(budget_ids=[1], budget_costs=[[1]], budgets=[[-2]]), r"`budgets` must be >= 0"),
        (dict(budget_ids=[1, 1], budget_costs=[[1], [1]], budgets=[[1]]), r"must not repeat"),
        (dict(budget_ids=[9], budget_costs=[[1]], budgets=[[1]]), r"`budget_ids` must hold ids"),
        (dict(budget_ids=[-3], budget_costs=[[1]], budgets=[[1]]), r"`budget_ids` must hold ids"),
        (dict(budget_ids=[[1]], budget_costs=[[1]], budgets=[[1]]), r"`budget_ids` must have sh"),
        (dict(budget_ids=[1], budget_costs=[[1]], budgets=[[1], [1]]), r"`budgets` must have the"),
        (dict(budget_ids=[1], budget_costs=[[1.5]], budgets=[[1]]), r"`budget_costs` must be int"),
    ],
)
def test_bad_budgets_are_refused_naming_the_argument(kwargs, needle):
    model = HashModel(6, 3, 6, seed=0)
    kwargs = {
        key: np.asarray(value, np.float32 if "1.5" in str(value) else np.int32)
        for key, value in kwargs.items()
    }
    for search in (beam_search, greedy_search):
        with pytest.raises(ValueError, match=needle):
            search(model.step_hash, tf.constant([3]), tf.constant([1]), END, max_length=6, **kwargs)


def test_run_time_negative_budgets_fail_naming_the_argument():
    model = HashModel(6, 3, 4, seed=0)
    run = tf.function(
        lambda limits: greedy_search(
            model.step_hash,
            tf.constant([3]),
            tf.constant([1]),
            END,
            max_length=4,
            budget_ids=tf.constant([1]),
            budget_costs=tf.constant([[1]]),
            budgets=limits,
        ),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
        autograph=False,
    )
    run(tf.constant([[1]]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="budgets"):
        run(tf.constant([[-1]]))
