"""`forced_search`: the model's log-probability of given sequences (teacher forcing through the
step function), checked against the NumPy twin of the toy model, against the searches' own
answers, and for what it refuses."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search, forced_search, greedy_search
from tests.decoding.toy import HashModel

END = 0


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): these tests build no Keras objects."""
    yield


def _numpy(out):
    return {key: np.asarray(value) for key, value in out.items()}


def _padded(rows, width):
    out = np.full([len(rows), width], -1, np.int32)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return out


@pytest.mark.parametrize("jit", [None, False, True])
def test_log_probs_and_scores_are_the_written_out_ones(jit):
    max_length = 6
    model = HashModel(6, 3, max_length, seed=5)
    h0 = np.array([4, 5, 6, 7], np.int32)
    start = np.array([1, 2, 3, 1], np.int32)
    mask = np.array([[1, 1, 1], [1, 0, 1], [1, 1, 0], [1, 1, 1]], bool)
    # a row of 2, of none (the end token alone), of max_length - 1 (the longest that ends)
    # and one too long: cut at max_length tokens without its end
    rows = [[3, 4], [], [5, 5, 1, 2, 3], [1, 2, 3, 4, 5, 1, 2]]
    targets = _padded(rows, 7)

    def decode():
        return forced_search(
            model.step_buffer,
            model.initial_buffer_state(h0),
            start,
            END,
            targets=targets,
            max_length=max_length,
            length_penalty=0.7,
            coverage_penalty=0.2,
            source_mask=mask,
        )

    out = _numpy(decode() if jit is None else tf.function(decode, jit_compile=jit)())
    for b, row in enumerate(rows):
        ended = len(row) + 1 <= max_length
        tokens = row + [END] if ended else row[:max_length]
        n = len(tokens)
        assert out["lengths"][b] == n
        np.testing.assert_array_equal(out["sequences"][b, :n], tokens)
        log_prob, atts, score = model.reference(h0[b], start[b], tokens, mask[b], 0.7, 0.2, 0.0)
        np.testing.assert_allclose(out["log_probs"][b], log_prob, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["scores"][b], score, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["alignments"][b, :n], atts, atol=1e-6)


def test_the_searches_answers_are_scored_as_the_searches_scored_them():
    model = HashModel(5, 3, 6, seed=8)
    h0 = np.array([4, 5, 6], np.int32)
    start = np.array([1, 2, 3], np.int32)
    for search, knobs in ((greedy_search, {}), (beam_search, {"beam_size": 3})):
        out = _numpy(search(model.step_hash, h0, start, END, max_length=6, **knobs))
        sequences, lengths, log_probs = out["sequences"], out["lengths"], out["log_probs"]
        if search is beam_search:  # the best of each beam
            sequences, lengths, log_probs = sequences[:, 0], lengths[:, 0], log_probs[:, 0]
        # without its end token where it has one (a row may run to max_length without)
        rows = [list(s[: n - 1] if s[n - 1] == END else s[:n]) for s, n in zip(sequences, lengths)]
        if search is greedy_search:
            assert any(s[n - 1] != END for s, n in zip(sequences, lengths))
        forced = _numpy(
            forced_search(model.step_hash, h0, start, END, targets=_padded(rows, 6), max_length=6)
        )
        np.testing.assert_array_equal(forced["lengths"], lengths)
        np.testing.assert_allclose(forced["log_probs"], log_probs, rtol=1e-5, atol=1e-5)


def test_what_it_refuses():
    model = HashModel(5, 3, 4)
    h0, start = np.array([4], np.int32), np.array([1], np.int32)
    with pytest.raises(ValueError, match="end token"):
        forced_search(model.step_hash, h0, start, -1, targets=[[1]], max_length=4)
    with pytest.raises(ValueError, match=r"constraints.*prefix_ids"):
        forced_search(
            model.step_hash, h0, start, END, targets=[[1]], max_length=4, prefix_ids=[[1]]
        )
    with pytest.raises(ValueError, match="targets"):
        forced_search(model.step_hash, h0, start, END, targets=[1, 2], max_length=4)
    with pytest.raises(ValueError, match="targets"):
        forced_search(model.step_hash, h0, start, END, targets=[[1], [2]], max_length=4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="targets"):
        forced_search(model.step_hash, h0, start, END, targets=[[1, 9]], max_length=4)

    # an end token known only when it runs: checked then
    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def forced(end):
        return forced_search(model.step_hash, h0, start, end, targets=[[1]], max_length=4)

    with pytest.raises(tf.errors.InvalidArgumentError, match="end token"):
        forced(tf.constant(-1))
    assert forced(tf.constant(END))["lengths"].numpy().tolist() == [2]
    with pytest.raises(ValueError, match="beam_size"):
        forced_search(model.step_hash, h0, start, END, targets=[[1]], max_length=4, beam_size=2)
