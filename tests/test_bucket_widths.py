"""On JAX a batch's token tensors are padded to their length bucket's width (`bucket_width`), so
a compiled train step sees one shape per bucket: the widths, the padding of a streamed batch
(tf.data and NumPy) and, in a JAX process, the train step's compilations counted while `fit`
runs over a stream of many buckets."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.train import batching

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bucket_width_is_the_longest_length_of_the_bucket_boundaries():
    boundaries = batching.bucket_boundaries(300)[:-1]  # the last one is max_length + 1
    lower = 0
    for b in boundaries:
        # every length of the bucket [lower, b) gets the bucket's longest, b - 1
        assert {batching.bucket_width(w) for w in range(lower, b)} == {b - 1}
        lower = b
    assert batching.bucket_widths(300) == [b - 1 for b in boundaries] + [
        batching.bucket_width(boundaries[-1])
    ]


def test_bucket_width_refuses_a_negative_width():
    with pytest.raises(ValueError, match="Received: width=-1"):
        batching.bucket_width(-1)


def _batch(source_width, target_width, rows=3):
    rng = np.random.RandomState(source_width * 100 + target_width)
    x = {
        "source": rng.randint(1, 9, size=(rows, source_width)).astype("int32"),
        "target_in": rng.randint(1, 9, size=(rows, target_width)).astype("int32"),
    }
    return x, rng.randint(1, 9, size=(rows, target_width)).astype("int32")


@pytest.mark.parametrize("widths", [(5, 7), (9, 4), (16, 13), (40, 50)])
def test_a_batch_is_padded_to_one_width_the_same_in_tf_and_numpy(widths):
    x, y = _batch(*widths)
    want = batching.bucket_width(max(widths))
    px, py = batching.pad_numpy_to_bucket(x, y)
    tx, ty = batching._pad_to_bucket(({k: tf.constant(v) for k, v in x.items()}, tf.constant(y)))
    for padded, original in (
        (px["source"], x["source"]),
        (px["target_in"], x["target_in"]),
        (py, y),
    ):
        assert padded.shape == (3, want)
        np.testing.assert_array_equal(padded[:, : original.shape[1]], original)
        assert not padded[:, original.shape[1] :].any()  # the padding id, 0
    np.testing.assert_array_equal(tx["source"].numpy(), px["source"])
    np.testing.assert_array_equal(tx["target_in"].numpy(), px["target_in"])
    np.testing.assert_array_equal(ty.numpy(), py)


# A JAX process: a stream of token batches over many length buckets through `Run.stream`, `fit`
# on a small model; the train step's XLA compilations are read from JAX's compile log.
JAX_RUN = textwrap.dedent(
    r"""
    import json, logging, sys, types
    import jax

    jax.config.update("jax_log_compiles", True)
    compiles = []

    class Compiles(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            if message.startswith("Finished XLA compilation of jit(train_step)"):
                compiles.append(message)

    logging.getLogger("jax").addHandler(Compiles())

    import keras
    import numpy as np
    from keras_attn.models import MaskedSequenceLoss
    from keras_attn.text import CharTokenizer
    from keras_attn.train import batching, token_batches
    from keras_attn.train.loop import Run

    path, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    texts = [t for line in open(path, encoding="utf-8") for t in line.rstrip("\n").split("\t")]
    tokenizer = CharTokenizer.build(texts)
    settings = types.SimpleNamespace(
        epochs=1, batch_size=8, seed=0, out=out, resume=False, distribute="none", verbose=0
    )
    run = Run(settings)
    stream = token_batches(path, tokenizer, max_tokens=64, max_length=30, seed=0, chunk=16)
    dataset, steps = run.stream(stream, steps)
    shapes, buckets = set(), set()
    for x, y in dataset.take(steps):
        shapes.add((*x["source"].shape, x["target_in"].shape[1], y.shape[1]))
        used = max(int((x["source"].numpy() != 0).sum(1).max()), int((y.numpy() != 0).sum(1).max()))
        buckets.add(batching.bucket_width(used))
    # a small model of the two inputs: the train step is Keras' own, whatever the layers
    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    memory = keras.ops.mean(keras.layers.Embedding(tokenizer.vocab_size, 8)(source), axis=1)
    hidden = keras.layers.Embedding(tokenizer.vocab_size, 8)(target_in) + memory[:, None]
    logits = keras.layers.Dense(tokenizer.vocab_size)(hidden)
    model = keras.Model({"source": source, "target_in": target_in}, logits)
    model.compile(optimizer="adam", loss=MaskedSequenceLoss(), jit_compile=True)
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
    print("@@ " + json.dumps({"compiles": len(compiles), "shapes": len(shapes),
                              "buckets": len(buckets)}))
    """
)


@pytest.mark.processes
def test_a_jax_training_run_compiles_its_train_step_once_per_bucket(tmp_path):
    rng = np.random.RandomState(0)
    letters = list("abcdefghij")
    lines = []
    for i in range(400):  # sources and targets of independent lengths, 1 ... 28 characters
        src = "".join(rng.choice(letters, size=rng.randint(1, 29)))
        tgt = "".join(rng.choice(letters, size=rng.randint(1, 29))).upper()
        lines.append(f"{src}\t{tgt}\n")
    path = tmp_path / "train.tsv"
    path.write_text("".join(lines), encoding="utf-8")
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", JAX_RUN, str(path), str(tmp_path / "run"), "24"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("@@ "))
    counts = json.loads(line[3:])
    assert counts["buckets"] >= 4, counts  # the stream spans several buckets
    assert counts["shapes"] == counts["buckets"], counts  # one batch shape per bucket
    assert 1 <= counts["compiles"] <= counts["buckets"], counts
