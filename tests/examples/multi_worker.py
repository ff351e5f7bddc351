"""Start an example script as a `MultiWorkerMirroredStrategy` job on this machine: one process
per worker, each with its own `TF_CONFIG` (the same cluster of loopback addresses on free ports,
its own task index) and pinned to one CPU core, the way docs/distributed.md runs it on N machines."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

from tests.examples.helpers import script, script_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_ports(n):
    """`n` distinct TCP ports free on the loopback interface right now (all bound at once, then
    released, so the operating system cannot hand out the same one twice)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(addresses, index):
    """The `TF_CONFIG` of worker `index` in a cluster of `addresses` (worker 0 is the chief)."""
    return json.dumps(
        {"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": index}}
    )


class Job:
    """`n` worker processes of `examples/<name> args...` (or of the program at absolute path `name`) (`args`: a list for every worker, or a
    function of the worker index returning its list); with `cluster=False`, plain processes
    (no `TF_CONFIG`, not pinned). stdout+stderr of worker i go to
    `log_dir/worker-i.log`. Use as a context manager: on exit every worker still running is
    killed (SIGKILL), so a failing or hanging test never leaves processes behind."""

    def __init__(self, name, args, log_dir, n=2, cluster=True):
        cores = sorted(os.sched_getaffinity(0))
        addresses = [f"127.0.0.1:{p}" for p in free_ports(n)]
        os.makedirs(log_dir, exist_ok=True)
        self.logs = [os.path.join(log_dir, f"worker-{i}.log") for i in range(n)]
        self.procs = []
        try:
            for i in range(n):
                env = script_env()
                if cluster:
                    env["TF_CONFIG"] = tf_config(addresses, i)
                program = name if os.path.isabs(name) else script(name)
                with open(self.logs[i], "w", encoding="utf-8") as log:
                    self.procs.append(
                        subprocess.Popen(
                            [
                                *(
                                    ["taskset", "-c", str(cores[i % len(cores)])] if cluster else []
                                ),  # execs: same pid
                                sys.executable,
                                program,
                                *(args(i) if callable(args) else args),
                            ],
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            env=env,
                            cwd=ROOT,
                        )
                    )
        except BaseException:
            self.kill()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()

    def log(self, i):
        with open(self.logs[i], encoding="utf-8", errors="replace") as f:
            return f.read()

    def kill(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass

    def wait(self, timeout):
        """Wait for every worker to exit (all within `timeout` seconds in total); returns their
        return codes. A worker still running at the deadline fails the caller's assertion."""
        deadline = time.time() + timeout
        codes = []
        for i, proc in enumerate(self.procs):
            try:
                codes.append(proc.wait(timeout=max(deadline - time.time(), 0.1)))
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"worker {i} still running after {timeout} s:\n{self.log(i)[-3000:]}"
                ) from None
        return codes

    def check(self, timeout):
        """`wait`, then assert that every worker exited 0 (showing the failing worker's log)."""
        codes = self.wait(timeout)
        for i, code in enumerate(codes):
            assert code == 0, f"worker {i} exited {code}:\n{self.log(i)[-4000:]}"
        return codes
