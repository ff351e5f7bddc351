"""Shape utilities of the decoding engine: static-or-dynamic sizes, tiling, row gathers.

Sizes are Python ints where the graph knows them (so XLA sees static shapes and no op is
added), scalar tensors otherwise (TensorFlow only: JAX shapes are always static).

A state that is a dict with the key `PER_EXAMPLE` (`"per_example"`) keeps the nest under it
once per example, `[B, ...]`: it is neither tiled nor gathered along the parents
(docs/decoding.md, "Per-example state").
"""

from collections.abc import Mapping

from keras import ops

from keras_attn.decoding import backend as kb

dim = kb.dim


def mul(a, b):
    """`a * b` for sizes that may be Python ints or scalar tensors."""
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return ops.cast(a, "int32") * ops.cast(b, "int32")


def is_one(k):
    """Whether `k` is the Python int 1 (one hypothesis per example: nothing to tile)."""
    return isinstance(k, int) and k == 1


def as_tensor_nest(state):
    return kb.map_structure(kb.convert, state)


PER_EXAMPLE = "per_example"


def has_per_example(state):
    """Whether `state` is a dict holding a per-example part (`state["per_example"]`)."""
    return isinstance(state, Mapping) and PER_EXAMPLE in state


def per_example_leaves(state):
    """Per leaf of `state` (flattened order): True for the leaves under `"per_example"`."""
    if not has_per_example(state):
        return [False] * len(kb.flatten(state))
    marked = {
        key: kb.map_structure(lambda _, per=key == PER_EXAMPLE: per, value)
        for key, value in state.items()
    }
    return [bool(x) for x in kb.flatten(marked)]


def tile_nest(state, multiple):
    """Repeats every leaf `[B, ...] -> [B * multiple, ...]` (row `b * multiple + k`), but
    those under `state["per_example"]`, which keep their B rows."""
    if is_one(multiple):
        return state

    def tile(x):
        return ops.repeat(x, multiple, axis=0)

    if not has_per_example(state):
        return kb.map_structure(tile, state)
    leaves = [x if per else tile(x) for x, per in zip(kb.flatten(state), per_example_leaves(state))]
    return kb.pack(state, leaves)


def gather_rows(x, parents, axis=0):
    """Rows of `x` `[N, ...]` along `parents` `[N]` (None: `x` itself); keeps the static shape.
    `axis`: where the N rows are (1 for a time-major `[T, N]` buffer)."""
    if parents is None:
        return x
    return kb.set_static_shape(kb.take(x, parents, axis=axis), x.shape)


def keep_shapes(new, old):
    """Gives each tensor of `new` the static shape of its counterpart in `old`.

    A `while_loop` needs loop variables whose static shape does not change; ops such as gather
    or reshape with a computed shape lose static sizes.
    """

    def fix(n, o):
        if not kb.compatible(n.shape, o.shape):
            raise ValueError(
                "`step_fn` must return the state with the same shapes it receives "
                "(preallocate caches to max length): a state tensor changed shape between "
                f"decoding steps. Received: state shape {n.shape}, expected {o.shape}"
            )
        if kb.dtype_name(n) != kb.dtype_name(o):
            raise ValueError(
                "`step_fn` must return the state with the dtypes it receives: a state tensor "
                f"changed dtype between decoding steps. Received: state dtype "
                f"{kb.dtype_name(n)}, expected {kb.dtype_name(o)}"
            )
        return kb.set_static_shape(n, o.shape)

    kb.assert_same_structure(new, old)
    return kb.map_structure(fix, new, old)
