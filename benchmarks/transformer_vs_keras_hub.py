"""Our Transformer layers and cached decoding against KerasHub's, same shapes and weights.

KerasHub is the library a Keras user would otherwise pick for Transformer blocks. Both sides
run on the TensorFlow backend, float32, CPU, each timed thing one `tf.function` (no XLA):

1. Training step (forward + backward + Adam apply): our `TransformerEncoderLayer` vs
   `keras_hub.layers.TransformerEncoder`, and our `TransformerDecoderLayer` (self- and
   cross-attention) vs `keras_hub.layers.TransformerDecoder` called with an
   `encoder_sequence`. Batch 32, 64 positions (decoder and encoder), d_model 256, 8 heads,
   FFN 1024, ReLU, post-norm, LayerNorm epsilon 1e-5, dropout 0.1, a padding mask on every
   sequence. KerasHub's weights are copied into ours, so the two compute the same function,
   dropout placed alike (attention weights, each sublayer's output: ours by default, the
   original paper's placement, docs/layers.md). A third row, for information, times ours with
   `activation_dropout=0.1` (the FFN's hidden activations dropped too, as PyTorch does; KerasHub
   has no such dropout).
2. Cached generation, decoder-only on both sides (no cross-attention): a stack of decoder
   layers (same weights) between one shared token embedding + sinusoidal positions and one
   shared output projection; batch 8, a prompt of 8 tokens, 64 new tokens (no end token, so
   every search runs all 64 steps). The prompt's first 7 tokens are written into the caches
   by one chunked call of the stack (both libraries' layers take a chunk at a cache index),
   then each step feeds one token. Ours: `keras_attn.decoding.greedy_search` / `beam_search`
   over `transformer_step(cached=True)`'s step; KerasHub: `GreedySampler` / `BeamSampler`
   over a `next` function built as `GPT2CausalLM.call_with_cache` builds it (one
   `[B, layers, 2, length, heads, head_dim]` cache tensor, each layer called with
   `self_attention_cache` / `self_attention_cache_update_index`).
3. Each pair idle, then under load: a second process multiplying 256 x 256 matrices with
   NumPy (one thread) for the whole of the timed rounds, started and stopped here. The load
   average is read before each half. Ratio = KerasHub's time / ours within each round, median
   over the rounds (`benchmarks.common`); target >= 1.0x on each row.

    .venv/bin/python benchmarks/transformer_vs_keras_hub.py [--repeats 5] [--profile]

`--profile` also prints the TensorFlow kernels of one step of each side by op type
(`common.op_profile`) and the op count of each generation loop body.
"""

from __future__ import annotations

import argparse
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common
from keras_attn.decoding import beam_search, greedy_search, transformer_step
from keras_attn.layers import PositionalEncoding, TransformerDecoderLayer, TransformerEncoderLayer

# Training shapes.
TRAIN = dict(batch=32, length=64, d_model=256, heads=8, ffn=1024, dropout=0.1)
# Generation shapes.
GEN = dict(batch=8, prompt=8, new=64, layers=4, d_model=256, heads=8, ffn=1024, vocab=1000, beam=4)

OURS, HUB = "keras_attn", "keras_hub"
# Ours with the FFN's hidden activations dropped too (PyTorch's placement), for information.
OURS_ACT_DROPOUT = "keras_attn, activation_dropout"


# ----------------------------------------------------------------------------- weights
def _canonical(path):
    """A KerasHub or keras_attn weight path without the layer's own name, in our spelling."""
    rest = path.split("/", 1)[1]
    rest = rest.replace("self_attention_layer/", "self_attention/")
    rest = rest.replace("feedforward_layer_norm", "feed_forward_layer_norm")
    return rest.replace("feedforward_", "feed_forward/")


def copy_weights(source, target):
    """Copy every weight of a KerasHub layer into the matching weight of ours (by role)."""
    theirs = {_canonical(w.path): w for w in source.weights}
    ours = {_canonical(w.path): w for w in target.weights}
    if set(theirs) != set(ours):
        raise ValueError(f"weights differ: {sorted(set(theirs) ^ set(ours))}")
    for name, w in ours.items():
        if tuple(w.shape) != tuple(theirs[name].shape):
            raise ValueError(f"{name}: {w.shape} vs {theirs[name].shape}")
        w.assign(theirs[name])


def _parameters(layer):
    return sum(int(np.prod(w.shape)) for w in layer.trainable_weights)


# ------------------------------------------------------------------------------ training
def training_steps(kind, cfg=None):
    """`({name: zero-argument tf.function running one training step}, info)` for the encoder
    or the decoder layer: KerasHub's, ours (same weights, same dropout placement), and ours
    with `activation_dropout` = the dropout rate too (`OURS_ACT_DROPOUT`)."""
    import keras_hub

    cfg = cfg or TRAIN
    b, t, d = cfg["batch"], cfg["length"], cfg["d_model"]
    heads, ffn, rate = cfg["heads"], cfg["ffn"], cfg["dropout"]
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((b, t, d)), tf.float32)
    target = tf.constant(rng.standard_normal((b, t, d)), tf.float32)

    def padding(length):
        return tf.constant(
            np.arange(length)[None, :] < rng.integers(length // 2, length + 1, b)[:, None]
        )

    if kind == "encoder":
        hub = keras_hub.layers.TransformerEncoder(ffn, heads, dropout=rate)
        ours = [
            TransformerEncoderLayer(heads, ffn, dropout=rate, activation_dropout=a)
            for a in (0.0, rate)
        ]
        inputs, masks = (x,), {"padding_mask": padding(t)}
    else:
        encoder = tf.constant(rng.standard_normal((b, t, d)), tf.float32)
        hub = keras_hub.layers.TransformerDecoder(ffn, heads, dropout=rate)
        ours = [
            TransformerDecoderLayer(heads, ffn, dropout=rate, activation_dropout=a)
            for a in (0.0, rate)
        ]
        inputs = (x, encoder)
        masks = {"decoder_padding_mask": padding(t), "encoder_padding_mask": padding(t)}
    shapes = [i.shape for i in inputs]
    hub.build(*shapes)
    for layer in ours:
        layer.build(*shapes)
        copy_weights(hub, layer)
    ours, twin = ours

    def call(layer, training):
        return layer(*inputs, **masks, training=training)

    # Same function (dropout off): the largest difference of the two outputs.
    gap = float(tf.reduce_max(tf.abs(call(hub, False) - call(ours, False))))

    def make(layer):
        optimizer = keras.optimizers.Adam(1e-4)
        optimizer.build(layer.trainable_variables)

        @tf.function(autograph=False)
        def train_step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(call(layer, True) - target))
            variables = layer.trainable_variables
            optimizer.apply(tape.gradient(loss, variables), variables)
            return loss

        return train_step

    fns = {OURS: make(ours), HUB: make(hub), OURS_ACT_DROPOUT: make(twin)}
    return fns, {"gap": gap, "parameters": (_parameters(ours), _parameters(hub))}


# ---------------------------------------------------------------------------- generation
class Generation:
    """A decoder-only stack in both libraries, same weights, shared embedding and output."""

    def __init__(self, cfg=None):
        import keras_hub

        self.cfg = cfg = cfg or GEN
        b, d, v = cfg["batch"], cfg["d_model"], cfg["vocab"]
        self.max_length = cfg["prompt"] + cfg["new"]
        keras.utils.set_random_seed(0)
        self.embedding = keras.layers.Embedding(v, d)
        self.embedding.build((None,))
        self.output = keras.layers.Dense(v)
        self.output.build((None, d))
        self.positions = PositionalEncoding()
        self.hub_layers, self.our_layers = [], []
        shape = (b, 2, d)
        for _ in range(cfg["layers"]):
            hub = keras_hub.layers.TransformerDecoder(cfg["ffn"], cfg["heads"])
            hub.build(shape)
            ours = TransformerDecoderLayer(cfg["heads"], cfg["ffn"], cross_attention=False)
            ours.build(shape)
            copy_weights(hub, ours)
            self.hub_layers.append(hub)
            self.our_layers.append(ours)
        rng = np.random.default_rng(1)
        self.prompt = tf.constant(rng.integers(1, v, size=(b, cfg["prompt"])), tf.int32)

    def embed(self, ids, start):
        return self.positions(self.embedding(ids), start_index=start)

    # -- ours
    def ours(self, beam_size=None):
        cfg = self.cfg
        p = cfg["prompt"]

        def search():
            step, state = transformer_step(
                self.our_layers,
                self.embedding,
                self.output,
                positional_encoding=self.positions,
                max_length=self.max_length,
                batch_size=cfg["batch"],
            )
            # The prompt's first p - 1 tokens go into the caches in one chunk.
            x = self.embed(self.prompt[:, : p - 1], 0)
            caches = []
            for layer, cache in zip(self.our_layers, state["self_cache"]):
                x, (new_cache, _) = layer(
                    x, self_attention_cache=cache, self_attention_cache_index=0
                )
                caches.append(tuple(new_cache))
            state = dict(state, self_cache=caches)

            def offset_step(tokens, state, t):  # the search's step 0 is position p - 1
                return step(tokens, state, t + (p - 1))

            start = self.prompt[:, p - 1]
            if beam_size is None:
                out = greedy_search(offset_step, state, start, -1, max_length=cfg["new"])
            else:
                out = beam_search(
                    offset_step, state, start, -1, beam_size=beam_size, max_length=cfg["new"]
                )
                out = {"sequences": out["sequences"][:, 0]}
            return tf.concat([self.prompt, out["sequences"]], axis=1)

        return tf.function(search, autograph=False)

    # -- KerasHub
    def _hub_call_with_cache(self, ids, cache, index):
        x = self.embed(ids, index)
        caches = []
        for i, layer in enumerate(self.hub_layers):
            x, next_cache = layer(
                x, self_attention_cache=cache[:, i, ...], self_attention_cache_update_index=index
            )
            caches.append(next_cache)
        return self.output(x), tf.stack(caches, axis=1)

    def hub(self, beam_size=None):
        from keras_hub.samplers import BeamSampler, GreedySampler

        cfg = self.cfg
        p, b = cfg["prompt"], cfg["batch"]
        head_dim = cfg["d_model"] // cfg["heads"]
        sampler = GreedySampler() if beam_size is None else BeamSampler(num_beams=beam_size)

        def next_fn(prompt, cache, index):
            ids = tf.slice(prompt, [0, index - 1], [tf.shape(prompt)[0], 1])
            logits, cache = self._hub_call_with_cache(ids, cache, index - 1)
            return logits[:, 0, :], None, cache

        def search():
            shape = [b, cfg["layers"], 2, self.max_length, cfg["heads"], head_dim]
            cache = tf.zeros(shape, tf.float32)
            _, cache = self._hub_call_with_cache(self.prompt[:, : p - 1], cache, 0)
            prompt = tf.concat([self.prompt, tf.zeros([b, cfg["new"]], tf.int32)], axis=1)
            return sampler(next_fn, prompt, cache=cache, index=p)

        return tf.function(search, autograph=False)


def loop_body_kernels(fn):
    """Kernels (graph nodes other than Const, Identity, NoOp) in the while-loop bodies of
    `fn`'s graph: what each generation step dispatches."""
    graph = fn.get_concrete_function().graph
    bodies = [f for name, f in graph._functions.items() if "body" in name]
    counts = collections.Counter(n.op for f in bodies for n in f.definition.node_def)
    return sum(counts.values()) - counts["Const"] - counts["Identity"] - counts["NoOp"]


# ---------------------------------------------------------------------------------- run
def run(repeats=5, profile=False):
    try:
        import keras_hub
    except ImportError:
        return (
            "### Transformer layers and cached generation vs KerasHub\n\n"
            "(keras-hub not installed: `pip install .[bench]` adds this comparison.)",
            {},
        )
    train, train_info = {}, {}
    for kind in ("encoder", "decoder"):
        train[kind], train_info[kind] = training_steps(kind)
    gen = Generation()
    k = GEN["beam"]
    decode = {
        "greedy": {OURS: gen.ours(), HUB: gen.hub()},
        f"beam K={k}": {OURS: gen.ours(k), HUB: gen.hub(k)},
    }
    # Same tokens? Greedy must agree except at near-ties of the random weights.
    same = {}
    for name, fns in decode.items():
        a, b = fns[OURS]().numpy(), fns[HUB]().numpy()
        p = GEN["prompt"]
        same[name] = 100.0 * np.mean(a[:, p:] == b[:, p:])
    pairs = {f"training step, {kind} layer": fns for kind, fns in train.items()}
    pairs.update({f"generation, {name}": fns for name, fns in decode.items()})
    results, loads = common.measure_idle_and_loaded(pairs, repeats, reference=HUB)

    rows, checks = [], {}
    for name, by_load in results.items():
        for load, (times, ratios) in by_load.items():
            twin = ratios.get(OURS_ACT_DROPOUT)
            rows.append(
                (
                    name,
                    load,
                    f"{times[OURS] * 1e3:.1f}",
                    f"{times[HUB] * 1e3:.1f}",
                    f"**{ratios[OURS]:.2f}x**",
                    "" if twin is None else f"{times[OURS_ACT_DROPOUT] * 1e3:.1f}: {twin:.2f}x",
                )
            )
            checks[f"{name} vs KerasHub, {load} (>= 1.0x)"] = ratios[OURS] >= 1.0
    kernels = {
        name: (loop_body_kernels(fns[OURS]), loop_body_kernels(fns[HUB]))
        for name, fns in decode.items()
    }
    t, g = TRAIN, GEN

    def hub_draws(kind):
        """Millions of entries each side drops per step: attention weights, sublayer outputs."""
        attention = t["batch"] * t["heads"] * t["length"] ** 2
        output = t["batch"] * t["length"] * t["d_model"]
        return (attention + 2 * output if kind == "encoder" else 2 * attention + 3 * output) / 1e6

    text = (
        "### Transformer layers and cached generation vs KerasHub\n\n"
        f"keras-hub {keras_hub.__version__}, TensorFlow backend, float32, one `tf.function` "
        f"each (no XLA); median of {repeats} interleaved rounds after a warm-up; ratio = "
        "KerasHub's time / ours within each round (>= 1 means ours is faster), median over "
        "rounds. Under load: a second process multiplying 256 x 256 NumPy matrices (one "
        f"thread) during the timed rounds. Load average (1, 5, 15 min) at the end of each half: "
        f"idle {loads['idle']}; under load {loads['under load']}.\n\n"
        + common.table(
            [
                "comparison",
                "machine",
                "ours ms",
                "KerasHub ms",
                "KerasHub / ours",
                f"ours with activation_dropout={t['dropout']}: ms, KerasHub / it",
            ],
            rows,
        )
        + "\n\n"
        f"Training step: forward + backward + Adam apply of one layer, batch {t['batch']}, "
        f"{t['length']} positions (decoder and encoder), d_model {t['d_model']}, {t['heads']} "
        f"heads, FFN {t['ffn']}, ReLU, post-norm, epsilon 1e-5, dropout {t['dropout']}, padding "
        "masks; KerasHub's weights copied into ours (parameters "
        + ", ".join(
            f"{kind} {a} / {b}"
            for kind, (a, b) in ((k_, i["parameters"]) for k_, i in train_info.items())
        )
        + "; largest output difference without dropout "
        + ", ".join(f"{kind} {i['gap']:.1e}" for kind, i in train_info.items())
        + "). Same arguments, same meaning, same dropout placement (the attention weights and "
        "each sublayer's output, the original paper's; ours by default). The last column, for "
        "information, times a twin of ours that also drops the FFN's hidden activations "
        "(`activation_dropout`, as PyTorch's `nn.TransformerEncoderLayer` does; KerasHub has no "
        "such dropout).\n\n"
        f"Generation: decoder-only, {g['layers']} layers (same weights), d_model {g['d_model']}, "
        f"{g['heads']} heads, FFN {g['ffn']}, vocab {g['vocab']}, shared embedding, sinusoidal "
        f"positions and output projection; batch {g['batch']}, prompt {g['prompt']} (its first "
        f"{g['prompt'] - 1} tokens cached by one chunked call), {g['new']} new tokens, no end "
        "token. Ours: `greedy_search` / `beam_search` over `transformer_step(cached=True)`; "
        "KerasHub: `GreedySampler` / `BeamSampler` over a `next` built like "
        "`GPT2CausalLM.call_with_cache` (one stacked cache tensor). Same tokens: "
        + ", ".join(f"{name} {s:.1f}%" for name, s in same.items())
        + " (random weights have near-ties). Kernels per loop step (graph nodes of the loop "
        "body without Const / Identity / NoOp), ours / KerasHub: "
        + ", ".join(f"{name} {a} / {b}" for name, (a, b) in kernels.items())
        + ". Ours also keeps lengths, finished flags, GNMT scores and K sorted hypotheses.\n\n"
        "Reading it: (1) a training step is matmuls plus dropout; both sides drop "
        f"{hub_draws('encoder'):.1f} M entries per step (encoder layer) and "
        f"{hub_draws('decoder'):.1f} M (decoder layer); `activation_dropout` adds "
        f"{t['batch'] * t['length'] * t['ffn'] / 1e6:.1f} M more (the last column). Ours draws "
        "each dropout mask from 16 random bits per entry (half the Philox words of KerasHub's "
        "float draws, `keras_attn.layers.rng`) and its LayerNorms use a closed-form gradient "
        "(`keras_attn.layers.normalization`), the two element-wise costs where the layers "
        "differ; the matmuls do the same arithmetic. (2) KerasHub's "
        "cached layer step has fewer kernels than ours (its cache write is one "
        "`dynamic_update_slice`; ours checks the cache index with two asserts, writes with "
        "scatters and builds the causal mask from ranges), but every step also slices each "
        "layer's keys and values out of the stacked cache tensor and stacks them back: copies "
        "of the whole cache that ours, one `(keys, values)` pair per layer written with a "
        "scatter, does not make (`--profile` prints the kernel time by kind of op). (3) "
        "`BeamSampler` reorders the whole cache every step with `ops.take_along_axis`, which on "
        "TensorFlow broadcasts int64 indices to the cache's full shape before gathering: that, "
        "not the model, is most of its time; ours gathers rows (`tf.gather` on the beam axis)."
    )
    if profile:
        for name, fns in pairs.items():
            for side, fn in fns.items():
                cats = common.op_categories(common.op_profile(fn, calls=3))
                print(name, side, {c: round(ms, 1) for c, ms in cats.items()})
    return text, checks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    text, checks = run(args.repeats, profile=args.profile)
    print(text)
    for name, ok in checks.items():
        print(("met  " if ok else "short") + " " + name)


if __name__ == "__main__":
    main()
