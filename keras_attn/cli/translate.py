"""`keras-attn translate EXPORT_DIR [TEXT ...]`."""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial

from keras_attn.cli.parser import (
    LateHelp,
    add_parser,
    export_limits,
    int_flag,
    number,
    resolve_version_dir,
)


def as_bytes(text):
    """A command-line or stdin text as the bytes to send: the exact bytes the user gave, even
    when they are not valid UTF-8 (the model reads broken UTF-8 as U+FFFD, never fails)."""
    if isinstance(text, bytes):
        return text
    return text.encode("utf-8", errors="surrogateescape")


def shown(text):
    """A text as printable str (invalid UTF-8 shown as U+FFFD)."""
    return as_bytes(text).decode("utf-8", errors="replace")


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
    takes = set().union(*(specs.SIGNATURES[n] for n in specs.MODE_SIGNATURES[mode]))
    refused = [n for n in given if n not in takes]
    if refused:
        flags = ", ".join(f"{specs.request_param(n).flag}={given[n]}" for n in refused)
        need = " (the sampling ones need --sample)" if set(refused) <= set(specs.SAMPLING) else ""
        raise ValueError(f"Not a request parameter of a {mode} search{need}. Received: {flags}")
    return given


def served_defaults_of(mode):
    """`{request parameter: default}` of the parameters a `mode` search takes."""
    from keras_attn.serving import specs

    names = set().union(*(specs.SIGNATURES[n] for n in specs.MODE_SIGNATURES[mode]))
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


def run(args, out):
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
    for row, hyps in enumerate(results, 1):
        for rank, (output, score) in enumerate(hyps[:n_best], 1):
            print(f"{row}\t{rank}\t{score:.4f}\t{output}", file=out)
    return 1 if missing else 0


def _param_help(name):
    from keras_attn.serving import specs

    spec = specs.request_param(name)
    default = "the export's setting" if name in EXPORT_PARAMS else repr(spec.default)
    where = " (with --sample)" if name in specs.SAMPLING else ""
    return f"{spec.help}{where}: {spec.requirement} (default: {default})"


def param_flag(name):
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


def add(subparsers):
    from keras_attn.serving.specs import REQUEST_PARAMS

    p = add_parser(
        subparsers,
        "translate",
        run,
        "translate text with an exported SavedModel (n-best with scores)",
        "Translate TEXTs (or stdin lines) with an exported model, in this process. Output: one "
        "line per hypothesis, tab-separated: input number, rank, score, output. Request "
        "parameters are checked against their documented ranges before anything runs.",
    )
    p.add_argument("texts", nargs="*", help="texts to translate (default: one per line from stdin)")
    p.add_argument(
        "--n-best", type=int_flag("n_best", 1), default=1, help="hypotheses printed per input"
    )
    p.add_argument("--greedy", action="store_true", help="greedy search (one output per input)")
    p.add_argument("--sample", action="store_true", help="sample one output per input")
    p.add_argument(
        "--stream", action="store_true", help="print each answer as it is found (step signatures)"
    )
    for name in REQUEST_PARAMS:
        flag = "--" + name.replace("_", "-")
        p.add_argument(
            flag, type=param_flag(name), default=None, help=LateHelp(partial(_param_help, name))
        )
    from keras_attn.serving.specs import CONSTRAINTS, PREFIX

    p.add_argument(PREFIX.flag, default=None, metavar="TEXT", help=PREFIX.help)
    p.add_argument(
        CONSTRAINTS.flag, action="append", default=None, metavar="PHRASE", help=CONSTRAINTS.help
    )
    p.add_argument("--json", action="store_true", help="print JSON")
