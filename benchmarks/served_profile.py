"""Served beam search, plain vs XLA: where each call's time goes, and what bounds the ratio.

The exports, inputs and settings of `benchmarks/served_xla.py` (a Transformer 2 + 2 layers,
d_model 128, and an `RNNSeq2Seq` LSTM 128 with Bahdanau attention; each exported with and without
`xla=("beam_search",)`; K=4, max_length 32; batch 1 and 32), loaded in a fresh process that
imports only TensorFlow and tensorflow_text, as a server does (loaded again for each batch).
Per model and batch:

- the wall time per call of signatures `beam_search` (plain) and `beam_search_xla`, interleaved
  round by round, and their ratio (plain / XLA);
- five calls of each signature, one TensorFlow profiler trace per call (read from its XPlane
  file), each instant of each thread given to the innermost event running then. Plain: the
  TensorFlow kernels (`name:OpType` events) by kind of op, and the executor's own time between
  them ("dispatch / control": scheduling, the loop's Enter / Exit / Switch / Merge /
  NextIteration, which have no kernel events, and the kernels the executor has found to take a
  few microseconds, which it runs inline without one). XLA: the compiled program's thunks (one
  event per HLO instruction run, named after it), grouped by the instruction (from the
  program XLA dumps with `--xla_dump_to`): a dot, or a fusion holding one, is a matmul;
  otherwise the TensorFlow op it came from (its metadata), else its opcode; the thunk
  executor's own time is dispatch; waiting for the program is not counted; the TensorFlow ops
  outside it (tokenizer, padding, checks) are grouped as in the plain signature. Shares are
  of the busy time so counted (both executors use both cores, so it exceeds the wall time),
  the medians over the five calls;
- the time the program's dots run: the union of their thunks' intervals over the call, so a
  lower bound of the XLA call's time; likewise dots with the gathers and scatters;
- the same dots alone: an XLA function of only the program's dots (their shapes and dimension
  numbers from its HLO, each run as often per call as in the trace, the per-step ones in a loop
  of as many iterations), traced the same way.

The XLA call cannot be shorter than its dots, so plain time / dot time bounds the ratio; plain
time / (dots + gathers and scatters) bounds it tighter, the gathers being the search's
reordering of the caches along the beam parents. The profiler adds a little to every event:
the traced dispatch shares are upper estimates. A benchmark, not a test: nothing is asserted.

    .venv/bin/python benchmarks/served_profile.py [--repeats N]
"""

from __future__ import annotations

import glob
import heapq
import json
import math
import os
import re
import statistics
import sys
import tempfile

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common, served_xla

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CATEGORIES = (
    "matmul",
    "gather / scatter",
    "transpose / copy / slice",
    "element-wise",
    "reduction / softmax / top-k",
    "control flow / dispatch",
    "tokenizer / strings",
    "other",
)
MATMUL, GATHER, MOVE, ELEMENTWISE, REDUCTION, CONTROL, STRINGS, OTHER = CATEGORIES

# TensorFlow op types (after dropping a leading "_" and the oneDNN prefixes "MklNative" / "Mkl").
_TF_OPS = {
    MATMUL: "MatMul BatchMatMul BatchMatMulV2 BatchMatMulV3 FusedMatMul Einsum Conv2D "
    "FusedConv2D Conv3D",
    GATHER: "GatherV2 Gather GatherNd ResourceGather TensorScatterUpdate TensorScatterAdd "
    "TensorScatterMax TensorScatterMin ScatterNd ScatterUpdate ResourceScatterUpdate",
    MOVE: "Transpose ConcatV2 Concat Pack Unpack Split SplitV Slice StridedSlice Tile Pad PadV2 "
    "MirrorPad ReverseV2 BroadcastTo Fill Reshape ExpandDims Squeeze ZerosLike OnesLike Range "
    "Copy Snapshot",
    ELEMENTWISE: "AddV2 Add AddN Sub Mul RealDiv Div DivNoNan FloorDiv FloorMod Mod Maximum "
    "Minimum Select SelectV2 Tanh Sigmoid Exp Log Log1p Relu Relu6 Elu Gelu Softplus BiasAdd "
    "Cast Equal NotEqual Less LessEqual Greater GreaterEqual LogicalAnd LogicalOr LogicalNot "
    "Square Sqrt Rsqrt Pow Neg Abs Sign Sin Cos Erf SquaredDifference IsFinite IsNan Round "
    "Floor Ceil Reciprocal ClipByValue",
    REDUCTION: "Sum Mean Max Min Prod All Any Softmax LogSoftmax TopKV2 TopK ArgMax ArgMin "
    "Cumsum Cumprod",
    CONTROL: "While StatelessWhile If StatelessIf Enter Exit Switch Merge NextIteration LoopCond "
    "PartitionedCall StatefulPartitionedCall NoOp Identity IdentityN ControlTrigger",
}
TF_CATEGORY = {op: cat for cat, ops in _TF_OPS.items() for op in ops.split()}
_STRING_HINTS = ("String", "Unicode", "Ragged", "Regex", "LookupTable", "Substr", "SegmentJoin")

# HLO opcodes, for the instructions whose TensorFlow op says nothing (copies added by XLA).
_HLO_OPS = {
    MATMUL: "dot convolution",
    GATHER: "gather scatter dynamic-slice dynamic-update-slice",
    MOVE: "copy transpose concatenate slice pad broadcast reverse bitcast reshape iota",
    REDUCTION: "reduce reduce-window sort",
    CONTROL: "while conditional call tuple get-tuple-element",
}
HLO_CATEGORY = {op: cat for cat, ops in _HLO_OPS.items() for op in ops.split()}

_OP_EVENT = re.compile(r"^[\w./-]+:(_?[A-Za-z]\w*)$")
_HLO_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s.*\{\s*$")
_HLO_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(\([^()]*\)|\w+\[[\d,]*\](?:\{[^}]*\})?)\s+"
    r"([\w\-]+)\((.*?)\)(.*)$"
)
DISPATCH_EVENTS = {
    "ExecutorState::Process": "TensorFlow executor",
    "ThunkExecutor::Execute": "XLA thunk executor",
    "CpuExecutable::ExecuteAsyncOnStream": "XLA thunk executor",
}
WAIT_EVENTS = ("BlockUntilReady",)


def tf_category(op_type):
    op = op_type.lstrip("_").replace("MklNative", "").replace("Mkl", "")
    if op in TF_CATEGORY:
        return TF_CATEGORY[op]
    if any(hint in op for hint in _STRING_HINTS):
        return STRINGS
    return OTHER


# ------------------------------------------------------------------------------ HLO reading
def parse_hlo(paths):
    """`{instruction name: {"dims", "opcode", "operands", "attrs", "computation"}}` and
    `{computation: [instruction names]}` of XLA's optimized HLO text files."""
    instructions, computations, current = {}, {}, None
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                match = _HLO_INSTRUCTION.match(line)
                if match:
                    name, shape, opcode, operands, attrs = match.groups()
                    dims = re.match(r"\w+\[([\d,]*)\]", shape)
                    instructions[name] = {
                        "dims": [int(d) for d in dims.group(1).split(",") if d] if dims else None,
                        "opcode": opcode,
                        "operands": re.findall(r"%([\w.\-]+)", operands),
                        "attrs": attrs,
                        "computation": current,
                    }
                    computations.setdefault(current, []).append(name)
                    continue
                match = _HLO_COMPUTATION.match(line)
                if match:
                    current = match.group(1)
    return instructions, computations


def _dots(name, instructions, computations):
    """The dot instructions a thunk runs: itself, or those of its fused computation."""
    ins = instructions[name]
    if ins["opcode"] in ("dot", "convolution"):
        return [name]
    called = re.search(r"calls=%([\w.\-]+)", ins["attrs"])
    if ins["opcode"] == "fusion" and called:
        members = computations.get(called.group(1), [])
        return [n for n in members if instructions[n]["opcode"] in ("dot", "convolution")]
    return []


def hlo_category(name, instructions, computations):
    ins = instructions[name]
    opcode = ins["opcode"]
    if HLO_CATEGORY.get(opcode) == CONTROL:
        return CONTROL
    if _dots(name, instructions, computations) or "matmul" in ins["attrs"].lower():
        return MATMUL
    op_type = re.search(r'op_type="(\w+)"', ins["attrs"])
    category = tf_category(op_type.group(1)) if op_type else OTHER
    if category not in (OTHER, CONTROL):
        return category
    if opcode in HLO_CATEGORY:
        return HLO_CATEGORY[opcode]
    if opcode == "custom-call" and "TopK" in ins["attrs"]:
        return REDUCTION
    called = re.search(r"calls=%([\w.\-]+)", ins["attrs"])
    if opcode == "fusion" and called:
        fused = {instructions[n]["opcode"] for n in computations.get(called.group(1), [])}
        for cat in (GATHER, REDUCTION, MOVE):
            if any(HLO_CATEGORY.get(op) == cat for op in fused):
                return cat
        return ELEMENTWISE
    return OTHER


def dot_einsum(name, instructions):
    """A dot instruction as `(equation, lhs dims, rhs dims)` of `tf.einsum`."""
    ins = instructions[name]
    lhs, rhs = (instructions[o]["dims"] for o in ins["operands"][:2])

    def dims(key):
        found = re.search(key + r"=\{([\d,]*)\}", ins["attrs"])
        return [int(d) for d in found.group(1).split(",") if d] if found else []

    letters = iter("abcdefghijklmnopqrstuvwxyz")
    a, b, out = [None] * len(lhs), [None] * len(rhs), []
    for i, j in zip(dims("lhs_batch_dims"), dims("rhs_batch_dims")):
        a[i] = b[j] = c = next(letters)
        out.append(c)
    for i, j in zip(dims("lhs_contracting_dims"), dims("rhs_contracting_dims")):
        a[i] = b[j] = next(letters)
    for side in (a, b):
        for i, c in enumerate(side):
            if c is None:
                side[i] = c = next(letters)
                out.append(c)
    return f"{''.join(a)},{''.join(b)}->{''.join(out)}", lhs, rhs


# ----------------------------------------------------------------------------- trace reading
def read_trace(logdir):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
        with open(path, "rb") as f:
            space.MergeFromString(f.read())
    return space


WAIT = "wait"


class Classifier:
    """Event name -> `(key, category)`, `WAIT` (a thread blocked on another's work), or None.
    A key is `("op", OpType)` for a TensorFlow kernel, `("thunk", name)` for an XLA thunk (an
    instruction of the program's HLO), or `("dispatch", which)` for the TensorFlow executor's or
    XLA's thunk executor's own time."""

    def __init__(self, instructions=None, computations=None):
        self.instructions, self.computations = instructions or {}, computations or {}
        self.cache = {}

    def __call__(self, name):
        if name not in self.cache:
            self.cache[name] = self._classify(name)
        return self.cache[name]

    def _classify(self, name):
        match = _OP_EVENT.match(name)
        if match:
            return ("op", match.group(1)), tf_category(match.group(1))
        if name in self.instructions:
            category = hlo_category(name, self.instructions, self.computations)
            return ("thunk", name), category
        if name in DISPATCH_EVENTS:
            return ("dispatch", DISPATCH_EVENTS[name]), CONTROL
        if name in WAIT_EVENTS:
            return WAIT
        return None


def self_times(space, classify):
    """`(totals, intervals)` of one trace: `totals[key] = [self picoseconds, count, category]`;
    `intervals[category]` the `(start, end)` picoseconds of its events on every thread.

    On each thread, every instant belongs to the innermost classified event running then (the
    latest started): other events (thread-pool bookkeeping inside a kernel) count as part of
    what encloses them; instants outside any classified event (the caller waiting for the
    call) and inside a wait are not counted."""
    totals, intervals = {}, {}
    for plane in space.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            origin = line.timestamp_ns * 1000
            items = []
            for event in line.events:
                found = classify(names.get(event.metadata_id, ""))
                if found is None:
                    continue
                start = origin + event.offset_ps
                end = start + event.duration_ps
                if found != WAIT:
                    key, category = found
                    entry = totals.setdefault(key, [0, 0, category])
                    entry[1] += 1
                    intervals.setdefault(category, []).append((start, end))
                items.append((start, end, None if found == WAIT else found[0]))
            items.sort(key=lambda item: (item[0], -item[1]))
            active, ends, now, i = [], [], None, 0
            while i < len(items) or ends:
                next_start = items[i][0] if i < len(items) else math.inf
                next_end = ends[0][0] if ends else math.inf
                t = min(next_start, next_end)
                if active and now is not None:
                    owner = items[active[-1]][2]
                    if owner is not None:
                        totals[owner][0] += t - now
                now = t
                if next_end <= next_start:
                    active.remove(heapq.heappop(ends)[1])
                else:
                    active.append(i)
                    heapq.heappush(ends, (items[i][1], i))
                    i += 1
    return totals, intervals


def union_ps(intervals):
    """Picoseconds during which at least one of `intervals` runs."""
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def summarize(traces, classify):
    """Per-call traces -> `{"categories": {category: ms}, "matmul_span": ms,
    "matmul_gather_span": ms, "top": [(ms, runs, category, name)], "runs": {key: runs}}`:
    medians over the calls, except `top` and `runs` (means)."""
    per_call, spans, spans_mg, summed = [], [], [], {}
    for space in traces:
        totals, intervals = self_times(space, classify)
        by_category = {c: 0.0 for c in CATEGORIES}
        for key, (ps, n, category) in totals.items():
            by_category[category] += ps / 1e9
            entry = summed.setdefault(key, [0.0, 0, category])
            entry[0] += ps / 1e9
            entry[1] += n
        per_call.append(by_category)
        spans.append(union_ps(intervals.get(MATMUL, [])) / 1e9)
        spans_mg.append(union_ps(intervals.get(MATMUL, []) + intervals.get(GATHER, [])) / 1e9)
    calls = len(traces)
    top = sorted(
        (
            (ms / calls, n / calls, cat, f"({k[1]} dispatch)" if k[0] == "dispatch" else k[1])
            for k, (ms, n, cat) in summed.items()
        ),
        reverse=True,
    )
    return {
        "categories": {c: statistics.median(d[c] for d in per_call) for c in CATEGORIES},
        "matmul_span": statistics.median(spans),
        "matmul_gather_span": statistics.median(spans_mg),
        "top": top[:12],
        "runs": {k: n / calls for k, (_, n, _) in summed.items()},
    }


# ------------------------------------------------------------------------ the loading process
def trace_calls(fn, calls):
    """One profiler trace per call of `fn` (after the caller's warm-up)."""
    import shutil

    import tensorflow as tf

    options = tf.profiler.experimental.ProfilerOptions(
        host_tracer_level=2, python_tracer_level=0, device_tracer_level=0
    )
    traces = []
    for _ in range(calls):
        logdir = tempfile.mkdtemp(prefix="served_profile_")
        try:
            tf.profiler.experimental.start(logdir, options=options)
            try:
                common.block(fn())
            finally:
                tf.profiler.experimental.stop()
            traces.append(read_trace(logdir))
        finally:
            shutil.rmtree(logdir, ignore_errors=True)
    return traces


def _new_hlo(dump, seen):
    paths = set(glob.glob(os.path.join(dump, "*after_optimizations.txt")))
    new = sorted(paths - seen)
    seen.update(new)
    return new


def dots_alone(dots, dump, seen, calls):
    """Runs `dots` (`[(equation, lhs dims, rhs dims, runs per call)]`) alone under XLA: the dots
    that run n times per call in a loop of n iterations, each with one operand (the smaller)
    shifted by the loop's running value, so that none is computed once for all iterations.
    Returns the median over `calls` traced calls of the time its dot thunks run (ms)."""
    import tensorflow as tf

    groups, operands = {}, []
    for i, (equation, lhs, rhs, runs) in enumerate(dots):
        a = tf.random.stateless_normal(lhs, seed=[1, i])
        b = tf.random.stateless_normal(rhs, seed=[2, i])
        operands.append((a, b))
        groups.setdefault(runs, []).append((i, equation, math.prod(lhs) <= math.prod(rhs)))

    def program(operands, s):
        for runs, items in sorted(groups.items()):

            def body(step, s, items=items):
                total = s
                for i, equation, shift_lhs in items:
                    a, b = operands[i]
                    a, b = (a + s, b) if shift_lhs else (a, b + s)
                    total = total + tf.reduce_sum(tf.einsum(equation, a, b))
                return step + 1, total * 1e-30

            _, s = tf.while_loop(lambda step, s, runs=runs: step < runs, body, (0, s))
        return s

    compiled = tf.function(program, jit_compile=True, autograph=False)
    zero = tf.constant(0.0)
    for _ in range(3):
        common.block(compiled(operands, zero))
    classify = Classifier(*parse_hlo(_new_hlo(dump, seen)))
    return summarize(trace_calls(lambda: compiled(operands, zero), calls), classify)["matmul_span"]


def worker(arguments):
    """Runs in the fresh process (see `measure`); prints `RESULT <json>`."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the ops the server links)

    args = json.loads(arguments)
    dump, seen = args["dump"], set()
    knobs = dict(
        beam_size=tf.constant(args["beam"]),
        max_length=tf.constant(args["max_length"]),
        length_penalty=tf.constant(0.6),
        coverage_penalty=tf.constant(0.0),
    )
    calls = args["traced_calls"]
    out = {}
    for batch in args["batches"]:
        # Loaded again for each batch: TensorFlow's executor learns which kernels are cheap
        # from the calls it has run and stops tracing those, so a batch-32 profile must not
        # follow batch-1 calls of the same functions.
        loaded = {k: tf.saved_model.load(args[k]) for k in ("plain", "xla")}
        sigs = {
            "plain": loaded["plain"].signatures["beam_search"],
            "xla": loaded["xla"].signatures["beam_search_xla"],
        }
        inputs = tf.constant(args["texts"][:batch])
        fns = {
            name: (lambda fn=fn: fn(inputs=inputs, **knobs)["scores"]) for name, fn in sigs.items()
        }
        a, b = sigs["plain"](inputs=inputs, **knobs), sigs["xla"](inputs=inputs, **knobs)
        same = bool(np.all(a["outputs"].numpy() == b["outputs"].numpy()))
        instructions, computations = parse_hlo(_new_hlo(dump, seen))  # the compiled program
        times, samples = common.interleaved(
            fns, repeats=args["repeats"], warmup=2, min_time=args["min_time"], return_samples=True
        )
        row = {
            "same": same,
            "wall": {k: v * 1e3 for k, v in times.items()},
            "ratio": common.paired_ratio(samples, "plain", "xla"),
        }
        for name, fn in fns.items():
            classify = Classifier(instructions, computations) if name == "xla" else Classifier()
            row[name] = summarize(trace_calls(fn, calls), classify)
        # The compiled program's dots, each as often per call as it ran.
        dots = []
        for (kind, name), runs in row["xla"]["runs"].items():
            if kind == "thunk":
                for dot in _dots(name, instructions, computations):
                    dots.append((*dot_einsum(dot, instructions), max(1, round(runs))))
        for name, kind in (("plain", "op"), ("xla", "thunk")):
            runs = row[name].pop("runs") if name == "plain" else row[name]["runs"]
            row[name]["launches"] = sum(n for (k, _), n in runs.items() if k == kind)
        row["xla"].pop("runs")
        row["dots"] = len(dots)
        row["dots_alone"] = dots_alone(dots, dump, seen, calls)
        out[str(batch)] = row
    out["modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "keras_attn")
    print("RESULT " + json.dumps(out))


def measure(plain, xla, sentences, repeats, dump):
    """Runs `worker` in a fresh process (XLA dumping its optimized programs into `dump`)."""
    args = dict(
        plain=plain,
        xla=xla,
        dump=dump,
        texts=sentences[: max(served_xla.BATCHES)],
        beam=served_xla.BEAM,
        max_length=served_xla.MAX_LENGTH,
        batches=list(served_xla.BATCHES),
        repeats=repeats,
        min_time=0.2,
        traced_calls=5,
    )
    here = os.path.join(ROOT, "benchmarks")
    code = (  # the `benchmarks` package registered from its folder, as the parent runs it
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('benchmarks', "
        f"{os.path.join(here, '__init__.py')!r}, submodule_search_locations=[{here!r}]); "
        "sys.modules['benchmarks'] = importlib.util.module_from_spec(spec); "
        "spec.loader.exec_module(sys.modules['benchmarks']); "
        "from benchmarks.served_profile import worker; worker(sys.argv[1])"
    )
    return served_xla.run_worker(code, args, f"--xla_dump_to={dump} --xla_dump_hlo_as_text")


# ------------------------------------------------------------------------------- the report
SHORT = {
    MATMUL: "matmul",
    GATHER: "gather/scatter",
    MOVE: "transpose/copy",
    ELEMENTWISE: "element-wise",
    REDUCTION: "reduce/softmax/top-k",
    CONTROL: "dispatch/control",
    STRINGS: "strings",
    OTHER: "other",
}


def _pct(part, whole):
    return f"{100 * part / whole:.0f}%" if whole else "n/a"


def _times(plain, part):
    return f"{plain / part:.1f}x" if part else "n/a"


def report(results):
    """The tables of `run` from `[(model, worker result)]`."""
    bound_rows, share_rows, detail_lines = [], [], []
    for short, result in results:
        for batch in served_xla.BATCHES:
            r = result[str(batch)]
            plain_ms, xla = r["wall"]["plain"], r["xla"]
            bound_rows.append(
                (
                    short,
                    batch,
                    f"{r['ratio']:.2f}x",
                    _times(plain_ms, xla["matmul_span"]),
                    _times(plain_ms, xla["matmul_gather_span"]),
                    _times(plain_ms, r["dots_alone"]),
                    _pct(xla["matmul_span"], r["wall"]["xla"]),
                    f"{xla['launches']:.0f}",
                    "yes" if r["same"] else "NO",
                )
            )
            for name, label in (("plain", "beam_search"), ("xla", "beam_search_xla")):
                cats = r[name]["categories"]
                busy = sum(cats.values())
                share_rows.append(
                    (short, batch, label, f"{r[name]['launches']:.0f}")
                    + tuple(_pct(cats[c], busy) for c in CATEGORIES)
                )
                top = "; ".join(
                    f"{n} ({SHORT[c]}) {ms:.2f} ms x{count:.0f}"
                    for ms, count, c, n in r[name]["top"][:6]
                )
                detail_lines.append(
                    f"- {short}, batch {batch}, {label}: wall {r['wall'][name]:.1f} ms, traced "
                    f"busy {busy:.1f} ms; {top}"
                )
            detail_lines.append(
                f"- {short}, batch {batch}: XLA dots {xla['matmul_span']:.1f} ms, with gathers "
                f"and scatters {xla['matmul_gather_span']:.1f} ms, the same {r['dots']} dots "
                f"alone {r['dots_alone']:.1f} ms; plain matmuls {r['plain']['matmul_span']:.1f} ms"
            )
    return (
        common.table(
            [
                "model",
                "batch",
                "ratio (plain / XLA)",
                "plain / XLA dots",
                "plain / (XLA dots + gathers, scatters)",
                "plain / same dots alone",
                "XLA dots / XLA wall",
                "XLA thunks per call",
                "same n-best",
            ],
            bound_rows,
        ),
        common.table(
            ["model", "batch", "signature", "traced kernels or thunks per call"]
            + [SHORT[c] for c in CATEGORIES],
            share_rows,
        ),
        "\n".join(detail_lines),
    )


def run(repeats=3):
    models, tokenizer, sentences = served_xla.build_models()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (description, model) in enumerate(models):
            plain = served_xla.export(model, tokenizer, os.path.join(tmp, f"m{i}_plain"), xla=False)
            xla = served_xla.export(model, tokenizer, os.path.join(tmp, f"m{i}_xla"), xla=True)
            dump = os.path.join(tmp, f"dump{i}")
            os.makedirs(dump)
            result = measure(plain, xla, sentences, repeats, dump)
            if result.pop("modules"):
                raise RuntimeError("the loading process imported keras_attn")
            results.append((description.split(" (")[0], result))
    bounds, shares, details = report(results)
    text = (
        "### Served beam search: what bounds the XLA speed-up\n\n"
        f"Models and settings of `served_xla.py` (K={served_xla.BEAM}, max_length "
        f"{served_xla.MAX_LENGTH}), each export loaded in a fresh process and called by "
        "signature. Ratio: plain / XLA wall time per call (medians, interleaved). The XLA call "
        "cannot be shorter than the time its dots run (the union of their thunks over the "
        "call, from the trace), so plain / XLA dots bounds the ratio; adding the gathers and "
        "scatters (the search's reordering of the caches) bounds it tighter. Same dots alone: "
        "the program's dots compiled by themselves.\n\n"
        + bounds
        + "\n\nShares of the traced busy time per call (kernels or thunks, plus dispatch: the "
        "executors' own time between them, loop control included):\n\n"
        + shares
        + "\n\nLargest items (self ms per call, runs per call) and the dot times:\n\n"
        + details
        + f"\n\nLoad average (1, 5, 15 min): {common.load_average()}"
    )
    return text, {}


if __name__ == "__main__":
    common.main(run, __doc__, default_repeats=3)
