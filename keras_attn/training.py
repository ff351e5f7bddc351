"""Former home of the example scripts' shared training code, now `keras_attn.train`: its names,
re-exported for code that imports them from here."""

from keras_attn import train as _train
from keras_attn.data.padding import pad_ids  # noqa: F401

globals().update({name: getattr(_train, name) for name in _train.__all__})
