"""Per-example state in the searches (docs/decoding.md, "Per-example state").

What a state holds under `"per_example"` keeps one row per example: the engine neither tiles
it to the `N = B K` hypotheses nor gathers it along the beam parents, and the step reads the
same rows for the K hypotheses of an example. The reference everywhere is the same search
with that part tiled as before: a plain wrapper moves it out of `"per_example"` (so the engine
tiles it to N rows and the step attends N rows, one per hypothesis) and back in before the
model's own step. Both must give the same n-best: sequences and lengths equal; scores,
log-probs, per-token log-probs and alignments to 1e-5.

- a toy `keras.ops` step whose per-example part is a `[B, V]` bias (beam, greedy, sampling);
- `RNNSeq2Seq` with Bahdanau, Luong global and local-p attention (memory, mask and projected
  keys per example); Luong local-m keeps its memory tiled (its window follows the query row);
- the cached `Transformer` (cross-attention caches and source mask per example), with
  grouped-query attention and with copy attention;
- eagerly and under `tf.function(jit_compile=True)`;
- one SavedModel export of the Transformer: its `beam_search` and `beam_search_xla` answers
  equal the in-process search on the tiled state;
- the attention kernel itself: several query rows against a precomputed cache
  (`attend.rows_shared`, by einsums and by multiply-and-sum) equal the same layer attending
  the memory head-major.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_attn import models
from keras_attn.decoding import beam_search, greedy_search, sample_search
from keras_attn.decoding.shapes import PER_EXAMPLE

V, B, K, MAX_LENGTH = 12, 3, 3, 6
SOURCE = np.array([[5, 6, 7, 8, 0], [4, 9, 10, 0, 0], [11, 5, 4, 6, 7]], np.int32)
START = np.ones(B, np.int32)
PENALTIES = dict(length_penalty=0.6, coverage_penalty=0.2)
EXACT = ("sequences", "lengths")
SCALE = 2.0
TILED = "tiled_source"  # where the reference keeps the per-example part (tiled by the engine)

MODELS = {
    "rnn-bahdanau": ("rnn", dict(attention="bahdanau")),
    "rnn-luong": ("rnn", dict(attention="luong", score="general")),
    "rnn-luong-local-p": ("rnn", dict(attention="luong", alignment="local-p", window=2)),
    "transformer": ("transformer", {}),
    "transformer-gqa": ("transformer", dict(num_key_value_heads=1)),
    "transformer-copy": ("transformer", dict(copy_attention=True)),
}


def build(name):
    """A small model with weights drawn in NumPy, built symbolically."""
    kind, kwargs = MODELS[name]
    if kind == "rnn":
        model = models.RNNSeq2Seq(V, V, 8, 8, **kwargs)
    else:
        model = models.Transformer(V, V, 2, 8, 2, 16, dropout=0.0, **kwargs)
    model(
        {
            "source": keras.KerasTensor(SOURCE.shape, "int32"),
            "target_in": keras.KerasTensor((B, 4), "int32"),
        }
    )
    rng = np.random.RandomState(3)
    model.set_weights([(rng.randn(*w.shape) * SCALE).astype(w.dtype) for w in model.get_weights()])
    return model


@pytest.fixture(scope="module")
def built():
    return {}


def get_model(built, name):
    if name not in built:
        built[name] = build(name)
    return built[name]


def tiled(step_fn, state):
    """The same step on the old layout: the per-example part moved out of `"per_example"`,
    so the engine tiles it to N rows, and moved back before `step_fn`."""
    assert PER_EXAMPLE in state, sorted(state)
    state = dict(state)
    state[TILED] = state.pop(PER_EXAMPLE)

    def step(tokens, state, step):
        inner = dict(state)
        inner[PER_EXAMPLE] = inner.pop(TILED)
        logits, new_state, attention = step_fn(tokens, inner, step)
        new_state = dict(new_state)
        new_state[TILED] = new_state.pop(PER_EXAMPLE)
        return logits, new_state, attention

    return step, state


def model_search(model, old, search=beam_search, **kwargs):
    encoded = model.encode(SOURCE)
    state = model.initial_decode_state(encoded, MAX_LENGTH)
    step = model.decode_step
    if old:
        step, state = tiled(step, state)
    return search(
        step,
        state,
        START,
        0,
        max_length=MAX_LENGTH,
        source_mask=encoded["source_mask"],
        **kwargs,
    )


def assert_same(expected, actual):
    assert sorted(expected) == sorted(actual)
    for key in expected:
        a, b = np.asarray(expected[key]), np.asarray(actual[key])
        if key in EXACT:
            np.testing.assert_array_equal(b, a, err_msg=key)
        else:
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5, err_msg=key)


# ------------------------------------------------------------------------ toy step
def toy(per_example):
    """`(step_fn, state, seen)`: logits from a hash of the prefix plus a per-example bias
    `[B, V]`, kept once per example (`per_example`) or tiled; `seen` records the rows of the
    bias each step was given."""
    rng = np.random.RandomState(0)
    table = ops.convert_to_tensor((rng.randn(37, V) * 2.0).astype(np.float32))
    bias = (rng.randn(B, V) * 3.0).astype(np.float32)
    seen = []

    def step_fn(tokens, state, step):
        h = (state["h"] * 31 + tokens + 1) % 37
        logits = ops.take(table, h, axis=0)
        rows = state[PER_EXAMPLE]["bias"] if per_example else state["bias"]
        seen.append(rows.shape[0])
        if per_example:  # [N, V] -> [B, K, V]: the K rows of example b read its bias row
            grouped = ops.reshape(logits, (ops.shape(rows)[0], -1, V)) + rows[:, None, :]
            logits = ops.reshape(grouped, (-1, V))
        else:
            logits = logits + rows
        new_state = dict(state)
        new_state["h"] = h
        return logits, new_state, None

    state = {"h": np.array([3, 11, 20], np.int32)}
    if per_example:
        state[PER_EXAMPLE] = {"bias": bias}
    else:
        state["bias"] = bias
    return step_fn, state, seen


@pytest.mark.parametrize(
    "search, kwargs",
    [
        (beam_search, dict(beam_size=K, **PENALTIES)),
        (greedy_search, {}),
        (sample_search, dict(temperature=0.9, seed=5)),
    ],
    ids=["beam", "greedy", "sample"],
)
def test_toy_per_example_state_is_neither_tiled_nor_gathered(search, kwargs):
    step_fn, state, seen = toy(per_example=True)
    out = search(step_fn, state, START, 0, max_length=MAX_LENGTH, **kwargs)
    assert set(seen) == {B}  # the step only ever saw B rows of the per-example part
    ref_step, ref_state, ref_seen = toy(per_example=False)
    expected = search(ref_step, ref_state, START, 0, max_length=MAX_LENGTH, **kwargs)
    assert set(ref_seen) == {B * kwargs.get("beam_size", 1)}
    assert_same(expected, out)


def test_toy_under_xla():
    step_fn, state, _ = toy(per_example=True)
    ref_step, ref_state, _ = toy(per_example=False)

    def run(step, st):
        return tf.function(
            lambda: beam_search(step, st, START, 0, max_length=MAX_LENGTH, beam_size=K),
            jit_compile=True,
        )()

    assert_same(run(ref_step, ref_state), run(step_fn, state))


# -------------------------------------------------------------------------- models
@pytest.mark.parametrize("name", list(MODELS))
def test_model_beam_search_same_as_tiled(built, name):
    model = get_model(built, name)
    state = model.initial_decode_state(model.encode(SOURCE), MAX_LENGTH)
    leaves = tf.nest.flatten(state[PER_EXAMPLE])
    assert leaves and all(x.shape[0] == B for x in leaves)
    expected = model_search(model, True, beam_size=K, **PENALTIES)
    out = model_search(model, False, beam_size=K, **PENALTIES)
    assert out["sequences"].shape == (B, K, MAX_LENGTH)
    assert out["alignments"].shape == (B, K, MAX_LENGTH, SOURCE.shape[1])  # per beam
    assert_same(expected, out)


@pytest.mark.parametrize("name", ["rnn-luong", "transformer"])
def test_model_greedy_same_as_tiled(built, name):
    model = get_model(built, name)
    assert_same(model_search(model, True, greedy_search), model_search(model, False, greedy_search))


@pytest.mark.parametrize("name", ["rnn-luong-local-p", "transformer-gqa"])
def test_model_beam_search_under_xla(built, name):
    model = get_model(built, name)

    def compiled(old):
        return tf.function(
            lambda: model_search(model, old, beam_size=K, **PENALTIES), jit_compile=True
        )()

    expected = model_search(model, True, beam_size=K, **PENALTIES)  # eager, tiled
    assert_same(expected, compiled(False))


def test_unknown_batch_in_a_graph(built):
    """Sizes unknown while tracing (as in a served signature): the grouping by example is
    computed at run time."""
    model = get_model(built, "transformer")

    @tf.function(
        input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)]
    )
    def search(source, beam):
        encoded = model.encode(source)
        state = model.initial_decode_state(encoded, MAX_LENGTH)
        start = tf.ones(tf.shape(source)[:1], tf.int32)
        return beam_search(
            model.decode_step,
            state,
            start,
            0,
            max_length=MAX_LENGTH,
            beam_size=beam,
            source_mask=encoded["source_mask"],
            **PENALTIES,
        )

    expected = model_search(model, True, beam_size=K, **PENALTIES)
    assert_same(expected, search(tf.constant(SOURCE), tf.constant(K)))


def test_local_m_keeps_its_memory_tiled():
    model = models.RNNSeq2Seq(V, V, 8, 8, attention="luong", alignment="local-m", window=1)
    model(
        {
            "source": keras.KerasTensor(SOURCE.shape, "int32"),
            "target_in": keras.KerasTensor((B, 4), "int32"),
        }
    )
    state = model.initial_decode_state(model.encode(SOURCE), MAX_LENGTH)
    assert PER_EXAMPLE not in state and state["memory"].shape[0] == B
    assert not model.decoder_cell.per_example_memory
    out = model_search(model, False, beam_size=K)
    assert out["sequences"].shape == (B, K, MAX_LENGTH)
    # handed a per-example memory anyway, the cell refuses it by name
    source = {k: v for k, v in state.items() if k != "cell"}
    per = {"cell": state["cell"], PER_EXAMPLE: source}
    with pytest.raises(ValueError, match="one row per example"):
        beam_search(model.decode_step, per, START, 0, max_length=MAX_LENGTH, beam_size=K)


# -------------------------------------------------------------------------- export
@pytest.mark.processes  # two exports: make test-processes
def test_exported_plain_and_xla_answers_equal_the_tiled_search(built, tmp_path):
    from keras_attn.serving.export import export_text_model
    from keras_attn.serving.harness import ServingRequest, run_in_process
    from keras_attn.serving.signatures import ServingSettings, ServingSignatures
    from keras_attn.serving.specs import TEXT_INPUT
    from keras_attn.text.char import CharTokenizer

    tokenizer = CharTokenizer.build("the quick brown fox jumps over the lazy dog")
    keras.utils.set_random_seed(2)
    model = models.Transformer(
        tokenizer.vocab_size, tokenizer.vocab_size, 1, 16, 2, 32, dropout=0.0
    )
    model({"source": np.ones((1, 4), np.int32), "target_in": np.ones((1, 3), np.int32)})
    settings = dict(
        beam_size=K,
        max_length=MAX_LENGTH,
        max_input_length=16,
        xla=("beam_search",),
        xla_batch_sizes=(4,),
        xla_source_lengths=(16,),
    )
    path = export_text_model(model, tokenizer, str(tmp_path / "m"), **settings)
    texts = np.array([b"the fox", b"lazy dog jumps", b"quick"], object)
    knobs = {
        "beam_size": np.int32(K),
        "max_length": np.int32(MAX_LENGTH),
        "length_penalty": np.float32(0.6),
        "coverage_penalty": np.float32(0.3),
    }
    requests = [
        ServingRequest(name, {"inputs": texts, **knobs})
        for name in ("beam_search", "beam_search_xla")
    ]
    plain, xla = run_in_process(path, requests).responses
    assert plain.ok and xla.ok, (plain.error_message, xla.error_message)

    # in process, on the tiled state (the old layout)
    signatures = ServingSignatures(
        model,
        ServingSettings(**settings),
        tf.TensorSpec([None], tf.string, name=TEXT_INPUT),
        tokenizer,
        tokenizer,
    )
    state, start, mask = signatures.encode(tf.constant(texts), MAX_LENGTH)
    step, state = tiled(model.decode_step, state)
    result = beam_search(
        step,
        state,
        start,
        tokenizer.end_id,
        max_length=MAX_LENGTH,
        beam_size=K,
        length_penalty=0.6,
        coverage_penalty=0.3,
        eos_penalty=signatures.settings.eos_penalty,
        source_mask=mask,
    )
    expected = {k: np.asarray(v) for k, v in signatures.beam_outputs(result, mask).items()}
    for response in (plain, xla):
        out = response.outputs
        assert out["outputs"].tolist() == expected["outputs"].tolist()
        np.testing.assert_array_equal(out["lengths"], expected["lengths"])
        for key in ("scores", "log_probs", "alignments"):
            np.testing.assert_allclose(out[key], expected[key], rtol=1e-5, atol=1e-5, err_msg=key)


# ------------------------------------------------------------------ the attention kernel
@pytest.mark.parametrize("groups", [None, 1])
@pytest.mark.parametrize("work", [0, 1 << 40], ids=["products", "sums"])
def test_query_rows_sharing_a_cache_equal_the_uncached_attention(monkeypatch, groups, work):
    """`MultiHeadAttention` with several query rows against a precomputed cache (its layout,
    `attend.rows_shared`, either kernel) gives the outputs and weights of the same layer
    attending the memory itself (head-major)."""
    from keras_attn.layers import multi_head_attend
    from keras_attn.layers.multi_head import MultiHeadAttention

    monkeypatch.setattr(multi_head_attend, "SHARED_MIN_WORK", work)
    rng = np.random.RandomState(4)
    query = rng.randn(2, 3, 8).astype(np.float32)
    memory = rng.randn(2, 5, 6).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    layer = MultiHeadAttention(4, 3, num_key_value_heads=groups)
    expected, expected_weights = layer(query, memory, value_mask=mask, return_attention_scores=True)
    cache = layer.compute_cache(memory, mask=mask)
    out, weights = layer(
        query, value_mask=mask, cache=cache, cache_zeroed=True, return_attention_scores=True
    )[:2]
    np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(weights), np.asarray(expected_weights), rtol=1e-5, atol=1e-6
    )
