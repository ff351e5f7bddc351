"""Export to TensorFlow Serving and its clients: `export_text_model`, `export_image_model`, `GrpcClient`, `RestClient`."""

from keras_attn.serving.client import GrpcClient, RestClient
from keras_attn.serving.export import export_image_model, export_text_model
