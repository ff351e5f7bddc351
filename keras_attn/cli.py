"""The `keras-attn` command.

    keras-attn inspect EXPORT_DIR [--json]
        signatures (names, dtypes, shapes), the ops of the graph (TF Text ops used, ops
        TensorFlow Serving lacks), assets and the warm-up records of an exported model.
        Exit status 1 when the graph uses an op the server does not have.
    keras-attn translate EXPORT_DIR [TEXT ...] [--beam-size K] [--n-best N] [--greedy] [--json]
            [--min-length N] [--no-repeat-ngram-size N] [--repetition-penalty P]
            [--sample [--temperature T] [--top-k K] [--top-p P] [--seed S]]
        translate TEXTs (or stdin lines) with the SavedModel's `beam_search` (or `greedy`, or
        `sample`; the `*_controls` signatures when a control is given), printing the n-best
        list with scores.
    keras-attn check EXPORT_DIR
        load the export in a fresh process the way TensorFlow Serving does (tensorflow and
        tensorflow_text only) and replay its warm-up requests; exit status 1 if one fails.
    keras-attn export MODEL.keras TOKENIZER_FILE EXPORT_DIR [--version N] [--beam-size K] [--xla] ...
        export a saved text model with `keras_attn.serving.export_text_model`.

EXPORT_DIR is a version directory (`.../dates/1`) or a model's base directory, in which case the
highest numeric version is used. Subcommands are registered in `COMMANDS`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def resolve_version_dir(path):
    """`path` itself if it holds a saved_model.pb, else its highest numeric subdirectory that does."""
    path = os.fspath(path)
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    versions = []
    if os.path.isdir(path):
        for entry in os.listdir(path):
            if entry.isdigit() and os.path.isfile(os.path.join(path, entry, "saved_model.pb")):
                versions.append(int(entry))
    if not versions:
        raise ValueError(
            "Not a SavedModel directory nor a base directory with numeric versions. "
            f"Received: export_dir={path!r}"
        )
    return os.path.join(path, str(max(versions)))


def _unreadable(path, err):
    return (
        f"`export_dir` must hold a readable SavedModel; {os.path.join(path, 'saved_model.pb')} "
        f"could not be read ({type(err).__name__}: {str(err).strip()[:300]}). "
        f"Received: export_dir={path!r}"
    )


def load_saved_model(export_dir):
    """`tf.saved_model.load` of the version directory; a file that cannot be read is a ValueError."""
    import tensorflow as tf

    path = resolve_version_dir(export_dir)
    try:
        return tf.saved_model.load(path)
    except Exception as err:  # a corrupt or truncated saved_model.pb, missing variables
        raise ValueError(_unreadable(path, err)) from None


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


def _shape(info):
    if info.tensor_shape.unknown_rank:
        return "<unknown>"
    return "[" + ", ".join("?" if d.size < 0 else str(d.size) for d in info.tensor_shape.dim) + "]"


def _summarize_value(array):
    if array.dtype == object:
        items = [
            v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v)
            for v in array.reshape(-1)
        ]
        text = json.dumps(items[:3], ensure_ascii=False) + (" ..." if len(items) > 3 else "")
        return (
            f"{array.dtype.name if array.dtype != object else 'string'}{list(array.shape)} {text}"
        )
    return f"{array.dtype.name}{list(array.shape)} {array.tolist() if array.size <= 4 else '...'}"


def inspect_export(export_dir):
    """A dict describing an exported SavedModel (no model code runs; only its protos are read)."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    from keras_attn.serving import ops_check
    from keras_attn.serving.harness import read_warmup_records

    path = resolve_version_dir(export_dir)
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        content = f.read()
    try:
        saved.ParseFromString(content)
    except Exception as err:  # google.protobuf's DecodeError (its module differs by backend)
        raise ValueError(_unreadable(path, err)) from None
    report = {"path": path, "meta_graphs": []}
    for meta_graph in saved.meta_graphs:
        signatures = {}
        for name, sig in sorted(meta_graph.signature_def.items()):
            if name.startswith("__"):
                continue
            signatures[name] = {
                kind: {
                    alias: {"dtype": tf.dtypes.as_dtype(info.dtype).name, "shape": _shape(info)}
                    for alias, info in sorted(getattr(sig, kind).items())
                }
                for kind in ("inputs", "outputs")
            }
        ops = ops_check.graph_ops(meta_graph)
        report["meta_graphs"].append(
            {
                "tags": list(meta_graph.meta_info_def.tags),
                "signatures": signatures,
                "num_ops": len(ops),
                "tf_text_ops": sorted(ops & ops_check.TF_TEXT_SERVING_OPS),
                "disallowed_ops": ops_check.disallowed_ops(meta_graph),
            }
        )
    assets_dir = os.path.join(path, "assets")
    report["assets"] = sorted(os.listdir(assets_dir)) if os.path.isdir(assets_dir) else []
    report["warmup"] = []
    for record in read_warmup_records(path, missing_ok=True):
        entry = {"kind": record.kind}
        if record.request is not None:
            entry["model_name"] = record.model_name
            entry["signature_name"] = record.request.signature_name
            entry["inputs"] = {
                alias: _summarize_value(value)
                for alias, value in sorted(record.request.inputs.items())
            }
        report["warmup"].append(entry)
    return report


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


CONTROL_DEFAULTS = {"min_length": 0, "no_repeat_ngram_size": 0, "repetition_penalty": 1.0}
SAMPLE_DEFAULTS = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0}
INT_KNOBS = ("beam_size", "max_length", "min_length", "no_repeat_ngram_size", "top_k", "seed")


def translate_with_savedmodel(
    export_dir,
    texts,
    beam_size=4,
    max_length=50,
    length_penalty=0.0,
    coverage_penalty=0.0,
    greedy=False,
    controls=None,
    sample=None,
):
    """`[[(text, score), ...] per input]` from an exported model's signatures (n-best best first).

    `controls`: `{min_length, no_repeat_ngram_size, repetition_penalty}` (any subset) sends the
    request to `beam_search_controls` / `greedy_controls`; `sample`: `{temperature, top_k, top_p,
    seed}` (any subset) to `sample`, one output per input (docs/serving.md)."""
    import numpy as np
    import tensorflow as tf

    loaded = load_saved_model(export_dir)
    inputs = tf.constant([as_bytes(t) for t in texts], tf.string, shape=[len(texts)])
    knobs = {}
    if sample is not None:
        name = "sample"
        knobs = dict(
            SAMPLE_DEFAULTS,
            **sample,
            max_length=max_length,
            **dict(CONTROL_DEFAULTS, **(controls or {})),
        )
    elif greedy:
        name = "greedy_controls" if controls else "greedy"
        if controls:
            knobs = dict(CONTROL_DEFAULTS, **controls, max_length=max_length)
    else:
        name = "beam_search_controls" if controls else "beam_search"
        knobs = dict(
            beam_size=beam_size,
            max_length=max_length,
            length_penalty=length_penalty,
            coverage_penalty=coverage_penalty,
            **(dict(CONTROL_DEFAULTS, **controls) if controls else {}),
        )
    if name not in loaded.signatures:
        raise ValueError(
            f"`export_dir` has no `{name}` signature (exported before it existed): re-export the model. "
            f"Received: export_dir={export_dir!r} with signatures {sorted(loaded.signatures)}"
        )
    tensors = {
        k: tf.constant(v, tf.int32 if k in INT_KNOBS else tf.float32) for k, v in knobs.items()
    }
    out = loaded.signatures[name](inputs=inputs, **tensors)
    outputs, scores = out["outputs"].numpy(), out["scores"].numpy()
    if outputs.ndim == 1:  # one output per input
        outputs, scores = outputs[:, None], scores[:, None]
    result = []
    for row_texts, row_scores in zip(outputs, scores):
        result.append(
            [
                (t.decode("utf-8", errors="replace"), float(s))
                for t, s in zip(row_texts, row_scores)
                if np.isfinite(s)
            ]
        )
    return result


def export_settings(export_dir):
    """The export-time beam settings, read back from the `beam_search` warm-up request
    (`beam_size`, `max_length`, `length_penalty`, `coverage_penalty`); {} when there is none."""
    from keras_attn.serving.harness import read_warmup_records

    knobs = ("beam_size", "max_length", "length_penalty", "coverage_penalty")
    for record in read_warmup_records(resolve_version_dir(export_dir), missing_ok=True):
        request = record.request
        if request is not None and request.signature_name == "beam_search":
            return {
                alias: value.item() for alias, value in request.inputs.items() if alias in knobs
            }
    return {}


def _stdin_lines():
    """stdin's lines as bytes (one undecodable line must not stop the others)."""
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    return [
        line.rstrip(b"\r\n") if isinstance(line, bytes) else line.rstrip("\r\n") for line in stream
    ]


def cmd_translate(args, out):
    texts = list(args.texts) if args.texts else _stdin_lines()
    n_best = args.n_best if args.n_best is not None else 1
    if n_best < 1:
        raise ValueError(f"`--n-best` must be >= 1. Received: n_best={n_best}")
    if args.greedy and args.sample:
        raise ValueError(
            "Pass `--greedy` or `--sample`, not both. Received: greedy=True, sample=True"
        )
    if (args.greedy or args.sample) and n_best > 1:
        mode = "--greedy" if args.greedy else "--sample"
        raise ValueError(
            f"`--n-best` must be 1 with `{mode}` (one answer per input). Received: n_best={n_best}"
        )
    sample = {k: getattr(args, k) for k in SAMPLE_DEFAULTS if getattr(args, k) is not None}
    if sample and not args.sample:
        raise ValueError(
            f"`--temperature`, `--top-k`, `--top-p` and `--seed` need `--sample`. Received: {sample}"
        )
    controls = {k: getattr(args, k) for k in CONTROL_DEFAULTS if getattr(args, k) is not None}
    if args.beam_size is not None and n_best > args.beam_size:
        raise ValueError(
            "`--n-best` must be <= `--beam-size` (a beam of K keeps K hypotheses). "
            f"Received: n_best={n_best}, beam_size={args.beam_size}"
        )
    settings = {"beam_size": 4, "max_length": 50, "length_penalty": 0.0, "coverage_penalty": 0.0}
    settings.update(export_settings(args.export_dir))
    for name in settings:
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    beam_size = settings["beam_size"]
    if args.beam_size is None:  # the export's beam, widened to give n_best hypotheses
        beam_size = max(beam_size, n_best)
    results = translate_with_savedmodel(
        args.export_dir,
        texts,
        beam_size=beam_size,
        max_length=settings["max_length"],
        length_penalty=settings["length_penalty"],
        coverage_penalty=settings["coverage_penalty"],
        greedy=args.greedy,
        controls=controls,
        sample=sample if args.sample else None,
    )
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
    for text, hyps in zip(texts, results):
        if n_best == 1:
            print(f"{hyps[0][0]}\t{hyps[0][1]:.4f}" if hyps else "", file=out)
            continue
        print(f"> {shown(text)}", file=out)
        for rank, (output, score) in enumerate(hyps[:n_best], 1):
            print(f"  {rank}\t{score:.4f}\t{output}", file=out)
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


def cmd_export(args, out):
    import keras

    import keras_attn.models  # noqa: F401  (registers the model classes for loading)
    from keras_attn.serving import export_text_model

    if not os.path.isfile(args.model):
        raise FileNotFoundError(f"No model file at {args.model!r}")
    model = keras.saving.load_model(args.model, compile=False)
    tokenizer = load_tokenizer(args.tokenizer)
    target = load_tokenizer(args.target_tokenizer) if args.target_tokenizer else None
    path = export_text_model(
        model,
        tokenizer,
        args.export_dir,
        version=args.version,
        beam_size=args.beam_size,
        max_length=args.max_length,
        max_input_length=args.max_input_length,
        max_length_limit=args.max_length_limit,
        length_penalty=args.length_penalty,
        coverage_penalty=args.coverage_penalty,
        eos_penalty=args.eos_penalty,
        target_tokenizer=target,
        source_add_start=args.source_add_start,
        source_add_end=args.source_add_end,
        overwrite=args.overwrite,
        xla=args.xla,
        xla_batch_sizes=_int_list("--xla-batch-sizes", args.xla_batch_sizes),
        xla_source_lengths=_int_list("--xla-source-lengths", args.xla_source_lengths),
    )
    print(path, file=out)
    return 0


# ---- main -------------------------------------------------------------------------------


def _add_inspect(subparsers):
    p = subparsers.add_parser(
        "inspect", help="signatures, ops and warm-up records of an exported model"
    )
    p.add_argument("export_dir", help="version directory or base directory of the export")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_inspect)


def _add_translate(subparsers):
    p = subparsers.add_parser(
        "translate", help="translate text with an exported SavedModel (n-best with scores)"
    )
    p.add_argument("export_dir", help="version directory or base directory of the export")
    p.add_argument("texts", nargs="*", help="texts to translate (default: one per line from stdin)")
    p.add_argument("--beam-size", type=int, default=None, help="default: the export's setting")
    p.add_argument(
        "--n-best", type=int, default=None, help="hypotheses printed per input (default 1)"
    )
    p.add_argument("--max-length", type=int, default=None, help="default: the export's setting")
    p.add_argument(
        "--length-penalty", type=float, default=None, help="default: the export's setting"
    )
    p.add_argument(
        "--coverage-penalty", type=float, default=None, help="default: the export's setting"
    )
    p.add_argument("--greedy", action="store_true", help="use the greedy signature")
    p.add_argument(
        "--min-length", type=int, default=None, help="no output ends before this many tokens"
    )
    p.add_argument(
        "--no-repeat-ngram-size", type=int, default=None, help="no n-gram of this size repeats"
    )
    p.add_argument(
        "--repetition-penalty", type=float, default=None, help="CTRL penalty on generated tokens"
    )
    p.add_argument(
        "--sample", action="store_true", help="sample one output per input (the sample signature)"
    )
    p.add_argument("--temperature", type=float, default=None, help="with --sample (default 1.0)")
    p.add_argument(
        "--top-k", type=int, default=None, help="with --sample: among the k likeliest (0: all)"
    )
    p.add_argument(
        "--top-p", type=float, default=None, help="with --sample: nucleus probability (default 1.0)"
    )
    p.add_argument(
        "--seed", type=int, default=None, help="with --sample: the same seed, the same samples"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_translate)


def _add_check(subparsers):
    p = subparsers.add_parser(
        "check", help="load an export the way TF Serving does and replay its warm-up"
    )
    p.add_argument("export_dir", help="version directory or base directory of the export")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before the check gives up")
    p.set_defaults(func=cmd_check)


def _add_export(subparsers):
    p = subparsers.add_parser(
        "export", help="export a saved .keras text model for TensorFlow Serving"
    )
    p.add_argument(
        "model", help="a .keras file of a model with encode/initial_decode_state/decode_step"
    )
    p.add_argument(
        "tokenizer", help="the tokenizer file (vocabulary .txt, or SentencePiece .model)"
    )
    p.add_argument("export_dir", help="the model's base directory; the version goes below it")
    p.add_argument(
        "--target-tokenizer", default=None, help="the target's tokenizer file if different"
    )
    p.add_argument("--version", type=int, default=1)
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="default 64, or the model's learned position table if smaller",
    )
    p.add_argument(
        "--max-input-length",
        type=int,
        default=None,
        help="default 256, or the model's learned position table if smaller",
    )
    p.add_argument(
        "--max-length-limit",
        type=int,
        default=None,
        help="largest max_length a request may ask for (default 4 x max-length, or the table)",
    )
    p.add_argument("--length-penalty", type=float, default=0.0)
    p.add_argument("--coverage-penalty", type=float, default=0.0)
    p.add_argument("--eos-penalty", type=float, default=0.0)
    p.add_argument("--source-add-start", action="store_true")
    p.add_argument("--source-add-end", action="store_true")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument(
        "--xla",
        action="store_true",
        help="also export <name>_xla signatures compiled with XLA (docs/serving.md, XLA)",
    )
    p.add_argument(
        "--xla-batch-sizes", default=None, help="batch buckets of the XLA signatures (1,8,32)"
    )
    p.add_argument(
        "--xla-source-lengths",
        default=None,
        help="source-length buckets of the XLA signatures (default 16,32,... to max-input-length)",
    )
    p.set_defaults(func=cmd_export)


# Each adds one subcommand to the parser; other modules may append theirs.
COMMANDS = [_add_inspect, _add_translate, _add_check, _add_export]


def build_parser():
    parser = argparse.ArgumentParser(prog="keras-attn", description="keras-attn command line")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(subparsers)
    return parser


def main(argv=None, out=None):
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        return args.func(args, out)
    except (ValueError, FileNotFoundError) as err:
        print(f"keras-attn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # a TensorFlow error from the model (e.g. an invalid knob)
        if type(err).__module__.startswith("tensorflow"):
            message = getattr(err, "message", str(err))
            print(
                f"keras-attn {args.command}: error: {type(err).__name__}: {message}",
                file=sys.stderr,
            )
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
