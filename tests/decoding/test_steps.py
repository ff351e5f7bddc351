"""Step functions of our decoders: cached == uncached, and every returned
hypothesis re-scored by running the layers teacher-forced outside the search."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search, greedy_search
from keras_attn.decoding.steps import rnn_step, transformer_step
from keras_attn.layers import (
    AttentionRNNCell,
    BahdanauAttention,
    LuongAttention,
    PositionalEncoding,
    TransformerDecoderLayer,
)

V, D, S, B, T = 9, 16, 5, 3, 6
START, END = 1, 0
MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 1, 1, 1]], bool)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _transformer(cross=True, num_layers=2):
    layers = [TransformerDecoderLayer(2, 24, cross_attention=cross) for _ in range(num_layers)]
    encoder = keras.random.normal((B, S, D), seed=3) if cross else None
    for layer in layers:
        layer(tf.zeros([B, 1, D]), encoder)
    embedding = keras.layers.Embedding(V, D)
    embedding.build((None,))
    output = keras.layers.Dense(V, kernel_initializer=keras.initializers.RandomNormal(stddev=0.5))
    output.build((None, D))
    return layers, embedding, output, PositionalEncoding(), encoder


def _teacher_forced_transformer(parts, b, y):
    """Full-sequence run of the stack on `[start, y_1..y_{L-1}]` (no cache)."""
    layers, embedding, output, pe, encoder = parts
    fed = np.array([[START] + list(y[:-1])], np.int32)
    x = pe(embedding(fed) * np.sqrt(D))
    for i, layer in enumerate(layers):
        x, scores = layer(
            x,
            encoder[b : b + 1],
            encoder_padding_mask=MASK[b : b + 1],
            return_attention_scores=True,
        )
    log_probs = _log_softmax(np.asarray(output(x))[0].astype(np.float64))
    return log_probs[np.arange(len(y)), y].sum(), np.asarray(scores)[0].mean(0)


def _search(parts, cached, beam_size, recompute="prefix", **kwargs):
    layers, embedding, output, pe, encoder = parts
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
        recompute=recompute,
    )
    start = tf.fill([B], START)
    if beam_size is None:
        return greedy_search(step, state, start, END, max_length=T, source_mask=MASK, **kwargs)
    return beam_search(
        step, state, start, END, beam_size=beam_size, max_length=T, source_mask=MASK, **kwargs
    )


def _assert_close(a, b, atol=1e-5):
    assert sorted(a) == sorted(b)
    np.testing.assert_array_equal(a["sequences"], b["sequences"])
    np.testing.assert_array_equal(a["lengths"], b["lengths"])
    for key in ("scores", "log_probs", "alignments"):
        np.testing.assert_allclose(a[key], b[key], atol=atol, rtol=atol)


def test_transformer_cached_equals_uncached_and_teacher_forcing():
    parts = _transformer()
    kwargs = dict(length_penalty=0.6, coverage_penalty=0.2, eos_penalty=0.1)
    cached = {k: v.numpy() for k, v in _search(parts, True, 3, **kwargs).items()}
    for recompute in ("prefix", "buffer"):
        uncached = _search(parts, False, 3, recompute=recompute, **kwargs)
        _assert_close(cached, {k: v.numpy() for k, v in uncached.items()})
    for b in range(B):
        for j in range(3):
            n = cached["lengths"][b, j]
            log_prob, att = _teacher_forced_transformer(parts, b, cached["sequences"][b, j, :n])
            np.testing.assert_allclose(cached["log_probs"][b, j], log_prob, atol=1e-4, rtol=1e-5)
            np.testing.assert_allclose(cached["alignments"][b, j, :n], att, atol=1e-5)
    greedy = {k: v.numpy() for k, v in _search(parts, True, None, **kwargs).items()}
    beam1 = {k: v.numpy()[:, 0] for k, v in _search(parts, True, 1, **kwargs).items()}
    _assert_close(greedy, beam1, atol=1e-6)


def test_junk_in_the_source_padding_never_reaches_a_cached_step():
    # The cross-attention caches are zeroed at the padding once, before the search; the
    # steps rely on it and do not zero them again.
    parts = _transformer(num_layers=1)
    clean = {k: v.numpy() for k, v in _search(parts, True, None).items()}
    dirty = np.array(parts[4])
    dirty[~MASK] = np.nan
    got = {k: v.numpy() for k, v in _search(parts[:4] + (tf.constant(dirty),), True, None).items()}
    assert np.all(np.isfinite(got["log_probs"])) and np.all(np.isfinite(got["alignments"]))
    _assert_close(clean, got, atol=1e-6)


def test_decoder_only_transformer_cached_equals_uncached():
    layers, embedding, output, pe, _ = _transformer(cross=False)
    results = []
    for cached, recompute in ((True, "prefix"), (False, "prefix"), (False, "buffer")):
        step, state = transformer_step(
            layers,
            embedding,
            output,
            positional_encoding=pe,
            max_length=T,
            batch_size=B,
            cached=cached,
            recompute=recompute,
        )
        out = beam_search(step, state, tf.constant([1, 2, 3]), END, beam_size=2, max_length=T)
        assert "alignments" not in out
        results.append({k: v.numpy() for k, v in out.items()})
    for other in results[1:]:
        np.testing.assert_array_equal(results[0]["sequences"], other["sequences"])
        np.testing.assert_allclose(results[0]["scores"], other["scores"], atol=1e-5)


def test_transformer_step_under_xla_and_runtime_beam_size():
    parts = _transformer(num_layers=1)
    eager = {k: v.numpy() for k, v in _search(parts, True, 2).items()}

    def decode():
        return _search(parts, True, 2)

    xla = {k: v.numpy() for k, v in tf.function(decode, jit_compile=True)().items()}
    _assert_close(eager, xla)

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def dynamic(beam_size):
        return _search(parts, True, beam_size)

    _assert_close(eager, {k: v.numpy() for k, v in dynamic(tf.constant(2)).items()})


def test_uncached_buffer_recompute_compiles_with_xla():
    parts = _transformer(num_layers=1)
    eager = {k: v.numpy() for k, v in _search(parts, True, 2).items()}
    xla = tf.function(lambda: _search(parts, False, 2, recompute="buffer"), jit_compile=True)()
    _assert_close(eager, {k: v.numpy() for k, v in xla.items()})


def test_bad_recompute_is_a_clear_error():
    layers, embedding, output, pe, encoder = _transformer(num_layers=1)
    with pytest.raises(ValueError, match="recompute"):
        transformer_step(
            layers,
            embedding,
            output,
            encoder,
            MASK,
            pe,
            max_length=T,
            cached=False,
            recompute="all",
        )


def _rnn(style):
    if style == "bahdanau":
        cell = AttentionRNNCell(keras.layers.GRUCell(D), BahdanauAttention(8), style="bahdanau")
    else:
        cell = AttentionRNNCell(
            keras.layers.LSTMCell(D), LuongAttention("general"), style="luong", input_feeding=True
        )
    memory = keras.random.normal((B, S, D), seed=4)
    cell.build((None, D), (None, S, D))
    embedding = keras.layers.Embedding(V, D)
    embedding.build((None,))
    output = keras.layers.Dense(V, kernel_initializer=keras.initializers.RandomNormal(stddev=0.7))
    output.build((None, cell.output_size))
    return cell, embedding, output, memory


@pytest.mark.parametrize("style", ["bahdanau", "luong"])
def test_rnn_step_matches_a_plain_loop_over_the_cell(style):
    cell, embedding, output, memory = _rnn(style)
    step, state = rnn_step(cell, embedding, output, memory, MASK)
    out = beam_search(
        step,
        state,
        tf.fill([B], START),
        END,
        beam_size=3,
        max_length=T,
        length_penalty=0.5,
        coverage_penalty=0.3,
        source_mask=MASK,
    )
    out = {k: v.numpy() for k, v in out.items()}
    for b in range(B):
        for j in range(3):
            n = out["lengths"][b, j]
            y = out["sequences"][b, j, :n]
            states = cell.get_initial_state(1)
            prev, log_prob, atts = START, 0.0, []
            for t in range(n):
                h, states, weights = cell(
                    embedding(np.array([prev])),
                    states,
                    memory[b : b + 1],
                    memory_mask=MASK[b : b + 1],
                    position=t,
                )
                log_prob += _log_softmax(np.asarray(output(h))[0].astype(np.float64))[y[t]]
                atts.append(np.asarray(weights)[0])
                prev = y[t]
            np.testing.assert_allclose(out["log_probs"][b, j], log_prob, atol=1e-4, rtol=1e-5)
            np.testing.assert_allclose(out["alignments"][b, j, :n], np.array(atts), atol=1e-5)
    greedy = {
        k: v.numpy()
        for k, v in greedy_search(
            step,
            state,
            tf.fill([B], START),
            END,
            max_length=T,
            length_penalty=0.5,
            coverage_penalty=0.3,
            source_mask=MASK,
        ).items()
    }
    beam1 = {
        k: v.numpy()[:, 0]
        for k, v in beam_search(
            step,
            state,
            tf.fill([B], START),
            END,
            beam_size=1,
            max_length=T,
            length_penalty=0.5,
            coverage_penalty=0.3,
            source_mask=MASK,
        ).items()
    }
    _assert_close(greedy, beam1, atol=1e-6)
