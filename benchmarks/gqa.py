"""Grouped-query attention and the Keras 3.15 options of MultiHeadAttention.

1. Cached decoding at a long context: one self-attention step (`B` rows, one query each)
   against a full cache of `L` positions, `num_heads` query heads and `G` key/value heads
   (G = num_heads: plain multi-head; G = 2; G = 1: multi-query). Reported: the step time
   relative to full heads (`full / G`, > 1 = faster) and the cache's bytes per layer.
2. Ours vs `keras.layers.MultiHeadAttention` (and `GroupQueryAttention`, also against our
   `GroupedQueryAttention`) with the same weights
   and `sliding_window`, `use_gate`, or grouped heads set: forward and forward+backward,
   `keras_time / our_time` (target >= 1.0x).
3. Sliding-window decoding at a long context: one causal step with the ring cache of
   `sliding_window` rows vs a full cache (cache bytes, step time, same output).

One `tf.function` per case (no XLA), float32, repetitions interleaved (benchmarks/common.py).

    .venv/bin/python benchmarks/gqa.py [--repeats 7]
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

# Decoding: batch, cache length, d_model, query heads.
DECODE = (8, 4096, 512, 8)
# Training-shape comparison with Keras: batch, length, d_model, heads.
COMPARE = (16, 128, 256, 8)


def _decode_cases(repeats):
    import tensorflow as tf

    from keras_attn.layers import MultiHeadAttention

    b, length, d, heads = DECODE
    h = d // heads
    x = tf.random.normal([b, 1, d])
    fns, sizes = {}, {}
    for groups in (heads, 2, 1):
        layer = MultiHeadAttention(heads, h, num_key_value_heads=groups)
        layer.build((b, 1, d))
        cache = tuple(tf.random.normal(c.shape) for c in layer.init_cache(b, length))
        sizes[groups] = sum(int(tf.size(c)) * 4 for c in cache)
        index = tf.constant(length - 1)

        def step(layer=layer, cache=cache):
            return layer(x, use_causal_mask=True, cache=cache, cache_index=index)[0]

        fns[f"G={groups}"] = tf.function(step)
    times, samples = common.interleaved(
        fns, repeats=repeats, warmup=2, min_time=0.2, return_samples=True
    )
    rows, checks = [], {}
    for groups in (heads, 2, 1):
        name = f"G={groups}"
        speed = common.paired_ratio(samples, f"G={heads}", name)
        rows.append(
            (
                f"{groups}"
                + (" (full heads)" if groups == heads else " (multi-query)" if groups == 1 else ""),
                f"{times[name] * 1e3:.2f}",
                f"{speed:.2f}x",
                f"{sizes[groups] / 2**20:.1f}",
                f"{100 * (1 - sizes[groups] / sizes[heads]):.0f}%",
            )
        )
        if groups != heads:
            checks[f"GQA G={groups} cached step vs full heads at L={length} (>= 1.0x)"] = (
                speed >= 1.0
            )
    text = (
        f"#### Cached decoding step at a long context (B={b}, L={length}, d={d}, {heads} query heads)\n\n"
        + common.table(
            [
                "key/value heads G",
                "step ms",
                "speed vs full heads",
                "cache MiB / layer",
                "cache saved",
            ],
            rows,
        )
    )
    return text, checks


# Sliding-window decoding: batch, position reached, d_model, heads, window.
RING = (8, 4096, 512, 8, 256)


def _ring_cases(repeats):
    """A causal sliding-window self-attention step at position `L - 1` with a ring cache of
    `window` rows vs a full cache of `L` rows (docs/multi_head.md): same answer, the ring's
    bytes and work do not grow with the position."""
    import numpy as np
    import tensorflow as tf

    from keras_attn.layers import MultiHeadAttention

    b, length, d, heads, window = RING
    layer = MultiHeadAttention(heads, d // heads, sliding_window=window)
    layer.build((b, 1, d))
    x = tf.random.normal([b, 1, d])
    index = tf.constant(length - 1)
    full = tuple(tf.random.normal(c.shape) for c in (tf.zeros([b, length, heads, d // heads]),) * 2)
    # The ring holds the full cache's last `window` positions, each at its slot p mod window.
    slots = (np.arange(length - window, length)) % window
    order = np.argsort(slots)
    ring = tuple(tf.gather(c[:, length - window :], order, axis=1) for c in full)
    assert tuple(layer.init_cache(b, length, ring=True)[0].shape) == tuple(ring[0].shape)
    fns, sizes = {}, {}
    for name, cache in (("full", full), ("ring", ring)):
        sizes[name] = sum(int(tf.size(c)) * 4 for c in cache)

        def step(cache=cache):
            return layer(x, use_causal_mask=True, cache=cache, cache_index=index)[0]

        fns[name] = tf.function(step)
    same = np.allclose(fns["full"]().numpy(), fns["ring"]().numpy(), atol=1e-4)
    times, samples = common.interleaved(
        fns, repeats=repeats, warmup=2, min_time=0.2, return_samples=True
    )
    speed = common.paired_ratio(samples, "full", "ring")
    rows = [
        (
            f"{name} ({length if name == 'full' else window} rows)",
            f"{times[name] * 1e3:.2f}",
            f"{sizes[name] / 2**20:.2f}",
        )
        for name in ("full", "ring")
    ]
    checks = {
        f"Sliding window {window}: ring cache step vs full cache at L={length} (>= 1.0x)": speed
        >= 1.0,
        "Ring cache step equals the full cache's": bool(same),
    }
    text = (
        f"#### Sliding-window decoding: ring cache vs full cache (B={b}, position {length - 1}, "
        f"d={d}, {heads} heads, window {window})\n\n"
        + common.table(["cache", "step ms", "cache MiB / layer"], rows)
        + f"\n\nRing vs full: **{speed:.2f}x** per step, "
        f"{sizes['full'] / sizes['ring']:.0f}x fewer bytes; same output: {'yes' if same else 'NO'}."
    )
    return text, checks


def _compare_cases(repeats):
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_attn.layers import GroupedQueryAttention, MultiHeadAttention

    b, t, d, heads = COMPARE
    h = d // heads
    keras.utils.set_random_seed(0)
    x = tf.random.normal([b, t, d])
    cases = {
        "sliding_window=32, causal": (
            lambda: keras.layers.MultiHeadAttention(heads, h, sliding_window=32),
            lambda: MultiHeadAttention(heads, h, sliding_window=32),
            {"use_causal_mask": True},
        ),
        "use_gate": (
            lambda: keras.layers.MultiHeadAttention(heads, h, use_gate=True),
            lambda: MultiHeadAttention(heads, h, use_gate=True),
            {},
        ),
        "GroupQueryAttention G=2": (
            lambda: keras.layers.GroupQueryAttention(h, heads, 2),
            lambda: MultiHeadAttention(heads, h, num_key_value_heads=2),
            {},
        ),
        "GroupedQueryAttention G=2, causal (Keras' constructor)": (
            lambda: keras.layers.GroupQueryAttention(h, heads, 2),
            lambda: GroupedQueryAttention(h, heads, 2),
            {"use_causal_mask": True},
        ),
    }
    rows, checks = [], {}
    for label, (make_theirs, make_ours, call) in cases.items():
        theirs, ours = make_theirs(), make_ours()
        theirs(x, x, **call)
        ours(x, x, **call)
        ours.set_weights(theirs.get_weights())
        same = np.allclose(ours(x, x, **call).numpy(), theirs(x, x, **call).numpy(), atol=1e-4)

        def passes(layer):
            def forward():
                return layer(x, x, **call)

            def forward_backward():
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    loss = tf.reduce_sum(layer(x, x, **call))
                return tape.gradient(loss, [x] + layer.trainable_variables)

            return tf.function(forward), tf.function(forward_backward)

        (of, ofb), (kf, kfb) = passes(ours), passes(theirs)
        for name, o, k in (("forward", of, kf), ("forward+backward", ofb, kfb)):
            times, samples = common.interleaved(
                {"ours": o, "keras": k},
                repeats=repeats,
                warmup=2,
                min_time=0.2,
                return_samples=True,
            )
            ratio = common.paired_ratio(samples, "keras", "ours")
            checks[f"MHA vs Keras with {label}, {name} (>= 1.0x)"] = ratio >= 1.0
            rows.append(
                (
                    label,
                    name,
                    f"{times['ours'] * 1e3:.1f}",
                    f"{times['keras'] * 1e3:.1f}",
                    f"{ratio:.2f}x",
                    "yes" if same else "NO",
                )
            )
    text = (
        f"#### Ours vs Keras with the 3.15 options (self-attention, B={b}, T={t}, d={d}, {heads} heads)\n\n"
        + common.table(["option", "pass", "ours ms", "Keras ms", "speed-up", "same outputs"], rows)
    )
    return text, checks


def run(repeats=7):
    decode_text, checks = _decode_cases(repeats)
    ring_text, more = _ring_cases(repeats)
    checks.update(more)
    compare_text, more = _compare_cases(repeats)
    checks.update(more)
    text = (
        "### Grouped-query attention and Keras 3.15's options (benchmarks/gqa.py)\n\n"
        f"Float32, one `tf.function` per case (no XLA), median of {repeats} interleaved rounds; "
        "ratios taken within each round.\n\n"
        + decode_text
        + "\n\n"
        + ring_text
        + "\n\n"
        + compare_text
    )
    return text, checks


if __name__ == "__main__":
    common.main(run, __doc__, default_repeats=7)
