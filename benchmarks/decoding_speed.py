"""Tokens per second of cached vs uncached Transformer greedy decoding, and beam search's cost.

A stack of `TransformerDecoderLayer`s (default: 4 layers, d_model 256,
8 heads, FFN 1024) with random weights decodes `--length` tokens greedily
for a batch of sources. The end token is never produced (id -1), so every
run generates exactly `length` tokens per row.

- cached: one token per step, self-attention keys/values kept in a
  `[B, max_length, heads, head_dim]` cache per layer, encoder keys/values
  projected once (`keras_attn.decoding.transformer_step(cached=True)`).
- uncached: the prefix recomputed at every step: tokens `0..t` re-run
  through the stack (`cached=False`, `recompute="prefix"`), the reference
  the cache is tested against. (`recompute="buffer"` re-runs all `length`
  positions, the static-shape variant XLA needs: about twice the work.)

- beam: `beam_search` (K=4 by default) over the cached step; its cost per generated token is
  reported relative to cached greedy (same number of steps; target <= 1.5 K).

Each search is one `tf.function` (optionally `--xla`); the first call
(trace/compile) is a warm-up, then the median of `--runs` timed calls is
reported. With `--jax`, the same searches (cached greedy and beam, same sizes, their own
random weights) also run on JAX, each one `jax.jit` function, in a subprocess with
`KERAS_BACKEND=jax`. Usage:

    .venv/bin/python benchmarks/decoding_speed.py [--batch 8] [--length 64] [--xla] [--jax]
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common
from keras_attn.decoding import beam_search, greedy_search, transformer_step
from keras_attn.layers import PositionalEncoding, TransformerDecoderLayer


def build(args):
    """`(layers, embedding, output, positional encoding, encoder output)`, the same on either
    backend (NumPy inputs)."""
    keras.utils.set_random_seed(0)
    layers = [
        TransformerDecoderLayer(args.heads, args.ffn, dropout=0.0) for _ in range(args.layers)
    ]
    rng = np.random.RandomState(0)
    encoder = rng.randn(args.batch, args.source_length, args.d_model).astype("float32")
    for layer in layers:
        layer(np.zeros([args.batch, 2, args.d_model], "float32"), encoder)
    embedding = keras.layers.Embedding(args.vocab, args.d_model)
    embedding.build((None,))
    output = keras.layers.Dense(args.vocab)
    output.build((None, args.d_model))
    return layers, embedding, output, PositionalEncoding(), encoder


def sequences(parts, args, beam_size=None, cached=True, recompute="prefix", **search_kwargs):
    """The searched `sequences` of the step `parts` make (greedy, or beam with `beam_size`)."""
    layers, embedding, output, pe, encoder = parts
    step, state = transformer_step(
        layers,
        embedding,
        output,
        encoder,
        np.ones([args.batch, args.source_length], bool),
        pe,
        max_length=args.length,
        embedding_scale=float(np.sqrt(args.d_model)),
        cached=cached,
        recompute=recompute,
    )
    start = np.zeros([args.batch], np.int32)
    if beam_size is not None:
        return beam_search(
            step, state, start, -1, beam_size=beam_size, max_length=args.length, **search_kwargs
        )["sequences"]
    return greedy_search(step, state, start, -1, max_length=args.length)["sequences"]


def make_decoder(parts, args, cached, beam_size=None, recompute="prefix", **search_kwargs):
    def decode():
        return sequences(parts, args, beam_size, cached, recompute, **search_kwargs)

    return tf.function(decode, jit_compile=args.xla)


def measure(fn, runs):
    t0 = time.perf_counter()
    fn().numpy()  # warm-up: trace (and compile)
    warm = time.perf_counter() - t0
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn().numpy()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), warm, out


def parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--xla", action="store_true", help="compile with jit_compile=True")
    parser.add_argument(
        "--jax", action="store_true", help="also time cached greedy and beam on JAX (jax.jit)"
    )
    parser.add_argument("--jax-worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def jax_worker(args):
    """On JAX (`KERAS_BACKEND=jax`): cached greedy and beam search as `jax.jit` functions of the
    weights, timed like the TensorFlow rows; prints `{name: median seconds}` as JSON."""
    import json

    import jax

    parts = build(args)
    layers, embedding, output = parts[:3]
    variables = [v for part in (*layers, embedding, output) for v in part.variables]

    def search(values, beam):
        with keras.StatelessScope(list(zip(variables, values))):
            return sequences(parts, args, args.beam_size if beam else None)

    values = [v.value for v in variables]
    medians = {}
    for name, beam in (("greedy", False), (f"beam K={args.beam_size}", True)):
        fn = jax.jit(lambda values, beam=beam: search(values, beam))
        fn(values).block_until_ready()  # compile
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            fn(values).block_until_ready()
            times.append(time.perf_counter() - t0)
        medians[name] = statistics.median(times)
    print(json.dumps(medians))


def jax_rows(args):
    """`jax_worker` in a subprocess with `KERAS_BACKEND=jax`: `{name: median seconds}`."""
    import json
    import subprocess

    argv = [sys.executable, os.path.abspath(__file__), "--jax-worker"]
    for key in ("batch", "length", "source_length", "layers", "d_model", "heads", "ffn"):
        argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    argv += ["--vocab", str(args.vocab), "--runs", str(args.runs)]
    argv += ["--beam-size", str(args.beam_size)]
    env = dict(os.environ, KERAS_BACKEND="jax")
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


SWEEP_BATCHES = (1, 32)


def step_mflop(args):
    """Multiply-adds x 2 of one cached decoding step: per layer the self-attention's four
    projections, the cross-attention's query and output projections, the FFN, attention over
    the cache and the source; then the output projection to the vocabulary."""
    b, d, f = args.batch, args.d_model, args.ffn
    per_layer = 2 * b * (6 * d * d + 2 * d * f + 2 * d * (args.length + args.source_length))
    return (args.layers * per_layer + 2 * b * d * args.vocab) / 1e6


def batch_sweep(repeats, base):
    """Cached vs prefix-recompute greedy at other batch sizes: `{batch: (cached s, prefix s,
    ratio)}`. The cached step's cost is mostly per-op overhead (flat in the batch), the prefix
    recompute's mostly arithmetic (growing with it), so the ratio grows with the batch."""
    out = {}
    for batch in SWEEP_BATCHES:
        args = argparse.Namespace(**{**vars(base), "batch": batch})
        parts = build(args)
        fns = {
            "cached": make_decoder(parts, args, True),
            "prefix": make_decoder(parts, args, False),
        }
        times, samples = common.interleaved(fns, repeats=repeats, warmup=1, return_samples=True)
        out[batch] = (
            times["cached"],
            times["prefix"],
            common.paired_ratio(samples, "prefix", "cached"),
        )
    return out


def xla_pair(repeats, base):
    """Under XLA (`jit_compile=True`): cached vs whole-buffer recompute (the prefix, whose
    shape grows, does not compile), batch as in the main table."""
    args = argparse.Namespace(**{**vars(base), "xla": True})
    parts = build(args)
    fns = {
        "cached": make_decoder(parts, args, True),
        "buffer": make_decoder(parts, args, False, recompute="buffer"),
    }
    times, samples = common.interleaved(fns, repeats=repeats, warmup=1, return_samples=True)
    return times["cached"], times["buffer"], common.paired_ratio(samples, "buffer", "cached")


def run(repeats=5, **overrides):
    """The RESULTS.md section: cached vs uncached greedy, beam K vs greedy, interleaved medians."""
    args = parser().parse_args([])
    args.runs = repeats
    for k, v in overrides.items():
        setattr(args, k, v)
    parts = build(args)
    k = args.beam_size
    fns = {
        "greedy, cached": make_decoder(parts, args, True),
        "greedy, uncached (prefix recomputed)": make_decoder(parts, args, False),
        f"beam K={k}, cached": make_decoder(parts, args, True, beam_size=k),
        "greedy, uncached (whole buffer recomputed)": make_decoder(
            parts, args, False, recompute="buffer"
        ),
    }
    times, samples = common.interleaved(fns, repeats=repeats, warmup=1, return_samples=True)
    # Share of generated tokens that agree (random weights have near-ties, where the two
    # paths' float rounding may pick different tokens; tests/decoding check equality exactly).
    cached_tokens = fns["greedy, cached"]().numpy()
    same = f"{100 * np.mean(cached_tokens == fns['greedy, uncached (prefix recomputed)']().numpy()):.1f}%"
    # Ratios within a round, median over rounds.
    speedup = common.paired_ratio(samples, "greedy, uncached (prefix recomputed)", "greedy, cached")
    buffer_speedup = common.paired_ratio(
        samples, "greedy, uncached (whole buffer recomputed)", "greedy, cached"
    )
    beam_ratio = common.paired_ratio(samples, f"beam K={k}, cached", "greedy, cached")
    tokens = args.batch * args.length
    rows = [
        (name, f"{t * 1e3:.0f}", f"{t / args.length * 1e3:.2f}", f"{tokens / t:.0f}")
        for name, t in times.items()
    ]
    sweep = batch_sweep(max(3, repeats // 2), args)
    sweep[args.batch] = (
        times["greedy, cached"],
        times["greedy, uncached (prefix recomputed)"],
        speedup,
    )
    xla_cached, xla_buffer, xla_speedup = xla_pair(repeats, args)
    # What a cached step dispatches: graph nodes of the loop body (without Const, Identity,
    # NoOp), the same count as the KerasHub comparison's.
    from benchmarks.transformer_vs_keras_hub import loop_body_kernels

    kernels = loop_body_kernels(fns["greedy, cached"])
    checks = {
        f"Transformer greedy cached vs prefix recomputed, batch {b} (>= 5x)": sweep[b][2] >= 5.0
        for b in sorted(sweep)
    }
    checks[f"Beam K={k} cost per token vs greedy (<= {1.5 * k:g}x)"] = beam_ratio <= 1.5 * k
    sweep_rows = [
        (b, f"{c / args.length * 1e3:.2f}", f"{p / args.length * 1e3:.2f}", f"{r:.2f}x")
        for b, (c, p, r) in sorted(sweep.items())
    ]
    text = (
        "### 3. Incremental decoding (Transformer)\n\n"
        f"{args.layers} decoder layers, d_model {args.d_model}, {args.heads} heads, FFN {args.ffn}, "
        f"vocab {args.vocab}, random weights; batch {args.batch}, source length "
        f"{args.source_length}, {args.length} tokens generated (the end token never comes); each "
        f"search one `tf.function` (no XLA); median of {repeats} interleaved rounds after a warm-up.\n\n"
        + common.table(["search", "ms per search", "ms per step", "tokens/s (batch rows)"], rows)
        + f"\n\nUncached = at step t the prefix (tokens 0..t) recomputed, the baseline of the "
        f"target; whole buffer = all {args.length} positions recomputed every step (the "
        f"static-shape variant XLA needs). Cached vs prefix recomputed: **{speedup:.2f}x** "
        f"(target >= 5x; tokens equal: {same}); vs whole buffer: {buffer_speedup:.2f}x. "
        f"Beam K={k} vs cached greedy per generated token: **{beam_ratio:.2f}x** "
        f"(target <= {1.5 * k:g}x = 1.5 K).\n\n"
        "By batch size (same model and length; ms per generated step):\n\n"
        + common.table(
            ["batch", "cached ms/step", "prefix recomputed ms/step", "speed-up"], sweep_rows
        )
        + f"\n\nUnder XLA (`jit_compile=True`, batch {args.batch}): cached "
        f"{xla_cached / args.length * 1e3:.2f} ms/step, whole buffer recomputed "
        f"{xla_buffer / args.length * 1e3:.2f} ms/step: **{xla_speedup:.2f}x**.\n\n"
        f"Reading it: a cached step does little arithmetic (about {step_mflop(args):.0f} MFLOP at "
        f"batch {args.batch}, well under a millisecond at matmul speed) in {kernels} "
        "TensorFlow kernels per step (graph nodes of the greedy loop's body without Const, "
        "Identity, NoOp; fewer run, as TensorFlow's graph optimizer merges repeated "
        "index and shape arithmetic), so without XLA its time is "
        "mostly the executor's per-op cost, already several ms per step at batch 1; the prefix "
        "recompute runs about as many ops on bigger tensors. The cache therefore wins by more as "
        "the batch grows, and by far the most under XLA, which compiles a step into a few fused "
        "kernels. keras_attn's one-query path attends in the cache's own layout "
        "(multiply-and-sum, no transpose of the cache or the scores), writes the new row with an "
        "in-place scatter (indices built once for keys and values) and projects it with 2-D "
        "matmuls whose bias TensorFlow fuses, scaling the query rather than its kernel "
        "(`keras_attn/layers/multi_head.py`); the cross-attention caches are zeroed at the "
        "source padding once, before the loop, not at every step, and the sinusoidal position "
        "rows are computed once (`keras_attn/decoding/steps.py`)."
    )
    try:  # beam search vs KerasHub's BeamSampler, when the bench extra is installed
        import keras_hub  # noqa: F401
    except ImportError:
        text += (
            "\n\n(keras-hub not installed: `pip install .[bench]` adds the BeamSampler comparison.)"
        )
    else:
        from benchmarks import beam_vs_keras_hub

        hub_text, hub_checks = beam_vs_keras_hub.run(repeats)
        text += "\n\n" + hub_text
        checks.update(hub_checks)
    return text, checks


def main():
    args = parser().parse_args()
    if args.jax_worker:
        jax_worker(args)
        return

    parts = build(args)
    rows, outputs = [], {}
    for name, cached in (("cached", True), ("uncached", False)):
        median, warm, outputs[name] = measure(make_decoder(parts, args, cached), args.runs)
        tokens = args.batch * args.length
        rows.append((name, median, tokens / median, warm))
    same = np.array_equal(outputs["cached"], outputs["uncached"])

    device = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
    print(
        f"Greedy decoding, {args.layers} layers, d_model {args.d_model}, {args.heads} heads, "
        f"batch {args.batch}, {args.length} tokens, source {args.source_length}, "
        f"vocab {args.vocab}, {device}{', XLA' if args.xla else ''}; "
        f"median of {args.runs} runs after a warm-up"
    )
    print(f"{'decoder':<10} {'seconds':>9} {'tokens/s':>10} {'warm-up s':>10}")
    for name, median, rate, warm in rows:
        print(f"{name:<10} {median:>9.3f} {rate:>10.0f} {warm:>10.1f}")
    print(f"speed-up (cached / uncached): {rows[1][1] / rows[0][1]:.2f}x")
    print(f"same tokens: {same}")
    if args.jax:
        tokens = args.batch * args.length
        for name, median in jax_rows(args).items():
            print(
                f"JAX (jax.jit), cached {name}: {median:.3f} s, {tokens / median:.0f} tokens/s, "
                f"{median / rows[0][1]:.2f}x the TensorFlow cached greedy time"
            )


if __name__ == "__main__":
    main()
