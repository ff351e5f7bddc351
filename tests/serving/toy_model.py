"""A small attention translator for the serving tests (not one of the example models).

Implements exactly the interface the exporter relies on:
`encode(source_ids) -> {"memory", "source_mask"}`,
`initial_decode_state(encoder_outputs, max_length) -> state`,
`decode_step(tokens, state, step) -> (logits, state, attention)`:
embeddings, a GRU cell and dot-product attention over the source, with fixed random weights.
A fully masked source (empty input) gets zero attention and a zero context.
"""

import keras
from keras import ops

from keras_attn.text import CharTokenizer

TRAINING_TEXT = [
    "hello world",
    "the quick brown fox",
    "jumps over the lazy dog",
    "0123456789 ,.;:!?",
]


@keras.saving.register_keras_serializable(package="keras_attn_tests")
class ToyTranslator(keras.Model):
    def __init__(self, vocab_size, units=16, target_vocab_size=None, **kwargs):
        super().__init__(**kwargs)
        target_vocab_size = target_vocab_size or vocab_size
        self.vocab_size = vocab_size
        self.target_vocab_size = target_vocab_size
        self.units = units
        self.source_embedding = keras.layers.Embedding(vocab_size, units)
        self.target_embedding = keras.layers.Embedding(target_vocab_size, units)
        self.cell = keras.layers.GRUCell(units)
        self.query = keras.layers.Dense(units, use_bias=False)
        self.output_layer = keras.layers.Dense(target_vocab_size)

    def build_all(self):
        state = self.initial_decode_state(self.encode(ops.ones((1, 3), "int32")), 4)
        self.decode_step(ops.ones((1,), "int32"), state, 0)
        self.built = True

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, units=self.units, target_vocab_size=self.target_vocab_size
        )
        return config

    def get_build_config(self):
        return {"built_by": "build_all"}

    def build_from_config(self, config):
        self.build_all()

    def encode(self, source_ids):
        source_ids = ops.convert_to_tensor(source_ids, "int32")
        mask = ops.not_equal(source_ids, 0)
        memory = ops.tanh(self.source_embedding(source_ids))
        return {"memory": memory, "source_mask": mask}

    def initial_decode_state(self, encoder_outputs, max_length):
        memory = encoder_outputs["memory"]
        mask = ops.cast(encoder_outputs["source_mask"], memory.dtype)
        total = ops.sum(memory * mask[:, :, None], axis=1)
        count = ops.maximum(ops.sum(mask, axis=1, keepdims=True), 1.0)
        return {"h": total / count, "memory": memory, "mask": encoder_outputs["source_mask"]}

    def decode_step(self, tokens, state, step):
        x = self.target_embedding(ops.convert_to_tensor(tokens, "int32"))
        h, _ = self.cell(x, [state["h"]])
        memory, mask = state["memory"], state["mask"]
        scores = ops.einsum("bsu,bu->bs", memory, self.query(h))
        scores = ops.where(mask, scores, ops.full_like(scores, -1e9))
        weights = ops.exp(scores - ops.max(scores, axis=-1, keepdims=True))
        weights = ops.where(mask, weights, ops.zeros_like(weights))
        weights = weights / ops.maximum(ops.sum(weights, axis=-1, keepdims=True), 1e-9)
        context = ops.einsum("bs,bsu->bu", weights, memory)
        logits = self.output_layer(ops.concatenate([h, context], axis=-1))
        return logits, {"h": h, "memory": memory, "mask": mask}, weights


@keras.saving.register_keras_serializable(package="keras_attn_tests")
class ToyCopier(ToyTranslator):
    """The toy translator with a pull towards copying its source: at step `t` the logit of
    source token `t` (the end token past the source) gets `copy` added, except the tokens of
    `skip`, which it never favours. A model that keeps its source's placeholders by itself
    (with `skip`: all but those spelled with the skipped tokens); same tokenizer both sides."""

    def __init__(self, vocab_size, end_id, copy=3.0, skip=(), **kwargs):
        super().__init__(vocab_size, **kwargs)
        self.end_id, self.copy, self.skip = int(end_id), float(copy), tuple(int(i) for i in skip)

    def get_config(self):
        config = super().get_config()
        config.pop("target_vocab_size")
        return config | {"end_id": self.end_id, "copy": self.copy, "skip": list(self.skip)}

    def encode(self, source_ids):
        return super().encode(source_ids) | {
            "source_ids": ops.convert_to_tensor(source_ids, "int32")
        }

    def initial_decode_state(self, encoder_outputs, max_length):
        state = super().initial_decode_state(encoder_outputs, max_length)
        return state | {"source_ids": encoder_outputs["source_ids"]}

    def decode_step(self, tokens, state, step):
        source = state["source_ids"]
        inner = {k: v for k, v in state.items() if k != "source_ids"}
        logits, inner, weights = super().decode_step(tokens, inner, step)
        width = ops.shape(source)[1]
        wanted = ops.take(source, ops.minimum(step, width - 1), axis=1)
        wanted = ops.where((step >= width) | ops.equal(wanted, 0), self.end_id, wanted)
        pull = self.copy * ops.one_hot(wanted, ops.shape(logits)[-1], dtype=logits.dtype)
        for token in self.skip:
            pull = pull * ops.cast(ops.not_equal(wanted, token), logits.dtype)[:, None]
        return logits + pull, inner | {"source_ids": source}, weights


def make_toy(seed=7, source_tokenizer=None):
    """`(model, tokenizer)` with fixed random weights; with `source_tokenizer`,
    `(model, source_tokenizer, target_tokenizer)` (the target is a character vocabulary)."""
    keras.utils.set_random_seed(seed)
    tokenizer = CharTokenizer.build(TRAINING_TEXT)
    if source_tokenizer is None:
        model = ToyTranslator(tokenizer.vocab_size)
        model.build_all()
        return model, tokenizer
    model = ToyTranslator(source_tokenizer.vocab_size, target_vocab_size=tokenizer.vocab_size)
    model.build_all()
    return model, source_tokenizer, tokenizer


class ToyCaptioner(ToyTranslator):
    """The same decoder attending over the pixels of a small image (`[B, H*W, units]`)."""

    def __init__(self, vocab_size, units=16, **kwargs):
        super().__init__(vocab_size, units=units, **kwargs)
        self.pixel_projection = keras.layers.Dense(units)

    def build_all(self, image_shape=(4, 4, 3)):
        images = ops.ones((1,) + tuple(image_shape), "float32")
        state = self.initial_decode_state(self.encode(images), 4)
        self.decode_step(ops.ones((1,), "int32"), state, 0)
        self.built = True

    def encode(self, images):
        images = ops.convert_to_tensor(images, "float32")
        shape = ops.shape(images)
        pixels = ops.reshape(images, (shape[0], shape[1] * shape[2], shape[3]))
        memory = ops.tanh(self.pixel_projection(pixels))
        return {"memory": memory, "source_mask": ops.ones(ops.shape(memory)[:2], "bool")}


def make_toy_captioner(seed=11, image_shape=(4, 4, 3)):
    """`(model, tokenizer)`: a captioner over `image_shape` images with fixed random weights."""
    keras.utils.set_random_seed(seed)
    tokenizer = CharTokenizer.build(TRAINING_TEXT)
    model = ToyCaptioner(tokenizer.vocab_size)
    model.build_all(image_shape)
    return model, tokenizer
