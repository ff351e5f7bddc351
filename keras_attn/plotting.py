"""Attention heat maps written to PNG files (matplotlib, Agg canvas: no display needed).

    from keras_attn.plotting import plot_attention
    plot_attention(weights, source_tokens=list("21.11.26"), output_tokens=list("2026-11-21"),
                   path="attention.png")

Rows are output tokens (y axis, top to bottom), columns source tokens (x axis, left to right);
a cell is the weight the output token gave the source token.
"""

from __future__ import annotations

import os
import warnings

import numpy as np


def _labels(arg, tokens, size):
    if tokens is None:
        return [str(i) for i in range(size)]
    tokens = [t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t) for t in tokens]
    if len(tokens) != size:
        raise ValueError(
            f"`{arg}` must have one label per {'column' if arg == 'source_tokens' else 'row'} of "
            f"`weights` ({size}). Received: {arg} of length {len(tokens)}"
        )
    # Whitespace would render as nothing: show it.
    return ["\u2423" if t == " " else t for t in tokens]


def plot_attention(
    weights, source_tokens=None, output_tokens=None, path="attention.png", title=None, dpi=100
):
    """Draw `weights` `[T_out, T_src]` as a heat map and save it as a PNG at `path`.

    Args:
        weights: array-like `[T_out, T_src]` (rows: output tokens, columns: source tokens).
        source_tokens: `T_src` labels for the x axis (default: positions).
        output_tokens: `T_out` labels for the y axis (default: positions).
        path: the PNG file to write (parent directories are created).
        title: optional figure title.
        dpi: resolution.

    Returns:
        The path written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim != 2 or 0 in weights.shape:
        raise ValueError(
            f"`weights` must be a non-empty 2-D array [output, source]. Received: weights.shape={weights.shape}"
        )
    if not np.all(np.isfinite(weights)):
        raise ValueError("`weights` must be finite. Received: weights with NaN or inf")
    rows, cols = weights.shape
    x_labels = _labels("source_tokens", source_tokens, cols)
    y_labels = _labels("output_tokens", output_tokens, rows)

    width = min(max(3.0, 0.3 * cols + 1.8), 40.0)
    height = min(max(2.5, 0.3 * rows + 1.2), 40.0)
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(
        weights, cmap="viridis", aspect="auto", vmin=0.0, vmax=max(float(weights.max()), 1e-6)
    )
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    ax.set_xticklabels(x_labels, rotation=90 if max(map(len, x_labels)) > 2 else 0)
    ax.set_yticklabels(y_labels)
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if title:
        ax.set_title(title)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    path = os.fspath(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # missing glyphs (e.g. CJK in the default font) are not fatal
        fig.savefig(path, format="png")
    return path
