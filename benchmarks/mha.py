"""Our MultiHeadAttention vs keras.layers.MultiHeadAttention.

Both layers hold the same weights (`set_weights`), run self-attention on float32 inputs in one
`tf.function` each (no XLA), forward and forward+backward (gradients of the summed output with
respect to the input and every weight). Reported per shape and pass: median seconds, our
throughput relative to Keras' (`keras_time / our_time`, >= 1 means we are at least as fast),
and the achieved GFLOP/s as a fraction of the machine's dense `matmul` GFLOP/s measured in the
same run. Then the kernel time by kind of op (TensorFlow profiler), our TensorFlow fast paths
against the reference paths they replace (`fast_paths`), and mixed precision.

FLOPs counted (multiply-add = 2): projections `2 B T d (3 d_qkv)`, output `2 B T d_v d`,
scores and context `2 B N T^2 (H + H_v)`; forward+backward counts 3x the forward.

    .venv/bin/python benchmarks/mha.py [--repeats 7]
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

SHAPES = (
    # (batch, length, d_model, heads)
    (16, 256, 512, 8),
    (64, 32, 128, 8),
)


def mha_flops(b, t, d, heads):
    h = d // heads
    projections = 2 * b * t * d * (3 * heads * h) + 2 * b * t * (heads * h) * d
    attention = 2 * b * heads * t * t * (h + h)
    return projections + attention


MATMUL_N = 2048
MATMUL_FLOPS = 2 * MATMUL_N**3


def matmul_reference():
    """The machine's dense float32 matmul: `[n, n] @ [n, n]` in one tf.function. It is timed
    in the same interleaved rounds as each MHA case, so both see the same machine load."""
    import tensorflow as tf

    a = tf.random.normal([MATMUL_N, MATMUL_N])
    b = tf.random.normal([MATMUL_N, MATMUL_N])
    return tf.function(lambda: tf.matmul(a, b))


def build_pair(b, t, d, heads):
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_attn.layers import MultiHeadAttention

    keras.utils.set_random_seed(0)
    x = tf.random.normal([b, t, d])
    theirs = keras.layers.MultiHeadAttention(heads, d // heads)
    theirs(x, x)
    ours = MultiHeadAttention(heads, d // heads)
    ours(x)
    ours.set_weights(theirs.get_weights())
    same = np.allclose(ours(x).numpy(), theirs(x, x).numpy(), atol=1e-4)
    return x, ours, theirs, same


def passes(layer, x, self_attention_call):
    import tensorflow as tf

    def forward():
        return self_attention_call(layer, x)

    def forward_backward():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = self_attention_call(layer, x)
            loss = tf.reduce_sum(y)
        return tape.gradient(loss, [x] + layer.trainable_variables)

    return tf.function(forward), tf.function(forward_backward)


def mixed_precision(repeats):
    """Forward+backward under `mixed_float16`, scores and softmax in float32 (the layer now)
    vs in float16 (the layer as it was with float16 scores, reproduced by tracing with the float32 cast of
    the queries and keys switched off), at the small shape: CPUs without float16 arithmetic
    emulate it, which takes minutes at the large shape on a shared machine."""
    import keras
    import tensorflow as tf

    from keras_attn.layers import MultiHeadAttention, multi_head_attend

    rows = []
    for b, t, d, heads in SHAPES[1:]:
        x = tf.random.normal([b, t, d])
        layer = MultiHeadAttention(heads, d // heads, dtype="mixed_float16")
        layer(x)
        _, now = passes(layer, x, lambda layer, x: layer(x))
        _, before = passes(layer, x, lambda layer, x: layer(x))
        common.block(now())
        keep = multi_head_attend._float32
        multi_head_attend._float32 = lambda v: v
        try:
            common.block(before())  # traced with float16 scores
        finally:
            multi_head_attend._float32 = keep
        times, samples = common.interleaved(
            {"float32 scores": now, "float16 scores": before},
            repeats=repeats,
            warmup=1,
            min_time=0.2,
            return_samples=True,
        )
        cost = common.paired_ratio(samples, "float32 scores", "float16 scores")
        rows.append(
            (
                f"({b}, {t}, {d}, {heads})",
                f"{times['float16 scores'] * 1e3:.1f}",
                f"{times['float32 scores'] * 1e3:.1f}",
                f"{cost:.2f}x",
            )
        )
    del keras
    return (
        "#### mixed_float16: scores and softmax in float32\n\n"
        "Our MultiHeadAttention, self-attention forward+backward under `mixed_float16`, one "
        "`tf.function` each, interleaved rounds. Before: scores in float16 (cast to float32 only "
        "inside the softmax); now: queries and keys cast to float32 for the score matmul.\n\n"
        + common.table(
            [
                "shape (B, T, d, heads)",
                "float16 scores ms",
                "float32 scores ms",
                "time now / before",
            ],
            rows,
        )
    )


def _self_attention(layer, x):
    return layer(x)


def fast_paths(repeats):
    """Each TensorFlow fast path of docs/multi_head.md ("Speed on TensorFlow") against the
    reference paths it replaces, in one process: the layer traced with both switched off
    (`fused_heads` and autodiff of the attention block), with the written attention
    gradient only, and as shipped (also the batched head-major projections, where
    `multi_head_projection.batched_heads` picks them)."""
    from keras_attn.layers import multi_head_attend as attend
    from keras_attn.layers import multi_head_projection as proj

    variants = {
        "reference": {"batched": False, "written": False},
        "written gradient": {"batched": False},
        "as shipped": {},
    }
    rows = []
    for b, t, d, heads in SHAPES:
        x, ours, _, _ = build_pair(b, t, d, heads)
        forward, forward_backward = {}, {}
        for name, switch in variants.items():
            f, fb = passes(ours, x, _self_attention)
            keep = attend.written_gradient, proj.batched_heads
            if "written" in switch:
                attend.written_gradient = lambda on=switch["written"]: on
            if "batched" in switch:
                proj.batched_heads = lambda *shape, on=switch["batched"]: on
            try:  # traced now, with the switches set
                common.block(f())
                common.block(fb())
            finally:
                attend.written_gradient, proj.batched_heads = keep
            forward_backward[name] = fb
            if name != "written gradient":  # the same forward pass as the reference
                forward[name] = f
        batched = proj.batched_heads(t, d, d // heads)
        for pass_name, fns in (("forward", forward), ("forward+backward", forward_backward)):
            times, samples = common.interleaved(
                fns, repeats=repeats, warmup=1, min_time=0.2, return_samples=True
            )
            rows.append(
                (
                    f"({b}, {t}, {d}, {heads})",
                    pass_name,
                    "yes" if batched else "no",
                    f"{times['reference'] * 1e3:.1f}",
                    f"{times['written gradient'] * 1e3:.1f}" if pass_name != "forward" else "-",
                    f"{times['as shipped'] * 1e3:.1f}",
                    f"{common.paired_ratio(samples, 'reference', 'as shipped'):.2f}x",
                )
            )
    return (
        "#### TensorFlow fast paths vs the reference paths\n\n"
        "Our MultiHeadAttention, self-attention, float32, traced three ways in one process "
        "(interleaved rounds): reference = one 2-D projection matmul and a transpose to "
        "head-major, attention differentiated by autodiff; written gradient = the attention "
        "block's gradient written out; as shipped = also the projections as batched matmuls "
        "straight into head-major with their gradient written out (only where one head's "
        "matmul is large enough: column `batched`). Speed-up = reference / as shipped.\n\n"
        + common.table(
            [
                "shape (B, T, d, heads)",
                "pass",
                "batched",
                "reference ms",
                "written gradient ms",
                "as shipped ms",
                "speed-up",
            ],
            rows,
        )
    )


def run(repeats=7):
    reference = matmul_reference()
    rows, checks, matmuls, profiles = [], {}, [], {}
    for b, t, d, heads in SHAPES:
        x, ours, theirs, same = build_pair(b, t, d, heads)
        ours_f, ours_fb = passes(ours, x, lambda layer, x: layer(x))
        theirs_f, theirs_fb = passes(theirs, x, lambda layer, x: layer(x, x))
        flops = mha_flops(b, t, d, heads)
        for name, (o, k), mult in (
            ("forward", (ours_f, theirs_f), 1),
            ("forward+backward", (ours_fb, theirs_fb), 3),
        ):
            times, samples = common.interleaved(
                {"ours": o, "keras": k, "matmul": reference},
                repeats=repeats,
                warmup=2,
                min_time=0.2,
                return_samples=True,
            )
            matmul = MATMUL_FLOPS / times["matmul"] / 1e9
            matmuls.append(matmul)
            # Ratios of the same round, then the median over rounds.
            ratio = common.paired_ratio(samples, "keras", "ours")
            ours_gf = mult * flops / times["ours"] / 1e9
            ours_frac = common.paired_ratio(samples, "matmul", "ours", mult * flops / MATMUL_FLOPS)
            keras_frac = common.paired_ratio(
                samples, "matmul", "keras", mult * flops / MATMUL_FLOPS
            )
            key = f"B={b} T={t} d={d} heads={heads} {name}"
            checks[f"MHA throughput vs Keras, {key} (>= 1.0x)"] = ratio >= 1.0
            if (b, t, d) == SHAPES[0][:3]:
                checks[f"MHA GFLOP/s vs matmul, {key} (>= 75%)"] = ours_frac >= 0.75
            if (b, t, d) == SHAPES[0][:3]:
                profiles[name] = {
                    who: common.op_categories(common.op_profile(fn, calls=5))
                    for who, fn in (("ours", o), ("Keras", k))
                }
            rows.append(
                (
                    f"({b}, {t}, {d}, {heads})",
                    name,
                    f"{times['ours'] * 1e3:.1f}",
                    f"{times['keras'] * 1e3:.1f}",
                    f"{ratio:.2f}x",
                    f"{ours_gf:.0f}",
                    f"{matmul:.0f}",
                    f"{100 * ours_frac:.0f}%",
                    f"{100 * keras_frac:.0f}%",
                    "yes" if same else "NO",
                )
            )
    text = (
        "### 1. MultiHeadAttention vs keras.layers.MultiHeadAttention\n\n"
        "Self-attention, float32, same weights, one `tf.function` per layer and pass (no XLA); "
        f"median of {repeats} interleaved rounds after a warm-up. Dense matmul reference: "
        f"{MATMUL_N}x{MATMUL_N} @ {MATMUL_N}x{MATMUL_N}, timed in the same rounds as each case "
        f"({min(matmuls):.0f} to {max(matmuls):.0f} GFLOP/s over the cases). "
        "Speed-up = Keras time / our time and % of matmul = (our GFLOP/s) / (matmul GFLOP/s), "
        "each computed within a round and the median taken over rounds. Targets: speed-up >= 1.0; "
        "% of matmul >= 75% at the large shape.\n\n"
        + common.table(
            [
                "shape (B, T, d, heads)",
                "pass",
                "ours ms",
                "Keras ms",
                "speed-up",
                "ours GFLOP/s",
                "matmul GFLOP/s",
                "ours % of matmul",
                "Keras % of matmul",
                "same outputs",
            ],
            rows,
        )
        + "\n\n"
        + profile_text(profiles)
        + "\n\n"
        + fast_paths(repeats)
        + "\n\n"
        + mixed_precision(repeats)
    )
    return text, checks


def profile_text(profiles):
    """Where the time goes at the large shape: kernel time by kind (TensorFlow profiler)."""
    b, t, d, heads = SHAPES[0]
    categories = [name for name, _ in common.OP_CATEGORIES] + ["element-wise / other"]
    rows = []
    for name, by_layer in profiles.items():
        for who, cats in by_layer.items():
            total = sum(cats.values())
            rows.append(
                [f"{name}, {who}", f"{total:.1f}"]
                + [f"{cats[c]:.1f} ({100 * cats[c] / total:.0f}%)" for c in categories]
            )
    headers = ["pass, layer", "kernel ms"] + [f"{c} ms" for c in categories]
    return (
        f"Profile at ({b}, {t}, {d}, {heads}): TensorFlow kernel time per call by kind of op, "
        "summed over the kernels (two may run at once on the two cores, so a sum can exceed "
        "the wall time; compare the shares). Only the `matmul` share runs at matmul speed; the "
        "rest (the softmax and its gradient, the head-major transposes, the bias and scale "
        "arithmetic) is memory-bound work that bounds the % of matmul.\n\n"
        + common.table(headers, rows)
    )


if __name__ == "__main__":
    common.main(run, __doc__, default_repeats=7)
