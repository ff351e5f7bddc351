"""`keras-attn translate EXPORT_DIR [TEXT ...]`."""

from __future__ import annotations

import json
import re
import sys
from functools import partial

from keras_attn.cli.parser import (
    LateHelp,
    add_parser,
    export_limits,
    int_flag,
    light_module,
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


def _stdin_lines():
    """stdin's lines as bytes (one undecodable line must not stop the others)."""
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    return [
        line.rstrip(b"\r\n") if isinstance(line, bytes) else line.rstrip("\r\n") for line in stream
    ]


def _modes():
    """The table of search modes (`keras_attn.decoding.modes`), read without Keras: its first
    mode is the default, each other one a flag (`--greedy`, `--sample`)."""
    return light_module("modes").MODES


def _mode(args):
    """The mode the flags name: the flag of one of the table's other modes, else its first."""
    default, *others = _modes()
    chosen = [name for name in others if getattr(args, name)]
    if len(chosen) > 1:
        flags = " or ".join(f"`--{name}`" for name in others)
        given = ", ".join(f"{name}=True" for name in chosen)
        raise ValueError(f"Pass {flags}, not both. Received: {given}")
    return chosen[0] if chosen else default


def _n_best(mode):
    """Whether `mode` answers K hypotheses per input (the table's `n_best`)."""
    return _modes()[mode].n_best


def given_params(args, mode):
    """`{request parameter: number}` of the parameter flags given, refused where the mode's
    signatures do not take one (its range is checked once, when the request is built)."""
    from keras_attn.serving import specs

    given = {n: getattr(args, n) for n in specs.REQUEST_PARAMS if getattr(args, n) is not None}
    takes = set().union(*(specs.SIGNATURES[n] for n in specs.MODE_SIGNATURES[mode]))
    refused = [n for n in given if n not in takes]
    if refused:
        flags = ", ".join(f"{specs.request_param(n).flag}={given[n]}" for n in refused)
        need = " (the sampling ones need --sample)" if set(refused) <= set(specs.SAMPLING) else ""
        raise ValueError(f"Not a request parameter of a {mode} search{need}. Received: {flags}")
    return given


def _check_n_best(n_best, mode, beam_size):
    if not _n_best(mode) and n_best > 1:
        raise ValueError(
            f"`--n-best` must be 1 with `--{mode}` (one answer per input). Received: n_best={n_best}"
        )
    if beam_size is not None and n_best > beam_size:
        raise ValueError(
            "`--n-best` must be <= `--beam-size` (a beam of K keeps K hypotheses). "
            f"Received: n_best={n_best}, beam_size={beam_size}"
        )


def _constraint_flags(args, mode):
    """`(prefix, phrases)` of the flags given (None where not given), checked to go with
    `mode`."""
    from keras_attn.serving import specs

    phrases = list(args.constraint) if args.constraint else None
    given = [n for n, v in (("prefix", args.prefix), ("constraints", phrases)) if v is not None]
    if given and not set(given) <= set(specs.mode_takes(mode)):
        takers = [name for name in _modes() if set(given) <= set(specs.mode_takes(name))]
        raise ValueError(
            f"`--prefix` and `--constraint` need a {' or '.join(takers)} search (not --{mode}). "
            f"Received: {', '.join(given)} with --{mode}"
        )
    return args.prefix, phrases


def starting_values(export_dir, mode):
    """`{setting: value}` a request to the export starts from: the search settings the export
    wrote (`keras_attn.serving.request.export_settings`), else the table's defaults within the
    export's limits."""
    from keras_attn.serving import request, specs

    written = request.export_settings(resolve_version_dir(export_dir))
    if written:
        return {name: written[name] for name in specs.SEARCH_SETTINGS if name in written}
    takes = set().union(*(specs.SIGNATURES[n] for n in specs.MODE_SIGNATURES[mode]))
    limits = export_limits(export_dir)
    return {
        name: min(specs.request_param(name).default, limit)
        for name, limit in limits.items()
        if name in takes
    }


def _with_export_settings(args, mode, params):
    """The parameter flags given on top of the export's settings (`starting_values`): a beam's
    settings, a beam not given widened to give `--n-best` hypotheses; the export's
    `max_length` for a request to sample or greedy_controls (or a loop here)."""
    start = starting_values(args.export_dir, mode)
    if _n_best(mode):
        params = {**start, **params}
        if args.beam_size is None:
            params["beam_size"] = max(params.get("beam_size", 1), args.n_best)
    elif (_takes_max_length(mode) or params or args.stream) and "max_length" in start:
        params = {"max_length": start["max_length"], **params}
    return params


def _takes_max_length(mode):
    """Whether every request of `mode` carries `max_length` (its first signature takes it:
    `sample`; `greedy` searches with the export's own)."""
    from keras_attn.serving import specs

    return "max_length" in specs.SIGNATURES[specs.MODE_SIGNATURES[mode][0]]


def _build(mode, params, prefix, phrases):
    """`SearchRequest.build`, a value out of range refused with its flag named."""
    from keras_attn.serving import specs
    from keras_attn.serving.request import SearchRequest

    try:
        return SearchRequest.build(
            mode,
            params,
            None if prefix is None else as_bytes(prefix),
            None if phrases is None else [as_bytes(c) for c in phrases],
        )
    except ValueError as err:
        found = re.search(r"Received: (\w+)=", str(err))
        if found is None or found.group(1) not in specs.REQUEST_PARAMS:
            raise
        raise ValueError(f"{specs.request_param(found.group(1)).flag}: {err}") from None


def request_of(args, mode):
    """The one `SearchRequest` of the translate flags: the parameters given, on top of the
    export's settings (`_with_export_settings`). Every value is checked once, when it is built
    (a `ValueError` naming its flag), before the model loads. An export written without its
    settings file gives them in its warm-up file, read with TensorFlow: the flags are checked
    on their own before that."""
    from keras_attn.serving.request import written_settings

    params = given_params(args, mode)
    prefix, phrases = _constraint_flags(args, mode)
    if written_settings(resolve_version_dir(args.export_dir)) is None:
        # each flag against its range (min_length against any max_length the export may have)
        _build(mode, {"max_length": 2**31 - 1, **params}, prefix, phrases)
    request = _build(mode, _with_export_settings(args, mode, params), prefix, phrases)
    _check_n_best(args.n_best, mode, None if args.beam_size is None else request.config.beam_size)
    return request


def translate_hypotheses(export_dir, texts, request):
    """`[[(text, score), ...] per input]` (n-best best first; hypotheses without a finite
    score dropped) from an exported model: the `SearchRequest` through `SavedModelClient`."""
    import numpy as np

    from keras_attn.serving.client import SavedModelClient

    result = SavedModelClient(export_dir).search(request, [as_bytes(t) for t in texts])
    outputs, scores = result["outputs"], result["scores"]
    if not _n_best(request.mode):  # one output per input
        outputs, scores = [[o] for o in outputs], scores[:, None]
    return [
        [(o, float(s)) for o, s in zip(row, row_scores) if np.isfinite(s)]
        for row, row_scores in zip(outputs, scores)
    ]


def _stream(args, texts, request, out):
    """`--stream`: the search loop here, over the export's encode / decode_step
    (docs/serving.md, Streaming)."""
    from keras_attn.serving.streaming import translate_stream

    return translate_stream(args.export_dir, texts, request, out)


def run(args, out):
    mode = _mode(args)
    request = request_of(args, mode)
    texts = list(args.texts) if args.texts else _stdin_lines()
    if args.stream:
        return _stream(args, texts, request, out)
    results = translate_hypotheses(args.export_dir, texts, request)
    return print_results(args, texts, results, out)


def print_results(args, texts, results, out):
    """The hypotheses, `--n-best` per input, as JSON or as tab-separated lines; exit status 1
    when an input got none."""
    n_best = args.n_best
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
    default = "the export's setting" if name in specs.SEARCH_SETTINGS else repr(spec.default)
    where = " (with --sample)" if name in specs.SAMPLING else ""
    return f"{spec.help}{where}: {spec.requirement} (default: {default})"


def param_flag(name):
    """The argparse type of a parameter flag: a number (its range is checked once, when the
    request is built: `request_of`)."""

    def parse(text):
        return number(text)

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
    _, *others = _modes().values()
    for mode in others:  # the first mode (beam search) is the one without a flag
        p.add_argument(f"--{mode.name}", action="store_true", help=mode.help)
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
