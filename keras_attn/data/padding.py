"""Id lists padded into one rectangular NumPy batch (no Keras, no TensorFlow)."""

import numpy as np


def pad_ids(rows, length=None, pad_id=0):
    """List of id lists -> int32 `[N, length]` (default: the longest row), cut or padded with
    `pad_id`."""
    length = max([len(r) for r in rows] + [1]) if length is None else length
    out = np.full((len(rows), length), pad_id, np.int32)
    for i, r in enumerate(rows):
        r = list(r)[:length]
        out[i, : len(r)] = r
    return out
