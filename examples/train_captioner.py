"""Train Show, Attend and Tell on digit strips: an image of 3-5 handwritten digits -> "3 1 4".

    python examples/train_captioner.py                    # soft attention
    python examples/train_captioner.py --attention hard   # hard attention (REINFORCE)
    python examples/train_captioner.py --resume           # continue an interrupted run

Validation after each epoch: caption exact match of greedy decoding on the validation strips, and
how often the attention's argmax lies in the box of the digit being written
(`val_attention_in_box`). At the end: test metrics (`results.json`), attention heat maps
(`attention/*.png`: caption steps on y, grid cells on x), and with `--export DIR` the SavedModel of
`keras_attn.serving.export_image_model` (images float32 [B, 16, 64, 2]: the strip and the
x-coordinate channel of `with_coords`, unless `--no-coords` -> captions "314").
"""

from __future__ import annotations

import json

import numpy as np

from keras_attn import train

FIRST_DIGIT_ID = 4  # ids 0..3: pad, start, end, unk; digit d is id 4 + d
VOCAB_SIZE = FIRST_DIGIT_ID + 10


def build_parser():
    """The script's flags."""
    p = train.base_parser(
        __doc__.splitlines()[0], epochs=30, batch_size=64, learning_rate=3e-3, out="runs/captioner"
    )
    p.add_argument("--attention", choices=("soft", "hard"), default="soft")
    p.add_argument("--n-train", type=int, default=8000)
    p.add_argument("--n-val", type=int, default=500)
    p.add_argument("--n-test", type=int, default=1000)
    p.add_argument("--embedding-dim", type=int, default=32)
    p.add_argument("--units", type=int, default=64)
    p.add_argument(
        "--penalty-weight", type=float, default=0.01, help="doubly stochastic penalty weight (soft)"
    )
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument(
        "--reinforce-weight", type=float, default=1.0, help="REINFORCE term weight (hard)"
    )
    p.add_argument("--entropy-weight", type=float, default=0.0, help="entropy bonus weight (hard)")
    p.add_argument(
        "--normalize-reward",
        action="store_true",
        help="divide the REINFORCE reward and baseline by the batch's reward std (hard)",
    )
    p.add_argument(
        "--soft-mix",
        type=float,
        default=0.5,
        help="probability that a training query uses the expected context (hard; Xu et al. use 0.5)",
    )
    p.add_argument(
        "--no-coords",
        dest="coords",
        action="store_false",
        help="do not add the x-coordinate channel (without it, small convolutions cannot tell left from "
        "right, and the attention cannot find the next digit)",
    )
    return p


def parse_args(argv=None):
    smoke = dict(n_train=128, n_val=16, n_test=16, units=16, embedding_dim=8)
    return train.parse_run_args(build_parser(), argv, smoke=smoke)


def with_coords(images):
    """Append an x-coordinate channel (0 at the left edge, 1 at the right) to `[N, H, W, 1]` images:
    the annotation vectors then know where they are, so "the next digit to the right" is learnable."""
    n, h, w, _ = images.shape
    ramp = np.broadcast_to(
        np.linspace(0.0, 1.0, w, dtype=np.float32)[None, None, :, None], (n, h, w, 1)
    )
    return np.concatenate([images, ramp], axis=-1)


def caption_arrays(strips):
    """DigitStrips -> (x {"image", "target_in"}, y): ids 4 + digit, start 1, end 2, pad 0."""
    n, k = strips.labels.shape
    tgt = np.zeros((n, k + 2), np.int32)
    tgt[:, 0] = 1
    for i in range(n):
        m = int(strips.lengths[i])
        tgt[i, 1 : m + 1] = strips.labels[i, :m] + FIRST_DIGIT_ID
        tgt[i, m + 1] = 2
    target_in = tgt[:, :-1].copy()
    target_in[target_in == 2] = 0
    return {"image": strips.images, "target_in": target_in}, tgt[:, 1:].copy()


def ids_to_caption(ids):
    out = []
    for t in ids:
        if t in (0, 2):
            break
        out.append(str(t - FIRST_DIGIT_ID) if FIRST_DIGIT_ID <= t < VOCAB_SIZE else "?")
    return " ".join(out)


def make_decoder(model, max_length):
    import tensorflow as tf

    from keras_attn.decoding import generate

    @tf.function(reduce_retracing=True)
    def decode(images):
        return generate(model, images, 1, 2, "greedy", max_length)

    return decode


def evaluate(decode, strips, grid_width, batch_size=256):
    """-> (exact match, fraction of steps whose attention argmax is in the right digit's box,
    captions, alignments)."""
    captions, aligns = [], []
    for i in range(0, len(strips), batch_size):
        out = decode(strips.images[i : i + batch_size])
        seqs, a = out["sequences"].numpy(), out["alignments"].numpy()
        captions += [ids_to_caption(s) for s in seqs]
        aligns += list(a)
    if not captions:
        return 0.0, 0.0, [], []
    exact = float(np.mean([c == r for c, r in zip(captions, strips.captions)]))
    cell = strips.images.shape[2] / grid_width  # pixels per grid column
    hits = total = 0
    for j, a in enumerate(aligns):
        for t in range(min(int(strips.lengths[j]), a.shape[0])):
            column = int(np.argmax(a[t])) % grid_width
            center = (column + 0.5) * cell
            x0, x1 = strips.boxes[j, t]
            hits += int(x0 <= center < x1)
            total += 1
    return exact, hits / max(total, 1), captions, aligns


def main(argv=None):
    import keras

    from keras_attn.data import digit_strips_splits
    from keras_attn.models import MaskedSequenceAccuracy, MaskedSequenceLoss, ShowAttendTell

    args = parse_args(argv)
    run = train.Run(args)
    splits = digit_strips_splits(args.n_train, args.n_val, args.n_test, seed=args.seed)
    if args.coords:
        for strips in splits.values():
            strips.images = with_coords(strips.images)
    channels = splits["train"].images.shape[-1]
    x, y = caption_arrays(splits["train"])
    max_length = y.shape[1] + 1
    print(f"{len(y)} training strips, attention {args.attention}, epochs {args.epochs}", flush=True)

    with run.strategy.scope():
        model = ShowAttendTell(
            VOCAB_SIZE,
            embedding_dim=args.embedding_dim,
            units=args.units,
            attention=args.attention,
            penalty_weight=args.penalty_weight,
            dropout=args.dropout,
            seed=args.seed,
            reinforce_weight=args.reinforce_weight,
            entropy_weight=args.entropy_weight,
            soft_mix_probability=args.soft_mix,
            normalize_reward=args.normalize_reward,
        )
        model.build({"image": (None, None, None, channels), "target_in": (None, None)})
        model.compile(
            optimizer=keras.optimizers.Adam(args.learning_rate, clipnorm=1.0),
            loss=MaskedSequenceLoss(),
            metrics=[MaskedSequenceAccuracy()],
            jit_compile=args.jit_compile,
        )
    run.restore(model)
    probe = model.encode(splits["train"].images[:1])["annotations"]
    grid_height = model.pool ** len(model.filters)
    grid_width = int(probe.shape[1]) // max(splits["train"].images.shape[1] // grid_height, 1)
    decode = make_decoder(model, max_length)

    def validation(_model):
        exact, in_box, _, _ = evaluate(decode, splits["val"], grid_width)
        return {"val_exact_match": exact, "val_attention_in_box": in_box}

    dataset, steps = run.batches(x, y)
    run.fit(model, dataset, steps, validation=validation)
    if not run.chief:  # multi-worker: the chief evaluates, plots and exports
        return None

    results = {
        "task": "digit strips",
        "model": f"show-attend-tell {args.attention}",
        "epochs": args.epochs,
        "train_seconds": round(run.train_seconds, 1),
    }
    for name in ("val", "test"):
        exact, in_box, _, _ = evaluate(decode, splits[name], grid_width)
        results[f"{name}_exact_match"], results[f"{name}_attention_in_box"] = exact, in_box
    print("Results: " + json.dumps(results), flush=True)
    with open(run.path("results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)

    write_heatmaps(run, splits["val"], decode, grid_width, args.heatmaps)
    if args.export:
        print(f"Exported SavedModel: {export(model, args, max_length, channels)}", flush=True)
    run.print_outputs()
    return results


def write_heatmaps(run, strips, decode, grid_width, count):
    from keras_attn.plotting import plot_attention

    count = min(count, len(strips))
    if not count:
        return []
    out = decode(strips.images[:count])
    seqs, lengths, aligns = (
        out["sequences"].numpy(),
        out["lengths"].numpy(),
        out["alignments"].numpy(),
    )
    paths = []
    for i in range(count):
        n = int(lengths[i])
        cells = aligns.shape[-1]
        labels = [f"{c // grid_width},{c % grid_width}" for c in range(cells)]
        words = [ids_to_caption([t]) or "</s>" for t in seqs[i, :n]]
        paths.append(
            plot_attention(
                aligns[i, :n],
                labels,
                words,
                run.path("attention", f"val_{i}.png"),
                title=f"truth: {strips.captions[i]}",
            )
        )
    print("Attention heat maps: " + ", ".join(paths), flush=True)
    return paths


def export(model, args, max_length, channels):
    """`keras_attn.serving.export_image_model`: signatures serving_default / beam_search / greedy
    on `images` float32 [B, 16, 64, 1]; captions come back as digit strings ("314")."""
    from keras_attn.serving import export_image_model
    from keras_attn.text import CharTokenizer

    digits = CharTokenizer([str(d) for d in range(10)])  # digit d is id 4 + d, as in training
    return export_image_model(
        model,
        digits,
        args.export,
        image_shape=(16, 64, channels),
        version=args.export_version,
        max_length=max_length,
        overwrite=True,
    )


if __name__ == "__main__":
    main()
