"""The names of `keras_attn.train` (and `keras_attn.data.padding.pad_ids`), importable from here
too. New code imports them from `keras_attn.train`."""

from keras_attn import train as _train
from keras_attn.data.padding import pad_ids  # noqa: F401

globals().update({name: getattr(_train, name) for name in _train.__all__})
