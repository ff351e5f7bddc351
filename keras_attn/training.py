"""The names of `keras_attn.train` (and `keras_attn.data.padding.pad_ids`), importable from here
too, each on first use as there. New code imports them from `keras_attn.train`."""

from keras_attn import train as _train
from keras_attn.data.padding import pad_ids

__all__ = [*_train.__all__, "pad_ids"]


def __getattr__(name):
    return getattr(_train, name)


def __dir__():
    return sorted(__all__)
