"""Shared pieces of the benchmarks: timing, machine info, the RESULTS.md section writer.

Timing rule: every figure is a ratio of two timings taken in the same process on
the same machine, each the median of several repetitions after a warm-up. Where two things
are compared, their repetitions are interleaved (A, B, A, B, ...) so that a burst of load
from other processes on a shared machine hits both sides alike.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "RESULTS.md")


def block(result):
    """Wait for `result` (a tensor or a nest of tensors) to be computed."""
    import tensorflow as tf

    for t in tf.nest.flatten(result):
        if hasattr(t, "numpy"):
            t.numpy()
    return result


def time_once(fn):
    t0 = time.perf_counter()
    block(fn())
    return time.perf_counter() - t0


def interleaved(fns, repeats=5, warmup=1, min_time=0.0, return_samples=False):
    """Median seconds per call of each function in `fns` (a dict name -> zero-argument callable).

    With `return_samples=True` also the per-round seconds `{name: [s_1, ..., s_repeats]}`:
    round `i` of every function ran back to back, so `paired_ratio` of two of them is less
    sensitive to the machine's load drifting between rounds than a ratio of medians.

    Each function is called `warmup` times first (tracing, compiling, caches), then the
    functions are timed in turn, round after round, `repeats` rounds. A round calls a function
    `n` times and counts the mean, `n` chosen once so that a round lasts at least `min_time`.
    """
    for fn in fns.values():
        for _ in range(warmup):
            block(fn())
    inner = {}
    for name, fn in fns.items():
        seconds = time_once(fn)
        inner[name] = max(1, int(min_time / max(seconds, 1e-9)) + 1) if min_time else 1
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner[name]):
                block(fn())
            samples[name].append((time.perf_counter() - t0) / inner[name])
    medians = {name: statistics.median(s) for name, s in samples.items()}
    return (medians, samples) if return_samples else medians


def paired_ratio(samples, numerator, denominator, scale=1.0):
    """Median over rounds of `scale * samples[numerator][i] / samples[denominator][i]`."""
    return statistics.median(
        scale * a / b for a, b in zip(samples[numerator], samples[denominator])
    )


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info():
    """One dict of what the numbers depend on."""
    import keras
    import numpy as np
    import tensorflow as tf

    try:
        import jax

        jax_version = jax.__version__
    except ImportError:  # pragma: no cover
        jax_version = "not installed"
    gpus = tf.config.list_physical_devices("GPU")
    try:
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "device": "GPU: " + ", ".join(g.name for g in gpus) if gpus else "CPU only",
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "keras backend": keras.backend.backend(),
        "jax": jax_version,
        "numpy": np.__version__,
        "load average at start (1, 5, 15 min)": load,
    }


def machine_markdown(info):
    return "\n".join(f"- {k}: {v}" for k, v in info.items())


def table(headers, rows):
    """A Markdown table."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(out)


def write_section(name, text, path=RESULTS):
    """Replace `<!-- name:begin -->` ... `<!-- name:end -->` in `path` with `text` (append the
    markers if absent). Other writers' sections are left byte for byte as they were."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    body = f"{begin}\n{text.strip()}\n{end}"
    old = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = f.read()
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if pattern.search(old):
        new = pattern.sub(lambda _: body, old, count=1)
    else:
        header = (
            ""
            if old.strip()
            else "# Benchmark results\n\nWritten by `make bench` (see benchmarks/README.md).\n"
        )
        new = (old.rstrip("\n") + "\n\n" if old.strip() else header + "\n") + body + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(new)
    os.replace(tmp, path)
    return path


_OP_EVENT = re.compile(r"^[\w./-]+:(_?[A-Za-z]\w*)$")

OP_CATEGORIES = (
    # (category, substrings of a TensorFlow op type), first match wins.
    ("matmul", ("MatMul", "Einsum", "Conv")),
    ("softmax", ("Softmax",)),
    ("transpose", ("Transpose",)),
    ("reduction", ("Sum", "Mean", "Max", "Min", "Prod")),
    ("concat / split / slice", ("Concat", "Split", "Slice", "Pack", "Unpack", "Gather", "Tile")),
)


def op_profile(fn, calls=10, by_name=False):
    """Where `fn`'s time goes, op by op: `{op type: ms per call}` summed over the TensorFlow
    kernels run by `calls` calls of `fn` under the TensorFlow profiler (read from its XPlane
    file, no TensorBoard needed); `by_name`: keyed by the op's full name (its name scopes,
    `.../copy/MatMul`) rather than its type. Kernels of one call may run side by side on
    several threads, so the sum can exceed the wall time; compare shares, not sums."""
    import glob
    import shutil
    import tempfile

    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    block(fn())
    logdir = tempfile.mkdtemp(prefix="keras_attn_profile_")
    try:
        tf.profiler.experimental.start(logdir)
        try:
            for _ in range(calls):
                block(fn())
        finally:
            tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
            with open(path, "rb") as f:
                space.MergeFromString(f.read())
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    totals = {}
    for plane in space.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = names.get(event.metadata_id, "")
                match = _OP_EVENT.match(name)
                if match:
                    op = match.group(1).lstrip("_").replace("MklNative", "").replace("Mkl", "")
                    if by_name:
                        op = name.rsplit(":", 1)[0] + ":" + op
                    totals[op] = totals.get(op, 0.0) + event.duration_ps / 1e9 / calls
    return totals


def op_categories(profile):
    """`op_profile`'s result summed into `OP_CATEGORIES` (the rest: "element-wise / other")."""
    out = {name: 0.0 for name, _ in OP_CATEGORIES}
    out["element-wise / other"] = 0.0
    for op, ms in profile.items():
        for name, keys in OP_CATEGORIES:
            if any(k in op for k in keys):
                out[name] += ms
                break
        else:
            out["element-wise / other"] += ms
    return out


def fmt(x, digits=2):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}f}"


def main(run, doc, default_repeats):
    """Command line of one benchmark script: run it and print its table and targets."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=default_repeats)
    args = parser.parse_args()
    text, checks = run(args.repeats)
    print(text)
    for k, v in checks.items():
        print(("MET   " if v else "MISSED") + " " + k)


# A second process keeping one core busy (NumPy on one thread) while the loaded half runs.
LOAD_SCRIPT = (
    "import numpy as np\n"
    "a = np.random.default_rng(0).random((256, 256))\n"
    "while True:\n"
    "    a = a @ a\n"
    "    a /= np.abs(a).max()\n"
)


def load_average():
    try:
        return ", ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def measure_idle_and_loaded(pairs, repeats, reference):
    """`{pair: {load: (median times, {name: reference / name ratio})}}`, idle then with one
    core busy (`LOAD_SCRIPT`), the functions of each pair (a dict name -> callable)
    interleaved; and the load average at the end of each half."""
    import subprocess
    import sys

    results = {name: {} for name in pairs}
    loads = {}
    for load in ("idle", "under load"):
        spinner = None
        if load != "idle":
            env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
            spinner = subprocess.Popen([sys.executable, "-c", LOAD_SCRIPT], env=env)
        try:
            for name, fns in pairs.items():
                # warmup=0: `interleaved` first calls each function once to size its rounds
                # (untimed), which is the warm-up (tracing) already.
                times, samples = interleaved(fns, repeats=repeats, warmup=0, return_samples=True)
                ratios = {n: paired_ratio(samples, reference, n) for n in fns if n != reference}
                results[name][load] = (times, ratios)
        finally:
            loads[load] = load_average()
            if spinner is not None:
                spinner.kill()
                spinner.wait()
    return results, loads
