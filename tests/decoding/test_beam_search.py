import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search, greedy_search
from tests.decoding.toy import HashModel

END = 0


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): these tests build no Keras objects."""
    yield


PENALTIES = [
    (0.0, 0.0, 0.0),
    (1.2, 0.0, 0.0),
    (0.0, 0.5, 0.0),
    (0.0, 0.0, 0.7),
    (0.6, 0.3, -0.4),
]


def _numpy(out):
    return {key: value.numpy() for key, value in out.items()}


def _check_against_reference(model, out, h0, start, mask, alpha, beta, gamma):
    """Every returned hypothesis: padding, log-prob, alignments and score recomputed."""
    seqs, lengths = out["sequences"], out["lengths"]
    batch, k, t = seqs.shape
    assert t == model.max_length
    for b in range(batch):
        row_mask = None if mask is None else mask[b]
        scores = out["scores"][b]
        real = np.isfinite(scores)
        assert np.all(np.diff(scores[real]) <= 0), scores  # best first
        assert np.all(~real[np.argmax(~real) :]) if (~real).any() else True
        for j in np.flatnonzero(real):
            n = lengths[b, j]
            y = seqs[b, j, :n]
            assert 1 <= n <= t
            assert np.all(seqs[b, j, n:] == END)
            assert np.all(y[:-1] != END)
            assert y[-1] == END or n == t
            log_prob, atts, score = model.reference(
                h0[b], start[b], list(y), row_mask, alpha, beta, gamma
            )
            np.testing.assert_allclose(out["log_probs"][b, j], log_prob, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out["scores"][b, j], score, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out["alignments"][b, j, :n], atts, atol=1e-6)
            assert np.all(out["alignments"][b, j, n:] == 0.0)


@pytest.mark.parametrize("alpha,beta,gamma", PENALTIES)
@pytest.mark.parametrize("stateful", ["hash", "buffer"])
def test_exhaustive_beam_equals_brute_force(alpha, beta, gamma, stateful):
    vocab, width, length = 4, 3, 3
    model = HashModel(vocab, width, length, seed=1)
    h0 = np.array([5, 17], np.int32)
    start = np.array([1, 2], np.int32)
    mask = np.array([[True, True, True], [True, False, True]])
    k = vocab**length  # more beams than hypotheses: nothing is ever pruned
    if stateful == "hash":
        step, init = model.step_hash, tf.constant(h0)
    else:
        step, init = model.step_buffer, model.initial_buffer_state(h0)
    out = _numpy(
        beam_search(
            step,
            init,
            start,
            END,
            beam_size=k,
            max_length=length,
            length_penalty=alpha,
            coverage_penalty=beta,
            eos_penalty=gamma,
            source_mask=mask,
        )
    )
    assert out["sequences"].shape == (2, k, length)
    assert out["alignments"].shape == (2, k, length, width)
    for b in range(2):
        expected = model.brute_force(h0[b], start[b], END, mask[b], alpha, beta, gamma)
        n = len(expected)  # 1 + 3 + 9 + 27 complete hypotheses
        assert n == 40
        for j, (score, log_prob, y) in enumerate(expected):
            padded = y + [END] * (length - len(y))
            np.testing.assert_array_equal(out["sequences"][b, j], padded)
            assert out["lengths"][b, j] == len(y)
            np.testing.assert_allclose(out["scores"][b, j], score, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out["log_probs"][b, j], log_prob, rtol=1e-5, atol=1e-5)
        # the surplus rows are empty
        assert np.all(out["scores"][b, n:] == -np.inf)
        assert np.all(out["log_probs"][b, n:] == -np.inf)
        assert np.all(out["lengths"][b, n:] == 0)
        assert np.all(out["sequences"][b, n:] == END)
        assert np.all(out["alignments"][b, n:] == 0.0)


@pytest.mark.parametrize("alpha,beta,gamma", PENALTIES)
def test_returned_scores_are_the_documented_score(alpha, beta, gamma):
    model = HashModel(6, 5, 7, seed=2)
    h0 = np.array([3, 40, 99], np.int32)
    start = np.array([1, 1, 4], np.int32)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 1, 1, 1, 1]], bool)
    out = _numpy(
        beam_search(
            model.step_buffer,
            model.initial_buffer_state(h0),
            start,
            END,
            beam_size=3,
            max_length=7,
            length_penalty=alpha,
            coverage_penalty=beta,
            eos_penalty=gamma,
            source_mask=mask,
        )
    )
    assert np.all(np.isfinite(out["scores"]))  # 3 beams << hypothesis space
    _check_against_reference(model, out, h0, start, mask, alpha, beta, gamma)


def test_no_mask_means_every_source_position_counts():
    model = HashModel(5, 4, 5, seed=3)
    h0 = np.array([8, 9], np.int32)
    start = np.array([1, 2], np.int32)
    out = _numpy(
        beam_search(
            model.step_hash,
            h0,
            start,
            END,
            beam_size=3,
            max_length=5,
            length_penalty=0.5,
            coverage_penalty=0.4,
            eos_penalty=0.3,
        )
    )
    _check_against_reference(model, out, h0, start, None, 0.5, 0.4, 0.3)


def test_step_without_attention():
    """No attention: no alignments, cp = 0; |X| from source_mask, else 0 (ep = 0)."""
    model = HashModel(5, 4, 5, seed=4)
    h0 = np.array([8, 9], np.int32)
    start = np.array([1, 2], np.int32)

    def step(tokens, state, step):
        logits, state, _ = model.step_hash(tokens, state, step)
        return logits, state, None

    for mask in (None, np.array([[1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 1]], bool)):
        out = _numpy(
            beam_search(
                step,
                h0,
                start,
                END,
                beam_size=3,
                max_length=5,
                length_penalty=0.7,
                coverage_penalty=5.0,
                eos_penalty=0.9,
                source_mask=mask,
            )
        )
        assert "alignments" not in out
        for b in range(2):
            for j in range(3):
                n = out["lengths"][b, j]
                rows, _ = model.trace(h0[b], start[b], list(out["sequences"][b, j, :n]))
                log_prob = sum(r[t] for r, t in zip(rows, out["sequences"][b, j, :n]))
                source_len = 0.0 if mask is None else mask[b].sum()
                expected = log_prob / ((5.0 + n) / 6.0) ** 0.7 + 0.9 * source_len / n
                np.testing.assert_allclose(out["scores"][b, j], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("alpha,beta,gamma", [(0.0, 0.0, 0.0), (0.8, 0.4, 0.3)])
@pytest.mark.parametrize("stateful", ["hash", "buffer"])
def test_beam_size_one_equals_greedy(alpha, beta, gamma, stateful):
    model = HashModel(7, 4, 8, seed=5)
    h0 = np.array([1, 2, 3, 4], np.int32)
    start = np.array([1, 3, 3, 2], np.int32)
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 1, 1]], bool)
    if stateful == "hash":
        step, init = model.step_hash, tf.constant(h0)
    else:
        step, init = model.step_buffer, model.initial_buffer_state(h0)
    kwargs = dict(
        max_length=8,
        length_penalty=alpha,
        coverage_penalty=beta,
        eos_penalty=gamma,
        source_mask=mask,
    )
    beam = _numpy(beam_search(step, init, start, END, beam_size=1, **kwargs))
    greedy = _numpy(greedy_search(step, init, start, END, **kwargs))
    np.testing.assert_array_equal(beam["sequences"][:, 0], greedy["sequences"])
    np.testing.assert_array_equal(beam["lengths"][:, 0], greedy["lengths"])
    np.testing.assert_allclose(beam["scores"][:, 0], greedy["scores"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(beam["log_probs"][:, 0], greedy["log_probs"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(beam["alignments"][:, 0], greedy["alignments"], atol=1e-7)
    # and greedy is the argmax path of the NumPy twin
    for b in range(4):
        h, prev = h0[b], start[b]
        for t in range(greedy["lengths"][b]):
            h = model.np_hash(h, prev)
            prev = int(np.argmax(model.logits[h]))
            assert greedy["sequences"][b, t] == prev


def test_rows_decoded_together_equal_rows_decoded_alone():
    model = HashModel(6, 4, 6, seed=6)
    h0 = np.array([11, 12, 13], np.int32)
    start = np.array([1, 2, 3], np.int32)
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 1, 1]], bool)
    kwargs = dict(
        beam_size=4, max_length=6, length_penalty=0.6, coverage_penalty=0.2, eos_penalty=0.1
    )
    together = _numpy(
        beam_search(
            model.step_buffer,
            model.initial_buffer_state(h0),
            start,
            END,
            source_mask=mask,
            **kwargs,
        )
    )
    for b in range(3):
        alone = _numpy(
            beam_search(
                model.step_buffer,
                model.initial_buffer_state(h0[b : b + 1]),
                start[b : b + 1],
                END,
                source_mask=mask[b : b + 1],
                **kwargs,
            )
        )
        for key in ("sequences", "lengths"):
            np.testing.assert_array_equal(together[key][b], alone[key][0])
        for key in ("scores", "log_probs", "alignments"):
            np.testing.assert_allclose(together[key][b], alone[key][0], rtol=1e-6, atol=1e-6)


def test_finished_hypotheses_are_frozen():
    """Hand-computed: p = (.5, .3, .2) with token 0 the end; after the end a
    step would put 98% on token 1, so a search that kept extending finished
    hypotheses would append it."""
    normal = np.log([0.5, 0.3, 0.2]).astype(np.float32)
    after_end = np.log([0.01, 0.98, 0.01]).astype(np.float32)

    def step(tokens, state, step):
        fed_end = tf.logical_and(tf.equal(tokens, END), step > 0)[:, None]
        logits = tf.where(fed_end, after_end[None], normal[None])
        return logits, state + 1, None

    out = _numpy(beam_search(step, tf.zeros([1], tf.int32), [2], END, beam_size=2, max_length=3))
    # step 0: [0] -0.69 (finished), [1] -1.20; step 1: [0] stays, [1 0] -1.90 beats [1 1] -2.41
    np.testing.assert_array_equal(out["sequences"][0], [[0, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(out["lengths"][0], [1, 2])
    expected = [np.log(0.5), np.log(0.3) + np.log(0.5)]
    np.testing.assert_allclose(out["log_probs"][0], expected, rtol=1e-6)
    np.testing.assert_allclose(out["scores"][0], expected, rtol=1e-6)

    # length penalty: the finished [0] keeps |Y| = 1 (lp = 1) while [1 0] is divided by lp(2)
    out = _numpy(
        beam_search(
            step, tf.zeros([1], tf.int32), [2], END, beam_size=2, max_length=3, length_penalty=2.0
        )
    )
    lp2 = (7.0 / 6.0) ** 2
    np.testing.assert_array_equal(out["lengths"][0], [1, 2])
    np.testing.assert_allclose(out["scores"][0], [expected[0], expected[1] / lp2], rtol=1e-6)


def test_max_length_finishes_hypotheses_and_impossible_tokens():
    """The end token's logit is -inf: every hypothesis is finished by max_length;
    with 2 possible tokens and beam 5 at max_length 1, three rows stay empty."""
    logits = np.array([-np.inf, 0.0, np.log(3.0)], np.float32)

    def step(tokens, state, step):
        return tf.tile(logits[None], [tf.shape(tokens)[0], 1]), state, None

    out = _numpy(
        beam_search(step, tf.zeros([2]), [1, 1], END, beam_size=3, max_length=4, length_penalty=1.0)
    )
    assert np.all(out["lengths"] == 4)
    assert np.all(out["sequences"] != END)
    lp = np.log([0.25, 0.75])
    for b in range(2):
        for j in range(3):
            y = out["sequences"][b, j]
            log_prob = lp[y - 1].sum()
            np.testing.assert_allclose(out["log_probs"][b, j], log_prob, rtol=1e-6)
            np.testing.assert_allclose(out["scores"][b, j], log_prob / (9.0 / 6.0), rtol=1e-6)
    np.testing.assert_array_equal(out["sequences"][0, 0], [2, 2, 2, 2])

    out = _numpy(beam_search(step, tf.zeros([1]), [1], END, beam_size=5, max_length=1))
    np.testing.assert_array_equal(out["sequences"][0, :, 0], [2, 1, END, END, END])
    np.testing.assert_array_equal(out["lengths"][0], [1, 1, 0, 0, 0])
    np.testing.assert_allclose(out["scores"][0, :2], np.log([0.75, 0.25]), rtol=1e-6)
    assert np.all(out["scores"][0, 2:] == -np.inf)
    assert not np.any(np.isnan(out["scores"]))


def _decode(model, h0, start, mask, beam_size, max_length, alpha, beta, gamma):
    return beam_search(
        model.step_buffer,
        model.initial_buffer_state(h0),
        start,
        END,
        beam_size=beam_size,
        max_length=max_length,
        length_penalty=alpha,
        coverage_penalty=beta,
        eos_penalty=gamma,
        source_mask=mask,
    )


def _assert_same(a, b):
    a, b = _numpy(a), _numpy(b)
    assert sorted(a) == sorted(b)
    for key in ("sequences", "lengths"):
        np.testing.assert_array_equal(a[key], b[key])
    for key in ("scores", "log_probs", "alignments"):
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-5)


def test_tf_function_and_xla_equal_eager():
    model = HashModel(5, 4, 4, seed=7)
    h0 = np.array([1, 50], np.int32)
    start = np.array([2, 3], np.int32)
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    args = (model, h0, start, mask, 3, 4, 0.6, 0.3, 0.2)

    def decode():
        return _decode(*args)

    eager = decode()
    _check_against_reference(model, _numpy(eager), h0, start, mask, 0.6, 0.3, 0.2)
    _assert_same(eager, tf.function(decode)())
    _assert_same(eager, tf.function(decode, jit_compile=True)())


def test_runtime_tensor_arguments_inside_tf_function():
    """beam_size, max_length and the penalties as run-time tensors (dynamic beam axis)."""
    model = HashModel(6, 4, 6, seed=8)
    h0 = np.array([1, 50, 7], np.int32)
    start = np.array([2, 3, 1], np.int32)
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [0, 1, 1, 1]], bool)
    spec = tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int32)
    fspec = (tf.TensorSpec([], tf.float32),) * 3

    @tf.function(input_signature=spec + fspec)
    def decode(beam_size, max_length, alpha, beta, gamma):
        # the buffer model preallocates 6 columns; max_length <= 6 here
        return _decode(model, h0, start, mask, beam_size, max_length, alpha, beta, gamma)

    for beam_size, max_length, alpha, beta, gamma in [
        (1, 6, 0.0, 0.0, 0.0),
        (3, 6, 0.6, 0.3, 0.2),
        (5, 4, 1.0, 0.0, 0.5),
    ]:
        got = decode(
            tf.constant(beam_size),
            tf.constant(max_length),
            tf.constant(alpha),
            tf.constant(beta),
            tf.constant(gamma),
        )
        assert got["sequences"].shape == (3, beam_size, max_length)
        _assert_same(
            got, _decode(model, h0, start, mask, beam_size, max_length, alpha, beta, gamma)
        )


def test_exported_saved_model(tmp_path):
    model = HashModel(6, 4, 6, seed=9)
    h0 = np.array([1, 50], np.int32)

    class Decoder(tf.Module):
        def __init__(self):
            super().__init__()
            self.table = tf.Variable(model.logits)
            self.att = tf.Variable(model.attention)

        @tf.function(
            input_signature=[
                tf.TensorSpec([None], tf.int32),
                tf.TensorSpec([], tf.int32),
                tf.TensorSpec([], tf.int32),
                tf.TensorSpec([], tf.float32),
                tf.TensorSpec([], tf.float32),
            ]
        )
        def decode(self, h, beam_size, max_length, alpha, beta):
            def step(tokens, state, step):
                new = (31 * state + tokens + 1) % 211
                return tf.gather(self.table, new), new, tf.gather(self.att, new)

            return beam_search(
                step,
                h,
                tf.fill(tf.shape(h), 2),
                END,
                beam_size=beam_size,
                max_length=max_length,
                length_penalty=alpha,
                coverage_penalty=beta,
            )

    module = Decoder()
    tf.saved_model.save(module, str(tmp_path / "decoder"))
    loaded = tf.saved_model.load(str(tmp_path / "decoder"))
    got = loaded.decode(
        tf.constant(h0), tf.constant(4), tf.constant(5), tf.constant(0.5), tf.constant(0.2)
    )
    want = beam_search(
        model.step_hash,
        h0,
        [2, 2],
        END,
        beam_size=4,
        max_length=5,
        length_penalty=0.5,
        coverage_penalty=0.2,
    )
    _assert_same(got, want)
    # the exported search checks its knobs' ranges at run time (docs/decoding.md)
    with pytest.raises(tf.errors.InvalidArgumentError, match="length_penalty"):
        loaded.decode(
            tf.constant(h0), tf.constant(4), tf.constant(5), tf.constant(-1000.0), tf.constant(0.2)
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match="beam_size"):
        loaded.decode(
            tf.constant(h0), tf.constant(0), tf.constant(5), tf.constant(0.5), tf.constant(0.2)
        )


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(beam_size=0), "beam_size"),
        (dict(beam_size=-2), "beam_size"),
        (dict(beam_size=2.5), "beam_size"),
        (dict(beam_size=True), "beam_size"),
        (dict(max_length=0), "max_length"),
        (dict(max_length=-1), "max_length"),
        (dict(beam_size=tf.constant(0)), "beam_size"),
    ],
)
def test_invalid_arguments_eager(kwargs, name):
    model = HashModel(4, 3, 3)
    with pytest.raises(ValueError, match=name):
        beam_search(model.step_hash, tf.constant([1]), [1], END, **kwargs)


@pytest.mark.parametrize("beam_size,max_length,name", [(0, 3, "beam_size"), (2, 0, "max_length")])
def test_invalid_arguments_graph(beam_size, max_length, name):
    model = HashModel(4, 3, 3)

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)] * 2)
    def decode(beam_size, max_length):
        return beam_search(
            model.step_hash, tf.constant([1]), [1], END, beam_size=beam_size, max_length=max_length
        )

    with pytest.raises(tf.errors.InvalidArgumentError, match=name):
        decode(tf.constant(beam_size), tf.constant(max_length))
    # valid values run
    assert decode(tf.constant(2), tf.constant(3))["sequences"].shape == (1, 2, 3)


def test_empty_batch_and_an_end_token_that_never_comes():
    model = HashModel(5, 3, 4, seed=10)
    out = beam_search(
        model.step_hash,
        np.zeros([0], np.int32),
        np.zeros([0], np.int32),
        END,
        beam_size=2,
        max_length=4,
    )
    assert out["sequences"].shape == (0, 2, 4) and out["alignments"].shape == (0, 2, 4, 3)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
    def decode(h):
        return greedy_search(model.step_hash, h, tf.ones_like(h), END, max_length=4)

    assert decode(np.zeros([0], np.int32))["sequences"].shape == (0, 4)

    # end_token -1: every hypothesis runs to max_length; an exhaustive beam
    # (27 beams, 3**3 sequences) returns all of them, ranked as brute force ranks them
    small = HashModel(3, 3, 3, seed=10)
    out = _numpy(
        beam_search(
            small.step_hash,
            np.array([7], np.int32),
            [2],
            -1,
            beam_size=27,
            max_length=3,
            length_penalty=0.5,
        )
    )
    assert np.all(out["lengths"] == 3)
    scored = sorted(
        (
            (small.reference(7, 2, list(y), None, 0.5, 0.0, 0.0)[2], list(y))
            for y in np.ndindex(3, 3, 3)
        ),
        key=lambda item: -item[0],
    )
    assert [list(y) for y in out["sequences"][0]] == [y for _, y in scored]
    np.testing.assert_allclose(out["scores"][0], [s for s, _ in scored], rtol=1e-5)


def test_state_passed_through_is_not_gathered():
    """A state leaf the step returns unchanged (here `h0`) is not gathered along the parents
    (it was tiled: every beam of an example holds the same value); the answer is the same."""
    model = HashModel(5, 4, 4, seed=3)
    h0 = np.array([1, 50], np.int32)
    start = np.array([2, 3], np.int32)

    def copying_step(tokens, state, step):  # the same step, `h0` returned as a new tensor
        logits, new_state, attention = model.step_buffer(tokens, state, step)
        return logits, dict(new_state, h0=tf.identity(new_state["h0"])), attention

    def traced(step_fn):
        fn = tf.function(
            lambda: beam_search(
                step_fn,
                model.initial_buffer_state(h0),
                tf.constant(start),
                END,
                beam_size=3,
                max_length=4,
            )
        )
        library = fn.get_concrete_function().graph.as_graph_def().library
        body = [f for f in library.function if "while_body" in f.signature.name]
        gathers = sum(node.op == "GatherV2" for f in body for node in f.node_def)
        return _numpy(fn()), gathers

    passed, passed_gathers = traced(model.step_buffer)
    copied, copied_gathers = traced(copying_step)
    assert passed_gathers == copied_gathers - 1
    for key in passed:
        np.testing.assert_array_equal(passed[key], copied[key])
