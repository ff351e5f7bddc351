"""The translator recipe's settings: one table of defaults by task and corpus size, one function
that resolves the flags a user gave against it, one frozen `TranslatorConfig`.

Resolution (`resolve_config`), in this order:

1. the defaults: `SHARED`, then the row of `BY_TASK` for the task and corpus size (`size_key`:
   the generated dates, or a text corpus below / from `SMALL_CORPUS` training pairs);
2. the flags given on the command line replace them, whatever the row says;
3. rules between settings, for what the user left to them: `schedule` is rsqrt with a time
   budget (it needs no end) and cosine otherwise; `length_penalty` by corpus
   (`served_length_penalty`); on a large corpus with a time budget
   (`BUDGET_RULE`) no dropout and a higher peak learning rate, and from `WIDE_BUDGET`
   minutes a wider model (`WIDE_UNITS`); `copy` is off for the models
   without copy attention (`hard`, `convs2s`);
4. `smoke`: one epoch unless `epochs` is given, the tiny dates split (`SMOKE`), and the sizes
   capped (`SMOKE_CAPS`, given or not);
5. fine-tuning (`init_model`: the model settings of the `--init-from` run): its model settings
   replace the rest, since its weights must fit.

The result is written as it is to `run_config.json` (`TranslatorConfig.record`).
"""

from __future__ import annotations

import dataclasses
import typing

SCORES = ("dot", "general", "concat")
ALIGNMENTS = ("global", "local-m", "local-p")
MODELS = ("bahdanau", "hard", "transformer", "convs2s") + tuple(
    f"luong-{s}-{a}" for s in SCORES for a in ALIGNMENTS
)
NO_COPY = ("hard", "convs2s")  # the models without copy attention
DISTRIBUTE = ("none", "mirrored", "multi-worker", "data-parallel")

SMALL_CORPUS = 20000  # training pairs below which the small-corpus row applies

# The settings that depend on the task and, for text, on the corpus size. The generated dates
# keep a small model; the small real corpora (a few thousand pairs, docs/real_data.md) want a
# wider model with dropout, copy attention, smaller batches (four times the updates per pass)
# and many more epochs, bounded by early stopping.
TEXT_MODEL = dict(
    model="transformer",
    embedding_dim=64,
    units=128,
    copy=True,
    keep_placeholders=True,
    word_rules=True,
)
# serving_default's GNMT length penalty for a text run, by corpus (`--corpus`): of 0, 1, 2, 3
# and 4, the one with the highest chrF + BLEU on each corpus's validation split (chrF alone
# keeps rising with longer answers while BLEU falls; docs/real_data.md, "The served length
# penalty"); other text (`--data`): the value that gained on both corpora.
LENGTH_PENALTY = {"es": 2.0, "zh": 1.0}
TEXT_LENGTH_PENALTY = 1.0
# The text rows' values that depend on the corpus size: {name: (text-small, text-large)}
# (recorded in run_config.json as "size_rule").
TEXT_BY_SIZE = {
    "token_dropout": (0.1, 0.0),
    "patience": (10, 5),
    "average": (5, 5),
    "dropout": (0.3, 0.1),
    "epochs": (200, 30),
    "max_tokens": (1024, 4096),
}
SIZE_RULE = tuple(TEXT_BY_SIZE)
BY_TASK = {
    "dates": dict(
        model="bahdanau",
        epochs=10,
        embedding_dim=32,
        units=64,
        dropout=0.0,
        copy=False,
        keep_placeholders=False,
        word_rules=False,
        token_dropout=0.0,
        patience=0,
        average=0,
        max_tokens=None,
    ),
    **{
        row: {**TEXT_MODEL, **{name: sizes[i] for name, sizes in TEXT_BY_SIZE.items()}}
        for i, row in enumerate(("text-small", "text-large"))
    },
}

# `smoke`: the dates split it generates, and the caps on sizes (given or not).
SMOKE = dict(n_train=256, n_val=32, n_test=32)
SMOKE_CAPS = dict(units=16, embedding_dim=16, vocab_size=200, max_tokens=512)

# The settings a fine-tuned run takes from the run it starts from (`init_from`): its model.
MODEL_SETTINGS = (
    "model",
    "units",
    "embedding_dim",
    "layers",
    "heads",
    "kv_heads",
    "sliding_window",
    "gate",
    "rotary",
    "window",
    "copy",
    "cell",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TranslatorConfig:
    """The resolved settings of one translator run (build it with `resolve_config`).

    A setting with a default here has it for every task (`SHARED`); one without takes its
    value from the task's row of `BY_TASK`."""

    epochs: int
    batch_size: int = 64
    learning_rate: float = 0.001
    seed: int = 0
    out: str = "runs/translator"
    resume: bool = False
    smoke: bool = False
    distribute: str = "none"
    coordinator_address: str | None = None
    num_processes: int = 1
    process_id: int = 0
    logical_cpus: int = 0
    export: str | None = None
    export_version: int = 1
    heatmaps: int = 3
    jit_compile: bool = False
    compilation_cache: bool = True
    verbose: int = 1
    model: str
    data: str | None = None
    corpus: str | None = None
    corpus_dir: str | None = None
    init_from: str | None = None
    time_budget: float = 0
    max_tokens: int | None
    steps_per_epoch: int = 0
    token_dropout: float
    patience: int
    average: int
    n_train: int = 20000
    n_val: int = 500
    n_test: int = 2000
    vocab_size: int = 0
    label_smoothing: float = 0.1
    max_seq: int = 128
    max_chars: int = 200
    embedding_dim: int
    units: int
    layers: int = 2
    heads: int = 4
    kv_heads: int | None = None
    sliding_window: int | None = None
    gate: bool = False
    rotary: float | None = None
    window: int = 10
    dropout: float
    copy: bool
    coverage_weight: float = 0.0
    schedule: str | None = None  # rule: rsqrt with a time budget, else cosine
    cell: str = "lstm"
    max_length: int | None = None
    beam_size: int = 4
    length_penalty: float | None = None  # rule: `served_length_penalty`
    xla: bool = False
    keep_placeholders: bool
    word_rules: bool
    mixed_precision: str | None = None
    # How it was resolved (not settings): the flags given, the table row, the corpus size.
    flags: typing.Mapping = dataclasses.field(default_factory=dict, compare=False, repr=False)
    row: str = "dates"
    train_pairs: int | None = None

    @property
    def text(self):
        """A text corpus (`data` or `corpus`), not the generated dates."""
        return bool(self.data or self.corpus)

    @property
    def task(self):
        """`"dates"`, `"tsv"` or `"catalogues-<LANG>"` (the name in results.json)."""
        if self.corpus:
            return f"catalogues-{self.corpus}"
        return "tsv" if self.data else "dates"

    def settings(self):
        """`{name: value}` of every setting (the flags' names, `text` too)."""
        names = [f.name for f in dataclasses.fields(self)][: -len(_RESOLUTION)]
        return {**{k: getattr(self, k) for k in names}, "text": self.text}

    def record(self):
        """What run_config.json holds: the model settings (what `init_from` reads), the row's
        size-dependent values, every setting, and how they were resolved."""
        return {
            "model": {k: getattr(self, k) for k in MODEL_SETTINGS},
            "size_rule": {k: BY_TASK[self.row][k] for k in SIZE_RULE},
            "args": self.settings(),
            "resolved": {
                "task": self.task,
                "row": self.row,
                "train_pairs": self.train_pairs,
                "flags": dict(self.flags),
            },
        }


_RESOLUTION = ("flags", "row", "train_pairs")

# Every setting whose default is the same for every task.
# A large corpus trained on a time budget: the budget buys a few passes over it, too few to
# over-fit, so dropout only slows what they learn; and the learning rate peaks higher (after
# the budget's short warm-up). Measured at 300 steps on the en->es corpus (docs/real_data.md).
BUDGET_RULE = dict(dropout=0.0, learning_rate=0.002)
# A large corpus on a budget of at least `WIDE_BUDGET` minutes: the Transformer `WIDE_UNITS`
# wide. Measured on the en->es corpus at 45 minutes (docs/real_data.md, "Defaults by corpus
# size"): 256 units use the whole budget and answer better (served test chrF 63.8 against
# 62.8), where 128 units stop early; at 15 minutes only 128 was measured, and stays.
WIDE_BUDGET = 45
WIDE_UNITS = 256

SHARED = {
    f.name: f.default
    for f in dataclasses.fields(TranslatorConfig)
    if f.default is not dataclasses.MISSING and f.name not in _RESOLUTION
}


@dataclasses.dataclass(frozen=True)
class DataSettings:
    """What preparing a text run's data reads (`keras_attn.train.translator.prepare_text_data`):
    settings the size row never changes, so they are read before the corpus size is known and
    the one `TranslatorConfig` of the run is resolved with it."""

    out: str
    resume: bool
    data: str | None
    corpus: str | None
    corpus_dir: str | None
    max_chars: int
    seed: int
    smoke: bool


def data_settings(flags):
    """The `DataSettings` of the flags given (`{name: value}`), the rest from `SHARED`."""
    if flags.get("data") and flags.get("corpus"):
        raise ValueError("give --data or --corpus, not both")
    names = [f.name for f in dataclasses.fields(DataSettings)]
    return DataSettings(**{name: flags.get(name, SHARED[name]) for name in names})


def served_length_penalty(text, corpus=None):
    """The length penalty a run's `serving_default` gets when none is given: 0 for the dates
    (every answer is one date), else `LENGTH_PENALTY` of the corpus or `TEXT_LENGTH_PENALTY`."""
    if not text:
        return 0.0
    return LENGTH_PENALTY.get(corpus, TEXT_LENGTH_PENALTY)


def size_key(text, train_pairs=None):
    """The `BY_TASK` row: `"dates"`, or `"text-small"` / `"text-large"` by the number of
    training pairs (`None`, not known yet: the small-corpus row)."""
    if not text:
        return "dates"
    return "text-large" if (train_pairs or 0) >= SMALL_CORPUS else "text-small"


def resolve_config(flags, train_pairs=None, init_model=None):
    """`flags` (`{name: value}` of the settings given, `build_parser`'s names) -> the frozen
    `TranslatorConfig` (the rules: this module's docstring). `train_pairs`: the text corpus's
    training pairs (the size row); `init_model`: the `init_from` run's model settings. Raises
    `ValueError` on settings that do not go together."""
    flags = dict(flags)
    unknown = set(flags) - set(SHARED) - set(BY_TASK["dates"])
    if unknown:
        raise ValueError(f"Unknown translator settings. Received: {sorted(unknown)}")
    text = bool(flags.get("data") or flags.get("corpus"))
    row = size_key(text, train_pairs)
    values = {**SHARED, **BY_TASK[row], **flags}
    if flags.get("schedule") is None:
        values["schedule"] = "rsqrt" if values["time_budget"] else "cosine"
    if flags.get("length_penalty") is None:
        values["length_penalty"] = served_length_penalty(text, values["corpus"])
    if values["time_budget"] and row == "text-large":
        values.update({k: v for k, v in BUDGET_RULE.items() if k not in flags})
        if values["time_budget"] >= WIDE_BUDGET and "units" not in flags:
            values["units"] = WIDE_UNITS
    if "copy" not in flags and values["model"] in NO_COPY:
        values["copy"] = False
    _check(values, text)
    if values["smoke"]:
        values.update(SMOKE)
        values["epochs"] = flags.get("epochs", 1)
        for name, cap in SMOKE_CAPS.items():
            values[name] = min(values[name] or cap, cap)
    if init_model:
        values.update({k: init_model[k] for k in MODEL_SETTINGS if k in init_model})
    if values["epochs"] < 1:
        raise ValueError(f"`--epochs` must be >= 1. Received: epochs={values['epochs']}")
    return TranslatorConfig(**values, flags=flags, row=row, train_pairs=train_pairs)


def _check(values, text):
    """The settings that cannot go together, refused by name."""
    if values["model"] not in MODELS:
        raise ValueError(
            f"--model must be one of {', '.join(MODELS)}. Received: model={values['model']!r}"
        )
    if values["data"] and values["corpus"]:
        raise ValueError("give --data or --corpus, not both")
    if values["init_from"] and not text:
        raise ValueError("--init-from fine-tunes a text model: give --data or --corpus too")
    if values["copy"] and values["model"] in NO_COPY:
        raise ValueError(
            "--copy needs an RNN with soft attention or the Transformer (not --model hard or convs2s)"
        )
    # the export's search settings, checked here and not after the training: the knobs' table
    from keras_attn.decoding.config import check_knob

    for name in ("beam_size", "length_penalty"):
        try:
            values[name] = check_knob(name, values[name])
        except ValueError as err:
            raise ValueError(f"--{name.replace('_', '-')}: {err}") from None
