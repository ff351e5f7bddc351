"""Sampled softmax against the full softmax at V = 50,000 (docs/real_data.md).

    python benchmarks/sampled_softmax.py [--repeats N]     # writes its section of benchmarks/RESULTS.md

A small next-token model (`Embedding(1000, D)` -> `Dense(D, tanh)` -> output projection over
V = 50,000 ids) trains with the full softmax cross-entropy or with
`keras_attn.losses.sampled_softmax_loss` (1,024 log-uniform candidates) on the same weights.
1. Train-step time (`tf.function`, Adam, one batch of 256 positions): full / sampled, median of
   interleaved rounds.
2. The loss reaching the same level: the full softmax trains 150 steps, the sampled one on the
   same batch stream until its held-out loss reaches the full one's (each of 1,000 contexts has
   one Zipf-distributed answer, drawn 90% of the time; else a random Zipf id), both scored with
   the FULL softmax cross-entropy, as inference and export compute it; training time compared
   as steps x measured time per step.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

VOCAB = 50_000
CONTEXTS = 1_000
DIM = 128
BATCH = 256
SAMPLED = 1_024
TRAIN_STEPS = 150


def _zipf(rng, n):
    import numpy as np

    k = np.floor(np.exp(rng.uniform(size=n) * np.log(VOCAB + 1.0))) - 1
    return np.minimum(k, VOCAB - 1).astype("int32")


def make_task(seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    answer = _zipf(rng, CONTEXTS)

    def batch(n, batch_rng):
        x = batch_rng.integers(0, CONTEXTS, n).astype("int32")
        noise = batch_rng.uniform(size=n) < 0.1
        y = np.where(noise, _zipf(batch_rng, n), answer[x]).astype("int32")
        return x, y

    return batch


def make_model(seed=0):
    import keras

    keras.utils.set_random_seed(seed)
    hidden = keras.Sequential(
        [keras.layers.Embedding(CONTEXTS, DIM), keras.layers.Dense(DIM, activation="tanh")]
    )
    output = keras.layers.Dense(VOCAB)
    hidden.build((None,))
    output.build((None, DIM))
    return hidden, output


def make_train_step(kind, seed=0):
    import keras
    import tensorflow as tf

    from keras_attn import losses

    hidden, output = make_model(seed)
    variables = hidden.trainable_variables + output.trainable_variables
    optimizer = keras.optimizers.Adam(3e-3)
    optimizer.build(variables)
    generator = keras.random.SeedGenerator(seed)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            h = hidden(x)
            if kind == "full":
                loss = losses.masked_sequence_loss(y, output(h))
            else:
                loss = losses.sampled_softmax_loss(
                    y, h, output.kernel, output.bias, SAMPLED, seed=generator
                )
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    @tf.function
    def full_loss(x, y):
        return losses.masked_sequence_loss(y, output(hidden(x)))

    return step, full_loss


def run(repeats=5):
    import numpy as np
    import tensorflow as tf

    task = make_task()
    steps = {kind: make_train_step(kind) for kind in ("full", "sampled")}
    x, y = (tf.constant(a) for a in task(BATCH, np.random.default_rng(1)))
    fns = {kind: (lambda s=s: s[0](x, y)) for kind, s in steps.items()}
    times, samples = common.interleaved(fns, repeats=repeats, warmup=2, return_samples=True)
    speedup = common.paired_ratio(samples, "full", "sampled")

    # The full softmax trains TRAIN_STEPS steps; the sampled one trains on the same stream of
    # batches until its held-out full-softmax loss reaches the full one's final loss (+0.05),
    # at most 4 * TRAIN_STEPS steps. Cost to reach = steps * ms per step measured above.
    fresh = {kind: make_train_step(kind, seed=2) for kind in ("full", "sampled")}
    train_rng = np.random.default_rng(3)
    batches = [task(BATCH, train_rng) for _ in range(4 * TRAIN_STEPS)]
    held_out = [task(BATCH, np.random.default_rng(100 + i)) for i in range(8)]

    def held_out_loss(full_loss):
        return float(
            np.mean([float(full_loss(tf.constant(a), tf.constant(b))) for a, b in held_out])
        )

    curve = {kind: [] for kind in fresh}
    step, full_loss = fresh["full"]
    for i, (bx, by) in enumerate(batches[:TRAIN_STEPS], start=1):
        step(tf.constant(bx), tf.constant(by))
        if i % 50 == 0:
            curve["full"].append((i, held_out_loss(full_loss)))
    level = curve["full"][-1][1]
    step, full_loss = fresh["sampled"]
    reached = None
    for i, (bx, by) in enumerate(batches, start=1):
        step(tf.constant(bx), tf.constant(by))
        if i % 50 == 0:
            curve["sampled"].append((i, held_out_loss(full_loss)))
            if curve["sampled"][-1][1] <= level + 0.05:
                reached = i
                break
    final = {kind: c[-1][1] for kind, c in curve.items()}
    cost = {
        "full": TRAIN_STEPS * times["full"],
        "sampled": (reached or 4 * TRAIN_STEPS) * times["sampled"],
    }
    checks = {
        f"sampled softmax train step at V={VOCAB:,} >= 3x faster than the full softmax": speedup
        >= 3.0,
        "sampled softmax reaches the full softmax's held-out loss (+0.05) in less training time": (
            reached is not None and cost["sampled"] < cost["full"]
        ),
    }
    rows = [
        [
            "full softmax",
            f"{times['full'] * 1e3:.1f}",
            "1.00x",
            str(TRAIN_STEPS),
            f"{final['full']:.3f}",
            f"{cost['full']:.1f}",
        ],
        [
            f"sampled softmax ({SAMPLED} candidates)",
            f"{times['sampled'] * 1e3:.1f}",
            f"{speedup:.2f}x",
            str(reached or f"> {4 * TRAIN_STEPS}"),
            f"{final['sampled']:.3f}",
            f"{cost['sampled']:.1f}",
        ],
    ]
    headers = [
        "training loss",
        "ms / train step",
        "speed-up",
        "steps",
        "held-out CE",
        "training s (steps x ms)",
    ]
    curves = "; ".join(
        f"{kind}: " + ", ".join(f"{v:.3f} @ {i}" for i, v in c) for kind, c in curve.items()
    )
    text = (
        "### Sampled softmax at V = 50,000\n\n"
        f"`Embedding({CONTEXTS}, {DIM})` -> `Dense({DIM}, tanh)` -> output projection over V = {VOCAB:,}, batch "
        f"{BATCH}, Adam, one `tf.function` train step each (no XLA), median of {repeats} interleaved rounds. "
        "Held-out loss: the full softmax cross-entropy (what inference and export compute) on 8 held-out "
        f"batches. The full softmax trains {TRAIN_STEPS} steps; the sampled one trains on the same stream of "
        "batches until it reaches the full one's final held-out loss (+0.05). Task: each of "
        f"{CONTEXTS} contexts has one Zipf-distributed answer, drawn 90% of the time (else a random Zipf id).\n\n"
        + common.table(headers, rows)
        + f"\n\nHeld-out loss curves: {curves}.\n\nSampled softmax train step **{speedup:.2f}x** faster "
        f"(target >= 3x); it reaches the full softmax's loss {final['full']:.3f} after {reached or 'more than ' + str(4 * TRAIN_STEPS)} "
        f"steps, {cost['sampled']:.1f} s of training against {cost['full']:.1f} s."
    )
    return text, checks


def main():
    """Run, print, and write the `sampled_softmax` section of benchmarks/RESULTS.md."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    text, checks = run(args.repeats)
    text += "\n\n" + common.table(
        ["target", "result"], [(k, "met" if v else "**missed**") for k, v in checks.items()]
    )
    text += "\n\nMachine:\n\n" + common.machine_markdown(common.machine_info())
    text += f"\n\nCommand: `python benchmarks/sampled_softmax.py --repeats {args.repeats}`"
    print(text)
    common.write_section("sampled_softmax", text)


if __name__ == "__main__":
    main()
