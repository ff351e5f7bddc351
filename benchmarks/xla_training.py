"""One training step with `jit_compile=True` vs without.

Two copies of each model with the same initial weights, compiled with Adam and the masked
sequence loss, one with `jit_compile=True` and one with `jit_compile=False`; a step is
`model.train_on_batch` on a fixed batch (the first calls trace and compile, then interleaved
medians). Speed-up = non-XLA time / XLA time (the XLA path must not be slower: >= 1.0).

The two models are configured as `examples/train_translator.py` trains them on dates (its defaults):
- the dates RNN translator: `RNNSeq2Seq` (embedding 32, LSTM 64, Bahdanau attention) on
  `make_dates` pairs, character ids, batch 64;
- the Transformer: `Transformer` (2 layers, d_model 64, 4 heads, FFN 128, shared embeddings)
  on the same data;
- and the Transformer of item 3 (4 layers, d_model 256, 8 heads, FFN 1024, dropout 0.1).

    .venv/bin/python benchmarks/xla_training.py
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

BATCH = 64


def dates_batch():
    import numpy as np

    from keras_attn.data.dates import make_dates
    from keras_attn.models import teacher_forcing
    from keras_attn.text import CharTokenizer

    pairs = make_dates(BATCH, seed=3)
    tokenizer = CharTokenizer.build([s for s, _ in pairs] + [t for _, t in pairs] + ["0123456789-"])
    source = tokenizer.tokenize_padded([s for s, _ in pairs]).numpy().astype("int32")
    target = tokenizer.tokenize_padded([t for _, t in pairs], add_start=True, add_end=True).numpy()
    target_in, target_out = teacher_forcing(np.asarray(target, "int32"))
    return (
        tokenizer.vocab_size,
        {"source": source, "target_in": np.asarray(target_in)},
        np.asarray(target_out),
    )


def make_models(kind, vocab):
    import keras

    from keras_attn.models import MaskedSequenceLoss, RNNSeq2Seq, Transformer

    models = {}
    weights = None
    for jit in (False, True):
        keras.utils.set_random_seed(0)
        if kind == "rnn":
            model = RNNSeq2Seq(
                vocab, vocab, embedding_dim=32, units=64, cell="lstm", attention="bahdanau"
            )
        elif kind == "transformer":
            model = Transformer(
                vocab,
                vocab,
                num_layers=2,
                d_model=64,
                num_heads=4,
                intermediate_dim=128,
                dropout=0.0,
                share_embeddings=True,
            )
        else:  # the size of item 3
            model = Transformer(
                vocab,
                vocab,
                num_layers=4,
                d_model=256,
                num_heads=8,
                intermediate_dim=1024,
                dropout=0.1,
                activation_dropout=0.1,  # as when its RESULTS.md rows were measured
            )
        model.build()
        if weights is None:
            weights = model.get_weights()
        else:
            model.set_weights(weights)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3), loss=MaskedSequenceLoss(), jit_compile=jit
        )
        models[jit] = model
    return models


def component_profile(repeats):
    """XLA vs not, forward+backward of the Transformer's parts alone at the 4x256 size
    ([64, 29, 256] inputs): where the XLA step loses or wins."""
    import keras
    import tensorflow as tf

    from keras_attn.layers import MultiHeadAttention

    keras.utils.set_random_seed(0)
    h = tf.random.normal([BATCH, 29, 256])
    feed_forward = keras.Sequential(
        [keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(256)]
    )
    attention = MultiHeadAttention(8, 32)
    norm = keras.layers.LayerNormalization()
    parts = {
        "feed-forward (Dense 256-1024-256)": (feed_forward, lambda: feed_forward(h)),
        "MultiHeadAttention (8 x 32)": (attention, lambda: attention(h)),
        "LayerNormalization": (norm, lambda: norm(h)),
    }
    rows = []
    for name, (layer, call) in parts.items():
        call()

        def grads(layer=layer, call=call):
            with tf.GradientTape() as tape:
                tape.watch(h)
                loss = tf.reduce_sum(call())
            return tape.gradient(loss, [h] + layer.trainable_variables)

        fns = {jit: tf.function(grads, jit_compile=jit) for jit in (False, True)}
        times, samples = common.interleaved(
            fns, repeats=repeats, warmup=2, min_time=0.2, return_samples=True
        )
        rows.append(
            (
                name,
                f"{times[False] * 1e3:.1f}",
                f"{times[True] * 1e3:.1f}",
                f"{common.paired_ratio(samples, False, True):.2f}x",
            )
        )
    return rows


def dropout_profile(repeats):
    """Dropout alone, XLA vs not: Keras' `Dropout` (TensorFlow's `auto_select` generator) and
    ours (`keras_attn.layers.rng.Dropout`), on the feed-forward's hidden activations of the
    4x256 model ([64, 29, 1024]), training mode."""
    import keras
    import tensorflow as tf

    from keras_attn.layers import rng

    h = tf.random.normal([BATCH, 29, 1024])
    layers = {
        "keras.layers.Dropout(0.1)": keras.layers.Dropout(0.1, seed=1),
        "keras_attn.layers.rng.Dropout(0.1)": rng.Dropout(0.1, seed=1),
    }
    fns = {}
    for name, layer in layers.items():
        for jit in (False, True):
            fns[(name, jit)] = tf.function(
                lambda layer=layer: layer(h, training=True), jit_compile=jit
            )
    times, samples = common.interleaved(
        fns, repeats=repeats, warmup=2, min_time=0.2, return_samples=True
    )
    return [
        (
            name,
            f"{times[(name, False)] * 1e3:.2f}",
            f"{times[(name, True)] * 1e3:.2f}",
            f"{common.paired_ratio(samples, (name, False), (name, True)):.2f}x",
        )
        for name in layers
    ]


def run(repeats=7):
    vocab, x, y = dates_batch()
    rows, checks = [], {}
    names = {
        "rnn": "dates RNN translator (RNNSeq2Seq, LSTM 64, Bahdanau)",
        "transformer": "dates Transformer (2 layers, d_model 64, 4 heads)",
        "transformer-4x256": "Transformer (4 layers, d_model 256, 8 heads, FFN 1024, dropout 0.1)",
    }
    for kind in names:
        models = make_models(kind, vocab)
        times, samples = common.interleaved(
            {jit: (lambda m: lambda: m.train_on_batch(x, y))(m) for jit, m in models.items()},
            repeats=repeats,
            warmup=2,
            min_time=0.3,
            return_samples=True,
        )
        speedup = common.paired_ratio(samples, False, True)
        checks[f"XLA training step not slower, {names[kind]} (>= 1.0x)"] = speedup >= 1.0
        rows.append(
            (
                names[kind],
                f"{times[False] * 1e3:.0f}",
                f"{times[True] * 1e3:.0f}",
                f"{speedup:.2f}x",
            )
        )
    text = (
        "### 5. XLA: one training step, `jit_compile=True` vs `False`\n\n"
        f"`train_on_batch` on a batch of {BATCH} `make_dates` pairs (character ids, source "
        f"{x['source'].shape[1]}, target {x['target_in'].shape[1]}), Adam; same initial weights; "
        f"median of {repeats} interleaved rounds after the compile.\n\n"
        + common.table(["model", "no XLA ms/step", "XLA ms/step", "speed-up"], rows)
        + "\n\nWhat made the 4x256 Transformer's XLA step slower than the plain one (0.87x) "
        "until keras_attn drew its own random numbers: Keras' dropout under XLA on a CPU. "
        "Dropout alone, same method:\n\n"
        + common.table(["layer", "no XLA ms", "XLA ms", "speed-up"], dropout_profile(repeats))
        + "\n\nKeras' TensorFlow backend draws with `tf.random.stateless_uniform` and its "
        "default `auto_select` algorithm, which XLA:CPU compiles into code about 100x slower "
        "than TensorFlow's kernel (Philox asked for by name is still about 2x slower there). "
        "keras_attn's layers and models therefore drop out with `keras_attn.layers.rng`: "
        "TensorFlow's Philox kernel outside XLA (a mask from 16 random bits per entry, half a "
        "Philox word, where the rate fits 16 bits: hence the no-XLA column's edge over Keras'), "
        "and inside an XLA compilation a keyed integer "
        "hash of each element's index that XLA fuses into the consumer (statistics checked in "
        "`tests/layers/test_rng.py`). Without dropout the step was already faster with XLA "
        "(about 1.1x): XLA fuses the element-wise work (LayerNorm, softmax, the optimizer "
        "update) while its matmuls about break even with the oneDNN kernels of the plain path."
    )
    if not all(checks.values()):
        text += (
            "\n\nProfile (forward+backward of the parts alone, XLA vs not, same method):\n\n"
            + common.table(["part", "no XLA ms", "XLA ms", "speed-up"], component_profile(repeats))
        )
    return text, checks


if __name__ == "__main__":
    common.main(run, __doc__, default_repeats=7)
