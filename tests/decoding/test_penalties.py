import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import penalties


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): these tests build no Keras objects."""
    yield


def test_length_penalty():
    lengths = np.array([1, 2, 7, 30])
    for alpha in (0.0, 0.6, 1.0, 2.5):
        got = penalties.length_penalty(tf.constant(lengths), alpha).numpy()
        np.testing.assert_allclose(got, ((5.0 + lengths) / 6.0) ** alpha, rtol=1e-6)
    assert penalties.length_penalty(1, 3.0).numpy() == pytest.approx(1.0)


def test_coverage_penalty_clips_and_masks():
    coverage = np.array([[0.0, 0.5, 1.7, 1.0], [0.2, 0.3, 0.0, 2.0]], np.float32)
    mask = np.array([[True, True, True, False], [True, True, False, True]])
    beta = 0.4
    logs = np.log(np.clip(coverage, 1e-10, 1.0))
    np.testing.assert_allclose(
        penalties.coverage_penalty(coverage, beta).numpy(), beta * logs.sum(-1), rtol=1e-6
    )
    np.testing.assert_allclose(
        penalties.coverage_penalty(coverage, beta, mask).numpy(),
        beta * np.where(mask, logs, 0.0).sum(-1),
        rtol=1e-6,
    )
    # a zero coverage costs log(1e-10), never -inf or NaN
    assert penalties.coverage_penalty([[0.0]], 1.0).numpy()[0] == pytest.approx(np.log(1e-10))


def test_eos_penalty_and_score():
    log_probs = np.array([-1.5, -4.0, -0.2], np.float32)
    lengths = np.array([2, 5, 1])
    source = np.array([7.0, 3.0, 4.0], np.float32)
    cp = np.array([-0.3, 0.0, -1.2], np.float32)
    alpha, gamma = 0.8, 0.25
    np.testing.assert_allclose(
        penalties.eos_penalty(source, lengths, gamma).numpy(), gamma * source / lengths, rtol=1e-6
    )
    expected = log_probs / ((5.0 + lengths) / 6.0) ** alpha + cp + gamma * source / lengths
    got = penalties.score(log_probs, lengths, alpha, cp, source, gamma).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6)
