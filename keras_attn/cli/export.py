"""`keras-attn export MODEL.keras TOKENIZER EXPORT_DIR` or `RUN_DIR EXPORT_DIR`."""

from __future__ import annotations

import argparse
import os
import re

from keras_attn.cli.parser import add_parser, int_flag


def load_tokenizer(path):
    """A `keras_attn.text` tokenizer from its file: `.model` SentencePiece, else a character vocabulary."""
    from keras_attn.text import CharTokenizer, SentencePieceTokenizer

    if not os.path.isfile(path):
        raise FileNotFoundError(f"No tokenizer file at {path!r}")
    if path.endswith(".model"):
        return SentencePieceTokenizer.load(path)
    return CharTokenizer.load(path)


def export_settings_of(args):
    """The one `ServingSettings` of an export command's setting flags
    (`keras_attn.serving.settings.settings_from_args`), checked before the model is loaded;
    a value out of range is a ValueError naming its flag."""
    from keras_attn.serving.settings import setting_flag, settings_from_args

    try:
        return settings_from_args(args)
    except ValueError as err:
        found = re.search(r"Received: (\w+)=", str(err))
        if found is None:
            raise
        raise ValueError(f"{setting_flag(found.group(1))}: {err}") from None


# The setting flags that apply to a run directory (`keras_attn.train.export_run` takes these;
# the rest are the run's own).
RUN_SETTINGS = ("beam_size", "length_penalty", "xla", "word_rules")
# Every flag the RUN_DIR EXPORT_DIR form takes: its help and its refusal read this one list.
RUN_FLAGS = (
    "--version",
    "--overwrite",
    "--beam-size",
    "--length-penalty",
    "--xla",
    "--word-rules",
    "--litert",
    "--quantize",
)


def check_version_free(args):
    """An existing version is replaced only with --overwrite: refused before anything loads."""
    version_dir = os.path.join(args.export_dir, str(args.version))
    if os.path.exists(version_dir) and not args.overwrite:
        raise ValueError(
            f"{version_dir} already exists: --overwrite replaces it (or --version picks "
            f"another). Received: export_dir={args.export_dir!r}, --version {args.version}"
        )


def check_device(settings):
    """With --litert: the settings a .tflite file cannot carry, refused before anything loads
    (`keras_attn.serving.litert.check_device_settings`), the error beginning with the flag."""
    from keras_attn.serving.litert import check_device_settings

    try:
        check_device_settings(settings)
    except ValueError as err:
        raise ValueError(f"--litert: {err}") from None


def run(args, out):
    if args.quantize is not None and args.litert is None:
        raise ValueError(
            f"--quantize applies to --litert only. Received: quantize={args.quantize!r}"
        )
    if args.run_dir is not None:
        return _export_run(args, out)
    settings = export_settings_of(args)
    if not os.path.isfile(args.model):
        raise FileNotFoundError(f"No model file at {args.model!r}")
    for path in (args.tokenizer, args.target_tokenizer):
        if path is not None and not os.path.isfile(path):
            raise FileNotFoundError(f"No tokenizer file at {path!r}")
    check_version_free(args)
    if args.litert:
        check_device(settings)
    import keras

    import keras_attn.models  # noqa: F401  (registers the model classes for loading)
    from keras_attn.serving import export_text_model

    tokenizer = load_tokenizer(args.tokenizer)
    target = load_tokenizer(args.target_tokenizer) if args.target_tokenizer else None
    model = keras.saving.load_model(args.model, compile=False)
    if args.step_signatures:
        from keras_attn.serving.steps import STEP_SIGNATURES

        settings = settings.replace(extra_signatures=(*settings.extra_signatures, STEP_SIGNATURES))
    path = export_text_model(
        model,
        tokenizer,
        args.export_dir,
        settings,
        version=args.version,
        target_tokenizer=target,
        overwrite=args.overwrite,
    )
    print(path, file=out)
    if args.litert:
        from keras_attn.serving.litert import export_litert

        lite = export_litert(
            model,
            args.litert,
            args.quantize,
            tokenizer=tokenizer,
            target_tokenizer=target,
            settings=settings.replace(extra_signatures=()),
        )
        print(lite, file=out)
    return 0


def _export_run(args, out):
    """`keras-attn export RUN_DIR EXPORT_DIR`: a training run exported from its directory
    (`keras_attn.train.export_run`: the served model and settings of the run's own export),
    taking `RUN_FLAGS` only."""
    from keras_attn.serving.settings import given_settings, setting_flag

    others = [setting_flag(n) for n in given_settings(args) if n not in RUN_SETTINGS]
    others += ["--target-tokenizer"] * (args.target_tokenizer is not None)
    others += ["--no-step-signatures"] * (not args.step_signatures)
    if others:
        raise ValueError(
            "A run directory is exported with its own settings: only "
            f"{', '.join(RUN_FLAGS)} apply. Received: {', '.join(others)}"
        )
    if not os.path.isfile(os.path.join(args.run_dir, "run_config.json")):
        raise ValueError(
            "`run_dir` must be a training run's directory (it holds run_config.json; a model "
            "file goes with its tokenizer: MODEL.keras TOKENIZER EXPORT_DIR). "
            f"Received: run_dir={args.run_dir!r}"
        )
    check_version_free(args)
    from keras_attn.train import export_run

    try:
        written = export_run(
            args.run_dir,
            args.export_dir,
            version=args.version,
            beam_size=args.beam_size,
            length_penalty=args.length_penalty,
            xla=args.xla,
            word_rules=args.word_rules,
            litert=args.litert,
            quantize=args.quantize,
        )
    except ValueError as err:
        if not str(err).startswith("A .tflite file"):
            raise
        raise ValueError(f"--litert: {err} (the run's word rules: --no-word-rules)") from None
    for path in written if args.litert else [written]:
        print(path, file=out)
    return 0


class ExportPaths(argparse.Action):
    """`export`'s positionals: MODEL.keras TOKENIZER EXPORT_DIR, or RUN_DIR EXPORT_DIR."""

    def __call__(self, parser, namespace, values, option_string=None):
        if len(values) == 3:
            model, tokenizer, export_dir = values
            run_dir = None
        elif len(values) == 2:
            run_dir, export_dir = values
            model = tokenizer = None
        else:
            parser.error(
                "export takes MODEL.keras TOKENIZER EXPORT_DIR, or RUN_DIR EXPORT_DIR. "
                f"Received: {len(values)} paths"
            )
        for name, value in (
            ("model", model),
            ("tokenizer", tokenizer),
            ("export_dir", export_dir),
            ("run_dir", run_dir),
        ):
            setattr(namespace, name, value)


def add(subparsers):
    p = add_parser(
        subparsers,
        "export",
        run,
        "export a saved .keras text model for TensorFlow Serving",
        "Export a saved .keras text model with keras_attn.serving.export_text_model (the flags "
        "build one ServingSettings: docs/serving.md, Settings), or a training run from its "
        "directory with keras_attn.train.export_run (the run's own served model and settings; "
        f"only {', '.join(RUN_FLAGS)} apply).",
        export_dir=False,
    )
    p.usage = (
        "keras-attn export MODEL.keras TOKENIZER EXPORT_DIR [options]\n"
        "       keras-attn export RUN_DIR EXPORT_DIR [options]"
    )
    p.add_argument(
        "paths",
        nargs="+",
        action=ExportPaths,
        metavar="PATH",
        help="MODEL.keras TOKENIZER EXPORT_DIR: a .keras file of a model with "
        "encode/initial_decode_state/decode_step, its tokenizer file (vocabulary .txt, or "
        "SentencePiece .model) and the model's base directory (the version goes below it); or "
        "RUN_DIR EXPORT_DIR: a training run's directory (examples/train_translator.py) and the "
        "base directory",
    )
    p.add_argument(
        "--target-tokenizer",
        default=None,
        help="the target's tokenizer file, if different (default: the tokenizer)",
    )
    p.add_argument(
        "--version", type=int_flag("version", 0), default=1, help="the version subdirectory"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing version (without it, an existing one is refused before the "
        "model loads)",
    )
    p.add_argument(
        "--no-step-signatures",
        dest="step_signatures",
        action="store_false",
        help="MODEL.keras form: leave out encode / decode_step / detokenize / tokenize, the "
        "signatures a streaming client loops over (docs/serving.md, Streaming; default: "
        "written; a run directory's export is the run's own)",
    )
    p.add_argument(
        "--litert",
        metavar="PATH.tflite",
        default=None,
        help="also write a LiteRT model with encode / decode_step (the same served model: a "
        "dates run's behind its date grammar) and its tokenizer beside it; refused when the "
        "export's placeholders, word rules or copy_source are on, which act in the "
        "SavedModel's graph only (docs/serving.md, On device; default: none)",
    )
    p.add_argument(
        "--quantize",
        choices=["dynamic_int8"],
        default=None,
        help="with --litert: int8 weights (dynamic-range quantization; default: float32 weights)",
    )
    from keras_attn.serving.settings import add_setting_flags

    add_setting_flags(p)
