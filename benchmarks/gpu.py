"""Attention and decoding on JAX, for a GPU (runs where TensorFlow is not installed).

First a check, then the timings. The check (`checks`): our fused path (`flash_attention=True`)
against our products (`flash_attention=False`) with the same weights, MHA and GQA, float32
and mixed_bfloat16, causal, padded tails and a sliding window: which kernel the compiled
gradient holds (cuDNN's fused attention or XLA's ops), the relative error of the output and of
all gradients, and NaN written into the padded positions (output and gradients finite, and how
far from the clean input's, next to how far the clean input moves from one run to the next).

Every timing is a ratio of two timings taken in this process, interleaved round after round
(each the median of the rounds after a warm-up), each side one `jax.jit` function:

1. Self-attention forward + backward (gradients of the summed output with respect to the
   input and every weight), d_model 1024, 16 heads: `keras.layers.MultiHeadAttention` against
   ours with its defaults and ours with `flash_attention=False` (our products), with the same
   weights; float32 and mixed_bfloat16; causal, no mask, padded tails (a quarter of each row
   padding, as `query_mask` / `value_mask`); T 1024 (B 8) and T 8192 (B 2). Ratio = Keras time
   / ours (> 1: ours faster).
2. Grouped-query attention (16 query heads, 4 key/value heads) against
   `keras.layers.GroupQueryAttention`, the same way.
3. The kernel's limit: `jax.nn.dot_product_attention` alone on the same q/k/v
   (`implementation="cudnn"` on a GPU, XLA's elsewhere), and the bfloat16 matmul rate.
4. Beam search over one GRU step (B 128, K 4, V 16,000, 32 tokens): ours against KerasHub's
   `BeamSampler` when `keras_hub` is importable (a bench-only package; the row says so when
   it is not), the share of rows whose best sequence is the same, and the operations of one
   step of each compiled loop (`--dump DIR` writes both compiled programs' HLO text); without
   an end token (both loops of a known count) and with one (both read after every step
   whether every row has ended; the random model seldom ends one, so both run every step).
5. Our Transformer's greedy decoding, tokens per second.
6. A `fit` step of our `Transformer` (4 + 4 layers, d 512, padded tails) in mixed_bfloat16,
   target tokens per second, with its defaults and with `flash_attention=False` (our
   products), against the keras.io KerasHub translation recipe at the same size (`TokenAndPositionEmbedding`, `TransformerEncoder` / `TransformerDecoder`) when
   `keras_hub` is importable.

`--profile` also traces the beam and `fit` rows with `jax.profiler` and prints, per call, the
wall time, the time the device was busy, how many kernels and device-to-host copies ran (a copy
to the host inside a step is a wait for the device) and the heaviest kernels.

`--small` runs every case at tiny sizes (on a CPU, in seconds): a check that the script runs,
not a measurement. `--only` names the sections to run (checks, attention, gqa, kernel, beam,
fit, decode).

    KERAS_BACKEND=jax .venv/bin/python benchmarks/gpu.py [--small] [--repeats 5] [--only ...]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time

os.environ["KERAS_BACKEND"] = "jax"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import keras
import numpy as np

from keras_attn.layers import GroupedQueryAttention, MultiHeadAttention

FULL = {
    "d_model": 1024,
    "heads": 16,
    "kv_heads": 4,
    "attention": [
        ("float32", 8, 1024, "causal"),
        ("mixed_bfloat16", 8, 1024, "causal"),
        ("mixed_bfloat16", 8, 1024, "no mask"),
        ("mixed_bfloat16", 2, 8192, "causal"),
        ("mixed_bfloat16", 8, 1024, "padded tails"),
    ],
    "gqa": [
        ("mixed_bfloat16", 8, 1024, "causal"),
        ("mixed_bfloat16", 8, 1024, "padded tails"),
        ("float32", 8, 1024, "causal"),
    ],
    "matmul": 8192,
    "check": (4, 1024),
    "beam": dict(batch=128, beam=4, vocab=16000, length=32, embed=256, hidden=512),
    "decode": dict(batch=32, source=64, length=64, layers=4, d_model=512, heads=8, vocab=16000),
    "fit": [
        dict(batch=128, length=64, layers=4, d_model=512, heads=8, vocab=16000),
        dict(batch=32, length=256, layers=4, d_model=512, heads=8, vocab=16000),
    ],
}
SMALL = {
    "d_model": 32,
    "heads": 4,
    "kv_heads": 2,
    "attention": [
        ("float32", 2, 16, "causal"),
        ("mixed_bfloat16", 2, 16, "padded tails"),
    ],
    "gqa": [("mixed_bfloat16", 2, 16, "causal")],
    "matmul": 128,
    "check": (2, 16),
    "beam": dict(batch=2, beam=2, vocab=50, length=4, embed=8, hidden=16),
    "decode": dict(batch=2, source=6, length=4, layers=1, d_model=16, heads=2, vocab=30),
    "fit": [dict(batch=2, length=8, layers=1, d_model=16, heads=2, vocab=30)],
}


def timed(fns, repeats):
    """Median seconds per call of each zero-argument function of `fns` (name -> callable),
    called in turn round after round after one warm-up call each."""
    for fn in fns.values():
        jax.block_until_ready(fn())
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(s) for name, s in samples.items()}


def profiled(fns, repeats):
    """Where the time of each zero-argument function of `fns` goes, from a `jax.profiler`
    trace of `repeats` calls each (after the timings' warm-up): per call, the wall time, the
    time the device was busy (the union of its kernels' intervals; on a CPU, of XLA's
    operations), how many kernels and device-to-host copies ran (a copy to the host in the
    middle of a step is a wait for the device: a `cond` or a loop's condition), and the kernels
    that took the most time. `(the plane read, {name: dict})`."""
    import glob
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="gpu-profile-")
    marks = {f"profiled {name}": name for name in fns}
    try:
        with jax.profiler.trace(folder):
            for mark, name in marks.items():
                with jax.profiler.TraceAnnotation(mark):
                    for _ in range(repeats):
                        jax.block_until_ready(fns[name]())
        (path,) = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
        data = jax.profiler.ProfileData.from_file(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    device = [p for p in data.planes if p.name.startswith("/device:")]
    spans, kernels, copies = {}, [], []
    for plane in data.planes:  # each function's calls: its annotation, in the trace's clock
        for line in plane.lines:
            for event in line.events:
                if event.name in marks:
                    spans[marks[event.name]] = (event.start_ns, event.start_ns + event.duration_ns)
    for plane in device or [p for p in data.planes if p.name == "/host:CPU"]:
        lines = list(plane.lines)
        streams = [line for line in lines if line.name.startswith("Stream")]
        for line in streams or lines:  # a GPU's kernels run on its streams (not derived lines)
            for event in line.events:
                stats = dict(event.stats)
                if "memcpy" in event.name.lower() or "memcpy_details" in stats:
                    copies.append((event.start_ns, event.name))
                elif device or "hlo_op" in stats:
                    op = stats.get("hlo_op", event.name)
                    kernels.append((event.start_ns, event.start_ns + event.duration_ns, op))
    read = device[0].name if device else "no device plane: XLA's operations on the host"
    result = {}
    missing = [name for name in fns if name not in spans]
    if missing:
        raise ValueError(f"the trace holds no annotation for {missing}")
    for name in fns:
        lo, hi = spans[name]
        mine = sorted(k for k in kernels if lo <= k[0] < hi)
        busy, end, by_op = 0, lo, {}
        for start, stop, op in mine:
            busy += max(0, stop - max(start, end))
            end = max(end, stop)
            by_op[op] = by_op.get(op, 0) + (stop - start)
        top = sorted(by_op.items(), key=lambda kv: -kv[1])[:6]
        d2h = [
            c
            for c in copies
            if lo <= c[0] < hi and re.search("d2h|dtoh|devicetohost", c[1].lower())
        ]
        result[name] = {
            "wall ms": (hi - lo) / repeats / 1e6,
            "busy ms": busy / repeats / 1e6,
            "kernels": len(mine) / repeats,
            "copies to host": len(d2h) / repeats,
            "top": [(op, ms / repeats / 1e6) for op, ms in top],
        }
    return read, result


def profile(label, fns, repeats):
    """With --profile, `profiled(fns, repeats)` kept for the section to print."""
    if PROFILES["on"]:
        try:
            PROFILES["found"].append((label, profiled(fns, repeats)))
        except Exception as e:  # a profile that fails costs its table, never the run's timings
            print(f"\nProfile of {label}: failed ({type(e).__name__}: {e})")


def print_profiles():
    """The profiles the section took (--profile), then none kept."""
    for label, found in PROFILES["found"]:
        print_profile(label, found)
    PROFILES["found"] = []


def print_profile(label, found):
    """`profiled`'s result as two tables: the totals, then the heaviest kernels."""
    read, profile = found
    rows = [
        [
            name,
            f"{p['wall ms']:.2f}",
            f"{p['busy ms']:.2f}",
            f"{p['kernels']:.0f}",
            f"{p['copies to host']:.0f}",
        ]
        for name, p in profile.items()
    ]
    headers = ["", "wall ms / call", "device busy ms", "kernels", "copies to the host"]
    print(f"\nProfile of {label} (jax.profiler, per call; read: {read})\n")
    print(table(headers, rows))
    rows = [
        [name, ", ".join(f"{op[:48]} {ms:.3f}" for op, ms in p["top"])]
        for name, p in profile.items()
    ]
    print("\nThe heaviest kernels (ms per call)\n")
    print(table(["", "kernels"], rows))


def device_name():
    device = jax.devices()[0]
    return f"{device.platform}: {getattr(device, 'device_kind', '?')}"


def _masks(kind, batch, length):
    if kind != "padded tails":
        return {"use_causal_mask": kind == "causal"}
    # Every row's last quarter is padding, more for the later rows.
    lengths = length - (length // 4) * (1 + np.arange(batch) % 2) // 2
    mask = np.arange(length)[None, :] < lengths[:, None]
    return {"query_mask": mask, "value_mask": mask}


def attention_step(layer, x, call):
    """`jax.jit` of the gradients of the summed output of `layer(x, x, **call)` with respect
    to `x` and every trainable weight: a zero-argument function."""
    weights = [v.value for v in layer.trainable_variables]
    others = [v.value for v in layer.non_trainable_variables]
    arrays = {k: v for k, v in call.items() if isinstance(v, np.ndarray)}
    flags = {k: v for k, v in call.items() if not isinstance(v, np.ndarray)}

    def loss(weights, x, arrays):
        out = layer.stateless_call(weights, others, x, x, **arrays, **flags)[0]
        return keras.ops.sum(keras.ops.cast(out, "float32"))

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    x = jax.numpy.asarray(x)
    arrays = {k: jax.numpy.asarray(v) for k, v in arrays.items()}
    return lambda: grad(weights, x, arrays)


def _flops(batch, length, d_model, kv_dim, kind):
    """Forward + backward FLOPs (3x the forward; causal attention counted half)."""
    projections = 2 * batch * length * d_model * (2 * d_model + 2 * kv_dim)
    attention = 4 * batch * length * length * d_model * (0.5 if kind == "causal" else 1.0)
    return 3 * (projections + attention)


def attention_rows(sizes, repeats, grouped=False):
    d, heads = sizes["d_model"], sizes["heads"]
    kv_heads = sizes["kv_heads"] if grouped else heads
    rows = []
    for policy, batch, length, kind in sizes["gqa" if grouped else "attention"]:
        keras.config.set_dtype_policy(policy)
        try:
            x = np.random.RandomState(0).normal(size=(batch, length, d)).astype("float32")
            if grouped:
                theirs = keras.layers.GroupQueryAttention(d // heads, heads, kv_heads)
                ours = GroupedQueryAttention(d // heads, heads, kv_heads)
                reference = GroupedQueryAttention(
                    d // heads, heads, kv_heads, flash_attention=False
                )
            else:
                theirs = keras.layers.MultiHeadAttention(heads, d // heads)
                ours = MultiHeadAttention(heads, d // heads)
                reference = MultiHeadAttention(heads, d // heads, flash_attention=False)
            for layer in (theirs, ours, reference):
                layer.build(x.shape, x.shape)
            ours.set_weights(theirs.get_weights())
            reference.set_weights(theirs.get_weights())
            call = _masks(kind, batch, length)
            fns = {
                "keras": attention_step(theirs, x, call),
                "ours": attention_step(ours, x, call),
                "ours (flash_attention=False)": attention_step(reference, x, call),
            }
            t = timed(fns, repeats)
        finally:
            keras.config.set_dtype_policy("float32")
        flops = _flops(batch, length, d, kv_heads * (d // heads), kind)
        rows.append(
            [
                policy,
                f"B {batch}, T {length}, {kind}",
                f"{t['keras'] * 1e3:.2f} ms ({flops / t['keras'] / 1e12:.1f} TFLOP/s)",
                f"{t['keras'] / t['ours']:.2f}x",
                f"{t['keras'] / t['ours (flash_attention=False)']:.2f}x",
            ]
        )
    return rows


def kernel_limit(sizes, repeats):
    """The kernel alone on the first bfloat16 attention case's q/k/v, forward + backward, and
    the bfloat16 matmul rate."""
    import jax.numpy as jnp

    d, heads = sizes["d_model"], sizes["heads"]
    _, batch, length, kind = next(c for c in sizes["attention"] if "bfloat16" in c[0])
    shape = (batch, length, heads, d // heads)
    r = np.random.RandomState(1)
    q, k, v = (jnp.asarray(r.normal(size=shape), jnp.bfloat16) for _ in range(3))
    gpu = jax.devices()[0].platform == "gpu"
    implementation = "cudnn" if gpu else "xla"

    def loss(q, k, v):
        out = jax.nn.dot_product_attention(
            q, k, v, is_causal=kind == "causal", implementation=implementation
        )
        return jnp.sum(out.astype(jnp.float32))

    kernel = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    n = sizes["matmul"]
    a = jnp.asarray(r.normal(size=(n, n)), jnp.bfloat16)
    matmul = jax.jit(lambda a: a @ a)
    t = timed({"kernel": lambda: kernel(q, k, v), "matmul": lambda: matmul(a)}, repeats)
    attention_flops = 3 * 4 * batch * length * length * d * (0.5 if kind == "causal" else 1.0)
    return [
        [
            f"jax.nn.dot_product_attention implementation={implementation!r}, bfloat16, "
            f"B {batch}, T {length}, {kind}, forward + backward",
            f"{t['kernel'] * 1e3:.2f} ms ({attention_flops / t['kernel'] / 1e12:.1f} TFLOP/s)",
        ],
        [
            f"bfloat16 matmul {n} x {n} x {n}",
            f"{t['matmul'] * 1e3:.3f} ms ({2 * n**3 / t['matmul'] / 1e12:.1f} TFLOP/s)",
        ],
    ]


def _kernel_of(fn, *args):
    """Which attention kernel the compiled `fn(*args)` holds: cuDNN's fused attention (a
    `__cudnn$fmha` custom call) or XLA's ops."""
    text = jax.jit(fn).lower(*args).compile().as_text()
    return "cuDNN fmha" if "cudnn$fmha" in text else "XLA"


def fused_checks(sizes):
    """Our fused path (`flash_attention=True`) against our products (`flash_attention=False`) on the
    device, with the same weights: the kernel the compiled gradient holds, the relative error
    `|a - b| / |b|` of the output and of the gradients (input and weights, as one vector), and NaN written
    into the padded positions of the input: whether output and gradients stay finite and
    equal to the clean ones."""
    d, heads = sizes["d_model"], sizes["heads"]
    batch, length = sizes["check"]
    rows = []
    for grouped in (False, True):
        kv_heads = sizes["kv_heads"] if grouped else heads
        for policy in ("float32", "mixed_bfloat16"):
            for kind in ("causal", "padded tails", "window"):
                keras.config.set_dtype_policy(policy)
                try:
                    rows.append(_fused_check(d, heads, kv_heads, grouped, batch, length, kind))
                finally:
                    keras.config.set_dtype_policy("float32")
                rows[-1][:0] = ["GQA" if grouped else "MHA", policy]
    return rows


def _fused_check(d, heads, kv_heads, grouped, batch, length, kind):
    import jax.numpy as jnp

    options = {"sliding_window": length // 8} if kind == "window" else {}
    if grouped:
        make = lambda **kw: GroupedQueryAttention(d // heads, heads, kv_heads, **options, **kw)  # noqa: E731
    else:
        make = lambda **kw: MultiHeadAttention(heads, d // heads, **options, **kw)  # noqa: E731
    ours, reference = make(flash_attention=True), make(flash_attention=False)
    r = np.random.RandomState(3)
    x = r.normal(size=(batch, length, d)).astype("float32")
    for layer in (ours, reference):
        layer.build(x.shape, x.shape)
    reference.set_weights(ours.get_weights())
    weights = [v.value for v in ours.trainable_variables]
    call = _masks(kind if kind != "window" else "causal", batch, length)
    arrays = {k: jnp.asarray(v) for k, v in call.items() if isinstance(v, np.ndarray)}
    flags = {k: v for k, v in call.items() if not isinstance(v, np.ndarray)}
    mask = call.get("query_mask", np.ones((batch, length), bool))
    probe = jnp.asarray(r.normal(size=(batch, length, d)) * mask[..., None], jnp.float32)

    def loss_of(layer):
        def loss(weights, x):
            out = layer.stateless_call(weights, [], x, x, **arrays, **flags)[0]
            return jnp.sum(out.astype(jnp.float32) * probe), out

        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))

    def rel(a, b):
        a, b = (np.asarray(t, np.float64) for t in (a, b))
        return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))

    ours_step = loss_of(ours)
    (_, out), grads = ours_step(weights, jnp.asarray(x))
    (_, want), want_grads = loss_of(reference)(weights, jnp.asarray(x))
    out_err = rel(out * mask[..., None], want * mask[..., None])

    # all gradients as one vector: the key bias's is zero in exact arithmetic (a constant
    # added to every score of a row), so its own relative error measures only rounding
    def flat(tree):
        return np.concatenate([np.ravel(np.asarray(t, np.float64)) for t in jax.tree.leaves(tree)])

    grad_err = rel(flat(grads), flat(want_grads))
    inert = "n/a (no padding)"
    if "query_mask" in call:
        dirty = np.where(mask[..., None], x, np.nan).astype("float32")
        (_, dirty_out), dirty_grads = ours_step(weights, jnp.asarray(dirty))
        leaves = [dirty_out * mask[..., None]] + list(jax.tree.leaves(dirty_grads))
        finite = all(bool(np.isfinite(np.asarray(t, np.float32)).all()) for t in leaves)
        again = ours_step(weights, jnp.asarray(x))[1]  # the clean input once more
        spread = rel(flat(again[0]), flat(grads[0]))
        moved = max(
            rel(dirty_out * mask[..., None], out * mask[..., None]),
            rel(flat(dirty_grads[0]), flat(grads[0])),
        )
        inert = ("finite" if finite else "NOT FINITE") + (
            f", {moved:.1e} from clean (clean run to run {spread:.1e})"
        )
    kernel = _kernel_of(ours_step, weights, jnp.asarray(x))
    return [f"B {batch}, T {length}, {kind}", kernel, f"{out_err:.1e}", f"{grad_err:.1e}", inert]


DUMP = {"dir": None}  # --dump: where the compiled programs are written
PROFILES = {"on": False, "found": []}  # --profile: (label, profiled(...)) of the timed rows


def loop_kernels(fn, *args, name=None):
    """The operations of the compiled `fn(*args)`'s largest `while` body once fused (each
    fusion, custom call, copy, ... one kernel launch per step; parameters, tuples and
    constants left out): what one step of the loop runs."""
    text = jax.jit(fn).lower(*args).compile().as_text()
    if DUMP["dir"] and name:
        with open(os.path.join(DUMP["dir"], name + ".hlo.txt"), "w") as f:
            f.write(text)
    bodies = set(re.findall(r"body=%?([\w.\-]+)", text))
    trivial = ("parameter(", "get-tuple-element(", "tuple(", "constant(", "bitcast(")
    counts, name = {}, None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if head:
            name = head.group(1) if head.group(1) in bodies else None
        elif line.startswith("}"):
            name = None
        elif name is not None and "=" in line:
            op = line.split("=", 1)[1]
            counts[name] = counts.get(name, 0) + (not any(t in op for t in trivial))
    return max(counts.values(), default=0)


def beam_rows(sizes, repeats):
    """Ours against KerasHub's BeamSampler on one GRU step, each compiled whole."""
    try:
        from keras_hub.samplers import BeamSampler
    except ImportError:
        print(
            "\nBeam search vs KerasHub's BeamSampler: skipped, keras_hub is not importable "
            "(a bench-only package: pip install keras-hub)."
        )
        return None
    import types

    from keras_attn.decoding import beam_search

    s = sizes["beam"]
    keras.utils.set_random_seed(0)
    embedding = keras.layers.Embedding(s["vocab"], s["embed"])
    cell = keras.layers.GRUCell(s["hidden"])
    dense = keras.layers.Dense(s["vocab"])
    embedding.build((None,))
    cell.build((None, s["embed"]))
    dense.build((None, s["hidden"]))
    layers = (embedding, cell, dense)
    trainable = [v for layer in layers for v in layer.trainable_variables]
    frozen = [v for layer in layers for v in layer.non_trainable_variables]
    variables = trainable + frozen
    values = [v.value for v in variables]
    batch, beam, length = s["batch"], s["beam"], s["length"]
    h0 = np.random.RandomState(2).normal(size=(batch, s["hidden"])).astype("float32")
    start = np.full((batch,), 1, "int32")

    def step(tokens, state):
        h, _ = cell(embedding(tokens), [state])
        return dense(h), h

    def ours_with(end):
        def ours(values):
            with keras.StatelessScope(list(zip(variables, values))):
                out = beam_search(
                    lambda t, st, i: step(t, st) + (None,),
                    h0,
                    start,
                    end,
                    beam_size=beam,
                    max_length=length,
                )
                return out["sequences"][:, 0]

        return ours

    sampler = BeamSampler(num_beams=beam)
    prompt = np.concatenate([start[:, None], np.zeros([batch, length], "int32")], axis=1)
    model = types.SimpleNamespace(trainable_variables=trainable, non_trainable_variables=frozen)

    def hub_with(end):
        def hub(values):
            with keras.StatelessScope(list(zip(variables, values))):
                return sampler(
                    lambda p, c, i: (lambda out: (out[0], None, out[1]))(step(p[:, i - 1], c)),
                    prompt,
                    cache=h0,
                    index=1,
                    stop_token_ids=None if end < 0 else [end],
                    model=model,
                )[:, 1:]

        return hub

    rows = []
    # no end token (both run a loop of a known count), then an end token (both read whether
    # every row has ended after each step; the random model seldom ends one, so both still run
    # every step)
    for end, label in ((-1, "no end token"), (s["vocab"] - 1, "an end token")):
        ours, hub = ours_with(end), hub_with(end)
        compiled = {"ours": jax.jit(ours), "keras_hub": jax.jit(hub)}
        fns = {name: (lambda fn=fn: fn(values)) for name, fn in compiled.items()}
        t = timed(fns, repeats)
        profile(f"beam search, {label}", fns, repeats)
        best = [np.asarray(compiled[name](values)) for name in ("ours", "keras_hub")]
        same = np.mean(np.all(best[0] == best[1], axis=1))
        tag = "" if end < 0 else "_end"
        rows.append(
            [
                f"B {batch}, K {beam}, V {s['vocab']}, {length} tokens, {label}",
                f"{t['ours'] * 1e3:.2f} ms",
                f"{t['keras_hub'] * 1e3:.2f} ms",
                f"{t['keras_hub'] / t['ours']:.2f}x",
                f"{same:.0%} of rows",
                f"{loop_kernels(ours, values, name='beam_ours' + tag)} / "
                f"{loop_kernels(hub, values, name='beam_keras_hub' + tag)}",
            ]
        )
    return rows


def decode_rows(sizes, repeats):
    """Our Transformer's greedy decoding (the engine's loop compiled whole), tokens/s."""
    from keras_attn.decoding import generate
    from keras_attn.models import Transformer

    s = sizes["decode"]
    keras.utils.set_random_seed(0)
    model = Transformer(
        s["vocab"], s["vocab"], s["layers"], s["d_model"], s["heads"], 4 * s["d_model"]
    )
    r = np.random.RandomState(3)
    source = r.randint(4, s["vocab"], size=(s["batch"], s["source"])).astype("int32")
    model({"source": source, "target_in": source[:, :2]})

    variables = model.variables
    values = [v.value for v in variables]

    def decode(values):
        with keras.StatelessScope(list(zip(variables, values))):
            out = generate(
                model,
                source,
                start_token=1,
                end_token=-1,
                search="greedy",
                max_length=s["length"],
            )
            return out["sequences"]

    compiled = jax.jit(decode)
    t = timed({"decode": lambda: compiled(values)}, repeats)
    tokens = s["batch"] * s["length"]
    return [
        [
            f"B {s['batch']}, source {s['source']}, {s['length']} tokens, {s['layers']}+"
            f"{s['layers']} layers, d {s['d_model']}",
            f"{t['decode'] * 1e3:.1f} ms",
            f"{tokens / t['decode']:.0f}",
        ]
    ]


def _hub_recipe(s):
    """The keras.io English-to-Spanish KerasHub model at the sizes `s`."""
    import keras_hub

    length, vocab, d = s["length"], s["vocab"], s["d_model"]
    source = keras.Input((length,), dtype="int32", name="source")
    target_in = keras.Input((length,), dtype="int32", name="target_in")
    x = keras_hub.layers.TokenAndPositionEmbedding(vocab, length, d, mask_zero=True)(source)
    for _ in range(s["layers"]):
        x = keras_hub.layers.TransformerEncoder(4 * d, s["heads"])(x)
    y = keras_hub.layers.TokenAndPositionEmbedding(vocab, length, d, mask_zero=True)(target_in)
    for _ in range(s["layers"]):
        y = keras_hub.layers.TransformerDecoder(4 * d, s["heads"])(y, x)
    logits = keras.layers.Dense(vocab)(y)
    return keras.Model({"source": source, "target_in": target_in}, logits)


def fit_rows(sizes, repeats):
    """One `fit` step (`train_on_batch`, compiled by Keras with `jax.jit`) in mixed_bfloat16 on
    padded batches: target tokens per second, ours and (when importable) KerasHub's recipe."""
    from keras_attn.models import MaskedSequenceLoss, Transformer

    try:
        import keras_hub  # noqa: F401

        hub = True
    except ImportError:
        hub = False
        print(
            "\nTransformer fit vs the KerasHub recipe: the KerasHub column is skipped, keras_hub "
            "is not importable (a bench-only package: pip install keras-hub)."
        )
    rows = []
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        for s in sizes["fit"]:
            b, t, vocab = s["batch"], s["length"], s["vocab"]
            r = np.random.RandomState(4)
            lengths = r.randint(t // 2, t + 1, size=(b,))
            real = np.arange(t)[None, :] < lengths[:, None]
            source = np.where(real, r.randint(4, vocab, size=(b, t)), 0).astype("int32")
            target = np.where(real, r.randint(4, vocab, size=(b, t)), 0).astype("int32")
            x = {"source": source, "target_in": target}
            fns = {}
            # the default (the fused kernel on an accelerator) and our products: at short
            # sequences the kernel's fixed cost may outweigh the scores it does not write
            for name, flash in (("ours", None), ("products", False)):
                keras.utils.set_random_seed(0)
                model = Transformer(
                    vocab,
                    vocab,
                    s["layers"],
                    s["d_model"],
                    s["heads"],
                    4 * s["d_model"],
                    dropout=0.0,
                    max_length=t,
                    flash_attention=flash,
                )
                model.compile(optimizer="adam", loss=MaskedSequenceLoss())
                fns[name] = lambda model=model: model.train_on_batch(x, target)
            if hub:
                recipe = _hub_recipe(s)
                recipe.compile(
                    optimizer="adam",
                    loss=keras.losses.SparseCategoricalCrossentropy(
                        from_logits=True, ignore_class=0
                    ),
                )
                fns["keras_hub"] = lambda: recipe.train_on_batch(x, target)
            t_ = timed(fns, repeats)
            profile(f"fit, B {b} x {t}", fns, repeats)
            tokens = int(real.sum())
            row = [f"B {b} x {t} tokens, padded tails"]
            row += [f"{tokens / t_[name]:.0f}" for name in ("ours", "products")]
            if hub:
                row += [f"{tokens / t_['keras_hub']:.0f}"]
                row += [f"{t_['keras_hub'] / t_[name]:.2f}x" for name in ("ours", "products")]
            rows.append(row)
    finally:
        keras.config.set_dtype_policy("float32")
    return rows, hub


def table(headers, rows):
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def _checks(sizes, repeats):
    print(
        "\nOur fused path (flash_attention=True) against our products (False), same weights: the "
        "kernel, relative error of the output and of the gradients, NaN in the padding\n"
    )
    headers = ["layer", "policy", "case", "kernel", "output", "gradients", "NaN padding"]
    print(table(headers, fused_checks(sizes)))


ATTENTION_HEADERS = ["policy", "case", "Keras", "ours (default)", "ours flash_attention=False"]


def _attention(sizes, repeats):
    print("\nSelf-attention, forward + backward (ratio = Keras time / ours; > 1: ours faster)\n")
    print(table(ATTENTION_HEADERS, attention_rows(sizes, repeats)))


def _gqa(sizes, repeats):
    print("\nGrouped-query attention vs keras.layers.GroupQueryAttention, forward + backward\n")
    print(table(ATTENTION_HEADERS, attention_rows(sizes, repeats, grouped=True)))


def _kernel(sizes, repeats):
    print("\nThe kernel's limit\n")
    print(table(["what", "time"], kernel_limit(sizes, repeats)))


def _beam(sizes, repeats):
    beam = beam_rows(sizes, repeats)
    if beam is not None:
        print("\nBeam search vs KerasHub's BeamSampler (GRU step, each compiled whole)\n")
        headers = ["case", "ours", "BeamSampler", "ratio", "same best", "ops per step"]
        print(table(headers, beam))
        print_profiles()


def _fit(sizes, repeats):
    fit, hub = fit_rows(sizes, repeats)
    print(
        "\nTransformer fit step, mixed_bfloat16, target tokens/s (ratio = ours / KerasHub; "
        "ours with its defaults and with `flash_attention=False`, our products)\n"
    )
    headers = ["case", "ours tokens/s", "ours, products"]
    if hub:
        headers += ["KerasHub tokens/s", "ratio", "ratio, products"]
    print(table(headers, fit))
    print_profiles()


def _decode(sizes, repeats):
    print("\nOur Transformer, greedy decoding\n")
    print(table(["case", "time", "tokens/s"], decode_rows(sizes, repeats)))


SECTIONS = {
    "checks": _checks,
    "attention": _attention,
    "gqa": _gqa,
    "kernel": _kernel,
    "beam": _beam,
    "fit": _fit,
    "decode": _decode,
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="tiny sizes, a check that it runs")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (5; --small 2)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=list(SECTIONS),
        default=list(SECTIONS),
        help="the sections to run, in the table's order (default: all)",
    )
    parser.add_argument(
        "--dump", default=None, help="a folder to write the compiled beam searches' HLO text to"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also trace the beam and fit rows with jax.profiler: device busy time, kernels, "
        "copies to the host and the heaviest kernels per call",
    )
    args = parser.parse_args(argv)
    DUMP["dir"] = args.dump
    PROFILES["on"] = args.profile
    sizes = SMALL if args.small else FULL
    repeats = args.repeats or (2 if args.small else 5)
    print(f"Device: {device_name()}; JAX {jax.__version__}, Keras {keras.__version__}")
    for name, section in SECTIONS.items():
        if name in args.only:
            section(sizes, repeats)
            sys.stdout.flush()
    if "tensorflow" in sys.modules:
        print("\nNote: TensorFlow was imported by this run.")


if __name__ == "__main__":
    main()
