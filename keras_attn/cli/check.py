"""`keras-attn check EXPORT_DIR [--timeout S]`."""

from __future__ import annotations

import os
import re
import subprocess

from keras_attn.cli.parser import add_parser, resolve_version_dir, seconds

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")


def last_error_line(text):
    """The last `SomeError: message` line of a child process's stderr (the error its last
    traceback ended with), or its last non-empty line."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Exit)\b[^ ]*:? ", line)]
    return (errors or lines or [""])[-1]


def run(args, out):
    from keras_attn.serving.harness import ServerWayError, run_server_way

    path = resolve_version_dir(args.export_dir)
    # An export without warm-up records still loads (the server warms nothing up): checked
    # the same way, then reported as a failure of the check.
    has_warmup = os.path.isfile(os.path.join(path, WARMUP_FILE))
    try:
        result = run_server_way(path, replay_warmup=has_warmup, timeout=args.timeout)
    except ServerWayError as err:
        if isinstance(err.__cause__, subprocess.TimeoutExpired):
            raise ValueError(
                f"The check timed out: loading {path} and replaying its warm-up took longer "
                f"than --timeout {args.timeout:g} s (give it more). "
                f"Received: --timeout {args.timeout:g}"
            ) from None
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


def add(subparsers):
    p = add_parser(
        subparsers,
        "check",
        run,
        "load an export the way TF Serving does and replay its warm-up",
        "Load an export in a fresh process with tensorflow and tensorflow_text only, the way "
        "TensorFlow Serving loads it, and replay its warm-up requests. Exit status 1 if one fails.",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        default=300.0,
        help="seconds the load and the warm-up replay may take before the check gives up "
        "(reported as a timeout)",
    )
