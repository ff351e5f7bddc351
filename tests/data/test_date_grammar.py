"""The ISO-date grammar of the dates translator (keras_attn.data.date_grammar).

The guarantee must not depend on training: the models here are untrained (random weights, or
logits that are all equal), so whatever they answer comes from the grammar alone."""

import datetime

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.data.date_grammar import ValidDates, is_iso_date, source_year
from keras_attn.decoding.protocol import generate
from keras_attn.text import CharTokenizer

# Real date strings as people write them (typed here, not rendered by the generator): several
# languages, ordinals, leap and non-leap February 29, the last day of a year, single-digit
# days, two-digit years, years outside 1950-2049, and inputs that are no date at all.
BATTERY = [
    "March 3rd, 2001",
    "3rd March 2001",
    "the 21st of June 1999",
    "Saturday, March 1st, 2025",
    "le 1er mars 2001",
    "le 14 juillet 1789",
    "1.º de marzo de 2001",
    "3.º de marzo de 2001",
    "el 3º de marzo de 2001",
    "1º de maio de 2020",
    "il 1º maggio 2019",
    "am 3. März 2001",
    "3e maart 2001",
    "den 3:e mars 2001",
    "29 February 2024",
    "Feb 29, 2023",
    "29.02.2000",
    "29/02/1900",
    "31 December 1999",
    "Dec 31st, 2049",
    "1 janvier 2050",
    "1/1/50",
    "7.8.09",
    "2026年11月21日",
    "21 ноября 2026 г.",
    "2024-02-30",
    "31 April 2021",
    "30 février 2024",
    "9 Sept 2012",
    "",
    "hello world",
    "12345678",
    "99",
]


def expected_year(source, years=(1950, 2049)):
    """None: any year of the range; 0: no date (""); else the year the answer must have."""
    year = source_year(source)
    if year is None:
        return None
    return year if years[0] <= year <= years[1] else 0


def check_answers(sources, answers, years=(1950, 2049)):
    """Every answer is a date that exists in `years` with the source's written year, or "" for
    a written year outside `years`. `answers`: one list per source (its n-best)."""
    for source, nbest in zip(sources, answers):
        year = expected_year(source, years)
        assert nbest[0] != "" or year == 0, (source, nbest)
        for answer in nbest:
            if answer == "":
                continue  # a lower rank with no date left, or a year out of range
            assert year != 0, (source, nbest)
            assert is_iso_date(answer), (source, nbest)
            assert years[0] <= int(answer[:4]) <= years[1], (source, nbest)
            if year is not None:
                assert int(answer[:4]) == year, (source, nbest)


@pytest.fixture(scope="module")
def tokenizer():
    from keras_attn.data import make_dates

    pairs = make_dates(400, seed=0)
    return CharTokenizer.build([t for p in pairs for t in p] + BATTERY)


@pytest.fixture(scope="module")
def model(tokenizer):
    from keras_attn.models import RNNSeq2Seq

    keras_model = RNNSeq2Seq(
        tokenizer.vocab_size, tokenizer.vocab_size, embedding_dim=8, units=8, seed=3
    )
    keras_model.build()
    return keras_model


def texts(tokenizer, out):
    seqs, lengths = out["sequences"].numpy(), out["lengths"].numpy()
    if seqs.ndim == 2:
        seqs, lengths = seqs[:, None], lengths[:, None]
    vocab = tokenizer.vocabulary
    return [
        ["".join(vocab[i] for i in row[:n] if i != tokenizer.end_id) for row, n in zip(rs, ns)]
        for rs, ns in zip(seqs, lengths)
    ]


def source_ids(tokenizer, sources):
    from keras_attn import training

    return tf.constant(training.pad_ids(tokenizer.tokenize(sources).to_list()))


def test_is_iso_date():
    assert is_iso_date("2024-02-29") and is_iso_date("2000-02-29") and is_iso_date("1999-12-31")
    for text in ("2023-02-29", "1900-02-29", "2001-03-33", "2001-13-01", "2001-00-10", "2001-3-3"):
        assert not is_iso_date(text), text
    assert not is_iso_date("２００１-03-03") and not is_iso_date("") and not is_iso_date(None)


def test_source_year_reference():
    assert source_year("le 14 juillet 1789") == 1789
    assert source_year("2026年11月21日") == 2026
    assert source_year("21.11.26") is None and source_year("12345678") is None
    assert source_year("٢٠٢٤/٢/٢٩") == 2024  # Arabic-Indic digits are digits
    assert source_year("3 May 99 or 2001 and 1999") == 2001  # the first run of four


class Uniform:
    """A model whose logits are all equal: what it writes is what the grammar allows."""

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def encode(self, source_ids):
        return {"source_mask": tf.not_equal(source_ids, 0)}

    def initial_decode_state(self, encoder_outputs, max_length):
        return {"rows": tf.zeros(tf.shape(encoder_outputs["source_mask"])[:1])}

    def decode_step(self, tokens, state, step):
        return tf.zeros([tf.shape(tokens)[0], self.vocab_size]), state, None


def all_sequences(wrapped, tokenizer, source):
    """Every string the grammar lets the model write for `source`, by expanding each allowed
    token of each prefix, step by step, until the end token."""
    ids = source_ids(tokenizer, [source])
    state = wrapped.initial_decode_state(wrapped.encode(ids), 16)
    tokens = tf.constant([tokenizer.start_id])
    prefixes, done = [""], set()
    vocab = tokenizer.vocabulary
    for step in range(12):
        logits, state, _ = wrapped.decode_step(tokens, state, step)
        rows, columns = np.nonzero(np.isfinite(logits.numpy()))
        assert len(set(rows)) == len(prefixes)  # never a row without a token
        keep = [(r, c) for r, c in zip(rows, columns) if c != tokenizer.end_id]
        assert len(keep) <= 5000, f"{len(keep)} prefixes at step {step}: more than the days"
        done |= {prefixes[r] for r, c in zip(rows, columns) if c == tokenizer.end_id}
        if not keep:
            return done
        parents = tf.constant([r for r, _ in keep])
        state = tf.nest.map_structure(lambda x, p=parents: tf.gather(x, p), state)
        tokens = tf.constant([c for _, c in keep], tf.int32)
        prefixes = [prefixes[r] + vocab[c] for r, c in keep]
    raise AssertionError("the grammar never ended")


def days_of(years):
    day, out = datetime.date(years[0], 1, 1), set()
    while day.year <= years[1]:
        out.add(day.isoformat())
        day += datetime.timedelta(days=1)
    return out


def test_the_grammar_writes_exactly_the_days_that_exist(tokenizer):
    # 1896 and 1904: leap years; 1900: a century, not one; 2000: a century divisible by 400.
    uniform = Uniform(tokenizer.vocab_size)
    wrapped = ValidDates(uniform, tokenizer, years=(1896, 1904))
    written = all_sequences(wrapped, tokenizer, "hello")
    assert written == days_of((1896, 1904))
    assert "1900-02-28" in written and "1900-02-29" not in written and "1896-02-29" in written
    wrapped = ValidDates(uniform, tokenizer, years=(1950, 2049))
    assert all_sequences(wrapped, tokenizer, "29 février 2000") == days_of((2000, 2000))
    assert all_sequences(wrapped, tokenizer, "le 14 juillet 1789") == {""}


def test_source_years_in_the_graph_match_the_reference(tokenizer, model):
    wrapped = ValidDates(model, tokenizer)
    ids = source_ids(tokenizer, BATTERY)
    got = wrapped.encode(ids)["date_grammar_source_year"].numpy().tolist()
    assert got == [-1 if source_year(s) is None else source_year(s) for s in BATTERY]


@pytest.mark.parametrize(
    "search,kwargs",
    [
        ("greedy", {}),
        ("beam", {"beam_size": 5}),
        ("sample", {"seed": 7, "temperature": 3.0}),
        ("beam", {"beam_size": 3, "min_length": 4, "no_repeat_ngram_size": 3}),
    ],
)
def test_every_answer_is_a_date_that_exists(tokenizer, model, search, kwargs):
    ids = source_ids(tokenizer, BATTERY)
    wrapped = ValidDates(model, tokenizer)
    out = generate(wrapped, ids, tokenizer.start_id, tokenizer.end_id, search, 16, **kwargs)
    check_answers(BATTERY, texts(tokenizer, out))
    # The same untrained model without the grammar writes no date at all.
    raw = generate(model, ids, tokenizer.start_id, tokenizer.end_id, search, 16, **kwargs)
    assert not any(is_iso_date(a) for nbest in texts(tokenizer, raw) for a in nbest)


def test_no_room_for_a_date_is_no_date(tokenizer, model):
    ids = source_ids(tokenizer, ["March 3rd, 2001", "hello"])
    wrapped = ValidDates(model, tokenizer)
    for max_length in (1, 10):
        out = generate(wrapped, ids, tokenizer.start_id, tokenizer.end_id, "beam", max_length)
        assert texts(tokenizer, out) == [[""] * 4, [""] * 4]
    # A control that forbids the end token where the date ends: no date, not an error.
    out = generate(wrapped, ids, tokenizer.start_id, tokenizer.end_id, "greedy", 16, min_length=12)
    assert texts(tokenizer, out) == [[""], [""]]


def test_arguments_are_checked(tokenizer, model):
    for years in ((2000, 1999), (0, 10), (1, 10000), "1950", None):
        with pytest.raises(ValueError, match="years"):
            ValidDates(model, tokenizer, years=years)
    with pytest.raises(ValueError, match="ISO dates"):
        ValidDates(model, CharTokenizer(list("abc")))
    with pytest.raises(ValueError, match="decode_step"):
        ValidDates(object(), tokenizer)


@pytest.mark.processes  # an export: make test-processes
def test_the_exported_model_answers_only_dates_that_exist(tokenizer, model, tmp_path):
    """The served model, run the way TensorFlow Serving runs it (a fresh process that loads
    the `serve` MetaGraph into a Session): every signature's every answer."""
    from keras_attn.serving import export_text_model
    from keras_attn.serving.harness import read_warmup_requests, run_server_way

    path = export_text_model(
        ValidDates(model, tokenizer),
        tokenizer,
        str(tmp_path / "dates"),
        beam_size=4,
        max_length=16,
        warmup_inputs=["March 3rd, 2001"],
    )
    inputs = np.array([s.encode("utf-8") for s in BATTERY], object)
    # One request per signature, with the knobs its warm-up request carries (the served
    # defaults), the battery as inputs, a wider beam and a hotter sampling.
    requests = read_warmup_requests(path)
    assert {r.signature_name for r in requests} >= {"serving_default", "beam_search", "sample"}
    settings = {"beam_size": np.int32(6), "temperature": np.float32(5.0), "seed": np.int32(11)}
    for request in requests:
        request.inputs["inputs"] = inputs
        for name, value in settings.items():
            if name in request.inputs:
                request.inputs[name] = value
        if "constraints" in request.inputs:  # the constrained search, here with none
            request.inputs["prefix"] = np.array([b""] * len(BATTERY), object)
            request.inputs["constraints"] = np.zeros((len(BATTERY), 0), object)
    results = run_server_way(path, requests, replay_warmup=True)
    for request, response in zip(requests, results.responses):
        outputs = response.outputs["outputs"]
        outputs = outputs if outputs.ndim == 2 else outputs[:, None]
        answers = [[a.decode("utf-8") for a in row] for row in outputs]
        assert response.ok and len(answers) == len(BATTERY), request.signature_name
        check_answers(BATTERY, answers)
    assert len(results.responses) == len(requests) >= 6
