"""The shapes a JAX train step sees (`batching.BucketShapes`): a token batch padded to its
length bucket's width and to the rows of that bucket's full batch, so that a bucket's last,
partial batch has the shape of its full ones; the rows of padding weigh nothing (the loss and
its gradients are those of the batch unpadded). Backend-neutral: run on TensorFlow and, with
`KERAS_BACKEND=jax`, on JAX."""

import keras
import numpy as np
import pytest

from keras_attn.train import batching


@pytest.mark.parametrize("max_length", [5, 9, 10, 24, 128, 200])
def test_each_length_gets_the_width_and_rows_of_its_bucket_of_the_batch_plan(max_length):
    bounds = batching.bucket_boundaries(max_length)
    sizes = batching.bucket_batch_sizes(bounds, 4096)
    shapes = batching.BucketShapes(4096, max_length)
    for length in range(max_length + 1):
        i = int(np.searchsorted(bounds, length, side="right"))  # as the NumPy stream buckets
        width = shapes.width(length)
        assert width == bounds[i] - 1, (length, bounds)  # the bucket's longest, never beyond
        assert width <= max_length
        assert shapes.rows(width) == sizes[i], (length, bounds, sizes)


def test_bucket_shapes_refuse_a_non_positive_size():
    with pytest.raises(ValueError, match="Received: max_tokens=0"):
        batching.BucketShapes(0, 24)
    with pytest.raises(ValueError, match="Received: max_length=-3"):
        batching.BucketShapes(64, -3)


def _batch(rows, source_width, target_width, seed=0, vocab=30):
    """Token ids with rows of random lengths padded at their end (0), each row >= 1 token."""
    rng = np.random.RandomState(seed)

    def ids(width):
        out = rng.randint(3, vocab, size=(rows, width)).astype("int32")
        lengths = rng.randint(1, width + 1, size=rows)
        lengths[0] = width
        out[np.arange(width)[None, :] >= lengths[:, None]] = 0
        return out

    target = ids(target_width + 1)
    return {"source": ids(source_width), "target_in": target[:, :-1]}, target[:, 1:].copy()


def test_a_partial_batch_gets_the_rows_and_width_of_its_bucket_in_numpy_and_tensorflow():
    import tensorflow as tf

    shapes = batching.BucketShapes(96, 24)
    for rows, source_width, target_width in ((3, 9, 11), (8, 5, 4), (2, 24, 20), (40, 2, 3)):
        x, y = _batch(rows, source_width, target_width)
        width = shapes.width(max(source_width, target_width))
        full = shapes.rows(width)
        px, py = batching.pad_numpy_to_bucket(x, y, shapes=shapes)
        for padded, original in ((px["source"], x["source"]), (px["target_in"], x["target_in"])):
            assert padded.shape == (max(full, rows), width)
            np.testing.assert_array_equal(padded[:rows, : original.shape[1]], original)
            assert not padded[rows:].any() and not padded[:, original.shape[1] :].any()
        assert py.shape == (max(full, rows), width) and not py[rows:].any()
        tx, ty = batching._pad_to_bucket(
            ({k: tf.constant(v) for k, v in x.items()}, tf.constant(y)), shapes=shapes
        )
        np.testing.assert_array_equal(tx["source"].numpy(), px["source"])
        np.testing.assert_array_equal(tx["target_in"].numpy(), px["target_in"])
        np.testing.assert_array_equal(ty.numpy(), py)


def _model(model_name):
    from keras_attn.train import translator

    flags = {"data": "pairs.tsv", "model": model_name, "dropout": 0.0, "token_dropout": 0.0}
    flags.update(units=16, embedding_dim=8, layers=1, label_smoothing=0.1)
    config = translator.resolve_config(flags, train_pairs=100)
    keras.utils.set_random_seed(3)
    return translator.build_model(config, 30)


def _loss_and_gradients(model, x, y):
    """The model's loss on `(x, y)` and its gradients w.r.t. the trainable weights (NumPy)."""
    if keras.backend.backend() == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        fixed = [v.value for v in model.non_trainable_variables]

        def loss(values):
            pred, _ = model.stateless_call(values, fixed, x, training=True)
            return model.loss(y, pred)

        value, grads = jax.jit(jax.value_and_grad(loss))(trainable)
    else:
        import tensorflow as tf

        with tf.GradientTape() as tape:
            value = model.loss(y, model(x, training=True))
        grads = tape.gradient(value, model.trainable_variables)
    return float(value), [keras.ops.convert_to_numpy(g) for g in grads]


@pytest.mark.parametrize("model_name", ["transformer", "bahdanau"])
def test_rows_and_columns_of_padding_change_neither_the_loss_nor_the_gradients(model_name):
    model = _model(model_name)
    x, y = _batch(3, 9, 12, seed=1)
    shapes = batching.BucketShapes(96, 24)
    px, py = batching.pad_numpy_to_bucket(x, y, shapes=shapes)
    assert py.shape == (6, 14)  # 3 rows of padding, 2 columns more
    loss, grads = _loss_and_gradients(model, x, y)
    padded_loss, padded_grads = _loss_and_gradients(model, px, py)
    assert np.isfinite(loss) and loss > 0
    np.testing.assert_allclose(padded_loss, loss, rtol=1e-5)
    assert len(grads) == len(padded_grads) > 0
    for g, pg in zip(grads, padded_grads):
        assert np.all(np.isfinite(pg))
        np.testing.assert_allclose(pg, g, rtol=1e-4, atol=1e-6)
    assert any(np.abs(g).max() > 1e-4 for g in grads)  # the comparison is not of zeros
