"""Run every speed benchmark and write its section of benchmarks/RESULTS.md.

    .venv/bin/python benchmarks/run_all.py [--only mha,gqa,luong,decoding,constrained,export,xla,served_xla,served_profile,hub,train,jax_train,streaming] [--quick]

Everything runs in this one process on this one machine, so the ratios compare like with like.
The section between `<!-- speed:begin -->` and `<!-- speed:end -->` is replaced (after each
benchmark, so a failure keeps what was measured); the rest of RESULTS.md (e.g. the quality
table of benchmarks/quality.py, between its own markers) is left as it is. Exit status 1 if a
benchmark crashed; a missed target is reported in the file, not as a failure (timings on a
shared machine are not a test).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

SECTION = "speed"
# name -> (module, repeats in a normal run, repeats with --quick)
BENCHMARKS = {
    "mha": ("benchmarks.mha", 15, 3),
    "gqa": ("benchmarks.gqa", 9, 3),
    "luong": ("benchmarks.luong_local", 9, 3),
    "decoding": ("benchmarks.decoding_speed", 7, 2),
    "constrained": ("benchmarks.constrained", 5, 2),
    "export": ("benchmarks.export_speed", 7, 3),
    "xla": ("benchmarks.xla_training", 5, 3),
    "served_xla": ("benchmarks.served_xla", 5, 3),
    "served_profile": ("benchmarks.served_profile", 3, 1),
    "hub": ("benchmarks.transformer_vs_keras_hub", 5, 2),
    "train": ("benchmarks.train_throughput", 3, 1),
    "jax_train": ("benchmarks.jax_training", 5, 2),
    "streaming": ("benchmarks.streaming", 5, 2),
}


def render(info, parts, checks, elapsed):
    lines = [
        "## Speed",
        "",
        "Written by `make bench` (`benchmarks/run_all.py`). Every figure is a ratio of timings taken "
        "in this one run on this one machine, each the median of several repetitions after a "
        "warm-up, the compared cases interleaved round by round; a ratio is taken within each "
        "round and its median over the rounds reported (the times in the tables are medians). "
        "Absolute times depend on the load of the machine; the ratios are the result.",
        "",
        "Machine:",
        "",
        common.machine_markdown(info),
        f"- total benchmark time: {elapsed / 60:.1f} min",
        "",
        "### Targets",
        "",
    ]
    if checks:
        lines.append(
            common.table(
                ["target", "result"], [(k, "met" if v else "**missed**") for k, v in checks.items()]
            )
        )
    else:
        lines.append("(none measured yet)")
    lines.append("")
    for text in parts:
        lines += [text, ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        default=",".join(BENCHMARKS),
        help="comma-separated subset of " + ", ".join(BENCHMARKS),
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--output", default=common.RESULTS)
    args = parser.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")

    import importlib

    info = common.machine_info()
    parts, checks, failed = [], {}, False
    start = time.perf_counter()
    for name in names:
        module_name, repeats, quick = BENCHMARKS[name]
        t0 = time.perf_counter()
        print(f"[bench] {name} ...", flush=True)
        try:
            module = importlib.import_module(module_name)
            text, found = module.run(repeats=quick if args.quick else repeats)
        except Exception:
            failed = True
            text = f"### {name}: FAILED\n\n```\n{traceback.format_exc()[-3000:]}\n```"
            found = {}
        parts.append(text)
        checks.update(found)
        print(text, flush=True)
        print(f"[bench] {name}: {time.perf_counter() - t0:.0f} s", flush=True)
        common.write_section(
            SECTION, render(info, parts, checks, time.perf_counter() - start), args.output
        )
    print(f"[bench] wrote {args.output}")
    for k, v in checks.items():
        print(("MET    " if v else "MISSED ") + k)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
