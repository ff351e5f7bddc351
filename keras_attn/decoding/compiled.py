"""Compiled once, called many times: the searches and `generate` on JAX (docs/decoding.md,
"Backends").

Called eagerly on JAX, `engine.decode` (so every search: `beam_search`, `greedy_search`,
`sample_search`, `forced_search`, `decode` with a `Strategy`) and `protocol.generate` run as
one jitted program per (step function or model, static settings, padded shapes), built the
first time and kept here, in one bounded cache keyed weakly on the step function (a bound
method: on its object) or the model. A later call with the same key runs the program: it
compiles nothing.

- Static (part of the key, a new value builds a new program): what sets shapes or the
  program's ops: `max_length`, `beam_size` (the strategy's width), `bad_token_ids` given as a
  list, the end token, the start token of `generate`, `report_invalid`, the search or the
  strategy's class, and every other knob at its neutral value (`length_penalty=0`, `top_p=1`,
  ...: off, it adds no op).
- Arguments (a new value compiles nothing): the state, the start tokens, the source mask or
  `generate`'s inputs, the constraints' tensors, the strategy's tensors (`Forced`'s targets,
  the sampling seed), the penalties, controls and sampling knobs away from their neutral value
  (`length_penalty=0.6` and `1.0` run the same program; `min_length`,
  `no_repeat_ngram_size`, `repetition_penalty`, `temperature`, `top_k`, `top_p`: a control
  at its neutral value adds no op, away from it the same ops whatever the value), and the
  variables the step function or the model reads: they go in through a
  `keras.StatelessScope`, so new weights (after `fit`, an `assign`) are used at once and
  compile nothing.
- Buckets: the batch is padded to the next power of two (1, 2, 4, 8, ...) with copies of its
  last row, and `generate`'s integer source ids `[B, S]` to the next power of two of at least
  8 columns with 0 (padding, masked by the model; not beyond a `max_length` the model
  declares); the outputs are cut back. Every row of a search is decoded on its own, so the
  copies never change the real rows' answers (sampling draws each row with its own key).
  Padding happens on the host (NumPy), so a new batch size within a bucket runs no new op.
- Variables: those of the model (`generate`, or a bound method's object when it is a Keras
  layer) and those of the Keras layers and variables the step function's closure holds go in
  as arguments. Any other variable read while tracing (through a global, an attribute) is
  noticed, and the program is traced again with it as an argument: no variable is ever baked
  into the program as a constant. Arrays that are not variables (a NumPy table in a closure)
  are constants of the program; a closure rebound to other objects is another key.
- Checks: the checks that eagerly raise on values (a NaN logit, an id outside the vocabulary)
  are compiled as flags (`backend.collect_checks`) and raised after the call as the same
  `ValueError`.

Nothing here runs on TensorFlow, inside a trace (`jax.jit`, where the caller compiles), or
inside a `keras.StatelessScope` of the caller's.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import math
import re
import types
import weakref

import keras
import numpy as np

from keras_attn.decoding import backend as kb
from keras_attn.decoding import contract
from keras_attn.decoding.config import KNOBS, DecodingConfig

#: programs kept per step function or model (the least recently used is dropped first)
PROGRAMS_PER_OWNER = 32
#: the shortest source bucket of `generate`'s integer inputs
MIN_SOURCE_BUCKET = 8

_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# knobs static at their value, whatever it is: those that set shapes
_STATIC_KNOBS = ("max_length", "beam_size")
# constraint fields with one row per example (padded with the batch)
_PER_EXAMPLE_CONSTRAINTS = ("prefix_ids", "constraint_ids", "constraint_alt_ids", "budgets")
_PRIMITIVE = (bool, int, float, str, bytes, type(None))


#: XLA's options for every search program compiled on the CPU (docs/decoding.md, "What compiles
#: when"): LLVM at optimization level 1 and XLA's loop emitters instead of its fusion emitters
#: halve what the first call of an RNN model's search costs, at the same speed per call within
#: the noise (benchmarks/RESULTS.md, "JAX vs TensorFlow on the CPU"). Set it to `{}` for XLA's
#: defaults; other backends always get theirs.
CPU_COMPILER_OPTIONS: dict = {
    "xla_backend_optimization_level": 1,
    "xla_cpu_use_fusion_emitters": False,
}


# options this process's XLA refused (an older XLA lacks some): left out from then on
_REFUSED: set = set()


def compiler_options() -> dict | None:
    """The options a program compiled now gets: `CPU_COMPILER_OPTIONS` on the CPU but those
    this process's XLA refused; else None (XLA's defaults)."""
    import jax

    if jax.default_backend() != "cpu":
        return None
    options = {k: v for k, v in CPU_COMPILER_OPTIONS.items() if k not in _REFUSED}
    return options or None


def bucket(n: int, minimum: int = 1) -> int:
    """The next power of two >= `n` (and >= `minimum`)."""
    return max(minimum, 1 << max(0, math.ceil(math.log2(max(n, 1)))))


def programs(owner) -> int:
    """How many programs are kept for `owner` (a step function, a bound method or a model)."""
    owner = owner.__self__ if isinstance(owner, types.MethodType) else owner
    return len(_CACHE.get(owner, ()))


# --------------------------------------------------------------------------- applicability
def _applies(*trees) -> bool:
    """JAX, no caller's stateless scope, and every array given is known now (no tracer)."""
    if keras.backend.backend() != "jax":
        return False
    from keras_attn._keras_compat import in_stateless_scope

    if in_stateless_scope():
        return False
    import jax

    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(trees))


def _is_array(x) -> bool:
    import jax

    return isinstance(x, (np.ndarray, jax.Array)) and not isinstance(x, jax.core.Tracer)


# ---------------------------------------------------------------------------------- owners
def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _weak(fn):
    """`fn` behind a weak reference (a bound method: to its object), called through it: a
    program keeps no step function or model alive (the cache is keyed weakly on them)."""
    if isinstance(fn, types.MethodType):
        obj, func = weakref.ref(fn.__self__), fn.__func__
        return lambda *args: func(obj(), *args)
    ref = weakref.ref(fn)
    return lambda *args: ref()(*args)


def _owner(fn):
    """`(owner, key, refs)`: what the cache is keyed weakly on, the hashable rest of the key,
    and the objects whose identity the key holds (kept alive with the program)."""
    if isinstance(fn, types.MethodType):
        return fn.__self__, ("method", fn.__func__), ()
    contents = tuple(_cell(c) for c in (getattr(fn, "__closure__", None) or ()))
    return fn, ("closure", tuple(id(x) for x in contents)), contents


def _variables_in(obj, depth=4, seen=None) -> list:
    """The Keras variables `obj` holds: a layer's, a variable, or those of the layers and
    variables in a function's closure, a bound method's object, a list, tuple or dict."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth < 0:
        return []
    seen.add(id(obj))
    if isinstance(obj, keras.Variable):
        return [obj]
    if isinstance(obj, keras.layers.Layer):
        return list(obj.variables)
    if isinstance(obj, types.MethodType):
        return _variables_in(obj.__self__, depth - 1, seen)
    if isinstance(obj, types.FunctionType):
        items = [_cell(c) for c in (obj.__closure__ or ())]
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    elif isinstance(obj, dict):
        items = list(obj.values())
    else:
        return []
    found = []
    for item in items:
        found += _variables_in(item, depth - 1, seen)
    return found


def _unique(variables) -> list:
    out, ids = [], set()
    for v in variables:
        if id(v) not in ids:
            ids.add(id(v))
            out.append(v)
    return out


def _static(value, refs):
    """`value` as part of a key: itself when it is a primitive (or a tuple of them), else its
    identity (and the object kept alive with the program)."""
    if isinstance(value, _PRIMITIVE) or (
        isinstance(value, tuple) and all(isinstance(v, _PRIMITIVE) for v in value)
    ):
        return value
    refs.append(value)
    return ("object", id(value))


# ------------------------------------------------------------------ settings -> key, arrays
def _neutral(name, value) -> bool:
    """A knob at its default as a Python number: off, resolved when tracing."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value == KNOBS[name].default
    )


def _split_config(config: DecodingConfig, refs, fresh_seed: bool):
    """`(key, arrays)`: the config's static fields as part of a key, and the fields that are
    arguments (every other one)."""
    key, arrays = [], {}
    for field in dataclasses.fields(config):
        name, value = field.name, getattr(config, field.name)
        if name == "seed":
            if value is None and fresh_seed:
                value = kb.fresh_seed()  # a fresh seed per call, as eagerly
            if value is not None:
                arrays[name] = np.asarray(kb.seed_tensor(value))
                continue
        elif name in KNOBS and name not in _STATIC_KNOBS and not _neutral(name, value):
            arrays[name] = np.asarray(value, KNOBS[name].dtype) if not _is_array(value) else value
            continue
        elif name == "bad_token_ids" and _is_array(value):
            arrays[name] = value
            continue
        elif name == "stop_after" and value is not None:  # any limit: one program
            arrays[name] = value if _is_array(value) else np.asarray(value, "int32")
            key.append((name, "given"))
            continue
        key.append((name, _static(value, refs)))
    return tuple(key), arrays


def _split_strategy(strategy, refs):
    """`(static, shared arrays, per-example arrays)` of a strategy's attributes: its tensors
    and its knobs away from neutral are arguments (those it names in `batch_arrays` have a
    batch axis), the rest is part of the key."""
    static, shared, rows = [type(strategy)], {}, {}
    per_example = set(getattr(strategy, "batch_arrays", ()))
    for name, value in sorted(vars(strategy).items()):
        if _is_array(value):
            (rows if name in per_example else shared)[name] = value
        elif name in KNOBS and name not in _STATIC_KNOBS and value is not None:
            if _neutral(name, value):
                static.append((name, value))
            else:
                shared[name] = np.asarray(value, KNOBS[name].dtype)
        else:
            static.append((name, _static(value, refs)))
    return tuple(static), shared, rows


def _split_constraints(constraints):
    """`(shared arrays, per-example arrays)` of a `Constraints` (None: none)."""
    shared, rows = {}, {}
    if constraints is not None:
        for field in dataclasses.fields(constraints):
            value = getattr(constraints, field.name)
            if value is not None:
                (rows if field.name in _PER_EXAMPLE_CONSTRAINTS else shared)[field.name] = value
    return shared, rows


def _fields(constraints):
    return {} if constraints is None else vars(constraints)


def _rebuild_strategy(strategy, arrays):
    clone = copy.copy(strategy)  # the caller's strategy is never prepared nor changed
    for name, value in arrays.items():
        setattr(clone, name, value)
    return clone


def _rebuild_config(config, arrays):
    """`config` (that of the call that built the program: its static fields are the key's)
    with its argument fields the traced `arrays`."""
    return DecodingConfig.build(config, arrays)


def _rebuild_constraints(arrays):
    from keras_attn.decoding.call import Constraints

    return Constraints(**arrays) if arrays else None


# -------------------------------------------------------------------------------- padding
def _pad_rows(tree, batch, padded):
    """Every leaf (batch first) padded from `batch` to `padded` rows with copies of its last
    row, on the host."""
    if padded == batch:
        return tree
    import jax

    def pad(x):
        x = np.asarray(x)
        return np.concatenate([x, np.repeat(x[-1:], padded - batch, axis=0)], axis=0)

    return jax.tree.map(pad, tree)


def _rows_ok(tree, batch) -> bool:
    """Every leaf has `batch` rows first (else no padding: the search reports the leaf)."""
    import jax

    return all(len(np.shape(x)) > 0 and np.shape(x)[0] == batch for x in jax.tree.leaves(tree))


def _arrays(tree):
    """Python numbers and lists of the tree as NumPy arrays (arguments are arrays)."""
    import jax

    return jax.tree.map(lambda x: x if _is_array(x) else np.asarray(x), tree)


def _cut(out, batch, padded, source=None, padded_source=None):
    """The outputs of the real rows (and source columns) of a padded call."""
    if padded == batch and source == padded_source:
        return out
    import jax

    cut = {}
    for key, value in out.items():
        if key in contract.SCALAR_OUTPUTS:
            cut[key] = value
            continue
        value = np.asarray(value)[:batch]
        if key == "alignments" and source != padded_source:
            value = value[..., :source]
        cut[key] = jax.device_put(value)  # a transfer, no program run
    return cut


# ------------------------------------------------------------------------------- programs
class _Recording(keras.StatelessScope):
    """A stateless scope whose mapping is set while tracing; it notes every variable read
    that is not in it (a variable the program would otherwise bake in as a constant)."""

    def __init__(self):
        # variables created while tracing are initialized after the call, outside the trace
        super().__init__(initialize_variables=False)
        self.missed = {}

    def get_current_value(self, variable):
        value = self.state_mapping.get(id(variable))
        if value is None:
            self.missed[id(variable)] = variable
        return value


class _Program:
    """One jitted program: `run(args)` with `variables` as arguments, and its checks."""

    def __init__(self, run, variables):
        self.variables = variables
        self.messages: list = []
        self.scope = _Recording()
        self.refs: tuple = ()

        def traced(values, args):
            with self.scope:
                self.scope.state_mapping = {id(v): x for v, x in zip(self.variables, values)}
                try:
                    with kb.collect_checks() as found:
                        out = run(args)
                finally:
                    self.scope.state_mapping = {}
            self.messages[:] = [message for _, message, _ in found]
            return out, [(ok, tuple(data)) for ok, _, data in found]

        self.traced = traced
        self._jit()

    def _jit(self):
        import jax

        self.options = compiler_options() or {}
        self.jitted = jax.jit(self.traced, compiler_options=self.options or None)

    def __call__(self, args):
        values = [v.value for v in self.variables]
        while True:
            try:
                return self.jitted(values, args)
            except Exception as err:  # JaxRuntimeError (XlaRuntimeError before JAX 0.5)
                refused = re.search(r"No such compile option: '(\w+)'", str(err))
                if refused is None or refused.group(1) not in self.options:
                    raise
                _REFUSED.add(refused.group(1))  # and for every program built from now on
                self._jit()

    def missed(self) -> list:
        """Variables read while tracing that are not arguments."""
        known = {id(v) for v in self.variables}
        return [v for key, v in self.scope.missed.items() if key not in known]


def _first_call(run, args, variables):
    """`(program, outputs)`: traced with `variables` as arguments, and traced again with any
    other variable it read added, until it reads none that is not an argument."""
    from keras_attn._keras_compat import initialize_all_variables

    for _ in range(8):
        program = _Program(run, variables)
        out = program(args)
        initialize_all_variables()  # any the step created, now outside the trace
        missed = program.missed()
        if not missed:
            return program, out
        variables = variables + missed
    raise RuntimeError(  # pragma: no cover (a step reads finitely many variables)
        "The step function kept reading new variables while traced."
    )


def _call(owner, key, run, args, hints, refs):
    """Runs the program of `(owner, key, args' shapes)`, built on first use; None when
    `owner` cannot be referenced weakly (the caller then runs eagerly)."""
    import jax

    leaves, treedef = jax.tree.flatten(args)
    signature = (
        key,
        treedef,
        tuple((tuple(x.shape), str(x.dtype), bool(getattr(x, "weak_type", False))) for x in leaves),
    )
    try:
        table = _CACHE.get(owner)
        if table is None:
            table = _CACHE[owner] = collections.OrderedDict()
    except TypeError:
        return None
    program = table.get(signature)
    if program is None:
        program, (out, flags) = _first_call(run, args, _unique(hints()))
        program.refs = tuple(refs)
        table[signature] = program
        while len(table) > PROGRAMS_PER_OWNER:
            table.popitem(last=False)
    else:
        table.move_to_end(signature)
        out, flags = program(args)
    for (ok, data), message in zip(flags, program.messages):
        if not bool(np.all(np.asarray(ok))):
            raise ValueError(kb.check_message(message, data))
    return out


# ---------------------------------------------------------------------------- entry points
def decode(inputs, strategy, config, constraints, k_axis=True):
    """`engine.decode` as one compiled program (module docstring), or None where this does not
    apply (not JAX, inside a trace): the engine then runs as it is. `inputs`: an
    `engine.Inputs`."""
    step_fn, initial_state, start_tokens, end_token, source_mask = inputs
    if not _applies(
        initial_state,
        start_tokens,
        end_token,
        source_mask,
        _fields(constraints),
        vars(strategy),
        vars(config),
    ):
        return None
    strategy_static_refs: list = []
    shared_c, rows_c = _split_constraints(constraints)
    strategy_static, shared_s, rows_s = _split_strategy(strategy, strategy_static_refs)
    from keras_attn.decoding import engine
    from keras_attn.decoding.constraints import ConstraintState

    batch = int(start_tokens.shape[0])
    # the checks that read values known now, before anything is traced (as eagerly)
    ConstraintState.of(constraints, batch, config.max_length)
    refs = list(strategy_static_refs)
    owner, owner_key, owner_refs = _owner(step_fn)
    refs += owner_refs
    end, end_array = _end_token(end_token)
    config_key, config_arrays = _split_config(config, refs, fresh_seed=False)
    rows = _arrays(
        {
            "state": initial_state,
            "start": start_tokens,
            "mask": source_mask,
            "constraints": rows_c,
            "strategy": rows_s,
        }
    )
    shared = _arrays(
        {"constraints": shared_c, "strategy": shared_s, "config": config_arrays, "end": end_array}
    )
    padded = batch
    if _rows_ok(rows, batch) and _declared(strategy, rows_s, batch):
        padded = bucket(batch)
    args = {"rows": _pad_rows(rows, batch, padded), "shared": shared}
    key = ("decode", owner_key, end, strategy_static, config_key, k_axis)
    try:
        step = _weak(step_fn)
    except TypeError:
        return None  # no weak reference to it: run eagerly

    def run(args):
        rows, shared = args["rows"], args["shared"]
        end_value = end if end_array is None else shared["end"]
        return engine.run(
            engine.Inputs(step, rows["state"], rows["start"], end_value, rows["mask"]),
            _rebuild_strategy(strategy, {**shared["strategy"], **rows["strategy"]}),
            _rebuild_config(config, shared["config"]),
            _rebuild_constraints({**shared["constraints"], **rows["constraints"]}),
            k_axis,
        )

    out = _call(owner, key, run, args, lambda: _variables_in(step_fn), refs)
    return None if out is None else _cut(out, batch, padded)


def generate(model, inputs, start_token, end_token, search, config, constraints):
    """`protocol.generate` (encode, state, search) as one compiled program with the model's
    variables as arguments (module docstring), or None where this does not apply."""
    from keras_attn.decoding import strategies

    refs: list = []
    strategy = search if isinstance(search, strategies.Strategy) else None
    if not _applies(
        inputs,
        start_token,
        end_token,
        _fields(constraints),
        vars(strategy) if strategy is not None else None,
        vars(config),
    ):
        return None
    shared_c, rows_c = _split_constraints(constraints)
    strategy_static, shared_s, rows_s = (
        _split_strategy(strategy, refs) if strategy is not None else (search, {}, {})
    )
    from keras_attn.decoding import protocol

    inputs = inputs if _is_array(inputs) else np.asarray(inputs)
    if len(inputs.shape) == 0:
        return None  # the model reports it
    batch = int(inputs.shape[0])
    start, start_array = _end_token(start_token)
    end, end_array = _end_token(end_token)
    config_key, config_arrays = _split_config(
        config, refs, fresh_seed=strategy is None and search == "sample"
    )
    rows = _arrays({"inputs": inputs, "constraints": rows_c, "strategy": rows_s})
    shared = _arrays(
        {
            "constraints": shared_c,
            "strategy": shared_s,
            "config": config_arrays,
            "start": start_array,
            "end": end_array,
        }
    )
    padded = batch
    if _rows_ok(rows, batch) and (strategy is None or _declared(strategy, rows_s, batch)):
        padded = bucket(batch)
    rows = _pad_rows(rows, batch, padded)
    source = padded_source = None
    if len(inputs.shape) == 2 and np.issubdtype(np.dtype(str(inputs.dtype)), np.integer):
        source = int(inputs.shape[1])
        padded_source = bucket(source, MIN_SOURCE_BUCKET)
        limit = getattr(model, "max_length", None)
        if isinstance(limit, int) and padded_source > limit:
            padded_source = source
        if padded_source > source:
            ids = np.asarray(rows["inputs"])
            rows["inputs"] = np.pad(ids, [(0, 0), (0, padded_source - source)])
    args = {"rows": rows, "shared": shared}
    key = ("generate", start, end, strategy_static, config_key)
    try:
        model_ref = weakref.ref(model)
    except TypeError:
        return None

    def run(args):
        rows, shared = args["rows"], args["shared"]
        how = search
        if strategy is not None:
            how = _rebuild_strategy(strategy, {**shared["strategy"], **rows["strategy"]})
        return protocol.generate(
            model_ref(),
            rows["inputs"],
            start if start_array is None else shared["start"],
            end if end_array is None else shared["end"],
            how,
            config=_rebuild_config(config, shared["config"]),
            constraints=_rebuild_constraints({**shared["constraints"], **rows["constraints"]}),
        )

    out = _call(model, key, run, args, lambda: list(model.variables), refs)
    return None if out is None else _cut(out, batch, padded, source, padded_source)


def _end_token(token):
    """`(static, array)`: a token known now as a Python int (part of the key), else the array
    (an argument)."""
    value = kb.static_value(token)
    if (
        value is not None
        and np.ndim(value) == 0
        and np.issubdtype(np.asarray(value).dtype, np.integer)
    ):
        return int(value), None
    return None, token if _is_array(token) else np.asarray(token)


def _declared(strategy, rows, batch) -> bool:
    """Whether the batch may be padded for `strategy`: each of its tensors with `batch` rows
    first is one it names in `batch_arrays` (its other tensors have no batch axis)."""
    declared = set(getattr(strategy, "batch_arrays", ()))
    return all(
        name in declared
        for name, value in vars(strategy).items()
        if _is_array(value) and len(np.shape(value)) > 0 and np.shape(value)[0] == batch
    )
