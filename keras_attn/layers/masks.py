"""Mask helpers shared by `MultiHeadAttention` and the Transformer layers.

All masks are bool tensors, True where a position may be attended to; None
means "no mask". Positions are 0-based and count a key/value cache's offset
(see docs/multi_head.md).
"""

import contextlib

from keras import ops

from keras_attn import _keras_compat as keras_backend  # Keras masks: no public accessor
from keras_attn.layers import scoring


def logical_and(a, b):
    """`a AND b`, where None stands for "all True"."""
    if a is None:
        return b
    if b is None:
        return a
    return ops.logical_and(a, b)


def cache_rows(mask, index, new_rows):
    """The part of a cache mask `[B, S]` at the rows that `new_rows` rows written at position
    `index` occupy, `[B, new_rows]`: position `p` is row `p mod S` (an ordinary cache's rows
    are its positions, a ring's slots are these); None for None."""
    if mask is None:
        return None
    rows = ops.arange(new_rows, dtype="int32") + ops.cast(index, "int32")
    return ops.take(mask, ops.mod(rows, ops.shape(mask)[1]), axis=1)


def keras_mask(x):
    """The Keras mask of `x` (None for None)."""
    return None if x is None else keras_backend.get_keras_mask(x)


@contextlib.contextmanager
def keras_masks_hidden(*tensors):
    """Hide the Keras masks of `tensors` for the duration of the block.

    A sublayer called inside does not see them (so that it neither receives
    them as `query_mask` / `value_mask` nor warns that it drops them); they are
    put back afterwards for the other consumers of the tensors.
    """
    saved = [(t, keras_backend.get_keras_mask(t)) for t in tensors if t is not None]
    saved = [(t, m) for t, m in saved if m is not None]
    for t, _ in saved:
        keras_backend.set_keras_mask(t, None)
    try:
        yield
    finally:
        for t, m in saved:
            keras_backend.set_keras_mask(t, m)


def check_mask_shape(name, mask, target):
    """A mask whose static shape cannot broadcast to `target` is a clear ValueError."""
    if mask is None:
        return
    shape = tuple(mask.shape)
    ok = len(shape) <= len(target) and all(
        m is None or t is None or m in (1, t) for m, t in zip(shape[::-1], tuple(target)[::-1])
    )
    if not ok:
        raise ValueError(
            f"`{name}` must broadcast to shape {tuple(target)}. Received: {name}.shape={shape}"
        )


def padding_mask(name, mask, length=None):
    """`mask [B, T]` (bool or 0/1) as bool, checking its rank (and length)."""
    if mask is None:
        return None
    mask = scoring.to_bool_mask(mask)
    if len(mask.shape) != 2 or (
        length is not None and mask.shape[1] is not None and mask.shape[1] != length
    ):
        expected = f"[batch, {length}]" if length is not None else "[batch, length]"
        raise ValueError(
            f"`{name}` must have shape {expected}. Received: {name}.shape={tuple(mask.shape)}"
        )
    return mask


def position_mask(query_positions, key_positions, causal=False, sliding_window=None):
    """Which keys each query may see by position: `[Tq, Tk]` bool, or None.

    `causal`: key `j` is visible to query `i` iff `j <= i`. `sliding_window`
    `w`: iff `|i - j| < w` (Keras' symmetric band; with `causal`, the `w`
    most recent positions up to and including `i`). Both count positions
    absolutely, so a query at cache offset `c + t` is at position `c + t`.
    """
    if not causal and sliding_window is None:
        return None
    q = ops.reshape(query_positions, (-1, 1))
    k = ops.reshape(key_positions, (1, -1))
    visible = None
    if causal:
        visible = k <= q
    if sliding_window is not None:
        visible = logical_and(visible, ops.abs(q - k) < sliding_window)
    return visible


def keys_seen(attention_mask):
    """`[B|1, Tk]` bool: the keys that some query (of some head) may attend to under
    `attention_mask` (`[Tq, Tk]`, `[B, Tq, Tk]` or `[B, heads, Tq, Tk]`); None for None. A key
    seen by no query is padding in all but name: it is zeroed like padding, so whatever it
    holds (NaN, inf) reaches no output and no gradient."""
    if attention_mask is None:
        return None
    m = scoring.to_bool_mask(attention_mask)
    rank = len(m.shape)
    if rank < 2 or rank > 4:
        return None  # the caller's shape check names the argument
    # Over the queries (and heads); the batch axis, where there is one, stays.
    seen = ops.any(m, axis=0 if rank == 2 else tuple(range(1, rank - 1)))
    return ops.reshape(seen, (-1, ops.shape(m)[-1]))
