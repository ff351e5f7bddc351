"""Export to TensorFlow Serving and its clients: `export_text_model`, `export_image_model` (with
their `ServingSettings`), `GrpcClient`, `RestClient`, `SavedModelClient`."""

from keras_attn.serving.client import GrpcClient, RestClient, SavedModelClient
from keras_attn.serving.export import export_image_model, export_text_model
from keras_attn.serving.settings import ServingSettings
