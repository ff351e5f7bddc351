"""Training throughput of the dates translator with `--distribute multi-worker` (2 worker processes
on one machine, one core each) against one process on one core and one process on both cores.

    .venv/bin/python benchmarks/multi_worker_speed.py [--rounds 2] [--n-train 4096]

Steady state only: examples per second from the `epoch_seconds` that the chief writes to
`metrics.jsonl` (training steps of an epoch, validation excluded), epochs after the first (which
traces the train step); and the chief's CPU time per example (`epoch_cpu_seconds`), which load
from other processes does not inflate. The cases are interleaved round by round so that load from other
processes hits all of them alike. Both workers run on the SAME machine: they share its memory
bandwidth and talk over loopback, so this is a lower bound on what two machines give, and on a
machine shared with other work the absolute numbers move; read the ratios.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

import numpy as np  # noqa: E402

from tests.examples.helpers import read_jsonl, script, script_env  # noqa: E402
from tests.examples.multi_worker import Job  # noqa: E402


def run_case(case, args, work):
    out = tempfile.mkdtemp(dir=work)
    common = [*args, "--out", out]
    if case == "2 workers, 1 core each":
        with Job(
            "train_translator.py",
            [*common, "--distribute", "multi-worker"],
            os.path.join(out, "logs"),
        ) as job:
            job.check(timeout=1800)
    else:
        prefix = (
            ["taskset", "-c", str(min(os.sched_getaffinity(0)))]
            if case == "1 process, 1 core"
            else []
        )
        proc = subprocess.run(
            [*prefix, sys.executable, script("train_translator.py"), *common],
            env=script_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--n-train", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=64, help="global batch")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument(
        "--no-two-cores", action="store_true", help="leave out the 1-process-on-2-cores case"
    )
    a = p.parse_args()
    steps = a.n_train // a.batch_size
    args = [
        "--n-train",
        str(a.n_train),
        "--n-val",
        "16",
        "--n-test",
        "16",
        "--batch-size",
        str(a.batch_size),
        "--epochs",
        str(a.epochs),
        "--heatmaps",
        "0",
        "--verbose",
        "0",
        "--schedule",
        "constant",
    ]
    cases = ["1 process, 1 core", "2 workers, 1 core each", "1 process, 2 cores"][
        : 2 if a.no_two_cores else 3
    ]
    results = {c: [] for c in cases}
    cpu_per_example = {c: [] for c in cases}
    work = tempfile.mkdtemp(prefix="multi_worker_speed_")
    try:
        for r in range(a.rounds):
            for case in cases:
                out = run_case(case, args, work)
                records = read_jsonl(os.path.join(out, "metrics.jsonl"))[1:]
                rate = float(
                    np.median([a.batch_size * steps / rec["epoch_seconds"] for rec in records])
                )
                cpu = float(
                    np.median(
                        [rec["epoch_cpu_seconds"] / (a.batch_size * steps) for rec in records]
                    )
                )
                results[case].append(rate)
                cpu_per_example[case].append(cpu * 1e3)
                print(
                    f"round {r + 1}: {case}: {rate:.0f} examples/s, {cpu * 1e3:.2f} CPU ms per example "
                    f"(the chief's process)",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = np.median(results[cases[0]])
    print(
        f"\ndates translator (Bahdanau, units 64), global batch {a.batch_size}, {steps} steps/epoch, "
        f"median of {a.rounds} rounds, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        "| case | examples/s | vs 1 process, 1 core | CPU ms per example, one process |\n|---|---|---|---|"
    )
    for case in cases:
        rate = np.median(results[case])
        print(
            f"| {case} | {rate:.0f} | {rate / base:.2f}x | {np.median(cpu_per_example[case]):.2f} |"
        )
    # A worker trains on half of every global batch: with a core (or machine) of its own and no
    # other load, the job runs at 1-process-1-core CPU cost / one worker's CPU cost per global example.
    one, two = np.median(cpu_per_example[cases[0]]), np.median(cpu_per_example[cases[1]])
    print(
        f"\nCPU-bound estimate for 2 workers with a core each, unloaded: {one / two:.2f}x "
        f"(a worker spends {two:.2f} CPU ms per global example it shares in, one process {one:.2f})"
    )


if __name__ == "__main__":
    main()
