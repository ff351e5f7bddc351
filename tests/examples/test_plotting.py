"""keras_attn.plotting.plot_attention writes a PNG of the weights, with clear errors on bad input."""

import numpy as np
import pytest

from keras_attn.plotting import plot_attention
from tests.examples.helpers import is_png


def test_writes_png_with_labels(tmp_path):
    weights = np.random.default_rng(0).dirichlet(np.ones(5), size=3)
    path = plot_attention(
        weights, list("ab cd"), ["x", "y", "</s>"], tmp_path / "sub" / "map.png", title="t"
    )
    assert path == str(tmp_path / "sub" / "map.png")
    assert is_png(path)
    # The image is as wide as its columns ask for: more source tokens, a wider figure.
    wide = plot_attention(np.ones((3, 40)) / 40, None, None, tmp_path / "wide.png")
    from PIL import Image

    assert Image.open(wide).size[0] > Image.open(path).size[0]


def test_rejects_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="source_tokens"):
        plot_attention(np.ones((2, 3)), ["a", "b"], None, tmp_path / "a.png")
    with pytest.raises(ValueError, match="output_tokens"):
        plot_attention(np.ones((2, 3)), None, ["a"], tmp_path / "a.png")
    with pytest.raises(ValueError, match="weights"):
        plot_attention(np.ones((3,)), None, None, tmp_path / "a.png")
    with pytest.raises(ValueError, match="finite"):
        plot_attention(np.full((2, 2), np.nan), None, None, tmp_path / "a.png")
