"""Decoding controls (docs/decoding.md, "Controls") held as properties, each against a
NumPy reference written out here: n-gram blocking, min_length, CTRL's repetition penalty,
nucleus sampling; equal eagerly, in tf.function and under XLA; rows independent."""

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


def _rows(out):
    """Every real returned hypothesis as a token list (up to and including the end token)."""
    seqs, lengths = out["sequences"], out["lengths"]
    if seqs.ndim == 2:
        seqs, lengths = seqs[:, None], lengths[:, None]
    return [
        list(seqs[b, j, : lengths[b, j]])
        for b in range(seqs.shape[0])
        for j in range(seqs.shape[1])
        if lengths[b, j] > 0
    ]


def _repeats_ngram(y, n):
    grams = [tuple(y[i : i + n]) for i in range(len(y) - n + 1)]
    return len(grams) != len(set(grams))


def _search(kind, model, h0, start, **kwargs):
    step = model.step_hash
    if kind == "beam":
        return beam_search(step, h0, start, END, beam_size=3, **kwargs)
    if kind == "greedy":
        return greedy_search(step, h0, start, END, **kwargs)
    return sample_search(step, h0, start, END, seed=5, **kwargs)


# A small vocabulary and a peaked distribution: without blocking, repeats are common.
MODEL = HashModel(5, 3, 12, seed=21, scale=3.0)
H0 = np.arange(0, 60, 3, dtype=np.int32)
START = np.ones(len(H0), np.int32)


@pytest.mark.parametrize("kind", ["beam", "greedy", "sample"])
@pytest.mark.parametrize("n", [1, 2])
def test_no_returned_sequence_repeats_an_ngram(kind, n):
    base = _numpy(_search(kind, MODEL, H0, START, max_length=12))
    assert any(_repeats_ngram(y, n) for y in _rows(base))  # the property is not vacuous
    out = _numpy(_search(kind, MODEL, H0, START, max_length=12, no_repeat_ngram_size=n))
    rows = _rows(out)
    assert len(rows) >= len(H0)  # every example still has an answer
    for y in rows:
        assert not _repeats_ngram(y, n), (n, y)


@pytest.mark.parametrize("kind", ["beam", "greedy", "sample"])
def test_no_hypothesis_ends_before_min_length(kind):
    model = HashModel(5, 3, 8, seed=22, scale=2.0)
    base = _numpy(_search(kind, model, H0, START, max_length=8))
    assert any(len(y) < 5 and y[-1] == END for y in _rows(base))
    out = _numpy(_search(kind, model, H0, START, max_length=8, min_length=4))
    for y in _rows(out):
        assert END not in y[:-1]
        assert y[-1] != END or len(y) - 1 >= 4, y
    # and the log-probs stay the model's own: banning does not renormalise
    for b in range(len(H0)):
        seq = out["sequences"][b] if out["sequences"].ndim == 2 else out["sequences"][b, 0]
        n = out["lengths"][b] if out["lengths"].ndim == 1 else out["lengths"][b, 0]
        rows, _ = model.trace(H0[b], START[b], list(seq[:n]))
        want = sum(r[t] for r, t in zip(rows, seq[:n]))
        got = out["log_probs"][b] if out["log_probs"].ndim == 1 else out["log_probs"][b, 0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _ctrl_greedy(model, h0, start, penalty, length):
    """Greedy in NumPy with CTRL's penalty: logit / p if > 0 else logit * p on generated tokens."""
    h, prev, out, log_prob = h0, start, [], 0.0
    for _ in range(length):
        h = model.np_hash(h, prev)
        logits = model.logits[h].astype(np.float64).copy()
        for tok in set(out):
            logits[tok] = logits[tok] / penalty if logits[tok] > 0 else logits[tok] * penalty
        row = log_softmax(logits)
        prev = int(np.argmax(row))
        out.append(prev)
        log_prob += row[prev]
        if prev == END:
            break
    return out, log_prob


@pytest.mark.parametrize("penalty", [1.6, 0.6])
def test_repetition_penalty_changes_greedy_choices_as_ctrl_says(penalty):
    model = HashModel(6, 3, 10, seed=23, scale=1.0)
    h0 = np.arange(1, 80, 4, dtype=np.int32)
    start = np.full(len(h0), 2, np.int32)
    plain = _numpy(greedy_search(model.step_hash, h0, start, END, max_length=10))
    out = _numpy(
        greedy_search(model.step_hash, h0, start, END, max_length=10, repetition_penalty=penalty)
    )
    beam1 = _numpy(
        beam_search(
            model.step_hash, h0, start, END, beam_size=1, max_length=10, repetition_penalty=penalty
        )
    )
    assert not np.array_equal(plain["sequences"], out["sequences"])  # it changed choices
    for b in range(len(h0)):
        want, log_prob = _ctrl_greedy(model, h0[b], start[b], penalty, 10)
        n = out["lengths"][b]
        assert list(out["sequences"][b, :n]) == want
        np.testing.assert_allclose(out["log_probs"][b], log_prob, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(beam1["sequences"][:, 0], out["sequences"])
    np.testing.assert_allclose(beam1["scores"][:, 0], out["scores"], rtol=1e-6, atol=1e-6)


def _nucleus(logits, temperature, top_k, top_p):
    """The truncated, renormalised distribution of docs/decoding.md, written out."""
    z = logits / temperature
    p = np.exp(z - z.max())
    order = np.argsort(-z, kind="stable")
    keep = np.zeros(len(z), bool)
    keep[order[:top_k]] = True
    p = np.where(keep, p, 0.0)
    p /= p.sum()
    total = 0.0
    nucleus = np.zeros(len(z), bool)
    for i in order:
        if total >= top_p or not keep[i]:
            break
        nucleus[i] = True
        total += p[i]
    p = np.where(nucleus, p, 0.0)
    return p / p.sum()


@pytest.mark.parametrize("xla", [False, True], ids=["graph", "xla"])
def test_nucleus_frequencies_match_the_truncated_distribution(xla):
    logits = np.array([1.0, 2.2, -0.5, 1.6, 0.3, 0.9], np.float32)
    n, temperature, top_k, top_p = 8000, 0.9, 5, 0.8

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
            top_p=top_p,
            seed=seed,
        )

    fn = tf.function(search, jit_compile=xla)
    out = _numpy(fn(tf.constant([0, 3], tf.int32)))
    again = _numpy(fn(tf.constant([0, 3], tf.int32)))
    np.testing.assert_array_equal(out["sequences"], again["sequences"])  # same seed, same samples
    p = _nucleus(logits.astype(np.float64), temperature, top_k, top_p)
    assert np.count_nonzero(p) == 3  # top_p cut the top-5 set to 3 tokens
    freq = np.bincount(out["sequences"][:, 0], minlength=len(logits)) / n
    # 5 standard deviations of a binomial frequency: fails by chance about once in 10^6
    np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / n) + 1e-12)
    assert np.all(freq[p == 0] == 0)


def _all_controls(kind, model, h0, start, ngram, min_length, penalty):
    kwargs = dict(
        max_length=10,
        no_repeat_ngram_size=ngram,
        min_length=min_length,
        repetition_penalty=penalty,
        bad_token_ids=[3],
        length_penalty=0.6,
    )
    if kind == "beam":
        return beam_search(
            model.step_buffer, model.initial_buffer_state(h0), start, END, beam_size=3, **kwargs
        )
    if kind == "greedy":
        return greedy_search(
            model.step_buffer, model.initial_buffer_state(h0), start, END, **kwargs
        )
    return sample_search(
        model.step_buffer, model.initial_buffer_state(h0), start, END, seed=4, top_p=0.9, **kwargs
    )


@pytest.mark.parametrize("kind", ["beam", "greedy", "sample"])
def test_controls_equal_eagerly_in_tf_function_and_under_xla(kind):
    model = HashModel(6, 3, 10, seed=24, scale=2.0)
    h0 = np.array([3, 14, 15, 92], np.int32)
    start = np.array([1, 2, 1, 2], np.int32)
    eager = _numpy(_all_controls(kind, model, h0, start, 2, 3, 1.3))
    for y in _rows(eager):
        assert 3 not in y and not _repeats_ngram(y, 2)
    spec = [tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float32)]
    dynamic = tf.function(
        lambda n, m, p: _all_controls(kind, model, h0, start, n, m, p), input_signature=spec
    )
    modes = [dynamic(tf.constant(2), tf.constant(3), tf.constant(1.3))]
    if kind != "sample":  # under XLA sampling draws from another generator (greedy.py)
        modes.append(
            tf.function(
                lambda: _all_controls(kind, model, h0, start, 2, 3, 1.3), jit_compile=True
            )()
        )
    for got in modes:
        got = _numpy(got)
        for key in eager:
            np.testing.assert_allclose(got[key], eager[key], rtol=1e-5, atol=1e-5)


def test_controls_keep_batch_rows_independent():
    model = HashModel(6, 3, 9, seed=25, scale=2.0)
    h0 = np.array([5, 6, 7], np.int32)
    start = np.array([1, 2, 3], np.int32)
    kwargs = dict(
        beam_size=3, max_length=9, no_repeat_ngram_size=2, min_length=2, repetition_penalty=1.4
    )
    together = _numpy(
        beam_search(model.step_buffer, model.initial_buffer_state(h0), start, END, **kwargs)
    )
    for b in range(3):
        alone = _numpy(
            beam_search(
                model.step_buffer,
                model.initial_buffer_state(h0[b : b + 1]),
                start[b : b + 1],
                END,
                **kwargs,
            )
        )
        np.testing.assert_array_equal(together["sequences"][b], alone["sequences"][0])
        np.testing.assert_allclose(together["scores"][b], alone["scores"][0], rtol=1e-6)


def test_bad_token_ids_are_never_generated_and_checked():
    out = _numpy(
        greedy_search(MODEL.step_hash, H0, START, END, max_length=12, bad_token_ids=[1, 2])
    )
    base = _numpy(greedy_search(MODEL.step_hash, H0, START, END, max_length=12))
    assert np.isin(base["sequences"], [1, 2]).any()
    assert not np.isin(out["sequences"], [1, 2]).any()
    with pytest.raises(ValueError, match="bad_token_ids"):
        greedy_search(MODEL.step_hash, H0, START, END, max_length=4, bad_token_ids=[5])
