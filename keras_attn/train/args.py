"""Command-line flags: the run flags every example script takes, and the translator's, whose
defaults are `config`'s table (a flag left out is absent from the parsed flags, so that
`resolve_config` knows what the user gave)."""

from __future__ import annotations

import argparse
import types

from keras_attn.train import config as cfg

# (flag, argparse keywords, help): the flags of every example script.
RUN_FLAGS = (
    ("--epochs", dict(type=int), "total number of epochs"),
    ("--batch-size", dict(type=int), "global batch size"),
    ("--learning-rate", dict(type=float), "Adam learning rate"),
    ("--seed", dict(type=int), "seed of data, initialisation and batch order"),
    ("--out", dict(), "output directory (checkpoints, logs, heat maps)"),
    ("--resume", dict(action="store_true"), "continue from the last checkpoint in --out"),
    ("--smoke", dict(action="store_true"), "tiny data, 1 epoch: runs end to end in seconds"),
    (
        "--distribute",
        dict(choices=cfg.DISTRIBUTE),
        "TensorFlow: mirrored (all local devices) or multi-worker (TF_CONFIG); JAX: "
        "data-parallel (keras.distribution.DataParallel over every device of every process)",
    ),
    (
        "--coordinator-address",
        dict(metavar="HOST:PORT"),
        "data-parallel over several processes: the address of process 0 (every process gives "
        "the same)",
    ),
    (
        "--num-processes",
        dict(type=int),
        "data-parallel: the number of processes (1: this process's devices)",
    ),
    ("--process-id", dict(type=int), "data-parallel: this process's id, 0 ... N-1"),
    (
        "--logical-cpus",
        dict(type=int, metavar="N"),
        "split the CPU into N logical devices (with --distribute mirrored: N replicas on one "
        "machine)",
    ),
    ("--export", dict(metavar="DIR"), "write a SavedModel under DIR/<version>/"),
    ("--export-version", dict(type=int), "version subdirectory of --export"),
    ("--heatmaps", dict(type=int), "attention heat maps of validation examples"),
    (
        "--jit-compile",
        dict(action="store_true"),
        "compile the train step with XLA (always on with KERAS_BACKEND=jax, where a step that "
        "is not compiled runs op by op)",
    ),
    (
        "--compilation-cache",
        dict(action=argparse.BooleanOptionalAction),
        "JAX in one process: keep the XLA programs compiled in RUN_DIR/jax_cache, so that a "
        "resumed or repeated run loads them instead of compiling them again",
    ),
    ("--verbose", dict(type=int, choices=(0, 1, 2)), "fit's verbosity (1: progress bar)"),
)

RUN_DEFAULTS = {
    name: cfg.SHARED[name]
    for name in (
        "batch_size learning_rate seed resume smoke distribute coordinator_address "
        "num_processes process_id logical_cpus export export_version heatmaps jit_compile "
        "compilation_cache verbose"
    ).split()
}

TRANSLATOR_FLAGS = (
    ("--model", dict(choices=cfg.MODELS, metavar="MODEL"), " | ".join(cfg.MODELS)),
    ("--data", dict(), "TSV corpus (source<TAB>target per line); without it: dates"),
    (
        "--corpus",
        dict(metavar="LANG"),
        "English -> LANG pairs of the corpus `make corpora` builds from gettext catalogues (es, zh); "
        "built on first use when absent",
    ),
    (
        "--corpus-dir",
        dict(metavar="DIR"),
        "with --corpus: the built corpus to read (default: `make corpora`'s, built if missing)",
    ),
    (
        "--init-from",
        dict(metavar="RUN_DIR"),
        "fine-tune: start from a text run's vocabulary, model settings and best weights",
    ),
    (
        "--time-budget",
        dict(type=float, metavar="MINUTES"),
        "stop at the last batch after which the epoch's end (validation, checkpoint) still "
        "fits in MINUTES of training (the run's: --resume counts the epochs already trained)",
    ),
    (
        "--max-tokens",
        dict(type=int),
        "text: token positions per batch, padding included (length-bucketed batches)",
    ),
    ("--steps-per-epoch", dict(type=int), "text: batches per epoch (0: one pass over the pairs)"),
    (
        "--token-dropout",
        dict(type=float),
        "text: source tokens replaced by <unk> with this probability",
    ),
    (
        "--patience",
        dict(type=int),
        "text: stop after this many epochs without a better validation chrF (0: never)",
    ),
    (
        "--average",
        dict(type=int),
        "text: also try the mean of the last N epochs' weights; kept if its validation chrF is "
        "higher",
    ),
    ("--n-train", dict(type=int), "dates: training examples"),
    ("--n-val", dict(type=int), "validation examples decoded after each epoch"),
    ("--n-test", dict(type=int), "dates: test examples (held out by date)"),
    (
        "--vocab-size",
        dict(type=int),
        "TSV: SentencePiece vocabulary size (0: sized to the corpus, see auto_vocab_size)",
    ),
    ("--label-smoothing", dict(type=float), "label smoothing of the sequence loss"),
    ("--max-seq", dict(type=int), "text: tokens per sequence at most (cut beyond)"),
    ("--max-chars", dict(type=int), "TSV: drop pairs longer than this"),
    ("--embedding-dim", dict(type=int), "embedding size"),
    ("--units", dict(type=int), "RNN units / Transformer d_model"),
    ("--layers", dict(type=int), "Transformer / ConvS2S layers"),
    ("--heads", dict(type=int), "Transformer heads"),
    ("--kv-heads", dict(type=int), "Transformer key/value heads (GQA; 1 = multi-query)"),
    ("--sliding-window", dict(type=int), "Transformer self-attention window"),
    ("--gate", dict(action="store_true"), "Transformer gated attention"),
    ("--rotary", dict(type=float, metavar="WAVELENGTH"), "Transformer rotary embeddings"),
    ("--window", dict(type=int), "Luong local window half-width D"),
    ("--dropout", dict(type=float), "dropout rate"),
    (
        "--copy",
        dict(action=argparse.BooleanOptionalAction),
        "copy attention (pointer-generator; never with --model hard or convs2s)",
    ),
    ("--coverage-weight", dict(type=float), "copy attention's coverage loss weight"),
    (
        "--schedule",
        dict(choices=("cosine", "constant", "rsqrt")),
        "learning-rate schedule: cosine decay over --epochs, constant, or rsqrt (warm-up, then "
        "1/sqrt(step): needs no end); default: rsqrt with --time-budget, else cosine",
    ),
    ("--cell", dict(choices=("lstm", "gru")), "RNN cell"),
    (
        "--mixed-precision",
        dict(choices=("bfloat16", "float16")),
        "compute in this dtype, variables in float32 (Keras' mixed_<dtype> policy; bfloat16 "
        "where the device has it)",
    ),
    ("--max-length", dict(type=int), "decoding length limit (default: from data)"),
    ("--beam-size", dict(type=int), "export: serving_default beam size"),
    (
        "--length-penalty",
        dict(type=float),
        "export: serving_default's length penalty alpha (GNMT); default: by corpus, 2.0 for "
        "--corpus es, 1.0 for other text, 0 for the dates (docs/real_data.md)",
    ),
    (
        "--xla",
        dict(action="store_true"),
        "export: also the <name>_xla signatures compiled with XLA (docs/serving.md)",
    ),
    (
        "--keep-placeholders",
        dict(action=argparse.BooleanOptionalAction),
        "export: every placeholder and markup tag of the source required in the served answers "
        "(docs/serving.md)",
    ),
    (
        "--word-rules",
        dict(action=argparse.BooleanOptionalAction),
        "export: the beam and sampling searches ban loops the source does not have and an "
        "end inside a cut source word; greedy stays plain (docs/serving.md, Word rules)",
    ),
)


def dest(flag):
    return flag.lstrip("-").replace("-", "_")


def table_default(name):
    """The default of setting `name` as `--help` shows it, read from `config`'s table."""
    if name in cfg.SHARED:
        value = cfg.SHARED[name]
        return None if value is None or value is False else f"default {value}"
    if name not in cfg.BY_TASK["dates"]:
        return None
    rows = [(row, cfg.BY_TASK[row][name]) for row in cfg.BY_TASK]
    if len({v for _, v in rows}) == 1:
        return f"default {rows[0][1]}"
    return "default: " + ", ".join(f"{v} ({row})" for row, v in rows)


def add_flags(parser, flags, defaults=None):
    """Add `flags` ((flag, keywords, help) rows) to `parser`. `defaults`: `{name: value}` given
    to argparse; without it every flag is left out of the namespace unless given (and the help
    shows the default from the translator's table)."""
    for flag, keywords, text in flags:
        name = dest(flag)
        if defaults is None:
            shown = table_default(name)
            keywords = dict(keywords, default=argparse.SUPPRESS)
        else:
            shown = None if defaults.get(name) is None else f"default {defaults[name]}"
            keywords = dict(keywords, default=defaults.get(name))
        parser.add_argument(flag, help=f"{text} ({shown})" if shown else text, **keywords)
    return parser


def build_parser(description="Train a translator."):
    """The translator's parser (`examples/train_translator.py`): its `parse_args` gives only the
    flags given; `translator_flags` turns them into `resolve_config`'s input."""
    parser = argparse.ArgumentParser(
        description=description,
        epilog="Defaults by task: dates (the generated dates), text-small (a text corpus below "
        f"{cfg.SMALL_CORPUS:,} training pairs), text-large (from {cfg.SMALL_CORPUS:,}); "
        "keras_attn.train.config holds the table, run_config.json the resolved settings.",
    )
    add_flags(parser, RUN_FLAGS)
    return add_flags(parser, TRANSLATOR_FLAGS)


def translator_flags(parser, argv=None):
    """`{name: value}` of the flags given in `argv`."""
    return vars(parser.parse_args(argv))


def base_parser(description, epochs=10, batch_size=64, learning_rate=1e-3, out="runs/example"):
    """The run flags for an example script other than the translator, with its defaults
    (`epochs`: 1 with `--smoke`; resolved by `parse_run_args`)."""
    parser = argparse.ArgumentParser(description=description)
    defaults = dict(RUN_DEFAULTS, batch_size=batch_size, learning_rate=learning_rate, out=out)
    add_flags(parser, RUN_FLAGS, defaults)
    parser.set_defaults(default_epochs=epochs)
    return parser


class RunSettings:
    """The settings of one example script's run, read-only: the flags parsed, `epochs`
    resolved, the script's `--smoke` sizes applied (`parse_run_args`). Read them as attributes
    (`settings.batch_size`, as on the namespace they came from); `replace` gives a copy with
    changes."""

    __slots__ = ("_values",)

    def __init__(self, values):
        object.__setattr__(self, "_values", types.MappingProxyType(dict(values)))

    def __getattr__(self, name):
        if name == "_values":  # not set yet (a copy being made)
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"The run has no setting {name!r}.") from None

    def __setattr__(self, name, value):
        raise AttributeError(
            f"A run's settings are read-only (build them with parse_run_args, or use "
            f"replace). Received: {name}={value!r}"
        )

    def replace(self, **changes):
        """A copy with `changes` (each the name of a setting it has)."""
        unknown = sorted(set(changes) - set(self._values))
        if unknown:
            raise ValueError(f"The run has no setting {unknown[0]!r}. Received: {unknown}")
        return RunSettings({**self._values, **changes})

    def as_dict(self):
        return dict(self._values)

    def __repr__(self):
        inner = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"RunSettings({inner})"


def parse_run_args(parser, argv=None, smoke=None):
    """The `RunSettings` of a `base_parser`'s flags in `argv`: `epochs` as given, else 1 with
    `--smoke`, else the script's default; with `--smoke`, the sizes of `smoke` (`{setting:
    value}`, the script's tiny run) replace the parsed ones."""
    values = vars(parser.parse_args(argv))
    default_epochs = values.pop("default_epochs")
    if values["epochs"] is None:
        values["epochs"] = 1 if values["smoke"] else default_epochs
    if values["smoke"] and smoke:
        values.update(smoke)
    return RunSettings(values)
