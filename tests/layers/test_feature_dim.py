"""The layers built from a shape refuse one without a known feature size, in one form."""

import re

import pytest

from keras_attn.layers import (
    PositionalEncoding,
    PositionwiseFeedForward,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)


def _message(name, shape, layout):
    return re.escape(
        f"`{name}` must have {layout} with a known last dimension. Received: {name}.shape={shape}"
    )


@pytest.mark.parametrize("shape", [(None, None), (8,)])
@pytest.mark.parametrize("layer", [lambda: PositionwiseFeedForward(4), PositionalEncoding])
def test_rank_two_or_more(layer, shape):
    with pytest.raises(ValueError, match=_message("inputs", shape, "rank >= 2 ([..., dim])")):
        layer().build(shape)
    layer().build((2, 5, 8))  # a known last dimension builds


@pytest.mark.parametrize("shape", [(2, 5, None), (5, 8)])
def test_transformer_layers_take_sequences(shape):
    layout = "rank 3 ([batch, length, dim])"
    with pytest.raises(ValueError, match=_message("inputs", shape, layout)):
        TransformerEncoderLayer(2, 8).build(shape)
    with pytest.raises(ValueError, match=_message("decoder_sequence", shape, layout)):
        TransformerDecoderLayer(2, 8).build(shape, (2, 5, 8))
    with pytest.raises(ValueError, match=_message("encoder_sequence", shape, layout)):
        TransformerDecoderLayer(2, 8).build((2, 5, 8), shape)
