"""Export to TensorFlow Serving and its clients: `export_text_model`, `GrpcClient`, `RestClient`."""

from keras_attn.serving.client import GrpcClient, RestClient  # noqa: F401
from keras_attn.serving.export import export_text_model  # noqa: F401
