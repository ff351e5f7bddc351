"""Luong local attention is local: time and memory per decoder step vs source length (issues 7, 18).

One decoder step: a one-step query `[B, Dq]` against a source `[B, S, Dv]`, score "general",
window D=10, in one `tf.function` per case (no XLA). Two ways of calling the layer:
- "projected": keys projected once (`projected_key=layer.project_keys(value)`, as a decoder
  does), B=16; global attention on the same inputs for comparison;
- "plain": `layer(h_t, memory)` with nothing projected beforehand, B=8, for local-p,
  local-m (`position=S // 2`) and global. A local layer gathers the window first and projects
  only the query (`general`: `q . (k W) = (q W^T) . k`), so this too must stay flat in S;
  global attention has to project every key, so it grows with S.

Memory: TensorFlow's allocator statistics (`tf.config.experimental.get_memory_info`) exist
only for GPUs, and on CPU the step's working set (a few hundred KB for local attention) is far
below what RSS deltas can resolve in a process whose RSS is ~1 GB and moves with the thread
pools. So the step's memory is read from its traced graph: every op's output tensor with its
static shape, leaving out the inputs themselves (the source, its projected keys, the weights)
and the ops that return a view of their input (Reshape, Identity, ExpandDims, Squeeze,
shape-only ops). The sum of those bytes bounds the step's peak intermediate memory from above
(the executor frees tensors after their last use), and the largest one bounds it from below.

    .venv/bin/python benchmarks/luong_local.py
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

LENGTHS = (128, 512, 2048, 8192)
BATCH = 16
PLAIN_BATCH = 8  # the batch the plain call is measured at
UNITS = 256
WINDOW = 10
VIEW_OPS = {
    "Reshape", "Identity", "ExpandDims", "Squeeze", "Shape", "ShapeN", "Size", "Rank",
    "Placeholder", "ReadVariableOp", "Const", "NoOp", "StopGradient", "IdentityN",
}  # fmt: skip


def graph_memory(concrete):
    """`(sum_bytes, max_bytes)` of the intermediate tensors of a concrete function's graph."""
    total = largest = 0
    for op in concrete.graph.get_operations():
        if op.type in VIEW_OPS:
            continue
        for out in op.outputs:
            shape = out.shape
            if shape.rank is None or not shape.is_fully_defined():
                continue
            try:
                size = out.dtype.size
            except Exception:  # resource / variant tensors
                continue
            n = size
            for d in shape.as_list():
                n *= d
            total += n
            largest = max(largest, n)
    return total, largest


def make_step(alignment, length, plain=False):
    import keras
    import tensorflow as tf

    from keras_attn.layers import LuongAttention

    keras.utils.set_random_seed(0)
    batch = PLAIN_BATCH if plain else BATCH
    layer = LuongAttention(score="general", alignment=alignment, window=WINDOW)
    value = tf.random.normal([batch, length, UNITS])
    query = tf.random.normal([batch, UNITS])
    kwargs = {"position": length // 2} if alignment == "local-m" else {}
    layer(query, value, **kwargs)
    if plain:

        @tf.function
        def plain_step(query, value):
            return layer(query, value, **kwargs)

        concrete = plain_step.get_concrete_function(query, value)
        return (lambda: plain_step(query, value)), concrete
    keys = layer.project_keys(value)

    @tf.function
    def step(query, value, keys):
        return layer(query, value, projected_key=keys)

    concrete = step.get_concrete_function(query, value, keys)
    return (lambda: step(query, value, keys)), concrete


CASES = (
    ("local-p", False),
    ("global", False),
    ("local-p", True),
    ("local-m", True),
    ("global", True),
)


def _name(alignment, plain):
    return f"{alignment} {'plain' if plain else 'projected'}"


def run(repeats=9):
    fns, memory = {}, {}
    for length in LENGTHS:
        for alignment, plain in CASES:
            fn, concrete = make_step(alignment, length, plain)
            fns[(alignment, plain, length)] = fn
            memory[(alignment, plain, length)] = graph_memory(concrete)
    times, samples = common.interleaved(
        fns, repeats=repeats, warmup=3, min_time=0.1, return_samples=True
    )
    first, last = LENGTHS[0], LENGTHS[-1]
    rows, ratios = [], {}
    for alignment, plain in CASES:
        for length in LENGTHS:
            total, largest = memory[(alignment, plain, length)]
            rows.append(
                [
                    _name(alignment, plain),
                    str(PLAIN_BATCH if plain else BATCH),
                    str(length),
                    f"{times[(alignment, plain, length)] * 1e3:.3f}",
                    f"{total / 1024:.0f}",
                    f"{largest / 1024:.0f}",
                ]
            )
        # Ratios within a round, median over rounds.
        ratios[(alignment, plain)] = (
            common.paired_ratio(samples, (alignment, plain, last), (alignment, plain, first)),
            memory[(alignment, plain, last)][0] / memory[(alignment, plain, first)][0],
        )
    checks = {}
    for alignment, plain in CASES:
        if alignment == "global":
            continue
        t, m = ratios[(alignment, plain)]
        checks[f"Luong {_name(alignment, plain)} step time S={last}/S={first} (<= 1.5)"] = t <= 1.5
        checks[f"Luong {_name(alignment, plain)} step memory S={last}/S={first} flat (<= 1.5)"] = (
            m <= 1.5
        )
    summary = "; ".join(
        f"{_name(a, p)} time **{t:.2f}x**, memory {m:.2f}x" for (a, p), (t, m) in ratios.items()
    )
    text = (
        "### 2. Luong local attention per decoder step\n\n"
        f"One-step query `[B, {UNITS}]`, source `[B, S, {UNITS}]`, score `general`, window D={WINDOW}; "
        f'"projected": keys projected once per source and passed as `projected_key=` (B={BATCH}); '
        f'"plain": `layer(h_t, memory)` with nothing projected beforehand (B={PLAIN_BATCH}; local-m '
        "at `position=S // 2`). One `tf.function` per case (no XLA); median of "
        f"{repeats} interleaved rounds after a warm-up. Memory: bytes of the step's intermediate "
        "tensors in its traced graph (sum = upper bound of the peak, max = largest single tensor; "
        "inputs and views excluded; see `benchmarks/luong_local.py` for why not RSS).\n\n"
        + common.table(
            ["case", "B", "S", "ms/step", "KiB (sum)", "KiB (max)"],
            rows,
        )
        + f"\n\nS={last} / S={first} (targets: local <= 1.5x): {summary}."
    )
    return text, checks


if __name__ == "__main__":
    common.main(run, __doc__, default_repeats=9)
