"""Shape utilities of the decoding engine: static-or-dynamic sizes, tiling, row gathers.

Sizes are Python ints where the graph knows them (so XLA sees static shapes and no op is
added), scalar tensors otherwise.
"""

import tensorflow as tf


def dim(x, axis):
    """Static size of `x` along `axis` when known, else a scalar tensor."""
    size = x.shape[axis]
    return int(size) if size is not None else tf.shape(x)[axis]


def mul(a, b):
    """`a * b` for sizes that may be Python ints or scalar tensors."""
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return tf.cast(a, tf.int32) * tf.cast(b, tf.int32)


def is_one(k):
    """Whether `k` is the Python int 1 (one hypothesis per example: nothing to tile)."""
    return isinstance(k, int) and k == 1


def as_tensor_nest(state):
    return tf.nest.map_structure(tf.convert_to_tensor, state)


def tile_nest(state, multiple):
    """Repeats every leaf `[B, ...] -> [B * multiple, ...]` (row `b * multiple + k`)."""
    if is_one(multiple):
        return state
    return tf.nest.map_structure(lambda x: tf.repeat(x, multiple, axis=0), state)


def gather_rows(x, parents, axis=0):
    """Rows of `x` `[N, ...]` along `parents` `[N]` (None: `x` itself); keeps the static shape.
    `axis`: where the N rows are (1 for a time-major `[T, N]` buffer)."""
    if parents is None:
        return x
    out = tf.gather(x, parents, axis=axis)
    if not tf.executing_eagerly():
        out.set_shape(x.shape)
    return out


def keep_shapes(new, old):
    """Gives each tensor of `new` the static shape of its counterpart in `old`.

    A `while_loop` needs loop variables whose static shape does not change; ops such as gather
    or reshape with a computed shape lose static sizes.
    """

    def fix(n, o):
        if not o.shape.is_compatible_with(n.shape):
            raise ValueError(
                "`step_fn` must return the state with the same shapes it receives "
                "(preallocate caches to max length): a state tensor changed shape between "
                f"decoding steps. Received: state shape {n.shape}, expected {o.shape}"
            )
        if n.dtype != o.dtype:
            raise ValueError(
                "`step_fn` must return the state with the dtypes it receives: a state tensor "
                f"changed dtype between decoding steps. Received: state dtype {n.dtype.name}, "
                f"expected {o.dtype.name}"
            )
        if not tf.executing_eagerly():
            n.set_shape(o.shape)
        return n

    tf.nest.assert_same_structure(new, old)
    return tf.nest.map_structure(fix, new, old)
