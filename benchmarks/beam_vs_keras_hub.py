"""Beam search against KerasHub's `BeamSampler` on the same GRU step model.

One GRU decoder step (embedding 64, GRU 256, Dense to V = 2000 logits) with random weights;
batch 16, beam 4, 32 tokens generated (no end token, so both run every step). Each search is
one `tf.function` (no XLA); the median of interleaved rounds after a warm-up, idle and then
under load (a second process spinning on a core for the duration). KerasHub is a bench-only
extra (`pip install .[bench]`), never a runtime dependency. Also counts the graph nodes of
each loop body (a proxy for the per-step op dispatch cost that a loaded machine stretches).

Then the same step with the same weights and initial state compiled whole: ours on JAX and
KerasHub's `BeamSampler` on JAX, each one `jax.jit` function of the weights (a process with
`KERAS_BACKEND=jax`, `jax_training.BackendWorker`), and ours on TensorFlow under XLA
(`tf.function(jit_compile=True)`, this process), the three asked in turn round after round;
the best sequences of the three are compared.

`--jax-only` times only the two `jax.jit` searches, interleaved, and prints their ratio, their
kernels per step and whether their best sequences agree (no section for RESULTS.md);
`--size large` takes the sizes of `benchmarks/gpu.py`'s beam case (batch 128, vocab 16,000,
embedding 256, GRU 512).

    .venv/bin/python benchmarks/beam_vs_keras_hub.py [--repeats 7]
    .venv/bin/python benchmarks/beam_vs_keras_hub.py --jax-only [--size large] [--repeats 7]
"""

import argparse
import collections
import os
import re
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common
from keras_attn.decoding import beam_search

B, K, L, V, D, H = 16, 4, 32, 2000, 64, 256
SIZES = {
    "default": dict(B=16, K=4, L=32, V=2000, D=64, H=256),
    "large": dict(B=128, K=4, L=32, V=16000, D=256, H=512),  # benchmarks/gpu.py's beam case
}


def use_size(name):
    """Sets the module's sizes (B, K, L, V, D, H) to those of `SIZES[name]`."""
    globals().update(SIZES[name])


def build():
    keras.utils.set_random_seed(0)
    embedding = keras.layers.Embedding(V, D)
    embedding.build((None,))
    cell = keras.layers.GRUCell(H)
    cell.build((None, D))
    output = keras.layers.Dense(V)
    output.build((None, H))

    def step(tokens, h):
        y, new = cell(embedding(tokens), [h])
        return output(y), (new[0] if isinstance(new, (list, tuple)) else new)

    step.layers = (embedding, cell, output)
    return step


def searches(step):
    from keras_hub.samplers import BeamSampler

    h0 = tf.random.normal([B, H], seed=1)
    start = tf.ones([B], tf.int32)

    def ours_step(tokens, state, t):
        logits, h = step(tokens, state)
        return logits, h, None

    @tf.function
    def ours():
        return beam_search(ours_step, h0, start, -1, beam_size=K, max_length=L)["sequences"]

    sampler = BeamSampler(num_beams=K)
    prompt = tf.concat([start[:, None], tf.zeros([B, L], tf.int32)], axis=1)

    def hub_next(prompt, cache, index):
        logits, h = step(prompt[:, index - 1], cache)
        return logits, None, h

    @tf.function
    def hub():
        return sampler(hub_next, prompt, cache=h0, index=1)

    return {"keras_attn beam_search": ours, "keras_hub BeamSampler": hub}


# ------------------------------------------------------------- compiled: JAX and XLA
OURS_JAX = "keras_attn beam_search, JAX (jit)"
HUB_JAX = "keras_hub BeamSampler, JAX (jit)"
OURS_XLA = "keras_attn beam_search, TensorFlow (XLA)"
SIZE = ["default"]  # the name of the sizes in use (passed to the JAX worker)
CALLS = 5  # searches per timed sample of the compiled searches (each a few tens of ms)


def initial_state():
    """`h0` [B, H] and the start tokens, as NumPy arrays (the same on both backends)."""
    h0 = np.random.RandomState(1).randn(B, H).astype("float32")
    return h0, np.ones([B], "int32")


def sequence_log_probs(step, sequences):
    """Log-probability of each row of `sequences` ([B, L]) under `step`, token by token."""
    h0, start = initial_state()
    h, tokens, total = tf.constant(h0), tf.constant(start), tf.zeros([B])
    for t in range(L):
        logits, h = step(tokens, h)
        tokens = tf.constant(sequences[:, t], tf.int32)
        total += tf.gather(tf.nn.log_softmax(logits), tokens, batch_dims=1)
    return total.numpy()


def save_weights(step, path):
    weights = [w for layer in step.layers for w in layer.get_weights()]
    np.savez(path, *weights)


def load_weights(step, path):
    saved = np.load(path)
    weights = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    for layer in step.layers:
        n = len(layer.weights)
        layer.set_weights(weights[:n])
        weights = weights[n:]


def jax_worker(weights_path):
    """On JAX: ours and KerasHub's search, each one `jax.jit` function of the weights (applied
    through a `StatelessScope`, as KerasHub's `CausalLM` compiles its generation), served to
    `BackendWorker`; `info` holds each one's best sequences."""
    import types

    import jax
    from keras_hub.samplers import BeamSampler

    from benchmarks import jax_training

    step = build()
    load_weights(step, weights_path)
    trainable = [v for layer in step.layers for v in layer.trainable_variables]
    frozen = [v for layer in step.layers for v in layer.non_trainable_variables]
    variables = trainable + frozen
    values = [v.value for v in variables]
    h0, start = initial_state()

    def ours_step(tokens, state, t):
        logits, h = step(tokens, state)
        return logits, h, None

    def ours(values):
        with keras.StatelessScope(list(zip(variables, values))):
            out = beam_search(ours_step, h0, start, -1, beam_size=K, max_length=L)
            return out["sequences"][:, 0]

    sampler = BeamSampler(num_beams=K)
    prompt = np.concatenate([start[:, None], np.zeros([B, L], "int32")], axis=1)
    # What `run_loop` reads of a model: the variables it carries through the loop.
    model = types.SimpleNamespace(trainable_variables=trainable, non_trainable_variables=frozen)

    def hub_next(prompt, cache, index):
        logits, h = step(prompt[:, index - 1], cache)
        return logits, None, h

    def hub(values):
        with keras.StatelessScope(list(zip(variables, values))):
            return sampler(hub_next, prompt, cache=h0, index=1, model=model)[:, 1:]

    compiled = {OURS_JAX: jax.jit(ours), HUB_JAX: jax.jit(hub)}
    sequences = {name: np.asarray(fn(values)).tolist() for name, fn in compiled.items()}
    body_ops = {
        name: while_body_ops(fn.lower(values).compile().as_text()) for name, fn in compiled.items()
    }
    jax_training.serve(
        {name: (lambda fn=fn: jax.block_until_ready(fn(values))) for name, fn in compiled.items()},
        {"sequences": sequences, "body_ops": body_ops},
    )


FREE_HLO = ("parameter", "get-tuple-element", "tuple", "constant", "bitcast")


def while_body_ops(hlo_text):
    """Kernels one step of a compiled loop runs: the instructions of the while body
    computation(s) of an optimized HLO module (a fusion counts once), without those that run
    no kernel (parameters, tuple plumbing, constants, bitcasts). `{opcode: count}`."""
    computations, current = {}, None
    for line in hlo_text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{"):
            current = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)", line).group(1)
            computations[current] = []
        elif line.strip() == "}":
            current = None
        elif current is not None and " = " in line:
            found = re.search(r"(?:^|\s)([a-z][a-z0-9\-_]*)\(", line.split(" = ", 1)[1])
            computations[current].append(found.group(1) if found else "?")
    counts = collections.Counter()
    for body in set(re.findall(r"body=%?([\w.\-]+)", hlo_text)):
        counts.update(op for op in computations.get(body, []) if op not in FREE_HLO)
    return dict(counts)


def compiled_rows(step, repeats):
    """Ours on TensorFlow under XLA here, ours and BeamSampler on JAX in a worker process,
    interleaved round by round: `(medians, samples, best sequences by name)`."""
    import tempfile

    from benchmarks import jax_training

    h0, start = initial_state()

    def ours_step(tokens, state, t):
        logits, h = step(tokens, state)
        return logits, h, None

    @tf.function(jit_compile=True)
    def ours_xla():
        return beam_search(ours_step, tf.constant(h0), start, -1, beam_size=K, max_length=L)[
            "sequences"
        ][:, 0]

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "weights.npz")
        save_weights(step, path)
        argv = ["--weights", path, "--size", SIZE[0]]
        with jax_training.BackendWorker(__file__, "jax", argv) as worker:
            times, samples = jax_training.timed_rounds(
                {OURS_XLA: ours_xla}, [worker], repeats, calls=CALLS
            )
            sequences = {k: np.asarray(v) for k, v in worker.info["sequences"].items()}
            body_ops = worker.info["body_ops"]
    sequences[OURS_XLA] = ours_xla().numpy()
    return times, samples, sequences, body_ops


def jax_only(repeats, calls):
    """The two `jax.jit` searches alone, interleaved in a JAX worker: a short report."""
    import tempfile

    from benchmarks import jax_training

    step = build()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "weights.npz")
        save_weights(step, path)
        argv = ["--weights", path, "--size", SIZE[0]]
        with jax_training.BackendWorker(__file__, "jax", argv) as worker:
            times, samples = jax_training.timed_rounds({}, [worker], repeats, calls=calls)
            seqs = {k: np.asarray(v) for k, v in worker.info["sequences"].items()}
            body_ops = worker.info["body_ops"]
    ratio = common.paired_ratio(samples, HUB_JAX, OURS_JAX)
    per_round = [h / o for h, o in zip(samples[HUB_JAX], samples[OURS_JAX])]
    same = int(np.all(seqs[OURS_JAX] == seqs[HUB_JAX], axis=1).sum())
    lines = [
        f"B {B}, K {K}, V {V}, embedding {D}, GRU {H}, {L} tokens; {repeats} rounds of {calls} "
        "searches each",
        *(f"{name}: {times[name] * 1e3:.2f} ms per search" for name in (OURS_JAX, HUB_JAX)),
        f"ratio (BeamSampler time / ours): {ratio:.3f}x (per round: "
        + ", ".join(f"{r:.3f}" for r in per_round)
        + ")",
        f"same best sequence: {same} / {B} rows",
        *(
            f"kernels per step, {name}: {sum(ops.values())} {dict(sorted(ops.items()))}"
            for name, ops in body_ops.items()
        ),
    ]
    return "\n".join(lines)


def compiled_section(step, repeats):
    times, samples, seqs, body_ops = compiled_rows(step, repeats)
    ratio = common.paired_ratio(samples, HUB_JAX, OURS_JAX)
    vs_xla = common.paired_ratio(samples, OURS_XLA, OURS_JAX)
    rows = [
        (name, f"{times[name] * 1e3:.1f}", f"{times[name] / L * 1e3:.3f}")
        for name in (OURS_JAX, HUB_JAX, OURS_XLA)
    ]

    def agree(a, b):
        a, b = seqs[a], seqs[b]
        return f"{int(np.all(a == b, axis=1).sum())} / {B} rows ({100 * np.mean(a == b):.1f}% of tokens)"

    differ = ~np.all(seqs[OURS_JAX] == seqs[HUB_JAX], axis=1)
    ties = ""
    if differ.any():
        gaps = sequence_log_probs(step, seqs[OURS_JAX]) - sequence_log_probs(step, seqs[HUB_JAX])
        ties = (
            " Where they differ, the log-probability of ours' best sequence minus BeamSampler's "
            "(recomputed token by token on TensorFlow): "
            + ", ".join(f"{g:+.1e}" for g in gaps[differ])
            + ". Beam search is not exact: both keep the K best prefixes of each step, from "
            "log-probabilities rounded differently (ours a log-softmax, BeamSampler the log of a "
            "softmax), so where two prefixes about tie for the K-th place each may keep another "
            "one and end on a different best sequence."
        )

    text = (
        "#### Compiled whole: JAX (jit) and TensorFlow (XLA)\n\n"
        f"Same step, weights and initial state; batch {B}, beam {K}, {L} tokens. On JAX each "
        "search is one `jax.jit` function of the weights (a process with `KERAS_BACKEND=jax`); "
        "on TensorFlow one `tf.function(jit_compile=True)`; the three asked in turn, median of "
        f"{repeats} rounds after the compile, a round timing {CALLS} searches of each.\n\n"
        + common.table(["search", "ms per search", "ms per step"], rows)
        + "\n\nSpeed ratio on JAX (BeamSampler time / ours, >= 1 means ours is faster): "
        f"**{ratio:.2f}x**; ours on TensorFlow (XLA) / ours on JAX: {vs_xla:.2f}x (ratios within "
        "each round, median over rounds). Same best sequence: ours on JAX vs BeamSampler on JAX "
        f"{agree(OURS_JAX, HUB_JAX)}; ours on JAX vs ours on TensorFlow (XLA) "
        f"{agree(OURS_JAX, OURS_XLA)}.{ties}\n\n"
        "Kernels per step on JAX (the instructions of the compiled while body, a fusion "
        "counted once, without parameters, tuples, constants and bitcasts): "
        + "; ".join(
            f"{name} {sum(ops.values())} ("
            + ", ".join(f"{op} {n}" for op, n in sorted(ops.items(), key=lambda x: -x[1]))
            + ")"
            for name, ops in body_ops.items()
        )
        + "."
    )
    return text, {"beam on JAX vs BeamSampler on JAX (>= 1.0x)": ratio >= 1.0}


def body_nodes(fn):
    """Graph nodes of the `while_loop` body, by kind (Const and Identity are not kernels)."""
    graph = fn.get_concrete_function().graph
    bodies = [f for name, f in graph._functions.items() if "body" in name]
    counts = collections.Counter(n.op for f in bodies for n in f.definition.node_def)
    total = sum(counts.values())
    return total, total - counts["Const"] - counts["Identity"] - counts["NoOp"]


def run(repeats=7):
    step = build()
    fns = searches(step)
    rows, ratios = [], {}
    for load in ("idle", "under load"):
        spinner = None
        if load != "idle":
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            times, samples = common.interleaved(fns, repeats=repeats, warmup=1, return_samples=True)
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        ratio = common.paired_ratio(samples, "keras_hub BeamSampler", "keras_attn beam_search")
        ratios[load] = ratio
        for name, t in times.items():
            rows.append((load, name, f"{t * 1e3:.1f}", f"{t / L * 1e3:.2f}"))
    nodes = {name: body_nodes(fn) for name, fn in fns.items()}
    text = (
        "### Beam search vs KerasHub BeamSampler (GRU step)\n\n"
        f"GRU step (embedding {D}, GRU {H}, vocab {V}), batch {B}, beam {K}, {L} tokens; one "
        f"`tf.function` each, no XLA; median of {repeats} interleaved rounds.\n\n"
        + common.table(["machine", "search", "ms per search", "ms per step"], rows)
        + "\n\nSpeed ratio (BeamSampler time / ours, >= 1 means ours is faster): "
        + ", ".join(f"{load} **{r:.2f}x**" for load, r in ratios.items())
        + ".\n\nLoop-body graph nodes (all / kernels without Const, Identity, NoOp): "
        + ", ".join(f"{name} {a} / {k}" for name, (a, k) in nodes.items())
        + ". Ours also keeps finished flags and GNMT scores, checks the logits for NaN "
        "and returns K sorted hypotheses with their scores and lengths; BeamSampler returns the "
        "best prompt."
    )
    checks = {f"beam vs BeamSampler, {load} (>= 1.0x)": r >= 1.0 for load, r in ratios.items()}
    compiled_text, compiled_checks = compiled_section(step, repeats)
    checks.update(compiled_checks)
    return text + "\n\n" + compiled_text, checks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--weights", help=argparse.SUPPRESS)
    parser.add_argument("--size", choices=sorted(SIZES), default="default")
    parser.add_argument("--jax-only", action="store_true", help="only the two jax.jit searches")
    parser.add_argument("--calls", type=int, default=CALLS, help="searches per timed sample")
    args = parser.parse_args()
    use_size(args.size)
    SIZE[0] = args.size
    if args.worker:
        jax_worker(args.weights)
        return
    if args.jax_only:
        print(jax_only(args.repeats, args.calls))
        return
    text, checks = run(args.repeats)
    print(text)
    for name, ok in checks.items():
        print(("met  " if ok else "short") + " " + name)


if __name__ == "__main__":
    main()
