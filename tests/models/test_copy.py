"""Copy attention (keras_attn.models.copy, See et al. 2017) against NumPy formulas, through the
model checklist, a toy task only copying solves, beam search by brute force, and export."""

import itertools
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search
from keras_attn.models import MaskedSequenceLoss, RNNSeq2Seq, Transformer
from keras_attn.models.copy import CopyGenerator, copy_distribution
from tests.models.helpers import END, START, log_softmax, no_pad, run_model_checklist
from tests.models.test_seq2seq import SV, _data


def test_copy_distribution_is_the_formula_on_a_hand_made_case():
    vocab_probs = np.array(
        [[0.0, 0.1, 0.1, 0.2, 0.3, 0.3], [0.05, 0.05, 0.3, 0.2, 0.2, 0.2]], "float32"
    )
    p_gen = np.array([[0.25], [0.9]], "float32")
    source = np.array([[4, 5, 4, 0], [3, 3, 2, 5]], "int32")  # repeated ids add up; 0 is padding
    attention = np.array([[0.5, 0.2, 0.3, 0.0], [0.1, 0.2, 0.3, 0.4]], "float32")
    got = np.asarray(copy_distribution(vocab_probs, p_gen, attention, source))
    # written out: P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: x_i = w} a_i
    expected = p_gen * vocab_probs
    expected[0, 4] += 0.75 * (0.5 + 0.3)
    expected[0, 5] += 0.75 * 0.2
    expected[1, 3] += 0.1 * (0.1 + 0.2)
    expected[1, 2] += 0.1 * 0.3
    expected[1, 5] += 0.1 * 0.4
    np.testing.assert_allclose(got, expected, atol=1e-7)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-6)
    # the [B, T, ...] layout of teacher forcing gives the same rows
    seq = np.asarray(
        copy_distribution(vocab_probs[:, None], p_gen[:, None], attention[:, None], source)
    )
    np.testing.assert_allclose(seq[:, 0], expected, atol=1e-7)


def test_copy_generator_layer_checklist():
    from tests.layers.checklist import run_layer_checklist

    r = np.random.default_rng(0)
    b, t, s, v = 2, 3, 4, 9
    attention = r.uniform(size=(b, t, s)).astype("float32")
    attention[0, :, 3] = 0.0  # the padded source position gets no attention (as in the models)
    inputs = {
        "logits": r.normal(size=(b, t, v)).astype("float32"),
        "attention": attention / attention.sum(-1, keepdims=True),
        "source_ids": np.array([[4, 5, 6, 0], [7, 8, 4, 4]], "int32"),
        "memory": r.normal(size=(b, s, 5)).astype("float32"),
        "decoder_output": r.normal(size=(b, t, 6)).astype("float32"),
        "decoder_input": r.normal(size=(b, t, 3)).astype("float32"),
    }
    run_layer_checklist(
        CopyGenerator,
        {"coverage_weight": 0.5},
        inputs,
        expected_output_shapes=[(b, t, v)],
        expected_num_trainable_weights=2,
    )
    layer = CopyGenerator()
    log_p = np.asarray(layer(**inputs))
    np.testing.assert_allclose(np.exp(log_p).sum(-1), 1.0, atol=1e-5)
    # the gate is sigmoid(w . [c_t; s_t; x_t] + b), written out in NumPy
    w, bias = (np.asarray(x) for x in layer.gate.weights)
    context = np.einsum("bts,bsd->btd", inputs["attention"], inputs["memory"])
    features = np.concatenate([context, inputs["decoder_output"], inputs["decoder_input"]], -1)
    p_gen = 1.0 / (1.0 + np.exp(-(features @ w + bias)))
    vocab = np.exp(inputs["logits"] - inputs["logits"].max(-1, keepdims=True))
    vocab /= vocab.sum(-1, keepdims=True)
    copied = np.einsum(
        "bts,bsv->btv",
        inputs["attention"],
        np.eye(v)[inputs["source_ids"]] * (inputs["source_ids"] != 0)[..., None],
    )
    np.testing.assert_allclose(np.exp(log_p), p_gen * vocab + (1 - p_gen) * copied, atol=1e-5)


@pytest.mark.parametrize("kind", ["rnn-luong", "transformer"])  # Bahdanau: the toy task below
def test_copy_models_pass_the_checklist_and_return_log_probabilities(kind):
    if kind == "transformer":
        model = Transformer(
            SV, SV, 1, 8, 2, 16, dropout=0.1, copy_attention=True, coverage_weight=0.5
        )
    else:
        attention = kind.split("-")[1]
        model = RNNSeq2Seq(
            SV, SV, 8, 8, attention=attention, copy_attention=True, coverage_weight=0.5
        )
    x, y = _data()
    log_p = np.asarray(model(x))
    real = x["target_in"] != 0  # (padded steps carry no attention and are masked out of the loss)
    np.testing.assert_allclose(np.exp(log_p[real]).sum(-1), 1.0, atol=1e-5)
    # the coverage loss is added in training only, and it is the documented formula
    model(x, training=True)
    assert len(model.losses) == 1 and float(model.losses[0]) > 0.0
    run_model_checklist(model, x, y)
    assert model.get_config()["copy_attention"] is True
    with pytest.raises(ValueError, match="copy_attention"):
        RNNSeq2Seq(SV, SV + 1, copy_attention=True)
    with pytest.raises(ValueError, match="coverage_weight"):
        Transformer(SV, SV, coverage_weight=0.5)
    with pytest.raises(ValueError, match="coverage_weight"):
        CopyGenerator(coverage_weight=-1.0)


# ------------------------------------------------------------- a task only copying solves
NAMES = list(range(10, 40))  # "names": seen in training 10..29, only at test 30..39


def _copy_task(names, rng, n):
    """`[frame, name, frame']` -> `[name, 9]`: the name is copied, then a fixed word."""
    frame = rng.integers(4, 9, (n, 2))
    name = rng.choice(names, n)
    source = np.stack([frame[:, 0], name, frame[:, 1]], 1).astype("int32")
    target_in = np.stack([np.full(n, START), name, np.full(n, 9)], 1).astype("int32")
    target_out = np.stack([name, np.full(n, 9), np.full(n, END)], 1).astype("int32")
    return {"source": source, "target_in": target_in}, target_out


def test_copy_model_copies_unseen_names_a_plain_model_cannot():
    rng = np.random.default_rng(0)
    x, y = _copy_task(NAMES[:20], rng, 256)
    test_x, test_y = _copy_task(NAMES[20:], rng, 64)
    accuracy = {}
    for copy in (False, True):
        keras.utils.set_random_seed(1)
        model = RNNSeq2Seq(40, 40, 16, 16, attention="bahdanau", copy_attention=copy)
        model.compile(keras.optimizers.Adam(0.03), MaskedSequenceLoss())
        model.fit(x, y, batch_size=32, epochs=5, verbose=0)
        predicted = np.asarray(model(test_x)).argmax(-1)
        accuracy[copy] = float(np.mean(predicted[:, 0] == test_y[:, 0]))  # the name step
    assert accuracy[True] >= 0.9 and accuracy[False] <= 0.1, accuracy


# --------------------------------------------------------------- beam search by brute force
def test_beam_search_over_a_copy_model_equals_brute_force():
    keras.utils.set_random_seed(3)
    vocab, length = 6, 3
    model = Transformer(vocab, vocab, 1, 8, 2, 16, dropout=0.0, copy_attention=True)
    model.build()
    source = np.array([[4, 5, 4], [5, 3, 0]], "int32")
    encoded = model.encode(source)

    def step(tokens, state, t):
        log_p, state, attention = model.decode_step(tokens, state, t)
        return no_pad(log_p), state, attention  # padding is never a hypothesis' token

    others = [v for v in range(1, vocab) if v != END]
    hyps = [list(b) + [END] for n in range(length) for b in itertools.product(others, repeat=n)]
    hyps += [list(b) for b in itertools.product(others, repeat=length)]
    k = len(hyps)  # 1 + 4 + 16 + 64: every hypothesis is kept
    out = beam_search(
        step,
        model.initial_decode_state(encoded, length),
        tf.fill([2], START),
        END,
        beam_size=k,
        max_length=length,
        source_mask=encoded["source_mask"],
    )
    for b in range(2):
        # every hypothesis scored by the teacher-forced model, in NumPy
        target_in = np.array([[START] + (h + [END] * length)[: length - 1] for h in hyps], "int32")
        log_p = log_softmax(
            np.asarray(
                no_pad(
                    model({"source": np.repeat(source[b : b + 1], k, 0), "target_in": target_in})
                ),
                "float64",
            )
        )
        scores = [sum(log_p[j, t, h[t]] for t in range(len(h))) for j, h in enumerate(hyps)]
        order = np.argsort(-np.array(scores), kind="stable")
        np.testing.assert_allclose(
            np.asarray(out["log_probs"])[b], np.array(scores)[order], atol=1e-4
        )
        for rank in range(5):
            h = hyps[order[rank]]
            np.testing.assert_array_equal(
                np.asarray(out["sequences"])[b, rank], h + [END] * (length - len(h))
            )


# --------------------------------------------------------------------------- export
def test_copy_model_exports_and_serves_the_server_way(tmp_path):
    from keras_attn.serving.export import export_text_model
    from keras_attn.serving.harness import run_server_way
    from keras_attn.text import CharTokenizer

    tokenizer = CharTokenizer.build(["hello world", "abc 123"])
    model = RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, 8, 8, copy_attention=True)
    model.build()
    export_text_model(
        model, tokenizer, str(tmp_path), beam_size=2, max_length=5, max_input_length=12
    )
    inputs = np.array([b"hello", b"ab 12"], dtype=object)
    knobs = {
        "beam_size": np.int32(2),
        "max_length": np.int32(5),
        "length_penalty": np.float32(0.0),
        "coverage_penalty": np.float32(0.0),
    }
    result = run_server_way(
        os.path.join(str(tmp_path), "1"),
        [("greedy", {"inputs": inputs}), ("beam_search", {"inputs": inputs, **knobs})],
    )
    assert "keras_attn" not in result.modules
    assert all(r.error_type is None for r in result.responses)
    greedy = result.responses[0].outputs
    ids = tokenizer.tokenize_padded(tf.constant(inputs))
    encoded = model.encode(ids)
    from keras_attn.decoding import greedy_search

    expected = greedy_search(
        model.decode_step,
        model.initial_decode_state(encoded, 5),
        tf.fill([2], START),
        END,
        max_length=5,
        source_mask=encoded["source_mask"],
    )
    np.testing.assert_allclose(greedy["scores"], expected["scores"].numpy(), atol=1e-5)
    alignments = np.asarray(greedy["alignments"])
    assert alignments.shape[:2] == (2, 5) and np.all(np.isfinite(alignments))
