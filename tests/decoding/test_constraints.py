"""Constrained decoding: forced prefix, required phrases, suppressed sequences, per-token scores.

The guarantees are checked as properties over random toy models (`toy.HashModel`, whose
NumPy twin recomputes every log-prob), the constrained beam against brute force over the
constrained space, and eager == tf.function == XLA.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search, greedy_search, sample_search
from keras_attn.decoding.constraints import ConstraintState
from tests.decoding.toy import HashModel

END = 0


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): nothing here builds Keras objects."""
    yield


def contains(seq, phrase):
    n = len(phrase)
    return any(list(seq[i : i + n]) == list(phrase) for i in range(len(seq) - n + 1))


def unpad(row):
    return [int(t) for t in row if t >= 0]


def random_case(seed, vocab, max_length, batch=2):
    """Prefix `[B, P]`, phrases `[B, C, L]` and suppressed sequences `[S, L]` that fit in
    `max_length` together and do not contradict each other (no end token, the suppressed
    sequences use tokens the prefix and the phrases do not)."""
    rng = np.random.RandomState(seed)
    tokens = list(range(1, vocab))
    prefix = -np.ones([batch, 2], np.int32)
    phrases = -np.ones([batch, 2, 2], np.int32)
    used = set()
    for b in range(batch):
        p = rng.randint(0, 3)
        prefix[b, :p] = rng.choice(tokens, p)
        room = max_length - p
        for c in range(2):
            n = min(rng.randint(0, 3), room)
            phrases[b, c, :n] = rng.choice(tokens, n, replace=False)
            room -= n
        used |= set(prefix[b][prefix[b] >= 0]) | set(phrases[b][phrases[b] >= 0])
    free = [t for t in tokens if t not in used] or [tokens[-1]]
    suppress = np.array([[free[0], free[-1]], [free[-1], free[-1]]], np.int32)
    if not set(suppress.ravel()).isdisjoint(used):
        suppress = np.array([[free[0], free[0]], [free[0], free[0]]], np.int32)
        suppress = suppress if free[0] not in used else -np.ones([2, 2], np.int32)
    return prefix, phrases, suppress


def check_guarantees(out, model, h0, start, prefix, phrases, suppress, beam):
    seqs, lengths = out["sequences"].numpy(), out["lengths"].numpy()
    met, tok = out["constraints_met"].numpy(), out["token_log_probs"].numpy()
    log_probs = out["log_probs"].numpy()
    if not beam:
        seqs, lengths, met = seqs[:, None], lengths[:, None], met[:, None]
        tok, log_probs = tok[:, None], log_probs[:, None]
    for b in range(seqs.shape[0]):
        want = unpad(prefix[b])
        rows_phrases = [unpad(p) for p in phrases[b] if unpad(p)]
        for k in range(seqs.shape[1]):
            if lengths[b, k] == 0:
                continue  # an empty row (fewer hypotheses than K)
            y = list(seqs[b, k, : lengths[b, k]])
            assert y[: len(want)] == want, (b, k, y, want)  # the prefix, exactly
            for s in suppress:
                if unpad(s):
                    assert not contains(y, unpad(s)), (y, unpad(s))
            body = y[:-1] if y[-1] == END else y
            assert met[b, k] == all(contains(body, p) for p in rows_phrases)
            # per-token log-probs: the model's own, 0 after the end, summing to log_probs
            rows, _ = model.trace(int(h0[b]), int(start[b]), y)
            expected = [row[t] for row, t in zip(rows, y)]
            np.testing.assert_allclose(tok[b, k, : len(y)], expected, atol=1e-4)
            assert np.all(tok[b, k, len(y) :] == 0.0)
            assert tok[b, k].sum() == pytest.approx(log_probs[b, k], abs=1e-4)
        assert met[b, 0], (b, seqs[b, 0], rows_phrases)  # they fit: the best meets them


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("search", ["beam", "greedy", "sample"])
def test_guarantees_hold_on_random_models(search, seed):
    vocab, max_length = 6, 6
    model = HashModel(vocab, 3, max_length, seed=seed)
    prefix, phrases, suppress = random_case(seed, vocab, max_length)
    h0 = tf.constant([seed, 7 * seed + 1], tf.int32)
    start = tf.constant([1, 2], tf.int32)
    kwargs = dict(prefix_ids=prefix, constraint_ids=phrases, suppress_ids=suppress)
    if search == "beam":
        out = beam_search(model.step_hash, h0, start, END, beam_size=3, max_length=6, **kwargs)
    elif search == "greedy":
        out = greedy_search(model.step_hash, h0, start, END, max_length=6, **kwargs)
    else:
        out = sample_search(model.step_hash, h0, start, END, max_length=6, seed=seed, **kwargs)
    check_guarantees(out, model, h0, start, prefix, phrases, suppress, search == "beam")


def test_constraints_compose_with_the_controls_and_the_buffer_state():
    """n-gram blocking, repetition penalty, min length, bad tokens, GNMT penalties; the step
    that carries its whole history per beam (it only works if the reorder is right)."""
    vocab, max_length = 7, 6
    model = HashModel(vocab, 3, max_length, seed=11)
    h0 = np.array([3, 9], np.int32)
    prefix = np.array([[2, -1], [-1, -1]], np.int32)
    phrases = np.array([[[4, 5], [-1, -1]], [[3, -1], [5, 4]]], np.int32)
    suppress = np.array([[6, 6], [2, 2]], np.int32)
    controls = dict(
        max_length=max_length,
        min_length=3,
        no_repeat_ngram_size=2,
        repetition_penalty=1.5,
        bad_token_ids=[1],
        length_penalty=0.6,
        coverage_penalty=0.2,
        prefix_ids=prefix,
        constraint_ids=phrases,
        suppress_ids=suppress,
    )
    start = tf.constant([1, 2], tf.int32)
    hashed = beam_search(model.step_hash, tf.constant(h0), start, END, beam_size=4, **controls)
    buffered = beam_search(
        model.step_buffer, model.initial_buffer_state(h0), start, END, beam_size=4, **controls
    )
    for key in ("sequences", "lengths", "constraints_met"):
        np.testing.assert_array_equal(hashed[key].numpy(), buffered[key].numpy(), err_msg=key)
    np.testing.assert_allclose(hashed["scores"].numpy(), buffered["scores"].numpy(), atol=1e-5)
    seqs, lengths = hashed["sequences"].numpy(), hashed["lengths"].numpy()
    for b in range(2):
        assert hashed["constraints_met"].numpy()[b, 0]
        for k in range(4):
            y = list(seqs[b, k, : lengths[b, k]])
            pairs = list(zip(y, y[1:]))
            assert (len(pairs) == len(set(pairs)) and 1 not in y and len(y) >= 3 + 1) or y[-1] != 0


def test_greedy_equals_beam_of_one_under_constraints():
    model = HashModel(6, 3, 6, seed=5)
    prefix, phrases, suppress = random_case(5, 6, 6)
    kwargs = dict(max_length=6, prefix_ids=prefix, constraint_ids=phrases, suppress_ids=suppress)
    h0, start = tf.constant([5, 36], tf.int32), tf.constant([1, 2], tf.int32)
    greedy = greedy_search(model.step_hash, h0, start, END, **kwargs)
    beam = beam_search(model.step_hash, h0, start, END, beam_size=1, **kwargs)
    for key in greedy:
        np.testing.assert_allclose(greedy[key].numpy(), beam[key].numpy()[:, 0], atol=1e-6)


def brute_force(model, h0, start, prefix, phrases, suppress, alpha, beta, gamma):
    """Every complete hypothesis that meets the constraints, best first."""
    others = [v for v in range(model.vocab) if v != END]
    hyps = []
    for length in range(1, model.max_length + 1):
        hyps += [list(b) + [END] for b in itertools.product(others, repeat=length - 1)]
    hyps += [list(b) for b in itertools.product(others, repeat=model.max_length)]
    kept = []
    for y in hyps:
        body = y[:-1] if y[-1] == END else y
        if y[: len(prefix)] != prefix or not all(contains(body, p) for p in phrases):
            continue
        if any(contains(y, s) for s in suppress):
            continue
        log_prob, _, score = model.reference(h0, start, y, None, alpha, beta, gamma)
        kept.append((score, log_prob, y))
    kept.sort(key=lambda item: -item[0])
    return kept


@pytest.mark.parametrize(
    "seed,prefix,phrases,suppress",
    [
        (0, [2], [[1], [3]], [[3, 3]]),
        (1, [], [[3], [2]], [[1, 1]]),
        (2, [1], [[2, 3]], [[3, 3]]),
        (3, [], [[1, 2]], [[2]]),  # the phrase holds a suppressed token: nothing meets it
    ],
)
def test_exhaustive_constrained_beam_is_brute_force(seed, prefix, phrases, suppress):
    vocab, max_length = 4, 4
    model = HashModel(vocab, 3, max_length, seed=seed)
    alpha, beta, gamma = 0.6, 0.3, 0.2
    expected = brute_force(model, 5, 1, prefix, phrases, suppress, alpha, beta, gamma)
    beam_size = (vocab - 1) ** max_length + sum((vocab - 1) ** n for n in range(max_length))
    pad = max(len(p) for p in phrases)
    out = beam_search(
        model.step_hash,
        tf.constant([5]),
        tf.constant([1]),
        END,
        beam_size=beam_size,
        max_length=max_length,
        length_penalty=alpha,
        coverage_penalty=beta,
        eos_penalty=gamma,
        prefix_ids=np.array([prefix + [-1]], np.int32),
        constraint_ids=np.array([[p + [-1] * (pad - len(p)) for p in phrases]], np.int32),
        suppress_ids=np.array([s + [-1] * (2 - len(s)) for s in suppress], np.int32),
    )
    met = out["constraints_met"].numpy()[0]
    assert met.sum() == len(expected)  # every sequence of the constrained space, no other
    if not expected:
        return
    scores, lengths = out["scores"].numpy()[0], out["lengths"].numpy()[0]
    got = [list(out["sequences"].numpy()[0, k, : lengths[k]]) for k in range(len(expected))]
    assert got[0] == expected[0][2]
    np.testing.assert_allclose(scores[: len(expected)], [e[0] for e in expected], atol=1e-4)
    assert sorted(map(tuple, got)) == sorted(tuple(e[2]) for e in expected)


def bigram_step(table):
    table = tf.math.log_softmax(tf.constant(table, tf.float32))

    def step(tokens, state, step):
        return tf.gather(table, tokens), state, None

    return step


def test_dynamic_beam_allocation_keeps_an_early_phrase():
    """A phrase token that is cheap only at the first step: a plain top-K keeps the likelier
    first tokens and must force the phrase at the end, at a high cost; the bank of hypotheses
    that met it keeps the early one, and a beam of two finds the best constrained sequence."""
    #        end    1      2      3      start
    table = [
        [0.0, 0.0, 0.0, 0.0, 0.0],  # after end (unused)
        [-9.0, 2.0, 1.8, -9.0, -9.0],  # after 1: 1 or 2, never 3
        [-9.0, 1.8, 2.0, -9.0, -9.0],  # after 2: likewise
        [-9.0, 2.0, 1.0, -9.0, -9.0],  # after 3: 1
        [-9.0, 2.0, 1.9, 1.0, -9.0],  # at the start: 3 is third
    ]
    step = bigram_step(table)
    kwargs = dict(max_length=3, constraint_ids=np.array([[[3]]], np.int32))
    out = beam_search(step, tf.zeros([1, 1]), tf.constant([4]), -1, beam_size=2, **kwargs)
    best = list(out["sequences"].numpy()[0, 0])
    log_table = tf.math.log_softmax(tf.constant(table)).numpy()
    space = [y for y in itertools.product([1, 2, 3], repeat=3) if 3 in y]
    scores = {y: log_table[4, y[0]] + log_table[y[0], y[1]] + log_table[y[1], y[2]] for y in space}
    assert best == list(max(scores, key=scores.get))
    assert best[0] == 3


@pytest.mark.parametrize("search", [greedy_search, sample_search])
def test_one_hypothesis_finishes_a_started_phrase_at_once(search):
    """After the phrase's first token the model prefers another one; greedy and sampling go on
    with the phrase (the room left alone would let them put it off to the end)."""
    #        end    1      2      3      start
    table = [
        [0.0, 0.0, 0.0, 0.0, 0.0],
        [-9.0, 3.0, 2.0, -9.0, -9.0],  # after 1: 1
        [-9.0, 9.0, -9.0, -9.0, -9.0],  # after 2: 1, almost surely
        [-9.0, 3.0, -9.0, -9.0, -9.0],  # after 3: 1
        [-9.0, -9.0, 9.0, -9.0, -9.0],  # at the start: 2
    ]
    kwargs = dict(max_length=6, constraint_ids=np.array([[[2, 3]]], np.int32))
    if search is sample_search:
        kwargs["seed"] = 4
    out = search(bigram_step(table), tf.zeros([1, 1]), tf.constant([4]), -1, **kwargs)
    assert list(out["sequences"].numpy()[0, :2]) == [2, 3]
    assert out["constraints_met"].numpy()[0]


@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_eager_function_and_xla_agree(search):
    model = HashModel(6, 3, 6, seed=2)
    prefix, phrases, suppress = random_case(2, 6, 6)
    h0, start = tf.constant([2, 15], tf.int32), tf.constant([1, 2], tf.int32)
    searcher = beam_search if search == "beam" else greedy_search
    kwargs = dict(beam_size=3) if search == "beam" else {}

    def run(prefix, phrases, suppress):
        out = searcher(
            model.step_hash,
            h0,
            start,
            END,
            max_length=6,
            length_penalty=0.5,
            prefix_ids=prefix,
            constraint_ids=phrases,
            suppress_ids=suppress,
            **kwargs,
        )
        return {k: out[k] for k in ("sequences", "scores", "token_log_probs", "constraints_met")}

    eager = run(prefix, phrases, suppress)
    dynamic = [
        tf.TensorSpec([None, None], tf.int32),
        tf.TensorSpec([None, None, None], tf.int32),
        tf.TensorSpec([None, None], tf.int32),
    ]
    graph = tf.function(run, input_signature=dynamic, autograph=False)
    xla = tf.function(run, autograph=False, jit_compile=True)
    for name, fn in (("graph", graph), ("xla", xla)):
        out = fn(tf.constant(prefix), tf.constant(phrases), tf.constant(suppress))
        for key in eager:
            np.testing.assert_allclose(
                out[key].numpy(), eager[key].numpy(), atol=1e-5, err_msg=f"{name} {key}"
            )


def test_sampling_under_xla_keeps_the_guarantees():
    """Under XLA sampling draws from another generator: other samples, same guarantees."""
    model = HashModel(6, 3, 6, seed=3)
    prefix, phrases, suppress = random_case(3, 6, 6)
    h0, start = tf.constant([3, 22], tf.int32), tf.constant([1, 2], tf.int32)

    @tf.function(jit_compile=True, autograph=False)
    def run(prefix, phrases, suppress):
        return sample_search(
            model.step_hash,
            h0,
            start,
            END,
            max_length=6,
            seed=5,
            prefix_ids=prefix,
            constraint_ids=phrases,
            suppress_ids=suppress,
        )

    out = run(tf.constant(prefix), tf.constant(phrases), tf.constant(suppress))
    check_guarantees(out, model, h0, start, prefix, phrases, suppress, beam=False)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(constraint_ids=[[[1, 2, 3, 4, 5, 1, 2]]]), r"`constraint_ids` must hold phrases"),
        (dict(prefix_ids=[[1, 0, -1]]), r"`prefix_ids` must not hold the end token"),
        (dict(constraint_ids=[[[0, 1]]]), r"`constraint_ids` must not hold the end token"),
        (dict(prefix_ids=[[1, 9]]), r"`prefix_ids` must hold ids of the vocabulary"),
        (dict(constraint_ids=[[[9]]]), r"`constraint_ids` must hold ids of the vocabulary"),
        (dict(suppress_ids=[[1, 9]]), r"`suppress_ids` must hold ids of the vocabulary"),
        (dict(prefix_ids=[[1, -1, 2]]), r"`prefix_ids` must have each row right-padded"),
        (dict(constraint_ids=[[[-2]]]), r"`constraint_ids` must hold ids >= 0"),
        (dict(prefix_ids=[[1, 2, 3]], suppress_ids=[[2, 3]]), r"must not hold a sequence of"),
        (dict(prefix_ids=[1, 2]), r"`prefix_ids` must have shape \[B, P\]"),
        (dict(prefix_ids=[[1], [2]]), r"`prefix_ids` must have the batch size"),
        (dict(constraint_ids=[[[1.0]]]), r"`constraint_ids` must be integer ids"),
        (dict(prefix_ids=[[1, 2, 3, 1, 2, 3, 1]]), r"`prefix_ids` must fit in max_length=6"),
    ],
)
def test_bad_constraints_are_refused_naming_the_argument(kwargs, needle):
    model = HashModel(6, 3, 6, seed=0)
    kwargs = {
        key: np.asarray(value, np.float32 if "1.0" in str(value) else np.int32)
        for key, value in kwargs.items()
    }
    for search in (beam_search, greedy_search):
        with pytest.raises(ValueError, match=needle):
            search(model.step_hash, tf.constant([3]), tf.constant([1]), END, max_length=6, **kwargs)


def test_what_does_not_fit_or_is_empty_answers_without_error():
    model = HashModel(6, 3, 4, seed=0)
    h0, start = tf.constant([3]), tf.constant([1])
    # two phrases of three tokens in four: not met, an ordinary answer, no NaN
    out = beam_search(
        model.step_hash,
        h0,
        start,
        END,
        beam_size=2,
        max_length=4,
        constraint_ids=np.array([[[1, 2, 3], [4, 5, 1]]], np.int32),
    )
    assert not out["constraints_met"].numpy().any()
    assert np.isfinite(out["scores"].numpy()).all()
    # no phrase (C = 0, or only padding): met
    for phrases in (np.zeros([1, 0, 2], np.int32), -np.ones([1, 2, 2], np.int32)):
        out = greedy_search(model.step_hash, h0, start, END, max_length=4, constraint_ids=phrases)
        assert out["constraints_met"].numpy().all()
    # a phrase holding a banned token: the controls win, and the answer says so
    out = greedy_search(
        model.step_hash,
        h0,
        start,
        END,
        max_length=4,
        bad_token_ids=[2],
        constraint_ids=np.array([[[2, 3]]], np.int32),
    )
    assert not out["constraints_met"].numpy().any()
    assert 2 not in out["sequences"].numpy()[0, : out["lengths"].numpy()[0]]


def test_run_time_ids_out_of_the_vocabulary_fail_naming_the_argument():
    model = HashModel(6, 3, 4, seed=0)
    run = tf.function(
        lambda p: greedy_search(
            model.step_hash, tf.constant([3]), tf.constant([1]), END, max_length=4, prefix_ids=p
        ),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
        autograph=False,
    )
    run(tf.constant([[1, 2]]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="prefix_ids"):
        run(tf.constant([[1, 9]]))


def test_constraint_code_does_not_run_without_constraints(monkeypatch):
    """The plain searches never build the constraint machinery (no op of it in the loop)."""

    def refuse(*args, **kwargs):
        raise AssertionError("constraint code ran")

    monkeypatch.setattr(ConstraintState, "process", refuse)
    monkeypatch.setattr(ConstraintState, "initial_state", refuse)
    model = HashModel(5, 3, 4, seed=0)
    for search in (beam_search, greedy_search):
        out = search(model.step_hash, tf.constant([3]), tf.constant([1]), END, max_length=4)
        assert "constraints_met" not in out
    with pytest.raises(AssertionError, match="constraint code ran"):
        greedy_search(
            model.step_hash,
            tf.constant([3]),
            tf.constant([1]),
            END,
            max_length=4,
            suppress_ids=np.array([[1, 2]], np.int32),
        )


def test_constraints_with_the_transformer_cache():
    """Cached and recomputed Transformer steps give the same constrained beams (the caches are
    reordered with the constraint state)."""
    from keras_attn.decoding import transformer_step
    from tests.decoding.test_steps import MASK, START, B, D, T, _transformer

    layers, embedding, output, pe, encoder = _transformer()
    prefix = np.array([[2, -1], [-1, -1], [3, 4]], np.int32)
    phrases = np.array([[[5, 6]], [[7, -1]], [[2, -1]]], np.int32)
    suppress = np.array([[8, 8]], np.int32)
    outs = []
    for cached in (True, False):
        step, state = transformer_step(
            layers,
            embedding,
            output,
            encoder,
            MASK,
            pe,
            max_length=T,
            embedding_scale=np.sqrt(D),
            cached=cached,
            recompute="buffer",
        )
        outs.append(
            beam_search(
                step,
                state,
                tf.fill([B], START),
                END,
                beam_size=3,
                max_length=T,
                source_mask=MASK,
                coverage_penalty=0.2,
                prefix_ids=prefix,
                constraint_ids=phrases,
                suppress_ids=suppress,
            )
        )
    cached, recomputed = outs
    np.testing.assert_array_equal(cached["sequences"].numpy(), recomputed["sequences"].numpy())
    np.testing.assert_allclose(cached["scores"].numpy(), recomputed["scores"].numpy(), atol=1e-4)
    assert cached["constraints_met"].numpy()[:, 0].all()
    seqs = cached["sequences"].numpy()
    assert list(seqs[0, 0, :1]) == [2] and list(seqs[2, 0, :2]) == [3, 4]


def test_constraints_as_savedmodel_signature_inputs(tmp_path):
    """Every constraint argument (and the beam) a signature input of unknown shape."""
    model = HashModel(6, 3, 6, seed=4)
    prefix, phrases, suppress = random_case(4, 6, 6)
    h0, start = np.array([4, 29], np.int32), np.array([1, 2], np.int32)

    def search(h0, start, prefix, phrases, suppress, beam_size):
        out = beam_search(
            model.step_hash,
            h0,
            start,
            END,
            beam_size=beam_size,
            max_length=6,
            prefix_ids=prefix,
            constraint_ids=phrases,
            suppress_ids=suppress,
        )
        keys = ("sequences", "scores", "token_log_probs", "constraints_met")
        return {key: out[key] for key in keys}

    spec = [
        tf.TensorSpec([None], tf.int32, name="h0"),
        tf.TensorSpec([None], tf.int32, name="start"),
        tf.TensorSpec([None, None], tf.int32, name="prefix"),
        tf.TensorSpec([None, None, None], tf.int32, name="phrases"),
        tf.TensorSpec([None, None], tf.int32, name="suppress"),
        tf.TensorSpec([], tf.int32, name="beam_size"),
    ]
    module = tf.Module()
    module.search = tf.function(search, input_signature=spec, autograph=False)
    tf.saved_model.save(module, str(tmp_path), signatures={"constrained": module.search})
    served = tf.saved_model.load(str(tmp_path)).signatures["constrained"]
    eager = search(h0, start, prefix, phrases, suppress, 3)
    out = served(
        h0=tf.constant(h0),
        start=tf.constant(start),
        prefix=tf.constant(prefix),
        phrases=tf.constant(phrases),
        suppress=tf.constant(suppress),
        beam_size=tf.constant(3),
    )
    for key, value in eager.items():
        np.testing.assert_allclose(out[key].numpy(), value.numpy(), atol=1e-5, err_msg=key)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(suppress_ids=np.zeros([0, 2], np.int32)),
        dict(suppress_ids=np.zeros([2, 0], np.int32)),
        dict(prefix_ids=np.zeros([2, 0], np.int32)),
        dict(prefix_ids=-np.ones([2, 3], np.int32)),
        dict(constraint_ids=np.zeros([2, 0, 0], np.int32)),
        dict(constraint_ids=np.zeros([2, 2, 0], np.int32)),
    ],
    ids=["S=0", "L=0", "P=0", "only-padding", "C=0", "phrases-L=0"],
)
def test_empty_arguments_change_nothing(kwargs):
    model = HashModel(6, 3, 5, seed=1)
    h0, start = tf.constant([3, 4]), tf.constant([1, 2])
    plain = beam_search(model.step_hash, h0, start, END, beam_size=2, max_length=5)
    out = beam_search(model.step_hash, h0, start, END, beam_size=2, max_length=5, **kwargs)
    for key in plain:
        np.testing.assert_allclose(out[key].numpy(), plain[key].numpy(), atol=1e-6)
    if "constraint_ids" in kwargs:
        assert out["constraints_met"].numpy().all()
