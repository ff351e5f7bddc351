"""The `keras-attn` command: inspect, try, check and export TensorFlow Serving models.

    keras-attn --version
    keras-attn inspect EXPORT_DIR [--json]
        signatures (names, dtypes, shapes), the ops of the graph (TF Text ops used, ops
        TensorFlow Serving lacks), assets and the warm-up records of an exported model.
        Exit status 1 when the graph uses an op the server does not have.
    keras-attn translate EXPORT_DIR [TEXT ...] [--n-best N] [--greedy | --sample] [--json]
            [--beam-size K] [--max-length N] [--length-penalty A] [--coverage-penalty B]
            [--min-length N] [--no-repeat-ngram-size N] [--repetition-penalty P]
            [--temperature T] [--top-k K] [--top-p P] [--seed S]
            [--prefix TEXT] [--constraint PHRASE ...]
        translate TEXTs (or stdin lines) with the SavedModel's signatures, routed the way the
        clients route them (`keras_attn.serving.client.SavedModelClient`); one line per
        hypothesis: input number, rank, score, output (docs/serving.md, "Command line").
        `--prefix` / `--constraint` (repeatable) go to `beam_search_constrained`.
    keras-attn check EXPORT_DIR
        load the export in a fresh process the way TensorFlow Serving does (tensorflow and
        tensorflow_text only) and replay its warm-up requests; exit status 1 if one fails.
    keras-attn export MODEL.keras TOKENIZER_FILE EXPORT_DIR [--version N] [--beam-size K] [--xla]
            [--keep-placeholders] ...
        export a saved text model with `keras_attn.serving.export_text_model`.

EXPORT_DIR is a version directory (`.../dates/1`) or a model's base directory, in which case the
highest numeric version is used. Subcommands are registered in `COMMANDS`. The translate flags
are the served knob table's (`keras_attn.serving.knobs`), each checked against its range before
any graph runs, with the Python API's message. Nothing heavier than the standard library is
imported until a command runs (`--help` and `--version` stay fast).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

# The module a command imports -> the extra that installs it.
EXTRAS = {
    "tensorflow_serving": "serving",
    "grpc": "serving",
    "tensorflow": "tensorflow",
    "tensorflow_text": "tensorflow",
    "keras": "tensorflow",
}


def inspect_export(export_dir):
    """A dict describing an exported SavedModel (`keras_attn.serving.inspection`)."""
    from keras_attn.serving.inspection import inspect_export as inspect

    return inspect(export_dir)


def resolve_version_dir(path):
    """`path` itself if it holds a saved_model.pb, else its highest numeric subdirectory that does."""
    from keras_attn.serving.client import resolve_version_dir as resolve

    return resolve(path)


def as_bytes(text):
    """A command-line or stdin text as the bytes to send: the exact bytes the user gave, even
    when they are not valid UTF-8 (the model reads broken UTF-8 as U+FFFD, never fails)."""
    if isinstance(text, bytes):
        return text
    return text.encode("utf-8", errors="surrogateescape")


def shown(text):
    """A text as printable str (invalid UTF-8 shown as U+FFFD)."""
    return as_bytes(text).decode("utf-8", errors="replace")


# ---- inspect ----------------------------------------------------------------------------


def _print_inspect(report, out):
    print(f"SavedModel: {report['path']}", file=out)
    for mg in report["meta_graphs"]:
        print(f"MetaGraph tags: {', '.join(mg['tags'])}", file=out)
        for name, sig in mg["signatures"].items():
            print(f"  signature {name!r}", file=out)
            for kind in ("inputs", "outputs"):
                for alias, spec in sig[kind].items():
                    print(
                        f"    {kind[:-1]:6} {alias:18} {spec['dtype']:8} {spec['shape']}", file=out
                    )
        print(f"  ops: {mg['num_ops']} distinct", file=out)
        print(f"  TF Text ops: {', '.join(mg['tf_text_ops']) or 'none'}", file=out)
        bad = mg["disallowed_ops"]
        print(f"  ops TensorFlow Serving lacks: {', '.join(bad) if bad else 'none'}", file=out)
    print(f"assets: {', '.join(report['assets']) or 'none'}", file=out)
    print(f"warm-up records: {len(report['warmup'])}", file=out)
    for i, entry in enumerate(report["warmup"]):
        if entry["kind"] != "predict_log":
            print(f"  [{i}] {entry['kind']}", file=out)
            continue
        print(f"  [{i}] predict {entry['model_name']}/{entry['signature_name']}", file=out)
        for alias, summary in entry["inputs"].items():
            print(f"        {alias}: {summary}", file=out)


def cmd_inspect(args, out):
    report = inspect_export(args.export_dir)
    if args.json:
        json.dump(report, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        _print_inspect(report, out)
    return 1 if any(mg["disallowed_ops"] for mg in report["meta_graphs"]) else 0


# ---- translate --------------------------------------------------------------------------


# The export-time settings a beam request starts from (read back from the warm-up file).
EXPORT_KNOBS = ("beam_size", "max_length", "length_penalty", "coverage_penalty")


def export_settings(export_dir):
    """The export-time beam settings, read back from the `beam_search` warm-up request
    (`beam_size`, `max_length`, `length_penalty`, `coverage_penalty`); {} when there is none."""
    from keras_attn.serving.harness import read_warmup_records

    for record in read_warmup_records(resolve_version_dir(export_dir), missing_ok=True):
        request = record.request
        if request is not None and request.signature_name == "beam_search":
            return {
                alias: value.item()
                for alias, value in request.inputs.items()
                if alias in EXPORT_KNOBS
            }
    return {}


def _stdin_lines():
    """stdin's lines as bytes (one undecodable line must not stop the others)."""
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    return [
        line.rstrip(b"\r\n") if isinstance(line, bytes) else line.rstrip("\r\n") for line in stream
    ]


def _mode(args):
    if args.greedy and args.sample:
        raise ValueError(
            "Pass `--greedy` or `--sample`, not both. Received: greedy=True, sample=True"
        )
    return "sample" if args.sample else "greedy" if args.greedy else "beam"


def checked_knobs(args, mode):
    """The knob flags given, each checked against the served table (flag named, the Python
    API's message), and that the mode's signatures take them. No TensorFlow runs here."""
    from keras_attn.serving import knobs as served

    given = {}
    for name in served.KNOB_NAMES:
        value = getattr(args, name)
        if value is None:
            continue
        spec = served.served_input(name)
        try:
            given[name] = spec.check(value)
        except ValueError as err:
            raise ValueError(f"{spec.flag}: {err}") from None
    takes = set().union(*(served.SIGNATURES[n] for n in served.MODES[mode]))
    refused = [n for n in given if n not in takes]
    if refused:
        flags = ", ".join(f"{served.served_input(n).flag}={given[n]}" for n in refused)
        need = " (the sampling knobs need --sample)" if set(refused) <= set(served.SAMPLING) else ""
        raise ValueError(f"Not a knob of a {mode} search{need}. Received: {flags}")
    return given


def _check_n_best(n_best, mode, beam_size):
    if n_best < 1:
        raise ValueError(f"`--n-best` must be >= 1. Received: n_best={n_best}")
    if mode != "beam" and n_best > 1:
        raise ValueError(
            f"`--n-best` must be 1 with `--{mode}` (one answer per input). Received: n_best={n_best}"
        )
    if beam_size is not None and n_best > beam_size:
        raise ValueError(
            "`--n-best` must be <= `--beam-size` (a beam of K keeps K hypotheses). "
            f"Received: n_best={n_best}, beam_size={beam_size}"
        )


def translate_hypotheses(export_dir, texts, mode="beam", prefix=None, constraints=None, **knobs):
    """`[[(text, score), ...] per input]` (n-best best first; hypotheses without a finite
    score dropped) from an exported model, through `SavedModelClient`'s routing. `prefix` and
    `constraints` (the same for every input) go to `beam_search_constrained`."""
    import numpy as np

    from keras_attn.serving.client import SavedModelClient

    if constraints is not None:
        constraints = [as_bytes(c) for c in constraints]
    result = SavedModelClient(export_dir).search(
        mode,
        [as_bytes(t) for t in texts],
        prefix=None if prefix is None else as_bytes(prefix),
        constraints=constraints,
        **knobs,
    )
    outputs, scores = result["outputs"], result["scores"]
    if mode != "beam":  # one output per input
        outputs, scores = [[o] for o in outputs], scores[:, None]
    return [
        [(o, float(s)) for o, s in zip(row, row_scores) if np.isfinite(s)]
        for row, row_scores in zip(outputs, scores)
    ]


def _constraint_flags(args, mode, knobs):
    """`{"prefix": ..., "constraints": [...]}` of the flags given, checked to go with `mode` and
    the other knobs (the constrained signature takes the beam knobs only)."""
    from keras_attn.serving import knobs as served

    given = {}
    if args.prefix is not None:
        given["prefix"] = args.prefix
    if args.constraint:
        given["constraints"] = list(args.constraint)
    if not given:
        return given
    if mode != "beam":
        raise ValueError(
            f"`--prefix` and `--constraint` need a beam search (not --{mode}). "
            f"Received: {', '.join(sorted(given))} with --{mode}"
        )
    served.route("beam", list(knobs) + list(given))
    return given


def cmd_translate(args, out):
    mode = _mode(args)
    n_best = args.n_best
    knobs = checked_knobs(args, mode)
    constraints = _constraint_flags(args, mode, knobs)
    _check_n_best(n_best, mode, knobs.get("beam_size"))
    texts = list(args.texts) if args.texts else _stdin_lines()
    exported = export_settings(args.export_dir)
    if mode == "beam":
        knobs = dict(exported, **knobs)
        if args.beam_size is None:  # the export's beam, widened to give n_best hypotheses
            knobs["beam_size"] = max(knobs.get("beam_size", 1), n_best)
    elif (mode == "sample" or knobs) and "max_length" in exported:
        # a request to sample or greedy_controls: the export's max_length unless given
        knobs.setdefault("max_length", exported["max_length"])
    low, high = knobs.get("min_length"), knobs.get("max_length")
    if low is not None and high is not None and low > high:  # before the graph sees them
        raise ValueError(
            "--min-length: `min_length` must be <= `max_length` (a hypothesis cut at "
            f"max_length would end earlier). Received: min_length={low}, max_length={high}"
        )
    results = translate_hypotheses(args.export_dir, texts, mode, **constraints, **knobs)
    # Every input gets its hypotheses; one without any (no finite score) is reported on stderr
    # and makes the exit status 1, never a "nan" line.
    missing = [i for i, hyps in enumerate(results) if not hyps]
    for i in missing:
        print(
            f"keras-attn translate: error: no hypothesis for input {i + 1}: {shown(texts[i])!r}",
            file=sys.stderr,
        )
    if args.json:
        payload = [
            {
                "input": shown(text),
                "hypotheses": [{"output": o, "score": s} for o, s in hyps[:n_best]],
            }
            for text, hyps in zip(texts, results)
        ]
        json.dump(payload, out, indent=2, ensure_ascii=False)
        out.write("\n")
        return 1 if missing else 0
    # The same four columns whatever --n-best: the output last, so it may hold tabs.
    for number, hyps in enumerate(results, 1):
        for rank, (output, score) in enumerate(hyps[:n_best], 1):
            print(f"{number}\t{rank}\t{score:.4f}\t{output}", file=out)
    return 1 if missing else 0


# ---- check ------------------------------------------------------------------------------


def cmd_check(args, out):
    from keras_attn.serving.harness import ServerWayError, run_server_way

    path = resolve_version_dir(args.export_dir)
    try:
        result = run_server_way(path, replay_warmup=True, timeout=args.timeout)
    except (ServerWayError, FileNotFoundError) as err:
        raise ValueError(
            f"`export_dir` does not load the way TensorFlow Serving loads it: {err}"
        ) from err
    print(
        f"SavedModel: {path} loads without keras_attn: {'keras_attn' not in result.modules}",
        file=out,
    )
    failed = "keras_attn" in result.modules or not result.warmup
    for request, response in zip(result.warmup_requests, result.warmup):
        if response.ok:
            shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in sorted(response.outputs.items()))
            print(f"  warm-up {request.signature_name}: ok ({shapes})", file=out)
        else:
            failed = True
            print(
                f"  warm-up {request.signature_name}: {response.error_type}: {response.error_message}",
                file=out,
            )
    if not result.warmup:
        print("  no warm-up requests", file=out)
    return 1 if failed else 0


# ---- export -----------------------------------------------------------------------------


def load_tokenizer(path):
    """A `keras_attn.text` tokenizer from its file: `.model` SentencePiece, else a character vocabulary."""
    from keras_attn.text import CharTokenizer, SentencePieceTokenizer

    if not os.path.isfile(path):
        raise FileNotFoundError(f"No tokenizer file at {path!r}")
    if path.endswith(".model"):
        return SentencePieceTokenizer.load(path)
    return CharTokenizer.load(path)


def _int_list(flag, text):
    """`"1,8,32"` -> `(1, 8, 32)`; None stays None (the export's default)."""
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(
            f"`{flag}` must be comma-separated integers. Received: {flag}={text!r}"
        ) from None


# The export flags: one per `ServingSettings` field, with its help; the default shown is the
# field's own (`settings_default`).
SETTING_FLAGS = {
    "beam_size": (int, "serving_default's beam and the warm-up requests' beam"),
    "max_length": (
        int,
        "most tokens generated by serving_default and greedy (default: 64, or the "
        "model's learned position table if smaller)",
    ),
    "max_input_length": (
        int,
        "source ids kept per input; longer inputs are cut (default: 256, or "
        "the model's learned position table if smaller)",
    ),
    "max_length_limit": (
        int,
        "largest max_length a request may ask for (default: 4 x "
        "--max-length, or the model's learned position table)",
    ),
    "beam_size_limit": (int, "largest beam_size a request may ask for"),
    "length_penalty": (float, "serving_default's and greedy's length penalty alpha"),
    "coverage_penalty": (float, "serving_default's and greedy's coverage penalty beta"),
    "eos_penalty": (float, "the end-of-sentence penalty gamma, fixed for every signature"),
    "xla_batch_sizes": (None, "batch buckets of the XLA signatures, comma-separated"),
    "xla_source_lengths": (
        None,
        "source-length buckets of the XLA signatures, comma-separated "
        "(default: 16, 32, ... up to --max-input-length)",
    ),
}
SETTING_SWITCHES = {
    "source_add_start": "put the start id before the source ids, as in training",
    "source_add_end": "put the end id after the source ids, as in training",
    "xla": "also export <name>_xla signatures compiled with XLA (docs/serving.md, XLA)",
    "keep_placeholders": "serving_default and beam_search keep every placeholder and markup "
    "tag of the source, as often as in it (docs/serving.md, Placeholders)",
}


def settings_default(name):
    import dataclasses

    from keras_attn.serving.signatures import ServingSettings

    (field,) = [f for f in dataclasses.fields(ServingSettings) if f.name == name]
    value = field.default
    return ",".join(map(str, value)) if isinstance(value, tuple) else value


def export_settings_of(args):
    """The one `ServingSettings` of an export command (checked before the model is loaded)."""
    from keras_attn.serving import ServingSettings

    given = {name: getattr(args, name) for name in SETTING_FLAGS if getattr(args, name) is not None}
    for name in ("xla_batch_sizes", "xla_source_lengths"):
        if name in given:
            given[name] = _int_list("--" + name.replace("_", "-"), given[name])
    given.update({name: True for name in SETTING_SWITCHES if getattr(args, name)})
    return ServingSettings(**given)


def cmd_export(args, out):
    settings = export_settings_of(args)
    import keras

    import keras_attn.models  # noqa: F401  (registers the model classes for loading)
    from keras_attn.serving import export_text_model

    if not os.path.isfile(args.model):
        raise FileNotFoundError(f"No model file at {args.model!r}")
    tokenizer = load_tokenizer(args.tokenizer)
    target = load_tokenizer(args.target_tokenizer) if args.target_tokenizer else None
    model = keras.saving.load_model(args.model, compile=False)
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
    return 0


# ---- main -------------------------------------------------------------------------------

KNOB_HELP = "knob:"  # a translate flag's help, read from the served table when help is printed


def _knob_help(name):
    from keras_attn.serving import knobs as served

    spec = served.served_input(name)
    default = "the export's setting" if name in EXPORT_KNOBS else repr(spec.default)
    where = " (with --sample)" if name in served.SAMPLING else ""
    return f"{spec.help}{where}: {spec.requirement} (default: {default})"


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default; the knob flags' help lines come from the
    served table, read only when the help is printed."""

    def _get_help_string(self, action):
        text = action.help or ""
        if text.startswith(KNOB_HELP):
            return _knob_help(text[len(KNOB_HELP) :]).replace("%", "%%")
        if callable(action.default) or "default: " in text or action.option_strings == []:
            return text
        if action.default is None or action.default is argparse.SUPPRESS:
            return text
        if action.default is False:
            return text + " (default: off)"
        return text + " (default: %(default)s)"


def number(text):
    """A knob flag's value: an int when it reads as one, else a float (the table checks it)."""
    try:
        return int(text)
    except ValueError:
        return float(text)


EXPORT_DIR_HELP = "version directory or base directory of the export"


def _add_parser(subparsers, func, help, description, export_dir=True):
    """A subcommand `func.__name__[4:]` running `func`, its first argument EXPORT_DIR."""
    p = subparsers.add_parser(
        func.__name__[len("cmd_") :],
        help=help,
        description=description,
        formatter_class=HelpFormatter,
    )
    if export_dir:
        p.add_argument("export_dir", help=EXPORT_DIR_HELP)
    p.set_defaults(func=func)
    return p


def _add_inspect(subparsers):
    p = _add_parser(
        subparsers,
        cmd_inspect,
        "signatures, ops and warm-up records of an exported model",
        "Describe an exported SavedModel from its files (no model code runs). Exit status 1 "
        "when the graph uses an op stock TensorFlow Serving lacks.",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _add_translate(subparsers):
    from keras_attn.serving.knobs import KNOB_NAMES

    p = _add_parser(
        subparsers,
        cmd_translate,
        "translate text with an exported SavedModel (n-best with scores)",
        "Translate TEXTs (or stdin lines) with an exported model, in this process. Output: one "
        "line per hypothesis, tab-separated: input number, rank, score, output. Knobs are "
        "checked against their documented ranges before anything runs.",
    )
    p.add_argument("texts", nargs="*", help="texts to translate (default: one per line from stdin)")
    p.add_argument("--n-best", type=int, default=1, help="hypotheses printed per input")
    p.add_argument("--greedy", action="store_true", help="greedy search (one output per input)")
    p.add_argument("--sample", action="store_true", help="sample one output per input")
    for name in KNOB_NAMES:
        flag = "--" + name.replace("_", "-")
        p.add_argument(flag, type=number, default=None, help=KNOB_HELP + name)
    from keras_attn.serving.knobs import CONSTRAINTS, PREFIX

    p.add_argument(PREFIX.flag, default=None, metavar="TEXT", help=PREFIX.help)
    p.add_argument(
        CONSTRAINTS.flag, action="append", default=None, metavar="PHRASE", help=CONSTRAINTS.help
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def _add_check(subparsers):
    p = _add_parser(
        subparsers,
        cmd_check,
        "load an export the way TF Serving does and replay its warm-up",
        "Load an export in a fresh process with tensorflow and tensorflow_text only, the way "
        "TensorFlow Serving loads it, and replay its warm-up requests. Exit status 1 if one fails.",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before the check gives up")


def _add_export(subparsers):
    p = _add_parser(
        subparsers,
        cmd_export,
        "export a saved .keras text model for TensorFlow Serving",
        "Export a saved .keras text model with keras_attn.serving.export_text_model; the flags "
        "build one ServingSettings (docs/serving.md, Settings).",
        export_dir=False,
    )
    p.add_argument(
        "model", help="a .keras file of a model with encode/initial_decode_state/decode_step"
    )
    p.add_argument(
        "tokenizer", help="the tokenizer file (vocabulary .txt, or SentencePiece .model)"
    )
    p.add_argument("export_dir", help="the model's base directory; the version goes below it")
    p.add_argument(
        "--target-tokenizer",
        default=None,
        help="the target's tokenizer file, if different (default: the tokenizer)",
    )
    p.add_argument("--version", type=int, default=1, help="the version subdirectory")
    p.add_argument("--overwrite", action="store_true", help="replace an existing version")
    for name, (kind, text) in SETTING_FLAGS.items():
        default = settings_default(name)
        shown_default = "" if default is None else f" (default: {default})"
        flag = "--" + name.replace("_", "-")
        p.add_argument(
            flag, type=kind, default=None, help=(text + shown_default).replace("%", "%%")
        )
    for name, text in SETTING_SWITCHES.items():
        p.add_argument("--" + name.replace("_", "-"), action="store_true", help=text)


# Each adds one subcommand to the parser; other modules may append theirs.
COMMANDS = [_add_inspect, _add_translate, _add_check, _add_export]

DESCRIPTION = (
    "Inspect, try, check and export keras-attn translators and captioners served by "
    "TensorFlow Serving (docs/serving.md)."
)


def build_parser():
    from keras_attn import __version__

    parser = argparse.ArgumentParser(
        prog="keras-attn", description=DESCRIPTION, formatter_class=HelpFormatter
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"keras-attn {__version__}",
        help="print the package's version and exit",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(subparsers)
    return parser


def missing_extra(err):
    """The one-line message for a module a command needs and the environment lacks, or None."""
    module = (err.name or "").split(".")[0]
    extra = EXTRAS.get(module)
    if extra is None:
        return None
    return f"this command needs the `{module}` module: pip install 'keras-attn[{extra}]'"


def graph_error_message(message):
    """The words of a failed graph assertion (`tf.debugging.Assert`: "assertion failed: [text]
    [value] ..."), without TensorFlow's node names and stack notes, e.g. "`beam_size` must be an
    integer in [1, 64]. Received: beam_size=1000"; other messages as they are."""
    marker = "assertion failed: ["
    if marker not in message:
        return message
    text = message[message.index(marker) + len(marker) :].split("\n", 1)[0].rstrip()
    text = text[:-1] if text.endswith("]") else text
    return re.sub(r"\] \[", " ", re.sub(r"=\] \[", "=", text)).strip()


def main(argv=None, out=None):
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        return args.func(args, out)
    except (ValueError, FileNotFoundError) as err:
        print(f"keras-attn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:
        message = missing_extra(err)
        if message is None:
            raise
        print(f"keras-attn {args.command}: error: {message}", file=sys.stderr)
        return 2
    except Exception as err:  # a TensorFlow error from the model
        if type(err).__module__.startswith("tensorflow"):
            message = graph_error_message(getattr(err, "message", str(err)))
            print(
                f"keras-attn {args.command}: error: {type(err).__name__}: {message}",
                file=sys.stderr,
            )
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
