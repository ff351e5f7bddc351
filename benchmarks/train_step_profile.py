"""What one training step of the corpus translator spends its time on, on this machine's CPU.

    python -m benchmarks.train_step_profile [--run runs/quality/corpus-es-15] [--batches 8]

Takes a corpus run (`train_translator.py --corpus LANG`; any run of the text recipe): its
config, tokenizer and weights, and its own first training batches (the run's seeded
pipeline, `--batches` of them, at most `max_tokens` padded tokens a side). Every figure comes
from one process, each function compiled for every batch shape before it is timed:

- **step**: the run's compiled `fit` step (`model.train_on_batch`: forward, loss, backward,
  the Adam update) over the batches, ms per batch and target tokens per second, and the
  process's CPU seconds per wall second while it runs (how many of the cores it keeps busy);
- **where the step's time goes**: the TensorFlow kernels of the step (`common.op_profile`),
  grouped by the part of the model their name scopes place them in (the vocabulary side:
  output projection, copy mixture, loss; the encoder; the decoder layers; the optimizer);
- **the library against its earlier formulations**: the step, and one decoding step of a
  beam of 4 over 64 sources (`decode_step`), with the library's copy mixture
  (`keras_attn.models.copy.copy_distribution`: the attention weights scattered into the
  vocabulary) and loss (`keras_attn.losses.masked_sequence_loss`: the gradient through an
  element-wise selection of the target) against the same two written as before
  (`one_hot_copy_distribution`: a product with the one-hot `[B, S, V]` of the source ids;
  `gathered_sequence_loss`: the gradient through a gather, which scatters into `[B, T, V]`).
  Ratio = earlier time / library time, median over interleaved rounds.

Writes the section `train-step-profile` of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

SECTION = "train-step-profile"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_RUN = os.path.join("runs", "quality", "corpus-es-15")

# The parts of a step, by the name scopes of its kernels (lower-cased; first match wins; the
# gradient kernels carry the forward op's scopes).
PARTS = (
    ("copy mixture", ("/copy",)),
    ("loss", ("compile_loss", "masked_sequence")),
    ("encoder", ("/encoder",)),
    ("decoder", ("/decoder",)),
    ("output projection", ("tensordot", "logits")),
    ("optimizer (Adam, clipping)", ("adam", "clip_by", "resourceapply", "assignvariable")),
    ("accuracy metric", ("argmax", "masked_accuracy")),
)
LIBRARY, EARLIER = "library", "earlier formulations"


def one_hot_copy_distribution(vocab_probs, p_gen, attention, source_ids):
    """The copy mixture as a product with the one-hot source ids (the comparison row): the same
    `P = p_gen * vocab_probs + (1 - p_gen) * copied` as `copy_distribution`."""
    from keras import ops

    vocab_probs = ops.cast(vocab_probs, "float32")
    one_step = len(attention.shape) == 2
    attention = ops.cast(attention, "float32")
    if one_step:
        attention = ops.expand_dims(attention, 1)
    ids = ops.cast(source_ids, "int32")
    real = ops.cast(ops.expand_dims(ops.not_equal(ids, 0), -1), "float32")
    copied = ops.matmul(attention, ops.one_hot(ids, vocab_probs.shape[-1]) * real)
    if one_step:
        copied = ops.squeeze(copied, 1)
    p_gen = ops.cast(p_gen, "float32")
    return p_gen * vocab_probs + (1.0 - p_gen) * copied


def gathered_sequence_loss(y_true, y_pred, mask=None, from_logits=True, label_smoothing=0.0):
    """`masked_sequence_loss` with the target's log-probability gathered, gradient included (the
    comparison row: the gather's gradient scatters into `[B, T, V]`)."""
    from keras import ops

    y_pred = ops.cast(y_pred, "float32")
    keep = ops.cast(mask, "bool")
    y_pred = ops.where(ops.expand_dims(keep, -1), y_pred, 1.0)
    log_p = ops.log_softmax(y_pred, axis=-1)
    ids = ops.expand_dims(ops.cast(y_true, "int32"), -1)
    nll = -ops.squeeze(ops.take_along_axis(log_p, ids, axis=-1), -1)
    nll = (1.0 - label_smoothing) * nll - label_smoothing * ops.mean(log_p, axis=-1)
    m = ops.cast(keep, "float32")
    return ops.sum(ops.where(keep, nll, 0.0)) / ops.maximum(ops.sum(m), 1.0)


def run_batches(run_dir, tokenizer, config, count):
    """The run's first `count` training batches, as NumPy `(inputs, target_out)`."""
    from keras_attn.train.batching import token_batches

    stream = token_batches(
        os.path.join(run_dir, "data", "train.tsv"),
        tokenizer,
        max_tokens=config.max_tokens,
        max_length=config.max_seq,
        seed=config.seed,
    )
    out = []
    for inputs, target in stream.take(count):
        out.append(({k: v.numpy() for k, v in inputs.items()}, target.numpy()))
    return out


def part_of(name):
    name = name.lower()
    for part, keys in PARTS:
        if any(k in name for k in keys):
            return part
    return "other"


def patched(fn, variant):
    """`fn` run with the variant's copy mixture and loss (module functions, looked up when the
    step is traced): the library's own, or the earlier formulations above."""
    import keras_attn.losses as losses_module
    import keras_attn.models.copy as copy_module

    swaps = []
    if variant == EARLIER:
        swaps = [
            (copy_module, "copy_distribution", one_hot_copy_distribution),
            (losses_module, "masked_sequence_loss", gathered_sequence_loss),
        ]

    def call():
        saved = [(module, name, getattr(module, name)) for module, name, _ in swaps]
        for module, name, value in swaps:
            setattr(module, name, value)
        try:
            return fn()
        finally:
            for module, name, value in saved:
                setattr(module, name, value)

    return call


def run(run_dir, count, repeats):
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_attn.train.export import run_model

    config, _, tokenizer, _, _ = run_model(run_dir)
    batches = run_batches(run_dir, tokenizer, config, count)
    tokens = sum(int((t != 0).sum()) for _, t in batches)
    padded = sum(int(t.size) for _, t in batches)
    # One model with the run's weights per variant, each traced with its own formulations.
    models = {variant: run_model(run_dir)[1] for variant in (LIBRARY, EARLIER)}

    def step_fn(model):
        def step():
            out = None
            for inputs, target in batches:
                out = model.train_on_batch(inputs, target)
            return out

        return step

    fns = {v: patched(step_fn(m), v) for v, m in models.items()}
    seconds = common.interleaved(fns, repeats=repeats, warmup=2)
    cores = {}
    for variant, fn in fns.items():
        cpu0, wall0 = time.process_time(), time.perf_counter()
        fn()
        cores[variant] = (time.process_time() - cpu0) / (time.perf_counter() - wall0)

    # The decoding step: a beam of 4 over 64 sources of the first batch's length.
    source = batches[0][0]["source"][:64]
    ids = np.full([source.shape[0] * 4], tokenizer.start_id, np.int32)
    decode = {}
    for variant, model in models.items():
        state = model.initial_decode_state(model.encode(source), 32)
        tiled = keras.tree.map_structure(lambda x: np.repeat(np.asarray(x), 4, axis=0), state)
        step = tf.function(lambda t, s, m=model: m.decode_step(t, s, 3)[0])
        decode[variant] = patched(lambda f=step, s=tiled: f(ids, s), variant)
    decode_seconds = common.interleaved(decode, repeats=max(repeats, 5) * 4, warmup=2)

    parts, top = {}, {}
    for variant, fn in fns.items():
        profile = common.op_profile(fn, calls=2, by_name=True)
        for name, ms in profile.items():
            key = (variant, part_of(name))
            parts[key] = parts.get(key, 0.0) + ms / 2 / count
        top[variant] = sorted(profile.items(), key=lambda kv: -kv[1])[:25]
    return {
        "batches": count,
        "tokens": tokens,
        "padded": padded,
        "step_ms": {k: 1000 * v / count for k, v in seconds.items()},
        "tokens_per_s": {k: tokens / v for k, v in seconds.items()},
        "cores_busy": cores,
        "decode_ms": {k: 1000 * v for k, v in decode_seconds.items()},
        "decode_batch": int(source.shape[0]) * 4,
        "source_length": int(source.shape[1]),
        "parts_ms": parts,
        "top_ms": {v: [(k, ms / 2 / count) for k, ms in t] for v, t in top.items()},
        "vocab": tokenizer.vocab_size,
        "model": dict(d_model=config.units, layers=config.layers, heads=config.heads),
    }


def markdown(run_dir, r):
    step, dec, cores = r["step_ms"], r["decode_ms"], r["cores_busy"]
    names = [p for p, _ in PARTS] + ["other"]
    parts = {v: {p: r["parts_ms"].get((v, p), 0.0) for p in names} for v in (LIBRARY, EARLIER)}
    totals = {v: sum(parts[v].values()) for v in parts}
    rows = [
        [
            p,
            f"{parts[LIBRARY][p]:.0f} ({100 * parts[LIBRARY][p] / totals[LIBRARY]:.0f}%)",
            f"{parts[EARLIER][p]:.0f} ({100 * parts[EARLIER][p] / totals[EARLIER]:.0f}%)",
        ]
        for p in sorted(names, key=lambda p: -parts[LIBRARY][p])
    ]
    lines = [
        "### One training step of the corpus translator (CPU)",
        "",
        f"`python -m benchmarks.train_step_profile --run {run_dir}`: the run's first "
        f"{r['batches']} training batches ({r['tokens']} target tokens, {r['padded']} "
        f"positions with padding), d_model {r['model']['d_model']}, "
        f"{r['model']['layers']}+{r['model']['layers']} layers, vocabulary {r['vocab']}, "
        f"copy attention; {common.cpu_model()}. Earlier formulations: the copy mixture as a "
        "product with the one-hot source ids, the loss's gradient through a gather.",
        "",
        common.table(
            ["", LIBRARY, EARLIER, "ratio"],
            [
                [
                    "train step, ms per batch",
                    common.fmt(step[LIBRARY], 0),
                    common.fmt(step[EARLIER], 0),
                    f"{step[EARLIER] / step[LIBRARY]:.2f}x",
                ],
                [
                    "target tokens / s",
                    f"{r['tokens_per_s'][LIBRARY]:.0f}",
                    f"{r['tokens_per_s'][EARLIER]:.0f}",
                    "",
                ],
                [
                    "cores busy during the step",
                    f"{cores[LIBRARY]:.2f}",
                    f"{cores[EARLIER]:.2f}",
                    "",
                ],
                [
                    f"decode_step, beam 4 x {r['decode_batch'] // 4} sources of "
                    f"{r['source_length']} tokens, ms",
                    common.fmt(dec[LIBRARY]),
                    common.fmt(dec[EARLIER]),
                    f"{dec[EARLIER] / dec[LIBRARY]:.2f}x",
                ],
            ],
        ),
        "",
        "Kernel time per batch by part of the model, ms (share of the summed kernel time; "
        "kernels run side by side on the cores, so the sums exceed the step's wall time):",
        "",
        common.table(["part of the model", LIBRARY, EARLIER], rows),
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default=DEFAULT_RUN, help="a corpus run's directory")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    result = run(args.run, args.batches, args.repeats)
    text = markdown(args.run.replace(os.sep, "/"), result)
    print(text)
    for variant, top in result["top_ms"].items():
        print(variant)
        for name, ms in top:
            print(f"{ms:8.1f} ms  {part_of(name):28s} {name}")
    if not args.no_write:
        common.write_section(SECTION, text)


if __name__ == "__main__":
    main()
