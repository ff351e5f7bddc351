"""Digit strips: 3-5 handwritten digits pasted side by side -> the caption "3 1 4".

The digits are scikit-learn's bundled `load_digits` images (1797 of them, 8x8, ink 0..16; shipped
inside the package, nothing downloaded). Each strip is a `CANVAS_HEIGHT x CANVAS_WIDTH` = 16 x 64
canvas (float32 in [0, 1], one channel): the digits go left to right without overlapping, each at
a random vertical offset (0..8) with random gaps between them (the free columns are split at
random among the `k + 1` gaps, so a strip may start or end with empty space). The box of digit `i`
is the column range `[x0, x1)` with `x1 = x0 + 8`: an attention model can be scored on whether it
looks inside the right box.

Splits (`digit_strips_splits`) cut the 1797 source images, stratified by label, into disjoint
train / val / test pools before any strip is made: no test strip shows a training image.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from keras_attn._checks import check_int, check_split_fractions

CANVAS_HEIGHT = 16
CANVAS_WIDTH = 64
DIGIT_SIZE = 8
MIN_DIGITS = 3
MAX_DIGITS = 5


@dataclasses.dataclass
class DigitStrips:
    """A batch of digit strips.

    Attributes:
        images: float32 `[N, 16, 64, 1]` in [0, 1].
        captions: list of N strings, the labels joined by spaces ("3 1 4").
        labels: int32 `[N, 5]`, the digits left to right, -1 after the last.
        boxes: int32 `[N, 5, 2]`, `(x0, x1)` column range (end exclusive) of each digit, -1 after
            the last.
        lengths: int32 `[N]`, number of digits (3..5).
        source_index: int32 `[N, 5]`, index into `load_digits()` of each pasted image, -1 after
            the last.
    """

    images: np.ndarray
    captions: list
    labels: np.ndarray
    boxes: np.ndarray
    lengths: np.ndarray
    source_index: np.ndarray

    def __len__(self):
        return len(self.captions)


@functools.lru_cache(maxsize=1)
def _digits():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = (bunch.images / 16.0).astype(np.float32)
    images.setflags(write=False)
    labels = bunch.target.astype(np.int32)
    labels.setflags(write=False)
    return images, labels


def make_digit_strips(n, seed=0, pool=None, min_digits=MIN_DIGITS, max_digits=MAX_DIGITS):
    """`n` strips drawn with `np.random.default_rng(seed)`.

    Args:
        n: number of strips.
        seed: the seed (same seed and pool, same strips).
        pool: indices into `load_digits()` to draw digit images from (default: all 1797).
        min_digits, max_digits: number of digits per strip, drawn uniformly (3..5 by default; at
            most 8 fit on the canvas).
    """
    images, labels = _digits()
    n = check_int("n", n, 0)
    max_fit = CANVAS_WIDTH // DIGIT_SIZE
    if not 1 <= int(min_digits) <= int(max_digits) <= max_fit:
        raise ValueError(
            f"Need 1 <= min_digits <= max_digits <= {max_fit}. "
            f"Received: min_digits={min_digits}, max_digits={max_digits}"
        )
    pool = np.arange(len(images)) if pool is None else np.asarray(pool, dtype=np.int64)
    if pool.ndim != 1 or len(pool) == 0 or pool.min() < 0 or pool.max() >= len(images):
        raise ValueError(
            f"`pool` must be a non-empty list of indices in [0, {len(images)}). Received: pool={pool!r}"
        )
    rng = np.random.default_rng(seed)
    out_images = np.zeros((n, CANVAS_HEIGHT, CANVAS_WIDTH, 1), np.float32)
    out_labels = np.full((n, max_digits), -1, np.int32)
    out_boxes = np.full((n, max_digits, 2), -1, np.int32)
    out_index = np.full((n, max_digits), -1, np.int32)
    lengths = np.zeros((n,), np.int32)
    captions = []
    for i in range(n):
        k = int(rng.integers(min_digits, max_digits + 1))
        chosen = pool[rng.integers(0, len(pool), size=k)]
        free = CANVAS_WIDTH - k * DIGIT_SIZE
        # Split the free columns into k + 1 gaps: k sorted cut points in [0, free].
        cuts = np.sort(rng.integers(0, free + 1, size=k))
        gaps = np.diff(np.concatenate([[0], cuts]))
        x = 0
        for j, (src, gap) in enumerate(zip(chosen, gaps)):
            x += int(gap)
            y = int(rng.integers(0, CANVAS_HEIGHT - DIGIT_SIZE + 1))
            out_images[i, y : y + DIGIT_SIZE, x : x + DIGIT_SIZE, 0] = images[src]
            out_boxes[i, j] = (x, x + DIGIT_SIZE)
            out_labels[i, j] = labels[src]
            out_index[i, j] = src
            x += DIGIT_SIZE
        lengths[i] = k
        captions.append(" ".join(str(d) for d in out_labels[i, :k]))
    return DigitStrips(out_images, captions, out_labels, out_boxes, lengths, out_index)


def split_digit_pools(seed=0, val_fraction=0.1, test_fraction=0.2):
    """Disjoint index pools (train, val, test) over `load_digits()`, stratified by label."""
    check_split_fractions(val_fraction, test_fraction)
    _, labels = _digits()
    rng = np.random.default_rng(seed)
    train, val, test = [], [], []
    for digit in range(10):
        idx = rng.permutation(np.flatnonzero(labels == digit))
        n_test = int(round(test_fraction * len(idx)))
        n_val = int(round(val_fraction * len(idx)))
        test.append(idx[:n_test])
        val.append(idx[n_test : n_test + n_val])
        train.append(idx[n_test + n_val :])
    return tuple(np.sort(np.concatenate(p)) for p in (train, val, test))


def digit_strips_splits(
    n_train, n_val, n_test, seed=0, val_fraction=0.1, test_fraction=0.2, **kwargs
):
    """{"train", "val", "test"} -> `DigitStrips`, built from disjoint source-image pools
    (`split_digit_pools`); `kwargs` go to `make_digit_strips`."""
    pools = split_digit_pools(seed, val_fraction, test_fraction)
    return {
        name: make_digit_strips(size, seed=[seed, offset], pool=pool, **kwargs)
        for offset, (name, size, pool) in enumerate(
            zip(("train", "val", "test"), (n_train, n_val, n_test), pools)
        )
    }
