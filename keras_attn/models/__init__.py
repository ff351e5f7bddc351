"""Models: `from keras_attn.models import HardAttentionModel, ...`."""

from keras_attn.models.hard_attention import HardAttentionModel
