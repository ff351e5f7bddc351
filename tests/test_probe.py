"""Bad and extreme input on the newest surfaces, kept as regression tests: broken gettext
catalogues, constrained decoding at its edges, the served signatures outside their buckets,
the ring cache and chunked prefill, `--init-from` a run that does not match.

The rule checked: bad input gets a clear error naming the argument (or the file), or a
sensible documented answer; never a NaN, a silent wrong answer, a hang or a crash.
"""

import io
import json
import struct

import numpy as np
import pytest

from keras_attn.data import BrokenCatalogueError, catalogue_pairs, read_catalogue
from keras_attn.data.corpora import build_corpus

# ------------------------------------------------------------------ broken gettext catalogues
HEADER = (
    'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
    '"Plural-Forms: nplurals=2; plural=(n != 1);\\n"\n\n'
)
GOOD = [("Open file", "Abrir archivo"), ("Close window", "Cerrar ventana"), ("Save", "Guardar")]
PO = HEADER + "".join(f'msgid "{s}"\nmsgstr "{t}"\n\n' for s, t in GOOD)


def _mo(pairs, plural=None):
    from babel.messages.catalog import Catalog
    from babel.messages.mofile import write_mo

    catalog = Catalog(locale="es")
    for source, target in pairs:
        catalog.add(source, target)
    if plural:
        catalog.add(*plural)
    buf = io.BytesIO()
    write_mo(buf, catalog)
    return buf.getvalue()


def _mo_field(data, table_field, index, value):
    """`data` with the (length, offset) of string `index` of the table named by header field
    `table_field` (3: msgids, 4: msgstrs) replaced by `value`."""
    data = bytearray(data)
    table = struct.unpack("<I", data[4 * table_field : 4 * table_field + 4])[0]
    data[table + 8 * index : table + 8 * index + 8] = struct.pack("<2I", *value)
    return bytes(data)


def _mo_string(data, table_field, index):
    table = struct.unpack("<I", data[4 * table_field : 4 * table_field + 4])[0]
    return struct.unpack("<2I", data[table + 8 * index : table + 8 * index + 8])


GOOD_MO = _mo(GOOD)
_LAST = _mo_string(GOOD_MO, 4, 3)  # the msgstr stored last in the file (msgid order: sorted)

# (id, file name, bytes, words the reason holds): each must be refused whole, named.
BROKEN = [
    ("mo-empty", "empty.mo", b"", ("0 bytes", "too short")),
    ("mo-header-cut", "cut.mo", GOOD_MO[:12], ("12 bytes", "too short")),
    ("mo-table-cut", "table.mo", GOOD_MO[:30], ("table", "past the end")),
    # the last translation cut in the middle: its first bytes must not become a pair
    ("mo-truncated", "trunc.mo", GOOD_MO[: _LAST[1] + 4], ("msgstr", "past the end")),
    ("mo-bad-magic", "magic.mo", b"\0\0\0\0" + GOOD_MO[4:], ("magic number",)),
    (
        "mo-huge-count",
        "count.mo",
        GOOD_MO[:8] + struct.pack("<I", 10**9) + GOOD_MO[12:],
        ("1000000000",),
    ),
    (
        "mo-offset-past-end",
        "offset.mo",
        _mo_field(GOOD_MO, 4, 1, (14, len(GOOD_MO) + 100)),
        ("msgstr 1", "past the end"),
    ),
    # a length running over the NUL terminator into the next strings
    (
        "mo-length-huge",
        "length.mo",
        _mo_field(GOOD_MO, 4, 1, (10**6, _mo_string(GOOD_MO, 4, 1)[1])),
        ("msgstr 1",),
    ),
    ("po-nul-in-string", "nul.po", PO.replace("Guardar", "Guar\0dar").encode(), ("NUL",)),
    ("po-utf16", "utf16.po", PO.encode("utf-16"), ("NUL",)),
    (
        "po-unclosed-quote",
        "quote.po",
        PO.replace('"Cerrar ventana"', '"Cerrar ventana').encode(),
        ("line 10", "quoted string"),
    ),
    (
        "po-missing-quote",
        "open.po",
        PO.replace('msgid "Save"', 'msgid Save"').encode(),
        ("line 12",),
    ),
    (
        "po-latin1-declared-utf8",
        "latin1.po",
        PO.replace("Guardar", "Guardar\xe9").encode("latin-1"),
        ("charset",),
    ),
]


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("case", BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_catalogue_is_refused_naming_the_file_and_skipped_among_good_ones(case, tmp_path):
    _, name, data, words = case
    path = _write(tmp_path, name, data)
    with pytest.raises(BrokenCatalogueError) as info:
        read_catalogue(path)
    message = str(info.value)
    assert "`path`" in message and path in message
    for word in words:
        assert word in info.value.reason
    assert isinstance(info.value, ValueError)
    # among good catalogues: skipped whole, listed with its reason, the others read
    bad = path
    good_po = _write(tmp_path, "good.po", PO.encode())
    other = [("Print", "Imprimir"), ("Quit", "Salir")]
    good_mo = _write(tmp_path, "other.mo", _mo(other))
    pairs, report = catalogue_pairs("es", paths=[good_po, bad, good_mo], packages=())
    assert pairs == GOOD + other
    assert [p for p, _ in report.unreadable] == [bad] and name in str(report)
    assert report.catalogues == [good_po, good_mo]
    assert report.entries == 2 + len(GOOD) + len(other)  # two headers
    corpus = build_corpus(
        "es",
        groups={"a": [good_po], "b": [bad, good_mo]},
        test_pairs=1,
        val_pairs=1,
        test_in_domain_pairs=0,
    )
    assert [p for p, _ in corpus.report.unreadable] == [bad]
    assert corpus.report.entries == report.entries
    assert sorted(p for split in corpus.splits.values() for p in split) == sorted(GOOD + other)
    assert json.loads(json.dumps(corpus.manifest))["unreadable"][0][1] == report.unreadable[0][1]
    assert bad in str(corpus.report)


# (id, bytes): files read as the plain catalogue `PO` reads
SAME_AS_PLAIN = [
    ("bom", b"\xef\xbb\xbf" + PO.encode()),
    ("crlf", PO.replace("\n", "\r\n").encode()),
    ("bom-crlf", b"\xef\xbb\xbf" + PO.replace("\n", "\r\n").encode()),
    # a template's header left as generated: babel cannot parse it, and it is not read
    (
        "template-header",
        PO.replace("nplurals=2; plural=(n != 1);", "nplurals=INTEGER; plural=EXPRESSION;")
        .replace('"Content-Type', '"Language: farsi/persian\\n"\n"Content-Type')
        .encode(),
    ),
]


@pytest.mark.parametrize("case", SAME_AS_PLAIN, ids=[c[0] for c in SAME_AS_PLAIN])
def test_bom_crlf_and_template_headers_read_as_the_plain_file(case, tmp_path):
    entries = read_catalogue(_write(tmp_path, "x.po", case[1]))
    assert entries == [("", "", "header")] + [(s, t, "ok") for s, t in GOOD]


def test_empty_po_and_mismatched_plural_forms_are_counted(tmp_path):
    assert read_catalogue(_write(tmp_path, "empty.po", b"")) == [("", "", "header")]
    extra = (
        'msgid "one file"\nmsgid_plural "%d files"\nmsgstr[0] "un archivo"\n'
        'msgstr[1] "%d archivos"\nmsgstr[2] "x"\nmsgstr[3] "y"\n\n'
        'msgid "one dir"\nmsgid_plural "%d dirs"\nmsgstr[0] "un dir"\n'
    )
    path = _write(tmp_path, "plural.po", (PO + extra).encode())
    mo = _write(
        tmp_path,
        "plural.mo",
        _mo([("Print", "Imprimir")], (("a page", "%d pages"), ("una", "%d", "x"))),
    )
    pairs, report = catalogue_pairs("es", paths=[path, mo], packages=())
    assert pairs == GOOD + [("Print", "Imprimir")]
    assert report.plural == 3 and report.header == 2 and not report.unreadable
    assert report.kept + report.plural + report.header == report.entries


# ------------------------------------------------------ constrained decoding at its edges
# A bigram-free toy: the logits favour token `step + 1` (the end token 2 at step 1), so an
# unconstrained search answers [1, 2] and every constraint visibly changes the answer.
VOCAB, END, B = 5, 2, 2


def _step(tokens, state, step):
    import tensorflow as tf

    n = tf.shape(tokens)[0]
    logits = tf.zeros(tf.stack([n, VOCAB])) + tf.one_hot(tf.minimum(step + 1, VOCAB - 1), VOCAB)
    return logits, state, None


def _search(kind, max_length=4, jit=False, **arrays):
    """The search with `arrays` as run-time tensors of unknown shape (as a served signature
    feeds them), or as given when `jit` is None."""
    import tensorflow as tf

    from keras_attn.decoding import beam_search, greedy_search, sample_search

    def run(**kw):
        state, start = tf.zeros((B, 1)), tf.ones((B,), tf.int32)
        if kind == "beam":
            return beam_search(_step, state, start, END, beam_size=2, max_length=max_length, **kw)
        if kind == "sample":
            return sample_search(_step, state, start, END, max_length=max_length, seed=1, **kw)
        return greedy_search(_step, state, start, END, max_length=max_length, **kw)

    if jit is None:
        out = run(**arrays)
    else:
        names = list(arrays)
        specs = [tf.TensorSpec([None] * np.ndim(arrays[n]), tf.int32) for n in names]
        fn = tf.function(lambda *xs: run(**dict(zip(names, xs))), input_signature=specs)
        if jit:
            fn = tf.function(fn, jit_compile=True)
        out = fn(*[tf.constant(np.asarray(arrays[n]), tf.int32) for n in names])
    return {k: v.numpy() for k, v in out.items()}


def _best(out):
    """(sequence, length, score, met) of the best hypothesis of each row."""
    seq, length, score = out["sequences"], out["lengths"], out["scores"]
    met = out.get("constraints_met")
    if seq.ndim == 3:
        seq, length, score = seq[:, 0], length[:, 0], score[:, 0]
        met = None if met is None else met[:, 0]
    return [list(s[:n]) for s, n in zip(seq, length)], score, met


def _count(row, phrase):
    return sum(row[i : i + len(phrase)] == phrase for i in range(len(row) - len(phrase) + 1))


def _contains(row, phrase):
    return _count(row, phrase) > 0


# (id, search, max_length, jit (None: static arrays), arrays, what the best must be: "met",
# "not met" or "plain" (the search without the constraints))
EDGE_ANSWERS = [
    (
        "prefix-meets-the-phrase",
        "beam",
        2,
        None,
        {"prefix_ids": [[3, 4]] * 2, "constraint_ids": [[[3, 4]]] * 2},
        "met",
    ),
    (
        "phrase-after-a-full-prefix",
        "greedy",
        2,
        False,
        {"prefix_ids": [[3, 4]] * 2, "constraint_ids": [[[1]]] * 2},
        "not met",
    ),
    (
        "phrase-holds-a-suppressed-token",
        "beam",
        6,
        False,
        {"constraint_ids": [[[3, 4]]] * 2, "suppress_ids": [[4]]},
        "not met",
    ),
    (
        "phrase-holds-a-suppressed-token-greedy",
        "greedy",
        6,
        None,
        {"constraint_ids": [[[3, 4]]] * 2, "suppress_ids": [[4]]},
        "not met",
    ),
    (
        "prefix-against-phrases-sample",
        "sample",
        4,
        False,
        {"prefix_ids": [[3, 3, 3]] * 2, "constraint_ids": [[[4, 4]]] * 2},
        "not met",
    ),
    (
        "fifty-phrases-in-four-steps",
        "beam",
        4,
        None,
        {"constraint_ids": np.full((2, 50, 1), 3)},
        "not met",
    ),
    (
        "phrase-padded-to-500",
        "greedy",
        4,
        False,
        {"constraint_ids": np.pad([[[3]], [[4]]], [[0, 0], [0, 0], [0, 499]], constant_values=-1)},
        "met",
    ),
    ("run-time-c-0", "beam", 6, False, {"constraint_ids": np.zeros((2, 0, 3))}, "plain"),
    ("run-time-l-0", "sample", 6, False, {"constraint_ids": np.zeros((2, 3, 0))}, "plain"),
    ("run-time-p-0", "greedy", 6, False, {"prefix_ids": np.zeros((2, 0))}, "plain"),
    ("run-time-s-0", "beam", 6, False, {"suppress_ids": np.zeros((0, 2))}, "plain"),
    ("suppress-l-0", "beam", 6, None, {"suppress_ids": np.zeros((2, 0), np.int32)}, "plain"),
    (
        "all-minus-one",
        "greedy",
        4,
        None,
        {"prefix_ids": [[-1]] * 2, "constraint_ids": [[[-1]]] * 2, "suppress_ids": [[-1]]},
        "plain",
    ),
    ("xla-c-0", "beam", 6, True, {"constraint_ids": np.zeros((2, 0, 3))}, "plain"),
    (
        "xla-phrases-fit",
        "beam",
        6,
        True,
        {"constraint_ids": [[[4, 3], [1, -1]]] * 2},
        "met",
    ),
    ("xla-long-prefix-cut", "sample", 6, True, {"prefix_ids": [[3, 4] * 5] * 2}, None),
    ("uint8-ids", "beam", 4, None, {"prefix_ids": np.array([[3], [4]], np.uint8)}, None),
]


@pytest.mark.parametrize("case", EDGE_ANSWERS, ids=[c[0] for c in EDGE_ANSWERS])
def test_constrained_search_edges_answer_as_documented(case):
    name, kind, max_length, jit, arrays, expect = case
    out = _search(kind, max_length, jit, **arrays)
    rows, scores, met = _best(out)
    assert np.isfinite(scores).all(), scores  # the best of each row is a real answer
    for values in out.values():
        if values.dtype.kind == "f":
            assert not np.isnan(values).any()
    prefix = np.asarray(arrays.get("prefix_ids", np.zeros((B, 0))))
    for b, row in enumerate(rows):
        forced = [int(t) for t in prefix[b] if t >= 0][:max_length]
        assert row[: len(forced)] == forced  # the prefix wins, cut at max_length
        for seq in np.asarray(arrays.get("suppress_ids", np.zeros((0, 0)))):
            seq = [int(t) for t in seq if t >= 0]
            assert not seq or not _contains(row[len(forced) :], seq)
        phrases = [
            [int(t) for t in p if t >= 0]
            for p in np.asarray(arrays.get("constraint_ids", np.zeros((B, 0, 0))))[b]
        ]
        # a phrase given n times must occur n times (docs/decoding.md)
        holds = all(_count(row, p) >= phrases.count(p) for p in phrases if p)
        if met is not None:
            assert met[b] == holds  # the flag tells the truth
    if expect == "met":
        assert met.all()
    elif expect == "not met":
        assert not met.any()
    elif expect == "plain":
        plain = _search(kind, max_length, None)
        assert rows == _best(plain)[0]
        assert met is None or met.all()


def test_ragged_and_wrongly_typed_ids_are_refused():
    # ids of the wrong dtype name the argument; a value that is no rectangle is refused
    for bad in ([[3.0], [3.0]], [[True], [False]], [["a"], ["b"]]):
        with pytest.raises(ValueError, match="`prefix_ids` must be integer ids"):
            _search("beam", 4, None, prefix_ids=np.array(bad))
    with pytest.raises(ValueError):
        _search("greedy", 4, None, prefix_ids=[[3, 4], [3]])
    with pytest.raises(ValueError, match="`suppress_ids` must have shape"):
        _search("beam", 4, None, suppress_ids=[[[3]]])


# ------------------------------------------- served signatures outside their buckets
# The toy translator exported once (char tokenizer, fixed random weights) with the constrained
# signature's XLA twin on one bucket, every request answered by one fresh process loading the
# export the way TensorFlow Serving does.
SERVED_MAX = 6


def _strings(*items):
    return np.array([t.encode() if isinstance(t, str) else t for t in items], dtype=object)


def _table(rows):
    return np.array([[c.encode() if isinstance(c, str) else c for c in r] for r in rows], object)


BEAM_KNOBS = {
    "beam_size": np.int32(2),
    "max_length": np.int32(SERVED_MAX),
    "length_penalty": np.float32(0.0),
    "coverage_penalty": np.float32(0.0),
}
SAMPLE_KNOBS = {
    "temperature": np.float32(1.0),
    "top_k": np.int32(0),
    "top_p": np.float32(1.0),
    "seed": np.int32(3),
    "max_length": np.int32(SERVED_MAX),
    "min_length": np.int32(0),
    "no_repeat_ngram_size": np.int32(0),
    "repetition_penalty": np.float32(1.0),
}
SNOWMAN = "\u2603"  # not in the toy's vocabulary


def _constrained(texts, prefix, rows, xla=False, **knobs):
    from keras_attn.serving.harness import ServingRequest

    return ServingRequest(
        "beam_search_constrained" + ("_xla" if xla else ""),
        {"inputs": _strings(*texts), "prefix": _strings(*prefix), "constraints": _table(rows)}
        | BEAM_KNOBS
        | knobs,
    )


def _served_requests():
    from keras_attn.serving.harness import ServingRequest

    long_text = "x" * 10_000
    return {
        "sample/batch-1000": ServingRequest(
            "sample", {"inputs": _strings(*["hello world"] * 1000)} | SAMPLE_KNOBS
        ),
        "sample/10k-empty-broken": ServingRequest(
            "sample", {"inputs": _strings(long_text, "", b"\xff\xfe\xc3(")} | SAMPLE_KNOBS
        ),
        # a 10k-character phrase and prefix: answered (phrase not met, prefix cut), never an
        # allocation of the phrase length squared
        "constrained/10k-phrase": _constrained(["fox"], ["x" * 10_000], [["y" * 10_000]]),
        "constrained_xla/10k-phrase": _constrained(["fox"], [""], [["y" * 10_000, "lo"]], xla=True),
        "constrained/500-char-phrase": _constrained(["hello"], [""], [["q" * 500]]),
        # a phrase the target vocabulary cannot spell: not forced as the unknown token, and
        # the answer says it is not met
        "constrained/unspelled-phrase": _constrained(
            ["hello", "hello"], ["", ""], [[SNOWMAN, "lo"], ["lo", ""]]
        ),
        "constrained_xla/unspelled-phrase": _constrained(
            ["hello"],
            [""],
            [["lo", "x" * 5 + SNOWMAN]],
            xla=True,  # the bucket of the 10k
        ),
        "constrained/unspelled-prefix": _constrained(["hello"], [SNOWMAN * 2], [[""]]),
        "constrained/broken-utf8": _constrained(["hello"], [b"\xff\xfe"], [[b"\xc3("]]),
        # too many phrase tokens for the batch: refused by name, not an out-of-memory
        "constrained/too-many-cells": _constrained(
            ["hello"] * 64, [""] * 64, [["lo" * 3] * 100] * 64, beam_size=np.int32(8)
        ),
        "constrained/prefix-rank-2": ServingRequest(
            "beam_search_constrained",
            {
                "inputs": _strings("a"),
                "prefix": np.array([[b"a"]], object),
                "constraints": _table([[""]]),
            }
            | BEAM_KNOBS,
        ),
        "constrained_xla/constraint-rows": _constrained(
            ["a", "b"], ["", ""], [["a"]] * 3, xla=True
        ),
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from keras_attn.serving.export import export_text_model
    from keras_attn.serving.harness import run_server_way
    from tests.serving.toy_model import make_toy

    model, tokenizer = make_toy()
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("probe") / "toy"),
        beam_size=2,
        max_length=SERVED_MAX,
        max_input_length=16,
        xla=("beam_search_constrained",),
        xla_batch_sizes=(4,),
        xla_source_lengths=(16,),
    )
    requests = _served_requests()
    result = run_server_way(path, list(requests.values()), timeout=900)
    return dict(zip(requests, result.responses)), tokenizer, path


def _ok(served, key):
    response = served[0][key]
    assert response.ok, f"{key}: {response.error_type}: {response.error_message}"
    outputs = response.outputs
    for value in outputs.values():
        if value.dtype.kind == "f":
            assert not np.isnan(value).any()
    return outputs


@pytest.mark.processes  # the export answered the server's way: make test-processes
def test_served_sampling_outside_the_buckets(served):
    big = _ok(served, "sample/batch-1000")
    assert big["outputs"].shape == (1000,) and np.isfinite(big["scores"]).all()
    odd = _ok(served, "sample/10k-empty-broken")
    assert odd["outputs"].shape == (3,) and np.isfinite(odd["scores"]).all()


def _texts(outputs):
    return [[o.decode("utf-8") for o in row] for row in outputs["outputs"]]


@pytest.mark.processes  # the export answered the server's way: make test-processes
def test_served_constrained_batch_and_long_phrases(served):
    for key in ("constrained/10k-phrase", "constrained/500-char-phrase"):
        out = _ok(served, key)
        assert not out["constraints_met"].any()  # cannot fit in max_length: answered, not met
        assert np.isfinite(out["scores"][:, 0]).all()
    assert _texts(_ok(served, "constrained/10k-phrase"))[0][0] == "x" * SERVED_MAX  # cut
    xla = _ok(served, "constrained_xla/10k-phrase")
    assert not xla["constraints_met"].any() and np.isfinite(xla["scores"][:, 0]).all()


@pytest.mark.processes  # the export answered the server's way: make test-processes
def test_served_unspelled_phrase_is_not_met_and_not_forced(served):
    tokenizer = served[1]
    for key, met in (
        ("constrained/unspelled-phrase", [False, True]),
        ("constrained_xla/unspelled-phrase", [False]),
    ):
        out = _ok(served, key)
        assert out["constraints_met"][:, 0].tolist() == met
        for row in _texts(out):
            assert "lo" in row[0]  # the spelled phrase of each row still met
            assert SNOWMAN not in row[0]
        ids = [tokenizer.tokenize([t.encode()]).to_list()[0] for t in _texts(out)[0]]
        assert all(tokenizer.unk_id not in seq for seq in ids)


@pytest.mark.processes  # the export answered the server's way: make test-processes
@pytest.mark.parametrize(
    "key, needles",
    [
        ("constrained/too-many-cells", ("`constraints` must be smaller", "64, 8, 100, 6")),
        ("constrained/prefix-rank-2", ("`prefix` must be a vector",)),
        ("constrained_xla/constraint-rows", ("`constraints` must have one row per input",)),
    ],
)
def test_served_bad_constraints_are_refused_by_name(served, key, needles):
    response = served[0][key]
    assert response.error_type == "InvalidArgumentError", response
    message = " ".join(response.error_message.split())
    for needle in needles:
        assert needle in message or needle.replace(", ", "] [") in message, message


@pytest.mark.processes  # the export answered the server's way: make test-processes
def test_served_unspelled_or_broken_prefix_is_forced_as_u_fffd(served):
    """Broken bytes read as U+FFFD, never an error: a prefix the vocabulary cannot spell is
    forced as the unknown token, which reads back as U+FFFD; a phrase of it is not met."""
    out = _ok(served, "constrained/unspelled-prefix")
    assert _texts(out)[0][0].startswith("\ufffd\ufffd") and np.isfinite(out["scores"][:, 0]).all()
    out = _ok(served, "constrained/broken-utf8")
    assert _texts(out)[0][0].startswith("\ufffd\ufffd") and not out["constraints_met"].any()


# ------------------------------------------------------------------ the CLI on that export
def _cli(*argv):
    import contextlib

    from keras_attn import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(list(argv), out)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "flags, message",
    [
        # past the export's limits: known only to the served graph, answered in its words
        (
            ("--beam-size", "1000"),
            "`beam_size` must be an integer in [1, 64]. Received: beam_size=1000",
        ),
        (
            ("--max-length", "10000"),
            "`max_length` must be an integer in [1, 24]. Received: max_length=10000",
        ),
        (("--sample", "--top-k", "1.5"), "--top-k: `top_k` must be an integer >= 0"),
        (("--sample", "--seed", str(2**40)), "--seed: `seed` must fit in int32"),
        (("--sample", "--constraint", "lo"), "`--prefix` and `--constraint` need a beam search"),
        (("--n-best", "0"), "--n-best: `n_best` must be an integer >= 1"),
        # against the export's max_length (6) when --max-length is not given
        (("--min-length", "7"), "--min-length: `min_length` must be <= `max_length`"),
        (("--sample", "--min-length", "5", "--max-length", "4"), "min_length=5, max_length=4"),
    ],
)
@pytest.mark.processes  # the export answered the server's way: make test-processes
def test_cli_bad_flags_get_one_clean_line(served, flags, message):
    code, out, err = _cli("translate", served[2], "hello", *flags)
    assert code == 2 and out == ""
    assert message in err, err
    assert len(err.strip().splitlines()) == 1 and "Assert" not in err and "node" not in err


def test_cli_on_a_missing_or_wrong_directory(tmp_path):
    for argv, words in (
        (("translate", str(tmp_path / "missing"), "a"), "does not exist"),
        (("inspect", str(tmp_path)), "Not a SavedModel directory"),
    ):
        code, out, err = _cli(*argv)
        assert code == 2 and words in err and str(tmp_path) in err


# ------------------------------------------- examples/train_translator.py --init-from
def _translator_script():
    import importlib.util

    from tests.examples.helpers import script

    spec = importlib.util.spec_from_file_location(
        "probe_train_translator", script("train_translator.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_dir(path, config=True, tokenizer=True, weights=True):
    path.mkdir()
    if config is True:
        config = {"model": {"model": "transformer", "units": 16}}
    if config is not None:
        (path / "run_config.json").write_text(
            config if isinstance(config, str) else json.dumps(config), encoding="utf-8"
        )
    if tokenizer:
        (path / "tokenizer.model").write_bytes(b"x")
    if weights:
        (path / "best.weights.h5").write_bytes(b"x")
    return str(path)


@pytest.mark.parametrize(
    "kind, needle",
    [
        ("missing", "no such directory"),
        ("not-a-text-run", "no run_config.json"),  # a dates run, or any other directory
        ("broken-config", "does not describe a model"),
        ("no-tokenizer", "no tokenizer.model"),
        ("no-weights", "no weights"),
    ],
)
def test_init_from_a_run_that_cannot_be_fine_tuned_is_refused_by_name(
    kind, needle, tmp_path, capsys
):
    module = _translator_script()
    run = tmp_path / "run"
    path = {
        "missing": lambda: str(run),
        "not-a-text-run": lambda: _run_dir(run, config=None),
        "broken-config": lambda: _run_dir(run, config='{"model": '),
        "no-tokenizer": lambda: _run_dir(run, tokenizer=False),
        "no-weights": lambda: _run_dir(run, weights=False),
    }[kind]()
    data = tmp_path / "pairs.tsv"
    data.write_text("a b\tB A\n", encoding="utf-8")
    argv = ["--data", str(data), "--init-from", path, "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as info:
        module.parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"--init-from {path}: " in err and needle in err, err
    assert not (tmp_path / "out").exists()  # refused before anything is written
    assert module.init_from_problem(_run_dir(tmp_path / "good")) is None


# --------------------------------------------- the ring cache and chunked prefill
@pytest.mark.parametrize("rotary", [None, 10_000])
def test_ring_cache_far_past_max_length_and_chunked_prefill(rotary):
    from keras_attn.layers import MultiHeadAttention

    b, t, w = 2, 9, 3
    x = np.random.RandomState(0).randn(b, t, 8).astype("float32")
    layer = MultiHeadAttention(2, 4, sliding_window=w, rotary_max_wavelength=rotary)
    full = np.asarray(layer(x, x, use_causal_mask=True))

    def steps(start):
        cache, outs = layer.init_cache(b, t, ring=True), []
        assert cache[0].shape[1] == w
        for i in range(t):
            out, cache = layer(
                x[:, i : i + 1], cache=cache, cache_index=start + i, use_causal_mask=True
            )
            outs.append(np.asarray(out))
        return np.concatenate(outs, 1)

    np.testing.assert_allclose(steps(0), full, atol=1e-5)
    # far positions: once the window is written, the same answers (only distances count); up
    # to the int32 limit without rotary embeddings, to 1e5 with them (float32 angles,
    # docs/multi_head.md)
    for start in (3 * 10**6, 2**31 - 1 - t) if rotary is None else (10**5,):
        np.testing.assert_allclose(steps(start)[:, w - 1 :], full[:, w - 1 :], atol=1e-4)
    # a prompt in uneven chunks into an ordinary cache, a NaN row masked in the last one
    cache, outs = layer.init_cache(b, t + 1), []
    for lo, hi in ((0, 1), (1, 5), (5, 9)):
        out, cache = layer(x[:, lo:hi], cache=cache, cache_index=lo, use_causal_mask=True)
        outs.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(outs, 1), full, atol=1e-5)
    junk = np.full((b, 1, 8), np.nan, "float32")
    out, cache = layer(junk, cache=cache, cache_index=9, value_mask=np.zeros((b, 1), bool))
    last, _ = layer(x[:, 8:9], cache=cache, cache_index=8, use_causal_mask=True)
    np.testing.assert_allclose(np.asarray(last), full[:, 8:9], atol=1e-5)
    # a chunk past the ring's rows: refused naming the argument
    with pytest.raises(ValueError, match=r"`cache_index` \+ the 2 new rows must fit"):
        layer(
            x[:, :2], cache=layer.init_cache(b, t, ring=True), cache_index=2, use_causal_mask=True
        )
