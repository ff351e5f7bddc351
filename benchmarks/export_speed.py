"""The exported SavedModel: beam_search vs in-process (item 4) and serving_default throughput (item 6).

Model: the dates translator architecture (`RNNSeq2Seq`, LSTM, Luong general attention) with
random weights and a character vocabulary built from `make_dates` text (no training: speed does
not depend on the weights except through when the end token comes, and both sides decode the
same inputs with the same weights). If the model cannot be exported (the example models are
still being finished), the toy translator of the serving tests is used and the section says so.

- item 4: the loaded SavedModel's `beam_search` signature vs the same computation in-process:
  tokenize -> `generate` (encode, `beam_search`) -> detokenize in one `tf.function` over the live Keras
  model (written here from the public pieces, as the exporter's signature does it), same knobs (K=4, max_length 32). Ratio =
  loaded time / in-process time (target <= 1.2) at batch 1 and 32.
- item 6: sentences per second through the loaded `serving_default` at batch 1, 8, 32 (TF2
  loader in this process; TF Serving runs the same graph through a Session).

    .venv/bin/python benchmarks/export_speed.py
"""

from __future__ import annotations

import os
import tempfile

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

BEAM = 4
MAX_LENGTH = 32
BATCHES_BEAM = (1, 32)
BATCHES_SERVING = (1, 8, 32)


def build_model():
    """`(model, tokenizer, description, sentences)`."""
    import keras

    from keras_attn.data.dates import make_dates
    from keras_attn.text import CharTokenizer

    keras.utils.set_random_seed(0)
    pairs = make_dates(512, seed=1)
    sources = [s for s, _ in pairs]
    tokenizer = CharTokenizer.build(sources + [t for _, t in pairs])
    try:
        from keras_attn.models import RNNSeq2Seq

        model = RNNSeq2Seq(
            tokenizer.vocab_size,
            tokenizer.vocab_size,
            embedding_dim=64,
            units=128,
            attention="luong",
            score="general",
        )
        model.build()
        description = "RNNSeq2Seq (LSTM 128, Luong general, random weights)"
    except Exception as error:  # the example models are not ready: the serving tests' toy model
        from tests.serving.toy_model import ToyTranslator

        model = ToyTranslator(tokenizer.vocab_size, units=64)
        model.build_all()
        description = (
            f"serving tests' ToyTranslator (RNNSeq2Seq unavailable: {type(error).__name__})"
        )
    return model, tokenizer, description, sources


def export(model, tokenizer, directory):
    from keras_attn.serving.export import export_text_model

    return export_text_model(
        model,
        tokenizer,
        os.path.join(directory, "dates"),
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        max_input_length=64,
    )


def in_process_beam_search(model, tokenizer):
    """The `beam_search` signature's computation, written from the public pieces, over the live model."""
    import tensorflow as tf

    from keras_attn.decoding import generate

    @tf.function
    def search(inputs, beam_size, max_length, length_penalty, coverage_penalty):
        ragged = tf.cast(tokenizer.tokenize(inputs, max_length=64), tf.int32)
        width = tf.maximum(tf.reduce_max(tf.concat([ragged.row_lengths(), [0]], 0)), 1)
        batch = tf.shape(inputs, out_type=tf.int64)[0]
        source_ids = ragged.to_tensor(
            default_value=tokenizer.pad_id, shape=tf.stack([batch, width])
        )
        result = generate(
            model,
            source_ids,
            tokenizer.start_id,
            tokenizer.end_id,
            "beam",
            max_length,
            beam_size=beam_size,
            length_penalty=length_penalty,
            coverage_penalty=coverage_penalty,
        )
        t = tf.reduce_max(tf.concat([tf.reshape(result["lengths"], [-1]), [1]], 0))
        return {
            "outputs": tokenizer.detokenize(result["sequences"][:, :, :t]),
            "scores": result["scores"],
            "alignments": result["alignments"][..., :t, :],
        }

    return search


def run(repeats=5):
    import tensorflow as tf

    model, tokenizer, description, sentences = build_model()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = export(model, tokenizer, tmp)
        except Exception as error:
            if "Toy" in description:
                raise
            from tests.serving.toy_model import ToyTranslator

            model = ToyTranslator(tokenizer.vocab_size, units=64)
            model.build_all()
            description = (
                f"serving tests' ToyTranslator (RNNSeq2Seq export failed: {type(error).__name__})"
            )
            path = export(model, tokenizer, tmp)
        loaded = tf.saved_model.load(path)
        in_process = in_process_beam_search(model, tokenizer)
        exported = loaded.signatures["beam_search"]
        knobs = dict(
            beam_size=tf.constant(BEAM),
            max_length=tf.constant(MAX_LENGTH),
            length_penalty=tf.constant(0.0),
            coverage_penalty=tf.constant(0.0),
        )
        beam_rows, checks = [], {}
        for batch in BATCHES_BEAM:
            inputs = tf.constant(sentences[:batch])
            a = in_process(inputs=inputs, **knobs)
            b = exported(inputs=inputs, **knobs)
            same = bool(tf.reduce_all(a["outputs"] == b["outputs"]))
            times, samples = common.interleaved(
                {
                    "in-process": lambda: in_process(inputs=inputs, **knobs),
                    "SavedModel": lambda: exported(inputs=inputs, **knobs),
                },
                repeats=repeats,
                warmup=2,
                min_time=0.2,
                return_samples=True,
            )
            ratio = common.paired_ratio(samples, "SavedModel", "in-process")
            checks[f"Exported beam_search vs in-process, batch {batch} (<= 1.2x)"] = ratio <= 1.2
            beam_rows.append(
                (
                    batch,
                    f"{times['in-process'] * 1e3:.1f}",
                    f"{times['SavedModel'] * 1e3:.1f}",
                    f"{ratio:.2f}x",
                    "yes" if same else "NO",
                )
            )
        default = loaded.signatures["serving_default"]
        fns = {}
        for batch in BATCHES_SERVING:
            inputs = tf.constant(sentences[:batch])
            fns[batch] = (lambda inputs: lambda: default(inputs=inputs))(inputs)
        times = common.interleaved(fns, repeats=repeats, warmup=2, min_time=0.2)
        serving_rows = [
            (batch, f"{times[batch] * 1e3:.1f}", f"{batch / times[batch]:.1f}")
            for batch in BATCHES_SERVING
        ]
    text = (
        "### 4. Exported `beam_search` vs in-process\n\n"
        f"Model: {description}; character vocabulary of {tokenizer.vocab_size} ids; date strings "
        f"from `make_dates`; K={BEAM}, max_length {MAX_LENGTH}. In-process = the same steps (tokenize, encode, "
        "`beam_search`, detokenize) in one `tf.function` over the live model; SavedModel = `tf.saved_model.load(...)"
        ".signatures['beam_search']`. Median of "
        f"{repeats} interleaved rounds after a warm-up; target: SavedModel <= 1.2x in-process.\n\n"
        + common.table(
            ["batch", "in-process ms", "SavedModel ms", "ratio", "same outputs"], beam_rows
        )
        + "\n\n### 6. Serving throughput (`serving_default`, loaded SavedModel)\n\n"
        f"Same export (beam K={BEAM}, max_length {MAX_LENGTH}); sentences/s = batch / median latency "
        "(one request at a time, no server batching).\n\n"
        + common.table(["batch", "ms per request", "sentences/s"], serving_rows)
    )
    return text, checks


if __name__ == "__main__":
    common.main(run, __doc__, default_repeats=5)
