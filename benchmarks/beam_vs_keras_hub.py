"""Beam search against KerasHub's `BeamSampler` on the same GRU step model.

One GRU decoder step (embedding 64, GRU 256, Dense to V = 2000 logits) with random weights;
batch 16, beam 4, 32 tokens generated (no end token, so both run every step). Each search is
one `tf.function` (no XLA); the median of interleaved rounds after a warm-up, idle and then
under load (a second process spinning on a core for the duration). KerasHub is a bench-only
extra (`pip install .[bench]`), never a runtime dependency. Also counts the graph nodes of
each loop body (a proxy for the per-step op dispatch cost that a loaded machine stretches).

    .venv/bin/python benchmarks/beam_vs_keras_hub.py [--repeats 7]
"""

import argparse
import collections
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common
from keras_attn.decoding import beam_search

B, K, L, V, D, H = 16, 4, 32, 2000, 64, 256


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
    return text, checks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    text, checks = run(args.repeats)
    print(text)
    for name, ok in checks.items():
        print(("met  " if ok else "short") + " " + name)


if __name__ == "__main__":
    main()
