import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search, greedy_search, sample_search
from tests.decoding.toy import HashModel, log_softmax

END = 0


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): these tests build no Keras objects."""
    yield


def _numpy(out):
    return {key: value.numpy() for key, value in out.items()}


def _check_outputs(model, out, h0, start, mask, alpha, beta, gamma):
    """Padding, log-probs, alignments and scores recomputed by the NumPy twin."""
    for b in range(len(h0)):
        n = out["lengths"][b]
        y = out["sequences"][b, :n]
        assert 1 <= n <= model.max_length
        assert np.all(out["sequences"][b, n:] == END)
        assert np.all(y[:-1] != END) and (y[-1] == END or n == model.max_length)
        row_mask = None if mask is None else mask[b]
        log_prob, atts, score = model.reference(
            h0[b], start[b], list(y), row_mask, alpha, beta, gamma
        )
        np.testing.assert_allclose(out["log_probs"][b], log_prob, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["scores"][b], score, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["alignments"][b, :n], atts, atol=1e-6)
        assert np.all(out["alignments"][b, n:] == 0.0)


def test_greedy_is_the_argmax_path_with_documented_scores():
    model = HashModel(5, 3, 6, seed=11)
    h0 = np.array([4, 5, 6, 7, 8], np.int32)
    start = np.array([1, 2, 3, 4, 1], np.int32)
    mask = np.array([[1, 1, 1], [1, 0, 1], [1, 1, 0], [0, 1, 1], [1, 1, 1]], bool)
    out = _numpy(
        greedy_search(
            model.step_buffer,
            model.initial_buffer_state(h0),
            start,
            END,
            max_length=6,
            length_penalty=0.9,
            coverage_penalty=0.3,
            eos_penalty=0.2,
            source_mask=mask,
        )
    )
    assert out["sequences"].shape == (5, 6) and out["alignments"].shape == (5, 6, 3)
    _check_outputs(model, out, h0, start, mask, 0.9, 0.3, 0.2)
    for b in range(5):
        rows, _ = model.trace(h0[b], start[b], list(out["sequences"][b, : out["lengths"][b]]))
        for t, row in enumerate(rows):
            assert out["sequences"][b, t] == np.argmax(row)


def test_greedy_in_tf_function_and_xla():
    model = HashModel(5, 3, 5, seed=12)
    h0 = np.array([4, 5], np.int32)
    start = np.array([1, 2], np.int32)

    def decode():
        return greedy_search(
            model.step_hash, h0, start, END, max_length=5, length_penalty=0.5, coverage_penalty=0.2
        )

    eager = _numpy(decode())
    for jit in (False, True):
        got = _numpy(tf.function(decode, jit_compile=jit)())
        for key in eager:
            np.testing.assert_allclose(got[key], eager[key], rtol=1e-6, atol=1e-6)


def test_greedy_invalid_max_length():
    model = HashModel(4, 3, 3)
    with pytest.raises(ValueError, match="max_length"):
        greedy_search(model.step_hash, tf.constant([1]), [1], END, max_length=0)

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def decode(max_length):
        return greedy_search(model.step_hash, tf.constant([1]), [1], END, max_length=max_length)

    with pytest.raises(tf.errors.InvalidArgumentError, match="max_length"):
        decode(tf.constant(0))
    assert decode(tf.constant(2))["sequences"].shape == (1, 2)


def test_sampling_is_reproducible_and_scored_under_the_model():
    model = HashModel(6, 3, 6, seed=13, scale=1.0)
    h0 = np.arange(40, dtype=np.int32)
    start = np.ones(40, np.int32)
    kwargs = dict(
        max_length=6,
        temperature=1.5,
        top_k=4,
        length_penalty=0.5,
        coverage_penalty=0.1,
        eos_penalty=0.3,
    )
    a = _numpy(sample_search(model.step_hash, h0, start, END, seed=7, **kwargs))
    b = _numpy(sample_search(model.step_hash, h0, start, END, seed=7, **kwargs))
    c = _numpy(sample_search(model.step_hash, h0, start, END, seed=8, **kwargs))
    np.testing.assert_array_equal(a["sequences"], b["sequences"])
    assert not np.array_equal(a["sequences"], c["sequences"])
    _check_outputs(model, a, h0, start, None, 0.5, 0.1, 0.3)
    # top_k=4 of 6: the two least likely tokens are never drawn
    for row in range(40):
        n = a["lengths"][row]
        rows, _ = model.trace(h0[row], start[row], list(a["sequences"][row, :n]))
        for t, logp in enumerate(rows):
            assert a["sequences"][row, t] in np.argsort(-logp)[:4]
    # tf.function with a tensor seed gives the eager samples
    fn = tf.function(
        lambda seed: sample_search(model.step_hash, h0, start, END, seed=seed, **kwargs)
    )
    got = _numpy(fn(tf.constant([0, 7], tf.int32)))
    np.testing.assert_array_equal(got["sequences"], a["sequences"])


def test_sampling_top_k_one_is_greedy():
    model = HashModel(6, 3, 5, seed=14)
    h0 = np.arange(6, dtype=np.int32)
    start = np.full(6, 2, np.int32)
    greedy = _numpy(greedy_search(model.step_hash, h0, start, END, max_length=5))
    sampled = _numpy(
        sample_search(
            model.step_hash, h0, start, END, max_length=5, top_k=1, temperature=3.0, seed=1
        )
    )
    for key in greedy:
        np.testing.assert_allclose(sampled[key], greedy[key], rtol=1e-6)


@pytest.mark.parametrize("xla", [False, True], ids=["graph", "xla"])
def test_sampling_distribution_follows_temperature_and_top_k(xla):
    logits = np.array([0.5, 2.0, -1.0, 1.0, 0.0], np.float32)
    n, temperature, top_k = 6000, 0.7, 3

    def step(tokens, state, step):
        return tf.tile(logits[None], [tf.shape(tokens)[0], 1]), state, None

    def search(seed):
        return sample_search(
            step,
            tf.zeros([n]),
            tf.ones([n], tf.int32),
            END,
            max_length=1,
            temperature=temperature,
            top_k=top_k,
            seed=seed,
        )

    if xla:  # Gumbel-max over keras_attn.layers.rng's fused draws
        fn = tf.function(search, jit_compile=True)
        out = _numpy(fn(tf.constant([0, 3], tf.int32)))
        again = _numpy(fn(tf.constant([0, 3], tf.int32)))
        other = _numpy(fn(tf.constant([0, 4], tf.int32)))
        np.testing.assert_array_equal(out["sequences"], again["sequences"])
        assert not np.array_equal(out["sequences"], other["sequences"])
    else:
        out = _numpy(search(3))
    keep = np.argsort(-logits)[:top_k]
    p = np.zeros(5)
    p[keep] = np.exp(logits[keep] / temperature)
    p /= p.sum()
    freq = np.bincount(out["sequences"][:, 0], minlength=5) / n
    np.testing.assert_allclose(freq, p, atol=4 * np.sqrt(0.25 / n))
    # the reported log-prob is the model's own (temperature 1, no top-k)
    np.testing.assert_allclose(
        out["log_probs"], log_softmax(logits)[out["sequences"][:, 0]], rtol=1e-5
    )
    assert np.all(out["scores"] == out["log_probs"])  # |Y| = 1, no penalties


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(temperature=0.0), "temperature"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_k=-1), "top_k"),
        (dict(max_length=0), "max_length"),
    ],
)
def test_sampling_invalid_arguments(kwargs, name):
    model = HashModel(4, 3, 3)
    with pytest.raises(ValueError, match=name):
        sample_search(model.step_hash, tf.constant([1]), [1], END, **kwargs)


@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_report_invalid_returns_the_nan_check_under_xla(search):
    """XLA drops assertions: `report_invalid=True` returns the NaN check as `"invalid"`,
    True from the step that returns a NaN logit on; without it the keys are the usual ones."""

    def make(bad_step):
        def step(tokens, state, t):
            logits = tf.one_hot(tokens % 5, 5) + tf.zeros([tf.shape(tokens)[0], 1])
            nan = tf.where(t >= bad_step, np.float32("nan"), np.float32(0.0))
            return logits + nan, state, None

        return step

    def run(bad_step, report):
        fn = tf.function(
            lambda: search(
                make(bad_step),
                tf.zeros([2]),
                tf.constant([1, 2]),
                -1,
                max_length=3,
                report_invalid=report,
            ),
            jit_compile=True,
        )
        return fn()

    assert bool(run(2, True)["invalid"])  # the last step only
    assert not bool(run(5, True)["invalid"])  # never
    assert "invalid" not in run(2, False)
