"""Export to TensorFlow Serving and its clients: `export_text_model`, `export_image_model` (with
their `ServingSettings`), `GrpcClient`, `RestClient`, `SavedModelClient`.

The exporters load TensorFlow when first asked for; the settings, the served table
(`keras_attn.serving.specs`) and the clients do not, so a command line can read them cheaply.
"""

from keras_attn import _pins
from keras_attn.serving.client import GrpcClient, RestClient, SavedModelClient
from keras_attn.serving.request import SearchRequest
from keras_attn.serving.settings import ServingSettings

_EXPORTERS = ("export_image_model", "export_text_model")
# What an export needs: TensorFlow, and TensorFlow Serving's protos for its warm-up records.
EXPORT_NEEDS = ("tensorflow", "tensorflow_serving")
__all__ = [
    "GrpcClient",
    "RestClient",
    "SavedModelClient",
    "SearchRequest",
    "ServingSettings",
    *_EXPORTERS,
]


def __getattr__(name):
    if name in _EXPORTERS:
        _pins.require(f"keras_attn.serving.{name}", EXPORT_NEEDS)
        from keras_attn.serving import export

        return getattr(export, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
