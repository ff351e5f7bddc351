"""Training throughput of our Transformer translator against the KerasHub recipe, in tokens/s.

The recipe Keras users copy for a Transformer translator is keras.io's "English-to-Spanish
translation with KerasHub": `keras_hub.layers.TokenAndPositionEmbedding`, one
`TransformerEncoder` and one `TransformerDecoder` (d_model 256, 8 heads, FFN 2048), a
WordPiece vocabulary, every batch padded to a fixed sequence length (40), batch 64. Both
sides here train on the same corpus (English -> Spanish pairs from the installed packages'
gettext catalogues: the training split `make corpora` builds), tokenized once by the
same KerasHub WordPiece tokenizers so that both see the same token ids:

- **KerasHub recipe**: the functional model of the recipe (embeddings with `mask_zero=True`,
  dropout 0.1 in both layers), fixed-length batches of 64 pairs.
- **keras_attn**: `keras_attn.models.Transformer` of the same size (1 + 1 layers, learned
  positions, dropout 0.1), batches by **token count** with length bucketing
  (`bucketed_batches` here: lengths rounded up to a multiple of 8, at most
  `64 * 40` padded tokens per side and batch), so the same padded-token budget per step holds
  fewer padding positions.

Throughput = source + target tokens of the epoch, padding excluded, per second of one
`fit` epoch over the same pairs (the epoch before the timed ones compiles every shape).
Each side with `jit_compile=False` (a `tf.function` per step: "eager fit" in Keras' words is
not the default; the default graph mode is what users run) and `jit_compile=True`, idle and
with one core busy (`common.measure_idle_and_loaded`). Ratio = ours / KerasHub tokens/s,
median over interleaved rounds. Target >= 1.5x. A last column, for information, runs
ours on the recipe's fixed-length batches: what the layers give without the bucketing.

    .venv/bin/python benchmarks/train_throughput.py [--repeats 3] [--pairs 2000]
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

CFG = dict(batch=64, length=40, d_model=256, heads=8, ffn=2048, dropout=0.1, vocab=8000)
OURS, HUB = "keras_attn", "keras_hub"
# Ours on the recipe's fixed-length batches, for information: what the layers alone give.
OURS_FIXED = "keras_attn, fixed batches"
TITLE = "### Training throughput: Transformer translator vs the KerasHub recipe"


def corpus(n_pairs, seed=0):
    """`n_pairs` English -> Spanish catalogue pairs (a seeded sample): the training split of
    the corpus `make corpora` builds, or the installed packages' catalogues where it is not
    built; an error saying how to build it where neither holds enough."""
    from keras_attn.data import catalogue_pairs, load_tsv
    from keras_attn.data.corpora import built_dir

    path = os.path.join(built_dir("es"), "train.tsv")
    if os.path.exists(path):
        pairs, _ = load_tsv(path, max_length=200)
    else:
        pairs, _ = catalogue_pairs("es", max_length=200)
    if len(pairs) < n_pairs:
        raise RuntimeError(
            f"{len(pairs)} English -> Spanish catalogue pairs found, {n_pairs} needed: "
            "run `make corpora`."
        )
    order = np.random.default_rng(seed).permutation(len(pairs))[:n_pairs]
    return [pairs[i] for i in order]


def tokenize(pairs):
    """Source and target id lists (no padding) from two KerasHub WordPiece tokenizers trained
    on the pairs, as the recipe does; the target gains start and end tokens."""
    import keras_hub
    import tensorflow as tf

    reserved = ["[PAD]", "[UNK]", "[START]", "[END]"]
    ids = []
    for side in (0, 1):
        texts = tf.data.Dataset.from_tensor_slices([p[side] for p in pairs])
        vocab = keras_hub.tokenizers.compute_word_piece_vocabulary(
            texts, vocabulary_size=CFG["vocab"], lowercase=side == 0, reserved_tokens=reserved
        )
        tok = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocab, lowercase=side == 0)
        out = tok([p[side] for p in pairs])
        rows = [[int(i) for i in r] for r in (out.to_list() if hasattr(out, "to_list") else out)]
        if side == 1:
            start, end = tok.token_to_id("[START]"), tok.token_to_id("[END]")
            rows = [[start] + r + [end] for r in rows]
        ids.append((rows, len(vocab)))
    return ids


def _pad(rows, length):
    out = np.zeros((len(rows), length), np.int32)
    for i, r in enumerate(rows):
        r = r[:length]
        out[i, : len(r)] = r
    return out


def fixed_batches(src, tgt):
    """The recipe's batches: every pair truncated/padded to 40 source and 41 target tokens."""
    b, n = CFG["batch"], CFG["length"]
    out = []
    for i in range(0, len(src) - b + 1, b):
        s, t = _pad(src[i : i + b], n), _pad(tgt[i : i + b], n + 1)
        out.append((s, t[:, :-1], t[:, 1:]))
    return out


def bucketed_batches(src, tgt, multiple=8):
    """Batches by token count: pairs sorted by length, each batch padded to its longest pair
    (rounded up to `multiple`) and holding at most `64 * 40` padded tokens per side. Same
    truncation as the recipe."""
    n, budget = CFG["length"], CFG["batch"] * CFG["length"]
    src = [r[:n] for r in src]
    tgt = [r[: n + 1] for r in tgt]
    order = sorted(range(len(src)), key=lambda i: (max(len(src[i]), len(tgt[i]) - 1), i))
    out, group, width = [], [], 0

    def flush():
        if group:
            w = -(-width // multiple) * multiple
            s = _pad([src[i] for i in group], w)
            t = _pad([tgt[i] for i in group], w + 1)
            out.append((s, t[:, :-1], t[:, 1:]))

    for i in order:
        w = max(width, len(src[i]), len(tgt[i]) - 1)
        if group and (len(group) + 1) * (-(-w // multiple) * multiple) > budget:
            flush()
            group, w = [], max(len(src[i]), len(tgt[i]) - 1)
        group.append(i)
        width = w
    flush()
    return out


def real_tokens(batches):
    return int(sum(np.count_nonzero(s) + np.count_nonzero(y) for s, _, y in batches))


def hub_model(src_vocab, tgt_vocab):
    import keras_hub

    d, heads, ffn, rate = CFG["d_model"], CFG["heads"], CFG["ffn"], CFG["dropout"]
    n = CFG["length"]
    enc_in = keras.Input((None,), dtype="int32", name="source")
    x = keras_hub.layers.TokenAndPositionEmbedding(src_vocab, n, d, mask_zero=True)(enc_in)
    memory = keras_hub.layers.TransformerEncoder(ffn, heads, dropout=rate)(x)
    dec_in = keras.Input((None,), dtype="int32", name="target_in")
    y = keras_hub.layers.TokenAndPositionEmbedding(tgt_vocab, n, d, mask_zero=True)(dec_in)
    y = keras_hub.layers.TransformerDecoder(ffn, heads, dropout=rate)(y, memory)
    logits = keras.layers.Dense(tgt_vocab)(y)
    return keras.Model({"source": enc_in, "target_in": dec_in}, logits)


def ours_model(src_vocab, tgt_vocab):
    from keras_attn.models import Transformer

    return Transformer(
        src_vocab,
        tgt_vocab,
        num_layers=1,
        d_model=CFG["d_model"],
        num_heads=CFG["heads"],
        intermediate_dim=CFG["ffn"],
        dropout=CFG["dropout"],
        positions="learned",
        max_length=CFG["length"] + 1,
    )


def epoch_fn(model, batches, jit):
    """A zero-argument function running one `fit` epoch over `batches` (compiled on first call)."""
    import tensorflow as tf

    from keras_attn.models import MaskedSequenceLoss

    model.compile(
        keras.optimizers.Adam(1e-4), MaskedSequenceLoss(), jit_compile=jit, steps_per_execution=1
    )

    def gen():
        for s, ti, to in batches:
            yield {"source": s, "target_in": ti}, to

    spec = (
        {
            "source": tf.TensorSpec((None, None), tf.int32),
            "target_in": tf.TensorSpec((None, None), tf.int32),
        },
        tf.TensorSpec((None, None), tf.int32),
    )
    data = tf.data.Dataset.from_generator(gen, output_signature=spec).prefetch(2)

    def epoch():
        model.fit(data, epochs=1, verbose=0)

    return epoch


def run(repeats=3, n_pairs=2000):
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        return f"{TITLE}\n\n(keras-hub not installed: `make bench` installs it.)", {}
    import warnings

    # the recipe's own warnings (a mask handed to EinsumDense) and the generator's end of data
    warnings.filterwarnings("ignore", category=UserWarning)
    keras.utils.set_random_seed(0)
    pairs = corpus(n_pairs)
    (src, src_vocab), (tgt, tgt_vocab) = tokenize(pairs)
    fixed = fixed_batches(src, tgt)
    used = len(fixed) * CFG["batch"]  # both sides train on the same pairs
    bucketed = bucketed_batches(src[:used], tgt[:used])
    tokens = {HUB: real_tokens(fixed), OURS: real_tokens(bucketed)}
    padded = {
        HUB: sum(s.size + y.size for s, _, y in fixed),
        OURS: sum(s.size + y.size for s, _, y in bucketed),
    }
    pairs_by_mode = {}
    for jit in (False, True):
        name = "fit, jit_compile=True" if jit else "fit, tf.function (default)"
        pairs_by_mode[name] = {
            HUB: epoch_fn(hub_model(src_vocab, tgt_vocab), fixed, jit),
            OURS: epoch_fn(ours_model(src_vocab, tgt_vocab), bucketed, jit),
            OURS_FIXED: epoch_fn(ours_model(src_vocab, tgt_vocab), fixed, jit),
        }
    for fns in pairs_by_mode.values():  # compile every shape before timing
        for fn in fns.values():
            fn()
    results, loads = common.measure_idle_and_loaded(pairs_by_mode, repeats, reference=HUB)
    rows, checks = [], {}
    for name, by_load in results.items():
        for load, (times, ratios) in by_load.items():
            # ratio of tokens/s = (tokens_ours / t_ours) / (tokens_hub / t_hub)
            ratio = ratios[OURS] * tokens[OURS] / tokens[HUB]
            fixed_tps = tokens[HUB] / times[OURS_FIXED]
            rows.append(
                (
                    name,
                    load,
                    f"{tokens[HUB] / times[HUB]:.0f}",
                    f"{tokens[OURS] / times[OURS]:.0f}",
                    f"**{ratio:.2f}x**",
                    f"{fixed_tps:.0f} ({ratios[OURS_FIXED]:.2f}x)",
                )
            )
            checks[f"training tokens/s vs KerasHub recipe, {name}, {load} (>= 1.5x)"] = ratio >= 1.5
    text = "\n".join(
        [
            TITLE,
            "",
            f"{used} English -> Spanish catalogue pairs, WordPiece ({src_vocab} / {tgt_vocab} "
            f"ids), d_model {CFG['d_model']}, {CFG['heads']} heads, FFN {CFG['ffn']}, 1 + 1 "
            f"layers, dropout {CFG['dropout']}. Real tokens per epoch: {tokens[HUB]} "
            f"(both sides); padded positions computed per epoch: KerasHub recipe "
            f"{padded[HUB]} ({len(fixed)} batches of {CFG['batch']}), keras_attn "
            f"{padded[OURS]} ({len(bucketed)} token-count batches). Load average at the end "
            f"of each half: {loads}.",
            "",
            common.table(
                [
                    "mode",
                    "load",
                    "KerasHub tokens/s",
                    "keras_attn tokens/s",
                    "ratio",
                    "keras_attn on the recipe's fixed batches",
                ],
                rows,
            ),
        ]
    )
    return text, checks


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=2000)
    args = parser.parse_args()
    text, checks = run(args.repeats, args.pairs)
    print(text)
    for k, v in checks.items():
        print(("MET   " if v else "MISSED") + " " + k)
