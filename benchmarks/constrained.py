"""Constrained beam search against plain beam search on the Transformer (docs/decoding.md,
"Constrained decoding").

The cached Transformer step of `benchmarks/decoding_speed.py` (random weights, the end token
never produced, so every search runs exactly `--length` steps) decoded with `beam_search`,
K = 4:

- plain: no constraint arguments;
- constrained: two required phrases per row (`constraint_ids [B, 2, 3]`, random tokens), which
  adds the constraint bookkeeping (per-hypothesis progress, the forced tokens, the banks of
  dynamic beam allocation) to every step;
- prefix: a forced 4-token prefix per row (`prefix_ids [B, 4]`).

Each search is one `tf.function`, with and without XLA; rounds interleaved; the ratio is the
median over rounds of constrained / plain (target <= 1.5x). Without constraint arguments the
engine builds no constraint state at all (`Constraints.of` answers None), so the plain search
runs the same graph it ran before constrained decoding existed.

    .venv/bin/python benchmarks/constrained.py [--batch 8] [--length 32]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np
import tensorflow as tf

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common, decoding_speed


def make_search(parts, args, constraints=None, prefix=None, xla=False):
    """The cached Transformer beam search of `decoding_speed`, with the constraint arguments."""
    args = argparse.Namespace(**{**vars(args), "xla": xla})
    return decoding_speed.make_decoder(
        parts, args, True, beam_size=args.beam_size, constraint_ids=constraints, prefix_ids=prefix
    )


def phrases(args, count=2, length=3, seed=0):
    rng = np.random.default_rng(seed)
    return tf.constant(rng.integers(1, args.vocab, (args.batch, count, length)), tf.int32)


def contains(row, phrase):
    n = len(phrase)
    return any(list(row[i : i + n]) == list(phrase) for i in range(len(row) - n + 1))


def run(repeats=5, **overrides):
    """The RESULTS.md section: constrained / prefix / plain beam search, eager graph and XLA."""
    base = decoding_speed.parser().parse_args([])
    base.length, base.layers = 32, 2
    for k, v in overrides.items():
        setattr(base, k, v)
    parts = decoding_speed.build(base)
    required = phrases(base)
    prefix = tf.constant(
        np.random.default_rng(1).integers(1, base.vocab, (base.batch, 4)), tf.int32
    )
    rows, checks = [], {}
    for xla in (False, True):
        fns = {
            "plain": make_search(parts, base, xla=xla),
            "2 phrases": make_search(parts, base, constraints=required, xla=xla),
            "prefix": make_search(parts, base, prefix=prefix, xla=xla),
        }
        times, samples = common.interleaved(fns, repeats=repeats, warmup=1, return_samples=True)
        # The guarantee the timing is for: every best hypothesis holds both phrases.
        best = fns["2 phrases"]().numpy()[:, 0]
        met = np.mean([all(contains(r, p) for p in ps) for r, ps in zip(best, required.numpy())])
        mode = "XLA" if xla else "graph"
        for name in fns:
            ratio = common.paired_ratio(samples, name, "plain")
            rows.append(
                (
                    mode,
                    name,
                    f"{times[name] / base.batch * 1e3:.2f}",
                    f"{ratio:.2f}x",
                    f"{100 * met:.0f}%" if name == "2 phrases" else "",
                )
            )
            if name == "2 phrases":
                checks[
                    f"Constrained beam (2 phrases, K={base.beam_size}) vs plain, {mode} (<= 1.5x)"
                ] = ratio <= 1.5
    text = (
        "### Constrained decoding (Transformer beam search)\n\n"
        f"{base.layers} decoder layers, d_model {base.d_model}, {base.heads} heads, FFN "
        f"{base.ffn}, vocab {base.vocab}, random weights; batch {base.batch}, source length "
        f"{base.source_length}, {base.length} tokens generated, beam K={base.beam_size}; two "
        "required phrases of 3 tokens per row, or a forced 4-token prefix "
        "(`benchmarks/constrained.py`); median of interleaved rounds.\n\n"
        + common.table(
            ["compiled", "search", "ms per sentence", "vs plain", "best hyp. holds both phrases"],
            rows,
        )
        + "\n\nWithout constraint arguments the search builds no constraint state, so the "
        "plain row is the search as it runs with no constraints at all."
    )
    return text, checks


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    text, checks = run(a.repeats, batch=a.batch, length=a.length)
    print(text)
    for name, ok in checks.items():
        print(("met   " if ok else "MISSED") + " " + name)


if __name__ == "__main__":
    main()
