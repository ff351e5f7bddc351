"""Luong local-p attention is local: time and memory per decoder step vs source length (issue 7, item 2).

One decoder step: a one-step query `[B, Dq]` against a source `[B, S, Dv]` whose keys were
projected once (`projected_key=layer.project_keys(value)`, as a decoder does), score
"general", window D=10, in one `tf.function` (no XLA). Global attention on the same inputs
is measured for comparison.

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

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # noqa: E402

LENGTHS = (128, 512, 2048, 8192)
BATCH = 16
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


def make_step(alignment, length):
    import keras
    import tensorflow as tf

    from keras_attn.layers import LuongAttention

    keras.utils.set_random_seed(0)
    layer = LuongAttention(score="general", alignment=alignment, window=WINDOW)
    value = tf.random.normal([BATCH, length, UNITS])
    query = tf.random.normal([BATCH, UNITS])
    layer(query, value)
    keys = layer.project_keys(value)

    @tf.function
    def step(query, value, keys):
        return layer(query, value, projected_key=keys)

    concrete = step.get_concrete_function(query, value, keys)
    return (lambda: step(query, value, keys)), concrete


def run(repeats=9):
    fns, memory = {}, {}
    for length in LENGTHS:
        for alignment in ("local-p", "global"):
            fn, concrete = make_step(alignment, length)
            fns[(alignment, length)] = fn
            memory[(alignment, length)] = graph_memory(concrete)
    times, samples = common.interleaved(fns, repeats=repeats, warmup=3, min_time=0.1, return_samples=True)
    rows = []
    for length in LENGTHS:
        row = [str(length)]
        for alignment in ("local-p", "global"):
            total, largest = memory[(alignment, length)]
            row += [f"{times[(alignment, length)] * 1e3:.3f}", f"{total / 1024:.0f}", f"{largest / 1024:.0f}"]
        rows.append(row)
    first, last = LENGTHS[0], LENGTHS[-1]
    # Ratios within a round, median over rounds.
    local_ratio = common.paired_ratio(samples, ("local-p", last), ("local-p", first))
    global_ratio = common.paired_ratio(samples, ("global", last), ("global", first))
    mem_ratio = memory[("local-p", last)][0] / memory[("local-p", first)][0]
    gmem_ratio = memory[("global", last)][0] / memory[("global", first)][0]
    checks = {
        f"Luong local-p step time S={last}/S={first} (<= 1.5)": local_ratio <= 1.5,
        f"Luong local-p step memory S={last}/S={first} flat (<= 1.5)": mem_ratio <= 1.5,
    }
    text = (
        "### 2. Luong local-p attention per decoder step\n\n"
        f"One-step query `[B={BATCH}, {UNITS}]`, source `[B, S, {UNITS}]`, score `general` with keys "
        f"projected once, window D={WINDOW}; one `tf.function` per case (no XLA); median of "
        f"{repeats} interleaved rounds after a warm-up. Memory: bytes of the step's intermediate "
        "tensors in its traced graph (sum = upper bound of the peak, max = largest single tensor; "
        "inputs and views excluded; see `benchmarks/luong_local.py` for why not RSS).\n\n"
        + common.table(
            [
                "S",
                "local-p ms/step",
                "local-p KiB (sum)",
                "local-p KiB (max)",
                "global ms/step",
                "global KiB (sum)",
                "global KiB (max)",
            ],
            rows,
        )
        + f"\n\nS={last} / S={first}: local-p time **{local_ratio:.2f}x** (target <= 1.5), "
        f"memory {mem_ratio:.2f}x; global time {global_ratio:.2f}x, memory {gmem_ratio:.1f}x."
    )
    return text, checks


if __name__ == "__main__":
    common.main(run, __doc__, default_repeats=9)
