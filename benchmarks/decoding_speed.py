"""Tokens per second of cached vs uncached Transformer greedy decoding, and beam search's cost (issue 7, item 3).

A stack of `TransformerDecoderLayer`s (default: 4 layers, d_model 256,
8 heads, FFN 1024) with random weights decodes `--length` tokens greedily
for a batch of sources. The end token is never produced (id -1), so every
run generates exactly `length` tokens per row.

- cached: one token per step, self-attention keys/values kept in a
  `[B, max_length, heads, head_dim]` cache per layer, encoder keys/values
  projected once (`keras_attn.decoding.transformer_step(cached=True)`).
- uncached: the whole fixed-size token buffer re-run through the stack at
  every step (`cached=False`), the reference the cache is tested against.

- beam: `beam_search` (K=4 by default) over the cached step; its cost per generated token is
  reported relative to cached greedy (same number of steps; target <= 1.5 K).

Each search is one `tf.function` (optionally `--xla`); the first call
(trace/compile) is a warm-up, then the median of `--runs` timed calls is
reported. Usage:

    .venv/bin/python benchmarks/decoding_speed.py [--batch 8] [--length 64] [--xla]
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # noqa: E402
from keras_attn.decoding import beam_search, greedy_search, transformer_step  # noqa: E402
from keras_attn.layers import PositionalEncoding, TransformerDecoderLayer  # noqa: E402


def build(args):
    keras.utils.set_random_seed(0)
    layers = [
        TransformerDecoderLayer(args.heads, args.ffn, dropout=0.0) for _ in range(args.layers)
    ]
    encoder = tf.random.normal([args.batch, args.source_length, args.d_model])
    for layer in layers:
        layer(tf.zeros([args.batch, 2, args.d_model]), encoder)
    embedding = keras.layers.Embedding(args.vocab, args.d_model)
    embedding.build((None,))
    output = keras.layers.Dense(args.vocab)
    output.build((None, args.d_model))
    return layers, embedding, output, PositionalEncoding(), encoder


def make_decoder(parts, args, cached, beam_size=None):
    layers, embedding, output, pe, encoder = parts
    mask = tf.ones([args.batch, args.source_length], tf.bool)

    def decode():
        step, state = transformer_step(
            layers, embedding, output, encoder, mask, pe, max_length=args.length,
            embedding_scale=float(np.sqrt(args.d_model)), cached=cached,
        )
        start = tf.zeros([args.batch], tf.int32)
        if beam_size is not None:
            return beam_search(
                step, state, start, -1, beam_size=beam_size, max_length=args.length
            )["sequences"]
        return greedy_search(step, state, start, -1, max_length=args.length)["sequences"]

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
    return parser


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
        "greedy, uncached": make_decoder(parts, args, False),
        f"beam K={k}, cached": make_decoder(parts, args, True, beam_size=k),
    }
    times, samples = common.interleaved(fns, repeats=repeats, warmup=1, return_samples=True)
    # Share of generated tokens that agree (random weights have near-ties, where the two
    # paths' float rounding may pick different tokens; tests/decoding check equality exactly).
    same = f'{100 * np.mean(fns["greedy, cached"]().numpy() == fns["greedy, uncached"]().numpy()):.1f}%'
    # Ratios within a round, median over rounds.
    speedup = common.paired_ratio(samples, "greedy, uncached", "greedy, cached")
    beam_ratio = common.paired_ratio(samples, f"beam K={k}, cached", "greedy, cached")
    tokens = args.batch * args.length
    rows = [
        (name, f"{t * 1e3:.0f}", f"{t / args.length * 1e3:.2f}", f"{tokens / t:.0f}")
        for name, t in times.items()
    ]
    checks = {
        "Transformer greedy cached vs uncached (>= 5x)": speedup >= 5.0,
        f"Beam K={k} cost per token vs greedy (<= {1.5 * k:g}x)": beam_ratio <= 1.5 * k,
    }
    text = (
        "### 3. Incremental decoding (Transformer)\n\n"
        f"{args.layers} decoder layers, d_model {args.d_model}, {args.heads} heads, FFN {args.ffn}, "
        f"vocab {args.vocab}, random weights; batch {args.batch}, source length "
        f"{args.source_length}, {args.length} tokens generated (the end token never comes); each "
        f"search one `tf.function` (no XLA); median of {repeats} interleaved rounds after a warm-up.\n\n"
        + common.table(["search", "ms per search", "ms per step", "tokens/s (batch rows)"], rows)
        + f"\n\nCached vs uncached greedy: **{speedup:.2f}x** faster (target >= 5x; tokens equal to the uncached "
        f"search: {same}). Beam K={k} vs cached greedy per generated token: **{beam_ratio:.2f}x** "
        f"(target <= {1.5 * k:g}x = 1.5 K)."
    )
    return text, checks


def main():
    args = parser().parse_args()

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


if __name__ == "__main__":
    main()
