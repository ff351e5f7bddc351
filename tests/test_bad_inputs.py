"""A catalogue of bad inputs, each with the exact error it gets.

Every entry of the tables below is one bad input. A `Case` holds a thunk that feeds it, the
exact exception type expected (`type(e) is expected`, not a subclass) and the strings the
message must contain: the argument's name and the value (or shape / dtype) received. The TSV
and serving tables instead check that the bad input is absorbed as documented (skipped and
counted; answered, or refused with InvalidArgumentError naming the knob), never a crash.

`python -m pytest -q tests/test_bad_inputs.py -s` prints how many bad inputs were tried.
"""

import dataclasses
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.data.tsv import load_tsv
from keras_attn.decoding import beam_search, greedy_search, sample_search
from keras_attn.layers import (
    AttentionDecoder,
    AttentionRNNCell,
    BahdanauAttention,
    HardAttention,
    LuongAttention,
    MultiHeadAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)

B, TQ, TV, DQ, DV = 2, 3, 5, 4, 6


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the conftest fixture: float32 and fixed seeds, without a `clear_session`
    per case (its garbage collection would cost more than the ~200 cases themselves)."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield


@dataclasses.dataclass
class Case:
    id: str
    feed: object  # thunk
    error: type
    needles: tuple  # substrings of the message: the argument and the value received


def _q(shape=(B, TQ, DQ), dtype="float32"):
    return np.random.RandomState(0).normal(size=shape).astype(dtype)


Q, V = _q(), _q((B, TV, DV))
QI, VI = tf.ones((B, TQ, DQ), tf.int32), tf.ones((B, TV, DV), tf.int32)


def built(layer, *args, **kwargs):
    """`layer` called once on good inputs (so later calls are checked against the built shapes)."""
    layer(*args, **kwargs)
    return layer


def _cell(style="bahdanau"):
    return AttentionRNNCell(keras.layers.GRUCell(8), BahdanauAttention(4), style=style)


def _decoder():
    return built(AttentionDecoder(_cell()), Q, V)


# ---------------------------------------------------------------- layers
CROSS = {
    "bahdanau": lambda: BahdanauAttention(4),
    "luong": lambda: LuongAttention("general"),
    "luong-local-p": lambda: LuongAttention("concat", alignment="local-p", window=2),
    "hard": lambda: HardAttention(),
}


def _cross_cases():
    cases = []
    for name, make in CROSS.items():
        cases += [
            Case(
                f"{name}/query-rank-4",
                lambda m=make: m()(Q[None], V),
                ValueError,
                ("query", "(1, 2, 3, 4)"),
            ),
            Case(
                f"{name}/value-rank-2",
                lambda m=make: m()(Q, V[:, 0]),
                ValueError,
                ("value", "(2, 6)"),
            ),
            Case(
                f"{name}/key-length",
                lambda m=make: m()(Q, V, key=V[:, :4]),
                ValueError,
                ("key", "(2, 4, 6)"),
            ),
            Case(
                f"{name}/query-last-dim",
                lambda m=make: built(m(), Q, V)(Q[..., :3], V),
                ValueError,
                ("query", "(2, 3, 3)"),
            ),
            Case(
                f"{name}/value-last-dim",
                lambda m=make: built(m(), Q, V)(Q, V[..., :3]),
                ValueError,
                ("value", "(2, 5, 3)"),
            ),
            Case(f"{name}/int-query", lambda m=make: m()(QI, V), ValueError, ("query", "int32")),
            Case(f"{name}/int-value", lambda m=make: m()(Q, VI), ValueError, ("value", "int32")),
            Case(
                f"{name}/mask-length",
                lambda m=make: m()(Q, V, value_mask=np.ones((B, 4), bool)),
                ValueError,
                ("value_mask", "(2, 4)"),
            ),
            Case(
                f"{name}/mask-rank-3",
                lambda m=make: m()(Q, V, value_mask=np.ones((B, TV, 1), bool)),
                ValueError,
                ("value_mask", "(2, 5, 1)"),
            ),
            Case(
                f"{name}/mask-batch",
                lambda m=make: m()(Q, V, value_mask=np.ones((3, TV), bool)),
                ValueError,
                ("value_mask", "(3, 5)"),
            ),
        ]
    return cases


LAYER_CASES = _cross_cases() + [
    # constructor arguments
    Case("bahdanau/units-0", lambda: BahdanauAttention(0), ValueError, ("units", "units=0")),
    Case(
        "bahdanau/normalize-str",
        lambda: BahdanauAttention(4, normalize="yes"),
        ValueError,
        ("normalize", "'yes'"),
    ),
    Case(
        "bahdanau/dropout-1",
        lambda: BahdanauAttention(4, dropout=1.0),
        ValueError,
        ("dropout", "1.0"),
    ),
    Case(
        "luong/score-name",
        lambda: LuongAttention(score="cosine"),
        ValueError,
        ("score", "'cosine'"),
    ),
    Case(
        "luong/score-additive",
        lambda: LuongAttention(score="additive"),
        ValueError,
        ("score", "'additive'"),
    ),
    Case(
        "luong/alignment-name",
        lambda: LuongAttention(alignment="local"),
        ValueError,
        ("alignment", "'local'"),
    ),
    Case(
        "luong/window-0",
        lambda: LuongAttention(alignment="local-m", window=0),
        ValueError,
        ("window", "window=0"),
    ),
    Case(
        "luong/window--3",
        lambda: LuongAttention(alignment="local-p", window=-3),
        ValueError,
        ("window", "window=-3"),
    ),
    Case("luong/window-float", lambda: LuongAttention(window=2.5), ValueError, ("window", "2.5")),
    Case(
        "luong/sigma-0",
        lambda: LuongAttention(alignment="local-p", sigma=0),
        ValueError,
        ("sigma", "sigma=0"),
    ),
    Case(
        "luong/units-0", lambda: LuongAttention("concat", units=0), ValueError, ("units", "units=0")
    ),
    Case("luong/dot-dims", lambda: LuongAttention("dot")(Q, V), ValueError, ("dot", "4", "6")),
    Case(
        "luong/local-m-step-without-position",
        lambda: LuongAttention(alignment="local-m")(Q[:, 0], V),
        ValueError,
        ("position", "position=None"),
    ),
    Case(
        "hard/score-name",
        lambda: HardAttention(score="bilinear"),
        ValueError,
        ("score", "'bilinear'"),
    ),
    Case(
        "hard/baseline-decay-1",
        lambda: HardAttention(baseline_decay=1.0),
        ValueError,
        ("baseline_decay", "1.0"),
    ),
    Case("hard/seed-str", lambda: HardAttention(seed="7"), ValueError, ("seed", "'7'")),
    Case(
        "hard/soft-mix-2",
        lambda: HardAttention()(Q, V, soft_mix_probability=2.0, training=True),
        ValueError,
        ("soft_mix_probability", "2.0"),
    ),
    # MultiHeadAttention
    Case(
        "mha/num-heads-0",
        lambda: MultiHeadAttention(0, 4),
        ValueError,
        ("num_heads", "num_heads=0"),
    ),
    Case(
        "mha/num-heads--1",
        lambda: MultiHeadAttention(-1, 4),
        ValueError,
        ("num_heads", "num_heads=-1"),
    ),
    Case("mha/key-dim-0", lambda: MultiHeadAttention(2, 0), ValueError, ("key_dim", "key_dim=0")),
    Case(
        "mha/output-shape-0",
        lambda: MultiHeadAttention(2, 4, output_shape=0),
        ValueError,
        ("output_shape", "0"),
    ),
    Case(
        "mha/query-rank-2",
        lambda: MultiHeadAttention(2, 4)(Q[:, 0]),
        ValueError,
        ("query", "(2, 4)"),
    ),
    Case(
        "mha/query-last-dim",
        lambda: built(MultiHeadAttention(2, 4), Q, V)(Q[..., :3], V),
        ValueError,
        ("query", "(2, 3, 3)"),
    ),
    Case("mha/int-query", lambda: MultiHeadAttention(2, 4)(QI), ValueError, ("query", "int32")),
    Case("mha/int-value", lambda: MultiHeadAttention(2, 4)(Q, VI), ValueError, ("value", "int32")),
    Case(
        "mha/attention-mask-keys",
        lambda: MultiHeadAttention(2, 4)(Q, V, attention_mask=np.ones((B, TQ, 4), bool)),
        ValueError,
        ("attention_mask", "(2, 3, 4)"),
    ),
    Case(
        "mha/attention-mask-rank-5",
        lambda: MultiHeadAttention(2, 4)(Q, V, attention_mask=np.ones((B, 1, 1, TQ, TV), bool)),
        ValueError,
        ("attention_mask", "(2, 1, 1, 3, 5)"),
    ),
    Case(
        "mha/value-mask-length",
        lambda: MultiHeadAttention(2, 4)(Q, V, value_mask=np.ones((B, 4), bool)),
        ValueError,
        ("value_mask", "(2, 4)"),
    ),
    Case(
        "mha/query-mask-length",
        lambda: MultiHeadAttention(2, 4)(Q, V, query_mask=np.ones((B, 4), bool)),
        ValueError,
        ("query_mask", "(2, 4)"),
    ),
    Case(
        "mha/cache-index-without-cache",
        lambda: MultiHeadAttention(2, 4)(Q, cache_index=0),
        ValueError,
        ("cache_index", "cache_index=0"),
    ),
    # PositionalEncoding
    Case(
        "pe/mode-name", lambda: PositionalEncoding(mode="rotary"), ValueError, ("mode", "'rotary'")
    ),
    Case(
        "pe/learned-without-max-length",
        lambda: PositionalEncoding(mode="learned"),
        ValueError,
        ("max_length", "max_length=None"),
    ),
    Case(
        "pe/max-length-0",
        lambda: PositionalEncoding(max_length=0),
        ValueError,
        ("max_length", "max_length=0"),
    ),
    Case("pe/base-negative", lambda: PositionalEncoding(base=-1.0), ValueError, ("base", "-1.0")),
    Case(
        "pe/too-long",
        lambda: PositionalEncoding("learned", max_length=2)(Q),
        ValueError,
        ("max_length", "(2, 3, 4)"),
    ),
    Case(
        "pe/start-index--1",
        lambda: PositionalEncoding()(Q, start_index=-1),
        ValueError,
        ("start_index", "start_index=-1"),
    ),
    Case("pe/rank-1", lambda: PositionalEncoding()(Q[0, 0]), ValueError, ("inputs", "(4,)")),
    Case("pe/int-inputs", lambda: PositionalEncoding()(QI), ValueError, ("inputs", "int32")),
    Case(
        "pe/last-dim",
        lambda: built(PositionalEncoding(), Q)(Q[..., :3]),
        ValueError,
        ("inputs", "(2, 3, 3)"),
    ),
    # PositionwiseFeedForward
    Case(
        "ffn/intermediate-0",
        lambda: PositionwiseFeedForward(0),
        ValueError,
        ("intermediate_dim", "=0"),
    ),
    Case(
        "ffn/activation-name",
        lambda: PositionwiseFeedForward(8, activation="nope"),
        ValueError,
        ("activation", "'nope'"),
    ),
    Case("ffn/rank-1", lambda: PositionwiseFeedForward(8)(Q[0, 0]), ValueError, ("inputs", "(4,)")),
    Case("ffn/int-inputs", lambda: PositionwiseFeedForward(8)(QI), ValueError, ("inputs", "int32")),
    Case(
        "ffn/last-dim",
        lambda: built(PositionwiseFeedForward(8), Q)(Q[..., :3]),
        ValueError,
        ("inputs", "(2, 3, 3)"),
    ),
    # Transformer layers
    Case(
        "encoder/num-heads-0",
        lambda: TransformerEncoderLayer(0, 8),
        ValueError,
        ("num_heads", "num_heads=0"),
    ),
    Case(
        "encoder/heads-do-not-divide",
        lambda: TransformerEncoderLayer(3, 8)(Q),
        ValueError,
        ("num_heads", "num_heads=3"),
    ),
    Case(
        "encoder/rank-2",
        lambda: TransformerEncoderLayer(2, 8)(Q[:, 0]),
        ValueError,
        ("inputs", "(2, 4)"),
    ),
    Case(
        "encoder/int-inputs",
        lambda: TransformerEncoderLayer(2, 8)(QI),
        ValueError,
        ("inputs", "int32"),
    ),
    Case(
        "encoder/last-dim",
        lambda: built(TransformerEncoderLayer(2, 8), Q)(Q[..., :2]),
        ValueError,
        ("inputs", "(2, 3, 2)"),
    ),
    Case(
        "encoder/padding-mask-length",
        lambda: TransformerEncoderLayer(2, 8)(Q, padding_mask=np.ones((B, 4), bool)),
        ValueError,
        ("padding_mask", "(2, 4)"),
    ),
    Case(
        "encoder/attention-mask-length",
        lambda: TransformerEncoderLayer(2, 8)(Q, attention_mask=np.ones((B, TQ, 4), bool)),
        ValueError,
        ("attention_mask", "(2, 3, 4)"),
    ),
    Case(
        "decoder/num-heads-0",
        lambda: TransformerDecoderLayer(0, 8),
        ValueError,
        ("num_heads", "num_heads=0"),
    ),
    Case(
        "decoder/int-decoder-sequence",
        lambda: TransformerDecoderLayer(2, 8)(QI, V),
        ValueError,
        ("decoder_sequence", "int32"),
    ),
    Case(
        "decoder/int-encoder-sequence",
        lambda: TransformerDecoderLayer(2, 8)(Q, VI),
        ValueError,
        ("encoder_sequence", "int32"),
    ),
    Case(
        "decoder/encoder-rank-2",
        lambda: TransformerDecoderLayer(2, 8)(Q, V[:, 0]),
        ValueError,
        ("encoder_sequence", "(2, 6)"),
    ),
    Case(
        "decoder/encoder-last-dim",
        lambda: built(TransformerDecoderLayer(2, 8), Q, V)(Q, V[..., :3]),
        ValueError,
        ("encoder_sequence", "(2, 5, 3)"),
    ),
    Case(
        "decoder/decoder-padding-mask-length",
        lambda: TransformerDecoderLayer(2, 8)(Q, V, decoder_padding_mask=np.ones((B, 4), bool)),
        ValueError,
        ("decoder_padding_mask", "(2, 4)"),
    ),
    Case(
        "decoder/encoder-padding-mask-length",
        lambda: TransformerDecoderLayer(2, 8)(Q, V, encoder_padding_mask=np.ones((B, 4), bool)),
        ValueError,
        ("encoder_padding_mask", "(2, 4)"),
    ),
    Case(
        "decoder/missing-encoder-sequence",
        lambda: built(TransformerDecoderLayer(2, 8), Q, V)(Q),
        ValueError,
        ("encoder_sequence", "encoder_sequence=None"),
    ),
    # AttentionRNNCell / AttentionDecoder
    Case(
        "cell/style-name",
        lambda: AttentionRNNCell(keras.layers.GRUCell(8), BahdanauAttention(4), style="vaswani"),
        ValueError,
        ("style", "'vaswani'"),
    ),
    Case(
        "cell/not-a-cell",
        lambda: AttentionRNNCell(keras.layers.Dense(8), BahdanauAttention(4)),
        ValueError,
        ("cell", "Dense"),
    ),
    Case(
        "cell/self-attention-layer",
        lambda: AttentionRNNCell(keras.layers.GRUCell(8), MultiHeadAttention(2, 4)),
        ValueError,
        ("attention", "MultiHeadAttention"),
    ),
    Case(
        "cell/attention-dim-0",
        lambda: AttentionRNNCell(
            keras.layers.GRUCell(8), BahdanauAttention(4), style="luong", attention_dim=0
        ),
        ValueError,
        ("attention_dim", "attention_dim=0"),
    ),
    Case(
        "decoder-rnn/cell-not-attention",
        lambda: AttentionDecoder(keras.layers.GRUCell(8)),
        ValueError,
        ("cell", "GRUCell"),
    ),
    Case(
        "decoder-rnn/inputs-rank-2",
        lambda: AttentionDecoder(_cell())(Q[:, 0], V),
        ValueError,
        ("inputs", "(2, 4)"),
    ),
    Case(
        "decoder-rnn/memory-rank-2",
        lambda: AttentionDecoder(_cell())(Q, V[:, 0]),
        ValueError,
        ("memory", "(2, 6)"),
    ),
    Case(
        "decoder-rnn/int-inputs",
        lambda: AttentionDecoder(_cell())(QI, V),
        ValueError,
        ("inputs", "int32"),
    ),
    Case(
        "decoder-rnn/int-memory",
        lambda: AttentionDecoder(_cell())(Q, VI),
        ValueError,
        ("memory", "int32"),
    ),
    Case(
        "decoder-rnn/inputs-last-dim",
        lambda: _decoder()(Q[..., :3], V),
        ValueError,
        ("inputs", "(2, 3, 3)"),
    ),
    Case(
        "decoder-rnn/memory-last-dim",
        lambda: _decoder()(Q, V[..., :3]),
        ValueError,
        ("memory", "(2, 5, 3)"),
    ),
    Case(
        "decoder-rnn/mask-length",
        lambda: AttentionDecoder(_cell())(Q, V, mask=np.ones((B, 4), bool)),
        ValueError,
        ("mask", "(2, 4)"),
    ),
    Case(
        "decoder-rnn/memory-mask-length",
        lambda: AttentionDecoder(_cell())(Q, V, memory_mask=np.ones((B, 4), bool)),
        ValueError,
        ("mask", "(2, 4)"),
    ),
    Case(
        "decoder-rnn/two-states-for-a-gru",
        lambda: AttentionDecoder(_cell())(Q, V, initial_state=[np.zeros((B, 8), "float32")] * 2),
        ValueError,
        ("states", "2 tensors"),
    ),
]


# -------------------------------------------------------------- decoding
VOCAB, END = 5, 2


def _step(tokens, state, step):
    """Logits favour token `step + 1` (END at step 1): a valid step function."""
    n = tf.shape(tokens)[0]
    logits = tf.zeros(tf.stack([n, VOCAB])) + tf.one_hot(tf.minimum(step + 1, VOCAB - 1), VOCAB)
    return logits, state, tf.ones(tf.stack([n, 3])) / 3.0


def _bad_rows(tokens, state, step):
    logits, state, attention = _step(tokens, state, step)
    return logits[:1], state, attention


def _bad_rank(tokens, state, step):
    logits, state, attention = _step(tokens, state, step)
    return logits[:, 0], state, attention


def _bad_attention(tokens, state, step):
    logits, state, attention = _step(tokens, state, step)
    return logits, state, attention[:1]


def _bad_state(tokens, state, step):
    logits, state, attention = _step(tokens, state, step)
    return logits, tf.concat([state, state], axis=-1), attention


def _bad_tuple(tokens, state, step):
    return _step(tokens, state, step)[:2]


STATE = np.zeros((B, 3), "float32")
START = np.ones((B,), "int32")
RUNTIME = tf.errors.InvalidArgumentError

# (id, search kwargs, eager error, graph error, needles[, graph needles]). In graph mode
# `beam_size` and `max_length` are traced as scalar tensors (known only at run time, as in a
# SavedModel), so their checks are run-time assertions (InvalidArgumentError).
DECODING_CASES = [
    (
        "beam/beam-size-0",
        dict(beam_size=0),
        ValueError,
        RUNTIME,
        ("beam_size", "beam_size=0"),
        ("beam_size", "[0]"),
    ),
    (
        "beam/beam-size--2",
        dict(beam_size=-2),
        ValueError,
        RUNTIME,
        ("beam_size", "beam_size=-2"),
        ("beam_size", "[-2]"),
    ),
    (
        "beam/beam-size-float",
        dict(beam_size=2.5),
        ValueError,
        ValueError,
        ("beam_size", "beam_size=2.5"),
    ),
    (
        "beam/max-length-0",
        dict(max_length=0),
        ValueError,
        RUNTIME,
        ("max_length", "max_length=0"),
        ("max_length", "[0]"),
    ),
    (
        "beam/max-length--1",
        dict(max_length=-1),
        ValueError,
        RUNTIME,
        ("max_length", "max_length=-1"),
        ("max_length", "[-1]"),
    ),
    (
        "beam/end-token-=-vocab",
        dict(end_token=VOCAB),
        ValueError,
        ValueError,
        ("end_token", f"end_token={VOCAB}"),
    ),
    (
        "beam/end-token-1000",
        dict(end_token=1000),
        ValueError,
        ValueError,
        ("end_token", "end_token=1000"),
    ),
    (
        "beam/end-token--5",
        dict(end_token=-5),
        ValueError,
        ValueError,
        ("end_token", "end_token=-5"),
    ),
    (
        "beam/length-penalty-nan",
        dict(length_penalty=float("nan")),
        ValueError,
        ValueError,
        ("length_penalty", "nan"),
    ),
    (
        "beam/coverage-penalty-inf",
        dict(coverage_penalty=math.inf),
        ValueError,
        ValueError,
        ("coverage_penalty", "inf"),
    ),
    (
        "beam/start-tokens-rank-2",
        dict(start_tokens=np.ones((B, 1), "int32")),
        ValueError,
        ValueError,
        ("start_tokens", "(2, 1)"),
    ),
    (
        "beam/source-mask-width",
        dict(source_mask=np.ones((B, 4), bool)),
        ValueError,
        ValueError,
        ("source_mask", "(2, 4)"),
    ),
    (
        "beam/step-logit-rows",
        dict(step_fn=_bad_rows),
        ValueError,
        RUNTIME,
        ("step_fn", "logits.shape=(1, 5), N=4"),
        ("step_fn", "logits", "[1]", "[4]"),
    ),
    (
        "beam/step-logit-rank",
        dict(step_fn=_bad_rank),
        ValueError,
        ValueError,
        ("step_fn", "logits.shape=("),
    ),
    (
        "beam/step-attention-rows",
        dict(step_fn=_bad_attention),
        ValueError,
        RUNTIME,
        ("step_fn", "attention.shape=(1, 3), N=4"),
        ("step_fn", "attention", "[1]", "[4]"),
    ),
    (
        "beam/step-state-shape",
        dict(step_fn=_bad_state),
        ValueError,
        ValueError,
        ("step_fn", "state shape"),
    ),
    (
        "beam/step-returns-pair",
        dict(step_fn=_bad_tuple),
        ValueError,
        ValueError,
        ("step_fn", "length 2"),
    ),
    (
        "greedy/max-length-0",
        dict(search="greedy", max_length=0),
        ValueError,
        RUNTIME,
        ("max_length", "max_length=0"),
        ("max_length", "[0]"),
    ),
    (
        "greedy/end-token-=-vocab",
        dict(search="greedy", end_token=VOCAB),
        ValueError,
        ValueError,
        ("end_token", f"end_token={VOCAB}"),
    ),
    (
        "greedy/step-logit-rows",
        dict(search="greedy", step_fn=_bad_rows),
        ValueError,
        ValueError,
        ("step_fn", "logits.shape=(1, 5), N=2"),
    ),
    (
        "greedy/step-state-shape",
        dict(search="greedy", step_fn=_bad_state),
        ValueError,
        ValueError,
        ("step_fn", "state shape"),
    ),
    (
        "sample/temperature-0",
        dict(search="sample", temperature=0.0),
        ValueError,
        ValueError,
        ("temperature", "0.0"),
    ),
    ("sample/top-k--1", dict(search="sample", top_k=-1), ValueError, ValueError, ("top_k", "-1")),
]


def _search(mode, kwargs):
    kwargs = dict(kwargs)
    search = kwargs.pop("search", "beam")
    step_fn = kwargs.pop("step_fn", _step)
    start = kwargs.pop("start_tokens", START)
    end = kwargs.pop("end_token", END)
    fn = {"beam": beam_search, "greedy": greedy_search, "sample": sample_search}[search]
    if search != "beam":
        kwargs.pop("beam_size", None)
    else:
        kwargs.setdefault("beam_size", 2)
    kwargs.setdefault("max_length", 4)
    if mode == "eager":
        return fn(step_fn, STATE, start, end, **kwargs)
    # graph: integer knobs become run-time tensors when they are ints
    dynamic = {
        k: v for k, v in kwargs.items() if k in ("beam_size", "max_length") and isinstance(v, int)
    }
    static = {k: v for k, v in kwargs.items() if k not in dynamic}
    names = sorted(dynamic)

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)] * len(names))
    def run(*values):
        return fn(step_fn, STATE, start, end, **static, **dict(zip(names, values)))

    return run(*[np.int32(dynamic[n]) for n in names])


# ------------------------------------------------------------------- data
TSV_CASES = [
    # (id, file content, (kept, blank, no_tab, undecodable, empty_field), pairs kept)
    ("blank-lines", b"a\tb\n\n   \n\t\nc\td\n", (2, 3, 0, 0, 0), [("a", "b"), ("c", "d")]),
    ("missing-tab", b"a b\nc\td\nno tab at all\n", (1, 0, 2, 0, 0), [("c", "d")]),
    ("latin-1-line", b"caf\xe9\tcaf\xe9\nok\tfine\n", (1, 0, 0, 1, 0), [("ok", "fine")]),
    (
        "mixed-encodings",
        "é\tè\n".encode()
        + "“quoted”\tcp1252\n".encode("cp1252")
        + "日本\tJapan\n".encode("shift_jis")
        + "ü\tu\n".encode(),
        (2, 0, 0, 2, 0),
        [("é", "è"), ("ü", "u")],
    ),
    (
        "truncated-utf8",
        b"ok\tja\n" + "日本".encode()[:-1] + b"\tx\n",
        (1, 0, 0, 1, 0),
        [("ok", "ja")],
    ),
    ("empty-fields", b"\tb\na\t\n \t \nx\ty\n", (1, 1, 0, 0, 2), [("x", "y")]),
    (
        "crlf-and-bom",
        b"\xef\xbb\xbfa\tb\r\n\r\nc\td\r\n",
        (2, 1, 0, 0, 0),
        [("a", "b"), ("c", "d")],
    ),
    ("nul-bytes", b"a\x00\tb\n\x00\x00\n", (1, 0, 1, 0, 0), [("a\x00", "b")]),
    ("only-garbage", b"\xff\xff\n\n\xfe\n", (0, 1, 0, 2, 0), []),
]


# ---------------------------------------------------------------- serving
LONG = ("x" * 99_999 + "y").encode()  # 100k characters
SERVING_BEAM, SERVING_MAX = 3, 6


def _strings(*items):
    return np.array(list(items), dtype=object)


def _beam(inputs=None, beam_size=SERVING_BEAM, max_length=SERVING_MAX, alpha=0.0, beta=0.0):
    return (
        "beam_search",
        {
            "inputs": _strings(b"hello") if inputs is None else inputs,
            "beam_size": np.int32(beam_size),
            "max_length": np.int32(max_length),
            "length_penalty": np.float32(alpha),
            "coverage_penalty": np.float32(beta),
        },
    )


# (id, request, expected): "ok" (answered, finite best score, outputs valid UTF-8) or
# (error type, needles of the message).
SERVING_CASES = [
    ("default/empty-batch", ("serving_default", {"inputs": _strings()}), "ok"),
    ("beam/empty-batch", _beam(_strings()), "ok"),
    ("greedy/empty-batch", ("greedy", {"inputs": _strings()}), "ok"),
    ("default/empty-string", ("serving_default", {"inputs": _strings(b"")}), "ok"),
    ("beam/empty-strings", _beam(_strings(b"", b"hello", b"")), "ok"),
    ("greedy/empty-string", ("greedy", {"inputs": _strings(b"")}), "ok"),
    (
        "default/broken-utf8",
        ("serving_default", {"inputs": _strings(b"caf\xe9 \xff\xfe", b"\xc3")}),
        "ok",
    ),
    ("beam/broken-utf8", _beam(_strings(b"\xed\xa0\x80 surrogate")), "ok"),
    ("greedy/broken-utf8", ("greedy", {"inputs": _strings(b"\x80\x80")}), "ok"),
    ("default/100k-chars", ("serving_default", {"inputs": _strings(LONG)}), "ok"),
    ("beam/100k-chars", _beam(_strings(LONG, b"hi")), "ok"),
    ("greedy/100k-chars", ("greedy", {"inputs": _strings(LONG)}), "ok"),
    ("beam/beam-size-0", _beam(beam_size=0), ("InvalidArgumentError", ("beam_size", "[0]"))),
    ("beam/beam-size--1", _beam(beam_size=-1), ("InvalidArgumentError", ("beam_size", "[-1]"))),
    (
        "beam/beam-size-over-limit",
        _beam(beam_size=65),
        ("InvalidArgumentError", ("beam_size", "[65]")),
    ),
    ("beam/max-length-0", _beam(max_length=0), ("InvalidArgumentError", ("max_length", "[0]"))),
    (
        "beam/max-length-over-limit",
        _beam(max_length=4 * SERVING_MAX + 1),
        ("InvalidArgumentError", ("max_length", f"[{4 * SERVING_MAX + 1}]")),
    ),
    (
        "beam/max-length-2e9",
        _beam(max_length=2_000_000_000),
        ("InvalidArgumentError", ("max_length", "2000000000")),
    ),
    (
        "beam/length-penalty-nan",
        _beam(alpha=float("nan")),
        ("InvalidArgumentError", ("length_penalty", "NaN")),
    ),
    (
        "beam/coverage-penalty-inf",
        _beam(beta=float("inf")),
        ("InvalidArgumentError", ("coverage_penalty", "Inf")),
    ),
    (
        "beam/beam-size-float",
        ("beam_search", dict(_beam()[1], beam_size=np.float32(2))),
        ("InvalidArgumentError", ("beam_size", "float")),
    ),
    (
        "beam/missing-knob",
        ("beam_search", {"inputs": _strings(b"hello")}),
        ("InvalidArgumentError", ("inputs",)),
    ),
    (
        "default/int-inputs",
        ("serving_default", {"inputs": np.array([1, 2], np.int32)}),
        ("InvalidArgumentError", ("inputs", "int32")),
    ),
]


ALL_COUNTS = {
    "layers": len(LAYER_CASES),
    "decoding": 2 * len(DECODING_CASES),
    "data": len(TSV_CASES),
    "serving": len(SERVING_CASES),
}


def test_catalogue_size():
    total = sum(ALL_COUNTS.values())
    print(f"\nbad inputs in the catalogue: {total} {ALL_COUNTS}")
    assert ALL_COUNTS["layers"] >= 80 and ALL_COUNTS["decoding"] >= 40 and total >= 150


# ------------------------------------------------------------------ tests
def _raises(case_feed, error, needles):
    with pytest.raises(Exception) as info:
        case_feed()
    e = info.value
    assert type(e) is error, f"{type(e).__name__}: {e}"
    message = str(e)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


@pytest.mark.parametrize("case", LAYER_CASES, ids=[c.id for c in LAYER_CASES])
def test_layer_bad_input(case):
    _raises(case.feed, case.error, case.needles)


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("case", DECODING_CASES, ids=[c[0] for c in DECODING_CASES])
def test_decoding_bad_input(case, mode):
    _, kwargs, eager_error, graph_error, needles = case[:5]
    error = eager_error if mode == "eager" else graph_error
    if mode == "graph" and len(case) > 5:  # a run-time assertion prints the value as "[v]"
        needles = case[5]
    _raises(lambda: _search(mode, kwargs), error, needles)


def test_decoding_good_inputs_next_to_the_bad_ones():
    """The catalogue's step function and arguments are valid: only the bad knob fails."""
    for mode in ("eager", "graph"):
        out = _search(mode, {})
        assert out["sequences"].shape == (B, 2, 4)
        np.testing.assert_array_equal(out["lengths"].numpy(), [[2, 4], [2, 4]])
    out = _search(
        "eager", {"end_token": -1}
    )  # -1: no end token, every hypothesis runs to max_length
    np.testing.assert_array_equal(out["lengths"].numpy(), 4)


@pytest.mark.parametrize("case", TSV_CASES, ids=[c[0] for c in TSV_CASES])
def test_tsv_bad_lines_are_skipped_and_counted(case, tmp_path):
    _, content, counts, pairs = case
    path = tmp_path / "bad.tsv"
    path.write_bytes(content)
    got, report = load_tsv(path)
    assert got == pairs
    assert (
        report.kept,
        report.blank,
        report.no_tab,
        report.undecodable,
        report.empty_field,
    ) == counts
    assert report.lines == sum(counts) + report.too_long
    assert report.skipped == report.lines - report.kept


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Every serving request answered by one process that loads the export like the server."""
    from keras_attn.serving.export import export_text_model
    from keras_attn.serving.harness import ServingRequest, run_server_way
    from tests.serving.toy_model import make_toy

    model, tokenizer = make_toy()
    base = tmp_path_factory.mktemp("bad_inputs_export") / "toy"
    path = export_text_model(
        model,
        tokenizer,
        str(base),
        beam_size=SERVING_BEAM,
        max_length=SERVING_MAX,
        max_input_length=16,
    )
    requests = [ServingRequest(name, inputs) for _, (name, inputs), _ in SERVING_CASES]
    result = run_server_way(path, requests)
    return {case[0]: response for case, response in zip(SERVING_CASES, result.responses)}


@pytest.mark.processes  # the export answered the server's way: make test-processes
@pytest.mark.parametrize("case", SERVING_CASES, ids=[c[0] for c in SERVING_CASES])
def test_serving_bad_input(case, served):
    key, (signature, inputs), expected = case
    response = served[key]
    if expected == "ok":
        assert response.ok, f"{response.error_type}: {response.error_message}"
        outputs = response.outputs
        batch = len(inputs["inputs"])
        assert outputs["outputs"].shape[0] == batch and outputs["scores"].shape[0] == batch
        for text in np.asarray(outputs["outputs"]).reshape(-1):
            text.decode("utf-8")
        best = outputs["scores"] if outputs["scores"].ndim == 1 else outputs["scores"][:, 0]
        assert np.all(np.isfinite(best))
        if "alignments" in outputs:
            assert np.all(np.isfinite(outputs["alignments"]))
            assert outputs["alignments"].shape[-1] <= 16  # sources cut to max_input_length
    else:
        error_type, needles = expected
        assert response.error_type == error_type, response
        for needle in needles:
            assert needle in response.error_message, (needle, response.error_message)


# ------------------------------------------- decoding: batches, seeds, NaN logits, knob ranges
# Each case failed on the first decoding engine: greedy ran with an initial state of
# another batch, NaN logits gave empty beams / NaN scores, a string seed and out-of-range knobs
# (length_penalty=-1000 or 1e6, coverage_penalty=1e30) returned garbage. Ranges: docs/decoding.md.
def _nan_step(tokens, state, step):
    """NaN in the last row's logits from step 0 on (the peeled first step and the loop)."""
    logits, state, attention = _step(tokens, state, step)
    last = tf.equal(tf.range(tf.shape(tokens)[0]), tf.shape(tokens)[0] - 1)[:, None]
    return tf.where(last, float("nan"), logits), state, attention


def _inf_step(tokens, state, step):
    logits, state, attention = _step(tokens, state, step)
    return logits + tf.one_hot(1, VOCAB) * float("inf"), state, attention


def _control_search(mode, search, **kwargs):
    fn = {"beam": beam_search, "greedy": greedy_search, "sample": sample_search}[search]
    step_fn = kwargs.pop("step_fn", _step)
    state = kwargs.pop("initial_state", STATE)
    if search == "beam":
        kwargs.setdefault("beam_size", 2)
    kwargs.setdefault("max_length", 4)
    if mode == "eager":
        return fn(step_fn, state, START, END, **kwargs)
    return tf.function(lambda: fn(step_fn, state, START, END, **kwargs))()


CONTROL_CASES = [
    (s, name, kwargs, error, needles)
    for s in ("beam", "greedy", "sample")
    for name, kwargs, error, needles in [
        (
            "initial-state-batch-3",
            dict(initial_state=np.zeros((3, 3), "float32")),
            ValueError,
            ("initial_state", "(3, 3)"),
        ),
        (
            "source-mask-batch-3",
            dict(source_mask=np.ones((3, 3), bool)),
            ValueError,
            ("source_mask", "(3, 3)"),
        ),
        ("nan-logits", dict(step_fn=_nan_step), RUNTIME, ("step_fn", "NaN")),
    ]
] + [
    (
        "greedy",
        "initial-state-scalar",
        dict(initial_state=np.float32(0)),
        ValueError,
        ("initial_state", "scalar"),
    ),
    ("beam", "inf-logits", dict(step_fn=_inf_step), RUNTIME, ("step_fn", "+inf")),
    (
        "beam",
        "length-penalty--1000",
        dict(length_penalty=-1000.0),
        ValueError,
        ("length_penalty", "[0, 10]", "-1000"),
    ),
    (
        "greedy",
        "length-penalty-1e6",
        dict(length_penalty=1e6),
        ValueError,
        ("length_penalty", "1000000.0"),
    ),
    (
        "beam",
        "coverage-penalty-1e30",
        dict(coverage_penalty=1e30),
        ValueError,
        ("coverage_penalty", "1e+30"),
    ),
    (
        "greedy",
        "eos-penalty-100",
        dict(eos_penalty=100.0),
        ValueError,
        ("eos_penalty", "[-10, 10]"),
    ),
    (
        "sample",
        "repetition-penalty-0",
        dict(repetition_penalty=0.0),
        ValueError,
        ("repetition_penalty", "[0.01, 100]"),
    ),
    ("beam", "min-length--1", dict(min_length=-1), ValueError, ("min_length", "min_length=-1")),
    (
        "greedy",
        "min-length-past-max",
        dict(min_length=5),
        ValueError,
        ("min_length", "max_length=4"),
    ),
    (
        "sample",
        "ngram--1",
        dict(no_repeat_ngram_size=-1),
        ValueError,
        ("no_repeat_ngram_size", "-1"),
    ),
    (
        "beam",
        "bad-token-ids-out-of-vocab",
        dict(bad_token_ids=[VOCAB]),
        ValueError,
        ("bad_token_ids", f"[{VOCAB}]"),
    ),
    ("sample", "seed-string", dict(seed="abc"), ValueError, ("seed", "'abc'")),
    ("sample", "seed-float", dict(seed=1.5), ValueError, ("seed", "1.5")),
    ("sample", "top-p-0", dict(top_p=0.0), ValueError, ("top_p", "(0, 1]")),
    ("sample", "top-p-1.5", dict(top_p=1.5), ValueError, ("top_p", "1.5")),
    (
        "sample",
        "temperature-1e6",
        dict(temperature=1e6),
        ValueError,
        ("temperature", "[0.01, 100]"),
    ),
]
ALL_COUNTS["decoding"] += len(CONTROL_CASES)


@pytest.mark.parametrize("case", CONTROL_CASES, ids=[f"{c[0]}/{c[1]}" for c in CONTROL_CASES])
def test_decoding_batch_seed_nan_and_range(case):
    """Eagerly; the NaN check also in a tf.function (a run-time assertion in the loop)."""
    search, _, kwargs, error, needles = case
    modes = ("eager", "graph") if error is RUNTIME else ("eager",)
    for mode in modes:
        _raises(lambda: _control_search(mode, search, **dict(kwargs)), error, needles)


@pytest.mark.parametrize(
    "name,value,search",
    [
        ("length_penalty", -1000.0, "beam"),
        ("coverage_penalty", 1e30, "greedy"),
        ("repetition_penalty", 1e3, "sample"),
        ("top_p", 2.0, "sample"),
    ],
)
def test_decoding_knob_ranges_at_run_time(name, value, search):
    """Knobs fed as tensors (as in a SavedModel) fail at run time naming the argument."""
    run = tf.function(
        lambda v: _control_search("graph", search, **{name: v}),
        input_signature=[tf.TensorSpec([], tf.float32)],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=name):
        run(tf.constant(value))
    run(tf.constant(1.0 if name in ("repetition_penalty", "top_p", "temperature") else 0.5))


def test_decoding_initial_state_batch_checked_at_run_time():
    """A batch known only at run time: the mismatch is an InvalidArgumentError, not a silent run."""
    run = tf.function(
        lambda state: greedy_search(_step, state, START, END, max_length=4),
        input_signature=[tf.TensorSpec([None, 3], tf.float32)],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="initial_state"):
        run(np.zeros((3, 3), "float32"))
    assert run(STATE)["sequences"].shape == (B, 4)


# ------------------------------------------- errors that were unclear
# (attention layers, the RNN decoder, positions). Counted in the catalogue's "layers".
ISSUE_20_LAYER_CASES = [
    Case(
        f"{name}/query-batch-vs-value-batch",
        lambda m=make: m()(Q, V[:1]),
        ValueError,
        ("query", "value", "(2, 3, 4)", "(1, 5, 6)"),
    )
    for name, make in CROSS.items()
] + [
    Case(
        "luong-local-m/no-source-positions",
        lambda: LuongAttention("general", alignment="local-m")(Q, V[:, :0]),
        ValueError,
        ("value", "(2, 0, 6)"),
    ),
    Case(
        "luong-local-p/no-source-positions",
        lambda: LuongAttention("general", alignment="local-p")(Q, V[:, :0]),
        ValueError,
        ("value", "(2, 0, 6)"),
    ),
    Case(
        "hard/no-source-positions",
        lambda: HardAttention()(Q, V[:, :0]),
        ValueError,
        ("value", "(2, 0, 6)"),
    ),
    Case(
        "hard/dropout", lambda: HardAttention(dropout=0.5), ValueError, ("dropout", "dropout=0.5")
    ),
    Case(
        "luong/position-float",
        lambda: LuongAttention("general", alignment="local-m")(Q[:, 0], V, position=2.7),
        ValueError,
        ("position", "2.7"),
    ),
    Case(
        "luong/position-float-tensor",
        lambda: LuongAttention("general", alignment="local-m")(
            Q[:, 0], V, position=tf.constant(2.7)
        ),
        ValueError,
        ("position", "float32"),
    ),
    Case(
        "luong/position-batch",
        lambda: LuongAttention("general", alignment="local-m")(Q[:, 0], V, position=[3]),
        ValueError,
        ("position", "(1,)", "(2,)"),
    ),
    Case(
        "decoder-rnn/batch-0",
        lambda: AttentionDecoder(_cell())(Q[:0], V[:0]),
        ValueError,
        ("inputs", "(0, 3, 4)"),
    ),
    Case(
        "decoder-rnn/empty-memory",
        lambda: AttentionDecoder(_cell())(Q, V[:, :0]),
        ValueError,
        ("memory", "(2, 0, 6)"),
    ),
    Case(
        "decoder-rnn/memory-batch",
        lambda: AttentionDecoder(_cell())(Q, V[:1]),
        ValueError,
        ("inputs", "memory", "(1, 5, 6)"),
    ),
    Case(
        "pe/start-index-tensor-past-table",
        lambda: built(PositionalEncoding("learned", max_length=4), Q)(
            Q, start_index=tf.constant(2)
        ),
        ValueError,
        ("max_length", "start_index=2"),
    ),
    Case(
        "pe/start-index-float",
        lambda: PositionalEncoding()(Q, start_index=1.5),
        ValueError,
        ("start_index", "1.5"),
    ),
]
ALL_COUNTS["layers"] += len(ISSUE_20_LAYER_CASES)


@pytest.mark.parametrize("case", ISSUE_20_LAYER_CASES, ids=[c.id for c in ISSUE_20_LAYER_CASES])
def test_issue_20_layer_bad_input(case):
    _raises(case.feed, case.error, case.needles)


# ------------------------------------------ constrained decoding: prefix, phrases, suppression
# A clear error naming the argument when the bad input is known when the search is built; a
# documented answer (`constraints_met` False, finite scores) when only the run finds it out.
def _constrained(search="beam", **kwargs):
    fn = {"beam": beam_search, "greedy": greedy_search, "sample": sample_search}[search]
    if search == "beam":
        kwargs.setdefault("beam_size", 2)
    kwargs.setdefault("max_length", 4)
    return fn(_step, STATE, START, END, **kwargs)


CONSTRAINT_CASES = [
    Case(
        "beam/phrase-longer-than-max-length",
        lambda: _constrained(constraint_ids=[[[3, 4, 3, 4, 3]], [[-1, -1, -1, -1, -1]]]),
        ValueError,
        ("constraint_ids", "max_length=4", "5 tokens"),
    ),
    Case(
        "greedy/prefix-longer-than-max-length",
        lambda: _constrained("greedy", prefix_ids=[[3, 4, 3, 4, 3], [3, -1, -1, -1, -1]]),
        ValueError,
        ("prefix_ids", "max_length=4", "5 tokens"),
    ),
    Case(
        "beam/prefix-holds-the-end-token",
        lambda: _constrained(prefix_ids=[[3, END], [3, -1]]),
        ValueError,
        ("prefix_ids", "end token", f"{END}"),
    ),
    Case(
        "beam/phrase-holds-the-end-token",
        lambda: _constrained(constraint_ids=[[[END]], [[3]]]),
        ValueError,
        ("constraint_ids", "end token"),
    ),
    Case(
        "sample/phrase-out-of-vocab",
        lambda: _constrained("sample", constraint_ids=[[[VOCAB]], [[3]]], seed=1),
        ValueError,
        ("constraint_ids", f"{VOCAB}"),
    ),
    Case(
        "beam/prefix-id-below--1",
        lambda: _constrained(prefix_ids=[[-2], [3]]),
        ValueError,
        ("prefix_ids", "-2"),
    ),
    Case(
        "beam/phrase-padding-inside",
        lambda: _constrained(constraint_ids=[[[3, -1, 4]], [[3, -1, -1]]]),
        ValueError,
        ("constraint_ids", "right-padded"),
    ),
    Case(
        "beam/prefix-holds-a-suppressed-sequence",
        lambda: _constrained(prefix_ids=[[3, 4], [3, -1]], suppress_ids=[[3, 4]]),
        ValueError,
        ("prefix_ids", "suppress_ids", "[3, 4]"),
    ),
    Case(
        "beam/constraint-ids-rank-2",
        lambda: _constrained(constraint_ids=[[3], [4]]),
        ValueError,
        ("constraint_ids", "[B, C, L]"),
    ),
    Case(
        "beam/prefix-batch-3",
        lambda: _constrained(prefix_ids=[[3], [3], [3]]),
        ValueError,
        ("prefix_ids",),
    ),
]
ALL_COUNTS["decoding"] += len(CONSTRAINT_CASES)


@pytest.mark.parametrize("case", CONSTRAINT_CASES, ids=[c.id for c in CONSTRAINT_CASES])
def test_constraint_bad_input(case):
    _raises(case.feed, case.error, case.needles)


def _in_graph(**tensors):
    """The beam with the constraints and `max_length` as run-time tensors (as in a SavedModel):
    nothing is known when the search is built."""
    max_length = tensors.pop("max_length", 4)

    @tf.function
    def run(max_length, tensors):
        return _constrained(max_length=max_length, **tensors)

    return run(tf.constant(max_length), {k: tf.constant(v, tf.int32) for k, v in tensors.items()})


# (id, arguments, the documented answer of the best hypothesis: constraints met or not)
CONSTRAINT_ANSWERS = [
    # more phrase tokens than max_length, found at run time: answered, not met
    (
        "phrase-longer-than-max-length",
        dict(constraint_ids=[[[3, 4, 3, 4, 3]], [[3, 4, 3, 4, 3]]]),
        False,
    ),
    ("more-phrases-than-fit", dict(constraint_ids=[[[3, 3], [4, 4], [1, 1]]] * 2), False),
    ("phrases-fit", dict(constraint_ids=[[[3, 4], [4, 3]]] * 2), True),
    # C = 0, L = 0, only padding: no phrase, met, the plain search's answer
    ("no-phrases-c-0", dict(constraint_ids=np.zeros((B, 0, 2), np.int32)), True),
    ("no-phrases-l-0", dict(constraint_ids=np.zeros((B, 2, 0), np.int32)), True),
    ("only-padding", dict(constraint_ids=[[[-1, -1]], [[-1, -1]]]), True),
    # a prefix past max_length at run time is cut; with phrases it leaves them no room
    (
        "prefix-past-max-length",
        dict(prefix_ids=[[3, 4, 3, 4, 3, 4]] * 2, constraint_ids=[[[1]]] * 2),
        False,
    ),
    # a run-time prefix holding a suppressed sequence: the prefix wins (it is forced)
    ("prefix-and-suppression", dict(prefix_ids=[[3, 4]] * 2, suppress_ids=[[3, 4]]), None),
]
ALL_COUNTS["decoding"] += len(CONSTRAINT_ANSWERS)


@pytest.mark.parametrize("case", CONSTRAINT_ANSWERS, ids=[c[0] for c in CONSTRAINT_ANSWERS])
def test_constraint_documented_answer(case):
    _, tensors, met = case
    out = _in_graph(**tensors)
    scores = out["scores"].numpy()
    assert np.isfinite(scores[:, 0]).all() and np.isfinite(out["token_log_probs"].numpy()).all()
    np.testing.assert_allclose(
        out["token_log_probs"].numpy().sum(-1)[:, 0], out["log_probs"].numpy()[:, 0], atol=1e-4
    )
    if met is not None:
        assert (out["constraints_met"].numpy()[:, 0] == met).all()
    else:
        assert (out["sequences"].numpy()[:, 0, :2] == [3, 4]).all()
    if "no-phrases" in case[0] or case[0] == "only-padding":
        plain = _in_graph()
        np.testing.assert_array_equal(out["sequences"].numpy(), plain["sequences"].numpy())
