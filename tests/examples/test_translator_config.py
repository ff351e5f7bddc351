"""The translator's settings are resolved once, by `resolve_config`: the defaults by task and
corpus size (docs/real_data.md, "Defaults by corpus size"), explicit flags winning over every
default, the rules between settings, `--smoke`, and `--init-from`'s model. The expected values
below are the documented recipe, written out here."""

import dataclasses
import json

import pytest

from keras_attn.train import build_parser, resolve_config
from keras_attn.train.config import SMALL_CORPUS, TranslatorConfig

# The documented table: (max_tokens, dropout, token_dropout, patience, average, epochs).
SMALL = dict(max_tokens=1024, dropout=0.3, token_dropout=0.1, patience=10, average=5, epochs=200)
LARGE = dict(max_tokens=4096, dropout=0.1, token_dropout=0.0, patience=5, average=5, epochs=30)
TEXT_MODEL = dict(model="transformer", units=128, embedding_dim=64, layers=2, heads=4, copy=True)
DATES = dict(
    model="bahdanau", units=64, embedding_dim=32, dropout=0.0, copy=False, epochs=10, patience=0
)


def pick(config, names):
    return {k: getattr(config, k) for k in names}


def test_dates_defaults():
    config = resolve_config({})
    assert pick(config, DATES) == DATES
    assert config.task == "dates" and not config.text and config.schedule == "cosine"
    assert config.batch_size == 64 and config.learning_rate == 1e-3 and not config.keep_placeholders
    assert not config.word_rules
    # the dates' beam answers one fixed-length date: no length penalty
    assert config.length_penalty == 0.0


@pytest.mark.parametrize(
    "pairs, row", [(0, SMALL), (SMALL_CORPUS - 1, SMALL), (SMALL_CORPUS, LARGE)]
)
def test_text_defaults_by_corpus_size(pairs, row):
    config = resolve_config({"data": "pairs.tsv"}, train_pairs=pairs)
    assert pick(config, row) == row
    assert pick(config, TEXT_MODEL) == TEXT_MODEL
    assert config.keep_placeholders and config.task == "tsv"
    # text exports: the word rules bind the beam and sampling searches unless told otherwise
    assert config.word_rules
    # text exports: serving_default's beam weighs against short answers, by corpus
    assert config.length_penalty > 0
    es, zh = (resolve_config({"corpus": c}, train_pairs=pairs) for c in ("es", "zh"))
    assert es.length_penalty > zh.length_penalty > 0
    off = resolve_config({"data": "pairs.tsv", "word_rules": False}, train_pairs=pairs)
    assert not off.word_rules
    assert config.record()["size_rule"] == {
        "token_dropout": row["token_dropout"],
        "patience": row["patience"],
        "average": row["average"],
        "dropout": row["dropout"],
        "epochs": row["epochs"],
        "max_tokens": row["max_tokens"],
    }


@pytest.mark.parametrize("pairs", [100, SMALL_CORPUS])
def test_an_explicit_flag_wins_over_every_default(pairs):
    given = dict(
        max_tokens=777,
        dropout=0.05,
        token_dropout=0.02,
        patience=1,
        average=2,
        epochs=3,
        units=40,
        embedding_dim=24,
        model="bahdanau",
        copy=False,
        keep_placeholders=False,
        batch_size=8,
        schedule="constant",
        length_penalty=0.5,
    )
    config = resolve_config({"corpus": "es", **given}, train_pairs=pairs)
    assert pick(config, given) == given
    assert config.task == "catalogues-es"
    # the dates task too, and an explicit value equal to a default is kept as given
    config = resolve_config({"dropout": 0.3, "epochs": 10, "copy": True})
    assert (config.dropout, config.epochs, config.copy) == (0.3, 10, True)


def test_schedule_and_copy_rules():
    text = {"data": "pairs.tsv"}
    assert resolve_config({**text, "time_budget": 45}).schedule == "rsqrt"
    assert resolve_config({**text, "time_budget": 45, "schedule": "cosine"}).schedule == "cosine"
    assert resolve_config(text).schedule == "cosine"
    for model in ("hard", "convs2s"):  # no copy attention: off by default, refused when asked
        assert resolve_config({**text, "model": model}).copy is False
        with pytest.raises(ValueError, match="--copy needs"):
            resolve_config({**text, "model": model, "copy": True})
    assert resolve_config({**text, "model": "bahdanau"}).copy is True


def test_the_budget_rule_of_a_large_corpus():
    text = {"data": "pairs.tsv", "time_budget": 15}
    config = resolve_config(text, train_pairs=SMALL_CORPUS)
    assert (config.dropout, config.learning_rate) == (0.0, 0.002)
    # without a budget, or on a small corpus, the rows' and shared defaults
    config = resolve_config({"data": "pairs.tsv"}, train_pairs=SMALL_CORPUS)
    assert (config.dropout, config.learning_rate) == (LARGE["dropout"], 0.001)
    config = resolve_config(text, train_pairs=SMALL_CORPUS - 1)
    assert (config.dropout, config.learning_rate) == (SMALL["dropout"], 0.001)
    # a flag given wins
    config = resolve_config({**text, "dropout": 0.2}, train_pairs=SMALL_CORPUS)
    assert (config.dropout, config.learning_rate) == (0.2, 0.002)
    config = resolve_config({**text, "learning_rate": 0.0005}, train_pairs=SMALL_CORPUS)
    assert (config.dropout, config.learning_rate) == (0.0, 0.0005)


def test_a_long_budget_on_a_large_corpus_trains_a_wider_model():
    from keras_attn.train.config import BY_TASK, WIDE_BUDGET, WIDE_UNITS

    row = BY_TASK["text-large"]["units"]
    long = {"corpus": "es", "time_budget": WIDE_BUDGET}
    assert resolve_config(long, train_pairs=SMALL_CORPUS).units == WIDE_UNITS
    assert WIDE_UNITS != row
    # a shorter budget, no budget, a small corpus, the dates: the rows' width
    short = {**long, "time_budget": WIDE_BUDGET - 30}
    assert resolve_config(short, train_pairs=SMALL_CORPUS).units == row
    assert resolve_config({"corpus": "es"}, train_pairs=SMALL_CORPUS).units == row
    assert resolve_config(long, train_pairs=SMALL_CORPUS - 1).units == row
    dates = resolve_config({"time_budget": WIDE_BUDGET})
    assert dates.units == resolve_config({}).units
    # a flag given wins
    config = resolve_config({**long, "units": 128}, train_pairs=SMALL_CORPUS)
    assert config.units == 128


def test_smoke_caps_sizes_given_or_not():
    config = resolve_config({"data": "pairs.tsv", "smoke": True, "units": 300}, train_pairs=400)
    assert (config.epochs, config.units, config.embedding_dim) == (1, 16, 16)
    assert (config.vocab_size, config.max_tokens) == (200, 512)
    assert config.dropout == 0.3  # the small-corpus row still applies
    config = resolve_config({"smoke": True, "epochs": 2, "n_train": 5000, "units": 8})
    assert (config.epochs, config.n_train, config.n_val, config.n_test) == (2, 256, 32, 32)
    assert (config.units, config.max_tokens) == (8, 512)


def test_init_from_model_replaces_the_model_settings():
    init = dict(model="bahdanau", units=96, copy=False, cell="gru", heads=8)
    config = resolve_config(
        {"data": "pairs.tsv", "init_from": "run", "units": 32, "dropout": 0.2},
        train_pairs=100,
        init_model=init,
    )
    assert pick(config, init) == init
    assert config.dropout == 0.2 and config.patience == 10  # not model settings


def test_settings_that_do_not_go_together_are_refused():
    with pytest.raises(ValueError, match="not both"):
        resolve_config({"data": "a.tsv", "corpus": "es"})
    with pytest.raises(ValueError, match="--init-from fine-tunes a text model"):
        resolve_config({"init_from": "runs/es"})
    with pytest.raises(ValueError, match="epochs"):
        resolve_config({"epochs": 0})
    # the export's search settings are refused before a run trains, naming the flag
    with pytest.raises(ValueError, match=r"--beam-size: `beam_size` must be an integer >= 1"):
        resolve_config({"beam_size": 0})
    with pytest.raises(ValueError, match=r"--length-penalty: `length_penalty` must be"):
        resolve_config({"corpus": "es", "length_penalty": -1.0})
    with pytest.raises(ValueError, match="Unknown"):
        resolve_config({"unit": 3})


def test_parser_gives_only_the_flags_given():
    parser = build_parser()
    assert vars(parser.parse_args([])) == {}
    flags = vars(parser.parse_args(["--data", "x.tsv", "--no-copy", "--dropout", "0.3"]))
    assert flags == {"data": "x.tsv", "copy": False, "dropout": 0.3}


def test_config_is_frozen_and_recorded_as_resolved():
    config = resolve_config({"data": "pairs.tsv", "units": 32}, train_pairs=50)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.units = 64
    record = json.loads(json.dumps(config.record(), default=str))
    assert record["args"]["units"] == 32 and record["args"]["dropout"] == 0.3
    assert record["model"]["units"] == 32 and record["model"]["model"] == "transformer"
    assert record["resolved"] == {
        "task": "tsv",
        "row": "text-small",
        "train_pairs": 50,
        "flags": {"data": "pairs.tsv", "units": 32},
    }
    names = {f.name for f in dataclasses.fields(TranslatorConfig)} - {"flags", "row", "train_pairs"}
    assert set(record["args"]) == names | {"text"}


def test_the_export_knows_the_sources_of_every_run_the_weights_were_trained_in(tmp_path):
    """`trained_sources`: the run's training sources, then those of the run it was fine-tuned
    from, and so on (a loop of runs read once)."""
    from keras_attn.train.translator import trained_sources

    def run(name, pairs, init_from):
        path = tmp_path / name
        (path / "data").mkdir(parents=True)
        lines = "".join(f"{s}\t{t}\n" for s, t in pairs)
        (path / "data" / "train.tsv").write_text(lines, encoding="utf-8")
        config = {"args": {"init_from": str(init_from) if init_from else None}}
        (path / "run_config.json").write_text(json.dumps(config), encoding="utf-8")
        return path

    base = run("base", [("Open file", "Abrir archivo")], None)
    tuned = run("tuned", [("Save", "Guardar"), ("Zorbo", "Zorbo")], base)
    assert trained_sources(tuned) == ["Save", "Zorbo", "Open file"]
    assert trained_sources(base) == ["Open file"]
    config = json.loads((base / "run_config.json").read_text())
    config["args"]["init_from"] = str(tuned)  # a loop
    (base / "run_config.json").write_text(json.dumps(config))
    assert trained_sources(tuned) == ["Save", "Zorbo", "Open file"]


def test_a_text_runs_export_copies_with_the_word_rules(tmp_path, monkeypatch):
    """A text run's export: the known words, `keep_unknown_words` and `copy_source` on with the
    word rules, all off without them (the call to `export_text_model` recorded by a spy: the
    export itself is tested in tests/serving)."""
    import keras_attn.serving
    from keras_attn.train import translator

    calls = []
    monkeypatch.setattr(keras_attn.serving, "export_text_model", lambda *a, **k: calls.append(k))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.tsv").write_text("Open file\tAbrir archivo\n", encoding="utf-8")
    (tmp_path / "run_config.json").write_text(json.dumps({"args": {"init_from": None}}))
    flags = {"data": "pairs.tsv", "out": str(tmp_path), "export": str(tmp_path / "export")}
    for rules in (True, False):
        config = dataclasses.replace(resolve_config(flags, train_pairs=50), word_rules=rules)
        translator.export(config, None, None, 16, "Open file")
    assert calls[0]["copy_source"] is True and calls[0]["known_words"] == ["Open file"]
    assert calls[1]["copy_source"] is False and calls[1]["known_words"] is None
    assert [c["keep_unknown_words"] for c in calls] == [True, False]
    # serving_default's length penalty is the run's
    assert [c["length_penalty"] for c in calls] == [config.length_penalty] * 2
    assert [c["word_rules"] for c in calls] == [True, False]


def test_a_text_run_resolves_its_config_once(tmp_path, monkeypatch):
    """The script's resolution prepares RUN_DIR/data first, so the one config knows the corpus
    size (its row); the run's data and tokenizer then use that config as it is."""
    from keras_attn.train import translator

    words = ["red", "blue", "green", "house", "tree", "river", "stone", "light"]
    lines = [f"the {a} {b}\tle {b} {a}\n" for a in words for b in words]
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(lines), encoding="utf-8")
    resolved = []
    real = translator.resolve_config

    def counted(*args, **kwargs):
        resolved.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(translator, "resolve_config", counted)
    argv = ["--data", str(data), "--out", str(tmp_path / "run"), "--smoke"]
    config = translator.parse_args(argv, prepare_data=True)
    train_lines = (tmp_path / "run" / "data" / "train.tsv").read_text(encoding="utf-8")
    assert config.train_pairs == len(train_lines.splitlines()) > 0
    assert config.row == "text-small"
    run = translator.TextRun(config)
    assert run.config is config
    assert len(run.splits["train"]) == config.train_pairs
    assert len(resolved) == 1


def test_a_run_recorded_before_the_length_penalty_gets_its_corpus_rule(tmp_path):
    """`run_config` of a run directory: the recorded length penalty, or for a run recorded
    without one the rule of its corpus (the value a new run of the same flags gets)."""
    from keras_attn.train.export import run_config

    for corpus in ("es", "zh"):
        new = resolve_config({"corpus": corpus}, train_pairs=SMALL_CORPUS)
        record = new.record()
        del record["args"]["length_penalty"]
        (tmp_path / "run_config.json").write_text(json.dumps(record))
        assert run_config(tmp_path).length_penalty == new.length_penalty
    given = resolve_config({"corpus": "es", "length_penalty": 0.25}, train_pairs=SMALL_CORPUS)
    (tmp_path / "run_config.json").write_text(json.dumps(given.record()))
    assert run_config(tmp_path).length_penalty == 0.25
