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
    keras-attn check EXPORT_DIR [--timeout S]
        load the export in a fresh process the way TensorFlow Serving does (tensorflow and
        tensorflow_text only) and replay its warm-up requests; exit status 1 if one fails or
        the export has no warm-up file.
    keras-attn export MODEL.keras TOKENIZER_FILE EXPORT_DIR [--version N] [--beam-size K] [--xla]
            [--keep-placeholders] ...
        export a saved text model with `keras_attn.serving.export_text_model`.

EXPORT_DIR is a version directory (`.../dates/1`) or a model's base directory, in which case the
highest numeric version is used. Subcommands are registered in `COMMANDS`; each parses its
arguments intermixed (`translate DIR --greedy "text"`: texts may follow flags). The translate
flags are the served request parameters (`keras_attn.serving.specs`), the export flags the settings'
(`keras_attn.serving.settings.add_setting_flags`); every numeric flag is checked while the
command line is parsed, before anything loads, with the Python API's message.

Every failure is one line on stderr, `keras-attn COMMAND: error: ...`, exit status 2: a bad
flag, a missing directory, a package the command needs (one pip command naming all of them,
`keras_attn._pins.install_command`), an export TensorFlow cannot read. TensorFlow's own logs
(its C++ library writes them to file descriptor 2) are kept off the terminal unless
`--verbose`. Neither Keras nor TensorFlow is imported until a command runs: `--help` and
`--version` stay fast, and work without them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import tempfile

from keras_attn import _pins

# The top-level modules each command needs (checked before it runs, so one message names all
# that are missing). `export` adds TF Text and sentencepiece for a SentencePiece tokenizer.
NEEDS = {
    "inspect": ("tensorflow", "tensorflow_serving"),
    "translate": ("tensorflow", "tensorflow_text", "tensorflow_serving"),
    "check": ("tensorflow", "tensorflow_text", "tensorflow_serving"),
    "export": ("keras", "tensorflow", "tensorflow_serving"),
}
SENTENCEPIECE_NEEDS = ("tensorflow_text", "sentencepiece")
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")


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
EXPORT_PARAMS = ("beam_size", "max_length", "length_penalty", "coverage_penalty")


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
                if alias in EXPORT_PARAMS
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


def checked_params(args, mode):
    """The parameter flags given, each checked against the served table (flag named, the Python
    API's message), and that the mode's signatures take them. No TensorFlow runs here."""
    from keras_attn.serving import specs

    given = {}
    for name in specs.REQUEST_PARAMS:
        value = getattr(args, name)
        if value is None:
            continue
        spec = specs.request_param(name)
        try:
            given[name] = spec.check(value)
        except ValueError as err:
            raise ValueError(f"{spec.flag}: {err}") from None
    takes = set().union(*(specs.SIGNATURES[n] for n in specs.MODES[mode]))
    refused = [n for n in given if n not in takes]
    if refused:
        flags = ", ".join(f"{specs.request_param(n).flag}={given[n]}" for n in refused)
        need = " (the sampling ones need --sample)" if set(refused) <= set(specs.SAMPLING) else ""
        raise ValueError(f"Not a request parameter of a {mode} search{need}. Received: {flags}")
    return given


def served_defaults_of(mode):
    """`{request parameter: default}` of the parameters a `mode` search takes."""
    from keras_attn.serving import specs

    names = set().union(*(specs.SIGNATURES[n] for n in specs.MODES[mode]))
    return {name: specs.request_param(name).default for name in names}


def _check_n_best(n_best, mode, beam_size):
    if mode != "beam" and n_best > 1:
        raise ValueError(
            f"`--n-best` must be 1 with `--{mode}` (one answer per input). Received: n_best={n_best}"
        )
    if beam_size is not None and n_best > beam_size:
        raise ValueError(
            "`--n-best` must be <= `--beam-size` (a beam of K keeps K hypotheses). "
            f"Received: n_best={n_best}, beam_size={beam_size}"
        )


def translate_hypotheses(export_dir, texts, mode="beam", prefix=None, constraints=None, **params):
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
        **params,
    )
    outputs, scores = result["outputs"], result["scores"]
    if mode != "beam":  # one output per input
        outputs, scores = [[o] for o in outputs], scores[:, None]
    return [
        [(o, float(s)) for o, s in zip(row, row_scores) if np.isfinite(s)]
        for row, row_scores in zip(outputs, scores)
    ]


def _constraint_flags(args, mode, params):
    """`{"prefix": ..., "constraints": [...]}` of the flags given, checked to go with `mode` and
    the other request parameters (the constrained signature takes the beam parameters only)."""
    from keras_attn.serving import specs

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
    if not getattr(args, "stream", False):  # the streamed beam takes every control with them
        specs.route("beam", list(params) + list(given))
    return given


def cmd_translate(args, out):
    mode = _mode(args)
    n_best = args.n_best
    params = checked_params(args, mode)
    constraints = _constraint_flags(args, mode, params)
    _check_n_best(n_best, mode, params.get("beam_size"))
    texts = list(args.texts) if args.texts else _stdin_lines()
    exported = export_settings(args.export_dir)
    if not exported:  # no warm-up file: the table's defaults, within the export's limits
        for name, limit in export_limits(args.export_dir).items():
            if name in served_defaults_of(mode) and served_defaults_of(mode)[name] > limit:
                exported[name] = limit
    if mode == "beam":
        params = dict(exported, **params)
        if args.beam_size is None:  # the export's beam, widened to give n_best hypotheses
            params["beam_size"] = max(params.get("beam_size", 1), n_best)
    elif (mode == "sample" or params) and "max_length" in exported:
        # a request to sample or greedy_controls: the export's max_length unless given
        params.setdefault("max_length", exported["max_length"])
    low, high = params.get("min_length"), params.get("max_length")
    if low is not None and high is not None and low > high:  # before the graph sees them
        raise ValueError(
            "--min-length: `min_length` must be <= `max_length` (a hypothesis cut at "
            f"max_length would end earlier). Received: min_length={low}, max_length={high}"
        )
    if args.stream:  # the search loop here, over encode / decode_step (docs/serving.md)
        from keras_attn.serving.streaming import translate_stream

        return translate_stream(args.export_dir, texts, mode, out, exported, constraints, **params)
    results = translate_hypotheses(args.export_dir, texts, mode, **constraints, **params)
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


def last_error_line(text):
    """The last `SomeError: message` line of a child process's stderr (the error its last
    traceback ended with), or its last non-empty line."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Exit)\b[^ ]*:? ", line)]
    return (errors or lines or [""])[-1]


def cmd_check(args, out):
    from keras_attn.serving.harness import ServerWayError, run_server_way

    path = resolve_version_dir(args.export_dir)
    # An export without warm-up records still loads (the server warms nothing up): checked
    # the same way, then reported as a failure of the check.
    has_warmup = os.path.isfile(os.path.join(path, WARMUP_FILE))
    try:
        result = run_server_way(path, replay_warmup=has_warmup, timeout=args.timeout)
    except ServerWayError as err:
        raise ValueError(
            "`export_dir` does not load the way TensorFlow Serving loads it: "
            f"{last_error_line(err)} Received: export_dir={path!r}"
        ) from None
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
    if not has_warmup:
        print(f"  no warm-up requests: {os.path.join(path, WARMUP_FILE)} does not exist", file=out)
    elif not result.warmup:
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
RUN_SETTINGS = ("beam_size", "xla", "word_rules")


def cmd_export(args, out):
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
    (`keras_attn.train.export_run`), with the run's own settings but `--beam-size` / `--xla` /
    `--word-rules`."""
    from keras_attn.serving.settings import given_settings, setting_flag

    others = [n for n in given_settings(args) if n not in RUN_SETTINGS]
    others += ["target_tokenizer"] * (args.target_tokenizer is not None)
    others += ["overwrite"] * bool(args.overwrite)
    if others:
        flags = ", ".join(setting_flag(n) for n in others)
        raise ValueError(
            "A run directory is exported with its own settings: only --version, --beam-size, "
            f"--xla and --word-rules apply. Received: {flags}"
        )
    if not os.path.isfile(os.path.join(args.run_dir, "run_config.json")):
        raise ValueError(
            "`run_dir` must be a training run's directory (it holds run_config.json; a model "
            "file goes with its tokenizer: MODEL.keras TOKENIZER EXPORT_DIR). "
            f"Received: run_dir={args.run_dir!r}"
        )
    from keras_attn.train import export_run

    path = export_run(
        args.run_dir,
        args.export_dir,
        version=args.version,
        beam_size=args.beam_size,
        xla=args.xla,
        word_rules=args.word_rules,
    )
    print(path, file=out)
    if args.litert:
        from keras_attn.serving.litert import export_litert
        from keras_attn.train.export import run_model

        _, model, tokenizer, max_length, _ = run_model(args.run_dir)
        lite = export_litert(
            model, args.litert, args.quantize, tokenizer=tokenizer, max_length=max_length
        )
        print(lite, file=out)
    return 0


# ---- the command line ---------------------------------------------------------------------


def _decoding_config():
    """`keras_attn.decoding.config`, its table (ranges, defaults, help) the translate flags
    are made and checked from, imported without running `keras_attn.decoding`'s `__init__`
    (which imports Keras and TensorFlow), so parsing and `--help` import neither. The module is
    registered under its own name: when a command imports `keras_attn.decoding`, the package
    uses this same module."""
    name = "keras_attn.decoding.config"
    if name in sys.modules or "keras_attn.decoding" in sys.modules:
        import importlib

        return importlib.import_module(name)
    import importlib.util

    import keras_attn

    path = os.path.join(os.path.dirname(keras_attn.__file__), "decoding", "config.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


PARAM_HELP = "param:"  # a translate flag's help, read from the served table when help is printed


def _param_help(name):
    from keras_attn.serving import specs

    spec = specs.request_param(name)
    default = "the export's setting" if name in EXPORT_PARAMS else repr(spec.default)
    where = " (with --sample)" if name in specs.SAMPLING else ""
    return f"{spec.help}{where}: {spec.requirement} (default: {default})"


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default; the parameter flags' help lines come from the
    served table, read only when the help is printed."""

    def _get_help_string(self, action):
        text = action.help or ""
        if text.startswith(PARAM_HELP):
            return _param_help(text[len(PARAM_HELP) :]).replace("%", "%%")
        if callable(action.default) or "default: " in text or action.option_strings == []:
            return text
        if action.default is None or action.default is argparse.SUPPRESS:
            return text
        if action.default is False:
            return text + " (default: off)"
        return text + " (default: %(default)s)"


def number(text):
    """A parameter flag's value: an int when it reads as one, else a float (the table checks
    it)."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def _param_flag(name):
    """The argparse type of a parameter flag: the number checked against the served table's range
    while the command line is parsed (the Python API's message)."""
    from keras_attn.serving import specs

    def parse(text):
        try:
            return specs.request_param(name).check(number(text))
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = name  # argparse names the type in "invalid <type> value"
    return parse


def _int_flag(name, minimum):
    """The argparse type of an integer flag >= `minimum` (`_checks`' message)."""
    from keras_attn import _checks

    def parse(text):
        try:
            return _checks.check_int(name, number(text), minimum=minimum)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = name
    return parse


def _seconds(text):
    """`--timeout`: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"`timeout` must be a finite number of seconds > 0. Received: timeout={text}"
        )
    return value


class UsageError(Exception):
    """A command line argparse refuses; `prog` is the (sub)command's name."""

    def __init__(self, prog, message):
        super().__init__(message)
        self.prog = prog


class OneLineParser(argparse.ArgumentParser):
    """A parser whose errors are one line, `prog: error: message` (the flag named as
    `--flag: ...`), raised as `UsageError` for `main` to print: no usage block."""

    def error(self, message):
        raise UsageError(self.prog, re.sub(r"^argument ([^:]+): ", r"\1: ", message))


def export_limits(export_dir):
    """`{"max_length": 24, "beam_size": 64}`: the largest values a request to the export may ask
    for, read from the messages of the range assertions in its saved_model.pb (bytes, no
    TensorFlow); {} when there is no export or none is found."""
    path = os.fspath(export_dir)
    if not os.path.isfile(os.path.join(path, "saved_model.pb")) and os.path.isdir(path):
        versions = [e for e in os.listdir(path) if e.isdigit()]
        versions = [v for v in versions if os.path.isfile(os.path.join(path, v, "saved_model.pb"))]
        if versions:
            path = os.path.join(path, max(versions, key=int))
    try:
        with open(os.path.join(path, "saved_model.pb"), "rb") as f:
            data = f.read()
    except OSError:
        return {}
    limits = {}
    pattern = rb"`(max_length|beam_size)` must be an integer in \[(\d+), (\d+)\]"
    for found in re.finditer(pattern, data):
        limits[found.group(1).decode()] = int(found.group(3))
    return limits


def limits_help(export_dir=None):
    """The help's paragraph on an export's limits: read from `export_dir` when given."""
    limits = export_limits(export_dir) if export_dir else {}
    if limits:
        asked = " and ".join(f"{name} up to {value}" for name, value in sorted(limits.items()))
        head = f"Limits of {export_dir}: a request may ask for {asked}."
    else:
        head = (
            "An export's limits (the largest max_length and beam_size a request may ask for) "
            "are shown here when EXPORT_DIR comes before --help."
        )
    return (
        f"{head} Longer inputs are cut to the export's max_input_length (set at export: "
        "keras-attn export --max-input-length)."
    )


class Subcommand(OneLineParser):
    """A subcommand's parser: arguments intermixed (positionals may follow flags, as in
    `translate DIR --greedy "le 3 mars 1999"`), and a help that states the export's limits
    when the EXPORT_DIR given before `--help` is readable."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        takes_export = any(a.dest == "export_dir" for a in self._get_positional_actions())
        if takes_export and {"-h", "--help"} & set(args):
            given = [a for a in args if not a.startswith("-") and os.path.isdir(a)]
            self.epilog = limits_help(given[0] if given else None)
        if self._intermixing:  # the inner passes of parse_known_intermixed_args
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


EXPORT_DIR_HELP = "version directory or base directory of the export"


def _add_parser(subparsers, func, help, description, export_dir=True):
    """A subcommand `func.__name__[4:]` running `func`, its first argument EXPORT_DIR."""
    p = subparsers.add_parser(
        func.__name__[len("cmd_") :],
        help=help,
        description=description,
        formatter_class=HelpFormatter,
        epilog=limits_help() if export_dir else None,
    )
    if export_dir:
        p.add_argument("export_dir", help=EXPORT_DIR_HELP)
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's own log lines (hidden otherwise)",
    )
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
    from keras_attn.serving.specs import REQUEST_PARAMS

    p = _add_parser(
        subparsers,
        cmd_translate,
        "translate text with an exported SavedModel (n-best with scores)",
        "Translate TEXTs (or stdin lines) with an exported model, in this process. Output: one "
        "line per hypothesis, tab-separated: input number, rank, score, output. Request "
        "parameters are checked against their documented ranges before anything runs.",
    )
    p.add_argument("texts", nargs="*", help="texts to translate (default: one per line from stdin)")
    p.add_argument(
        "--n-best", type=_int_flag("n_best", 1), default=1, help="hypotheses printed per input"
    )
    p.add_argument("--greedy", action="store_true", help="greedy search (one output per input)")
    p.add_argument("--sample", action="store_true", help="sample one output per input")
    p.add_argument(
        "--stream", action="store_true", help="print each answer as it is found (step signatures)"
    )
    for name in REQUEST_PARAMS:
        flag = "--" + name.replace("_", "-")
        p.add_argument(flag, type=_param_flag(name), default=None, help=PARAM_HELP + name)
    from keras_attn.serving.specs import CONSTRAINTS, PREFIX

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
    p.add_argument(
        "--timeout", type=_seconds, default=300.0, help="seconds before the check gives up"
    )


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


def _add_export(subparsers):
    p = _add_parser(
        subparsers,
        cmd_export,
        "export a saved .keras text model for TensorFlow Serving",
        "Export a saved .keras text model with keras_attn.serving.export_text_model (the flags "
        "build one ServingSettings: docs/serving.md, Settings), or a training run from its "
        "directory with keras_attn.train.export_run (its own settings; --beam-size and --xla "
        "apply).",
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
        "--version", type=_int_flag("version", 0), default=1, help="the version subdirectory"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing version")
    p.add_argument(
        "--no-step-signatures",
        dest="step_signatures",
        action="store_false",
        help="leave out encode / decode_step / detokenize / tokenize, the signatures a streaming "
        "client loops over (docs/serving.md, Streaming; a run directory's export carries them)",
    )
    p.add_argument(
        "--litert",
        metavar="PATH.tflite",
        default=None,
        help="also write a LiteRT model with encode / decode_step and its tokenizer beside it "
        "(docs/serving.md, On device; default: none)",
    )
    p.add_argument(
        "--quantize",
        choices=["dynamic_int8"],
        default=None,
        help="with --litert: int8 weights (dynamic-range quantization; default: float32 weights)",
    )
    from keras_attn.serving.settings import add_setting_flags

    add_setting_flags(p)


# Each adds one subcommand to the parser; other modules may append theirs.
COMMANDS = [_add_inspect, _add_translate, _add_check, _add_export]

DESCRIPTION = (
    "Inspect, try, check and export keras-attn translators and captioners served by "
    "TensorFlow Serving (docs/serving.md)."
)


def build_parser():
    from keras_attn import __version__

    _decoding_config()
    parser = OneLineParser(
        prog="keras-attn", description=DESCRIPTION, formatter_class=HelpFormatter
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"keras-attn {__version__}",
        help="print the package's version and exit",
    )
    subparsers = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Subcommand
    )
    for add in COMMANDS:
        add(subparsers)
    return parser


def needed_modules(args):
    """The top-level modules the parsed command needs (`NEEDS`)."""
    needs = list(NEEDS.get(args.command, ()))
    tokenizers = [getattr(args, n, None) for n in ("tokenizer", "target_tokenizer")]
    run_dir = getattr(args, "run_dir", None)
    if run_dir is not None:
        tokenizers.append(os.path.join(run_dir, "tokenizer.model"))
        tokenizers = [t for t in tokenizers if t is None or os.path.exists(t)]
    if any(t and t.endswith(".model") for t in tokenizers):
        needs += SENTENCEPIECE_NEEDS
    return needs


def check_ready(args):
    """Before a command runs: its EXPORT_DIR exists, and every module it needs is installed
    (one message, one pip command, for all that are missing), TF Text matching TensorFlow."""
    export_dir = getattr(args, "export_dir", None)
    if export_dir is not None and args.command != "export" and not os.path.exists(export_dir):
        raise ValueError(f"`export_dir` does not exist. Received: export_dir={export_dir!r}")
    needs = needed_modules(args)
    missing = [m for m in needs if _pins.is_missing(m)]
    if missing:
        names = ", ".join(f"`{m}`" for m in missing)
        raise ValueError(
            f"this command needs {names}, not installed here: {_pins.install_command(missing)}"
        )
    if "tensorflow_text" in needs:
        mismatch = _pins.tensorflow_text_mismatch()
        if mismatch is not None:
            raise ValueError(mismatch)


def missing_extra(err):
    """The one-line message for a module a command needs and the environment lacks, or None."""
    module = (err.name or "").split(".")[0]
    if module not in _pins.EXTRA_OF and module not in _pins.FOLLOWERS:
        return None
    return f"this command needs `{module}`, not installed here: {_pins.install_command([module])}"


@contextlib.contextmanager
def quiet_tensorflow(verbose=False):
    """Run a command without TensorFlow's log lines, unless `verbose`: its C++ library writes
    them to file descriptor 2 (some before any setting can silence them, others when a request
    fails: "Local rendezvous is aborting"), so fd 2 goes to a temporary file while Python's
    `sys.stderr` keeps the terminal (our one-line errors, Python warnings). The Python loggers
    (tensorflow, absl) are set to errors only. When the command fails unexpectedly, the hidden
    lines are shown before the traceback."""
    if verbose:
        yield
        return
    import logging

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    loggers = [logging.getLogger(n) for n in ("tensorflow", "absl")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        saved = None
    python_stderr = sys.stderr
    log = tempfile.TemporaryFile() if saved is not None else None
    if saved is not None:
        try:
            on_fd2 = python_stderr.fileno() == 2
        except (OSError, ValueError, AttributeError):
            on_fd2 = False
        if on_fd2:
            encoding = getattr(python_stderr, "encoding", None) or "utf-8"
            sys.stderr = open(
                saved, "w", 1, encoding=encoding, errors="backslashreplace", closefd=False
            )
        os.dup2(log.fileno(), 2)
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 2)
            if sys.stderr is not python_stderr:
                sys.stderr.close()
                sys.stderr = python_stderr
            os.close(saved)
            if failed:
                log.seek(0)
                hidden = log.read().decode("utf-8", errors="replace")
                if hidden.strip():
                    print(hidden, end="", file=sys.stderr)
            log.close()


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
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
    except UsageError as err:
        print(f"{err.prog}: error: {err}", file=sys.stderr)
        return 2
    prog = f"keras-attn {args.command}"
    with quiet_tensorflow(getattr(args, "verbose", False)):
        try:
            check_ready(args)
            return args.func(args, out)
        except (ValueError, FileNotFoundError) as err:
            print(f"{prog}: error: {err}", file=sys.stderr)
            return 2
        except ModuleNotFoundError as err:
            message = missing_extra(err)
            if message is None:
                raise
            print(f"{prog}: error: {message}", file=sys.stderr)
            return 2
        except Exception as err:  # a TensorFlow error from the model
            if type(err).__module__.startswith("tensorflow"):
                message = graph_error_message(getattr(err, "message", str(err)))
                print(f"{prog}: error: {type(err).__name__}: {message}", file=sys.stderr)
                return 2
            raise


if __name__ == "__main__":
    sys.exit(main())
