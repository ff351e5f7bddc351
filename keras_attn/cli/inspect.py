"""`keras-attn inspect EXPORT_DIR [--json]`."""

from __future__ import annotations

import json

from keras_attn.cli.parser import add_parser


def inspect_export(export_dir):
    """A dict describing an exported SavedModel (`keras_attn.serving.inspection`)."""
    from keras_attn.serving.inspection import inspect_export as inspect

    return inspect(export_dir)


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


def run(args, out):
    report = inspect_export(args.export_dir)
    if args.json:
        json.dump(report, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        _print_inspect(report, out)
    return 1 if any(mg["disallowed_ops"] for mg in report["meta_graphs"]) else 0


def add(subparsers):
    p = add_parser(
        subparsers,
        "inspect",
        run,
        "signatures, ops and warm-up records of an exported model",
        "Describe an exported SavedModel from its files (no model code runs). Exit status 1 "
        "when the graph uses an op stock TensorFlow Serving lacks.",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
