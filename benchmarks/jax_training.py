"""A Transformer training step on JAX vs TensorFlow: `fit` steps per second, each backend in
its own process.

The same small `keras_attn.models.Transformer` (2 + 2 layers, d_model 128, 4 heads, FFN 512,
dropout 0.1, vocabularies of 1000) with the same initial weights, Adam and the masked
sequence loss, trains on the same batch (32 random source / target sequences of 24 tokens)
repeated `STEPS` times per `fit` call. Three cases:

- JAX, `jit_compile=True` (a process with `KERAS_BACKEND=jax`);
- TensorFlow, `jit_compile=True` (XLA) and TensorFlow, `jit_compile=False` (a `tf.function`
  per step), both in one process with `KERAS_BACKEND=tensorflow`.

The processes start side by side and wait on their standard input; this process then asks each
for one timed `fit` call in turn, round after round (`BackendWorker`, `timed_rounds`), so the
rounds of the two backends interleave as those of one process would and every ratio is taken
within a round (median over rounds). The first call of each case (tracing, compilation) is the
warm-up.

    .venv/bin/python benchmarks/jax_training.py [--repeats 5]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

CFG = dict(batch=32, length=24, vocab=1000, layers=2, d_model=128, heads=4, ffn=512, dropout=0.1)
STEPS = 8  # training steps per timed `fit` call
JAX_XLA, TF_XLA, TF_PLAIN = "JAX, jit", "TensorFlow, XLA", "TensorFlow, no XLA"
# Lines of the worker protocol start with this tag; anything else a library prints is skipped.
TAG = "@@ "


# ------------------------------------------------------------------ processes on a backend
class BackendWorker:
    """A benchmark script run with `--worker` on one Keras backend, in its own process.

    The worker builds and warms up its functions, then answers `serve`'s protocol: one line
    with its `info` (a JSON object), then, for each name written to its standard input, the
    seconds of one call of that function. Stop it with `close` (or a `with` block)."""

    def __init__(self, script, backend, argv=()):
        self._stderr = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, KERAS_BACKEND=backend)
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(script), "--worker", *argv],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
        )
        self.backend = backend
        self.info = self._read()

    def _read(self):
        for line in self.process.stdout:
            if line.startswith(TAG):
                return json.loads(line[len(TAG) :])
        self._stderr.seek(0)
        raise RuntimeError(
            f"the {self.backend} worker exited (status {self.process.wait()}):\n"
            + self._stderr.read()[-3000:]
        )

    def time(self, name, calls=1):
        """Mean seconds of `calls` calls of the worker's function `name`, timed in the worker."""
        self.process.stdin.write(json.dumps([name, calls]) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def serve(fns, info=None):
    """The worker's side of `BackendWorker`: each function of `fns` (name -> a callable that
    returns once its work is done) is called once (warm-up), then `info` is written and every
    `[name, calls]` read from standard input is answered with the mean seconds of `calls`
    calls."""
    for fn in fns.values():
        fn()
    print(TAG + json.dumps({"names": list(fns), **(info or {})}), flush=True)
    for line in sys.stdin:
        name, calls = json.loads(line)
        t0 = time.perf_counter()
        for _ in range(calls):
            fns[name]()
        print(TAG + json.dumps((time.perf_counter() - t0) / calls), flush=True)


def timed_rounds(local, workers, repeats, calls=1):
    """`(medians, samples)` as `common.interleaved(..., return_samples=True)` gives them, over
    functions of this process (`local`, name -> callable, warmed up here) and of `workers`
    (each `BackendWorker`'s `info["names"]`): each round times every function in turn, a
    sample being the mean of `calls` calls."""
    for fn in local.values():
        common.block(fn())
    samples = {name: [] for name in local}
    for worker in workers:
        samples.update({name: [] for name in worker.info["names"]})
    for _ in range(repeats):
        for name, fn in local.items():
            samples[name].append(sum(common.time_once(fn) for _ in range(calls)) / calls)
        for worker in workers:
            for name in worker.info["names"]:
                samples[name].append(worker.time(name, calls))
    return {name: statistics.median(s) for name, s in samples.items()}, samples


# ------------------------------------------------------------------------ the training step
def batch():
    import numpy as np

    from keras_attn.models import teacher_forcing

    rng = np.random.RandomState(0)
    n, length, vocab = CFG["batch"], CFG["length"], CFG["vocab"]
    source = rng.randint(1, vocab, size=(n, length)).astype("int32")
    target = rng.randint(1, vocab, size=(n, length + 1)).astype("int32")
    target_in, target_out = teacher_forcing(target)
    x = {"source": source, "target_in": np.asarray(target_in, "int32")}
    y = np.asarray(target_out, "int32")
    # The same batch STEPS times: one `fit` call runs STEPS steps.
    tile = lambda a: np.concatenate([a] * STEPS)  # noqa: E731
    return {k: tile(v) for k, v in x.items()}, tile(y)


def make_model(jit_compile, weights_path):
    """The Transformer, compiled; its initial weights written to `weights_path` (an `.npz`) if
    that file does not exist yet, else read from it (so that both backends start alike)."""
    import keras
    import numpy as np

    from keras_attn.models import MaskedSequenceLoss, Transformer

    keras.utils.set_random_seed(0)
    model = Transformer(
        CFG["vocab"],
        CFG["vocab"],
        num_layers=CFG["layers"],
        d_model=CFG["d_model"],
        num_heads=CFG["heads"],
        intermediate_dim=CFG["ffn"],
        dropout=CFG["dropout"],
    )
    model.build()
    variables = model.trainable_variables
    if os.path.exists(weights_path):
        saved = np.load(weights_path)
        for i, v in enumerate(variables):
            v.assign(saved[f"w{i}"])
    else:
        np.savez(weights_path, **{f"w{i}": np.asarray(v) for i, v in enumerate(variables)})
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3), loss=MaskedSequenceLoss(), jit_compile=jit_compile
    )
    return model


def worker(weights_path):
    import keras

    x, y = batch()
    cases = {JAX_XLA: True} if keras.backend.backend() == "jax" else {TF_XLA: True, TF_PLAIN: False}
    fns = {}
    for name, jit in cases.items():
        model = make_model(jit, weights_path)
        fns[name] = lambda model=model: model.fit(
            x, y, batch_size=CFG["batch"], epochs=1, shuffle=False, verbose=0
        )
    serve(fns)


def run(repeats=5):
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, "weights.npz")
        # TensorFlow first: it writes the initial weights that the JAX process reads.
        with BackendWorker(__file__, "tensorflow", ["--weights", weights]) as tf_worker:
            with BackendWorker(__file__, "jax", ["--weights", weights]) as jax_worker:
                times, samples = timed_rounds({}, [tf_worker, jax_worker], repeats)
    rate = {name: STEPS / t for name, t in times.items()}
    vs_xla = common.paired_ratio(samples, TF_XLA, JAX_XLA)
    vs_plain = common.paired_ratio(samples, TF_PLAIN, JAX_XLA)
    rows = [
        (
            name,
            f"{times[name] / STEPS * 1e3:.1f}",
            f"{rate[name]:.1f}",
            "1.00x" if name == JAX_XLA else f"{common.paired_ratio(samples, name, JAX_XLA):.2f}x",
        )
        for name in (JAX_XLA, TF_XLA, TF_PLAIN)
    ]
    c = CFG
    text = (
        "### Transformer training step: JAX vs TensorFlow\n\n"
        f"`keras_attn.models.Transformer` ({c['layers']} + {c['layers']} layers, d_model "
        f"{c['d_model']}, {c['heads']} heads, FFN {c['ffn']}, dropout {c['dropout']}, vocabularies "
        f"of {c['vocab']}), same initial weights, Adam, `MaskedSequenceLoss`; one batch of "
        f"{c['batch']} random source / target sequences of {c['length']} tokens; a timed call is "
        f"`fit` over that batch {STEPS} times (one epoch, {STEPS} steps). Each backend in its own "
        f"process, the processes asked in turn round after round; median of {repeats} rounds "
        "after the compile.\n\n"
        + common.table(["backend", "ms per step", "steps/s", "JAX steps/s / this"], rows)
        + f"\n\nJAX (jit) vs TensorFlow with XLA: **{vs_xla:.2f}x** the steps per second; vs "
        f"TensorFlow without XLA: **{vs_plain:.2f}x** (ratios within each round, median over "
        "rounds; the time per step includes `fit`'s own per-call work spread over its steps)."
    )
    return text, {}


def main():
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--weights", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.weights)
        return
    text, _ = run(args.repeats)
    print(text)


if __name__ == "__main__":
    main()
