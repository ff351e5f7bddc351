"""The text recipe's data without TensorFlow (`keras_attn.train.numpy_text`): the SentencePiece
model and ids of `SentencePieceTokenizer`, length-bucketed batches in a seeded order, an exact
resume, and all of it importable and running where TensorFlow cannot be imported."""

import os
import subprocess
import sys
import textwrap
import types

import numpy as np

from keras_attn.train.batching import bucket_batch_sizes, bucket_boundaries
from keras_attn.train.numpy_text import (
    SentencePieceText,
    count_pairs_tokens,
    numpy_token_batches,
)

WORDS = "red green blue cat dog bird sun moon tree river stone cloud año niño 東京".split()


def write_pairs(path, n=300, seed=0):
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        phrase = list(rng.choice(WORDS, size=int(rng.integers(1, 9))))
        lines.append(" ".join(phrase) + "\t" + " ".join(reversed(phrase)).upper())
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [line.split("\t") for line in lines]


def test_the_same_model_and_ids_as_the_tensorflow_tokenizer(tmp_path):
    from keras_attn.text import SentencePieceTokenizer

    pairs = write_pairs(tmp_path / "pairs.tsv")
    texts = [t for pair in pairs for t in pair]
    ours = SentencePieceText.train(texts, vocab_size=400, byte_fallback=True)
    theirs = SentencePieceTokenizer.train(texts, vocab_size=400, byte_fallback=True)
    assert ours.model_proto == theirs.model_proto and ours.vocabulary == theirs.vocabulary
    sentences = ["red cat 東京", "año  niño", "", "zebra ü"]
    for kwargs in ({}, {"add_start": True, "add_end": True, "max_length": 5}):
        expected = theirs.tokenize(sentences, **kwargs).to_list()
        assert ours.tokenize(sentences, **kwargs).to_list() == expected
    ids = theirs.tokenize_padded(sentences, add_end=True).numpy()
    ids[0, 1] = 1  # a start id inside is skipped
    ids = np.concatenate([ids, ids[:, :2]], axis=1)  # read stops at the first end
    assert list(ours.detokenize(ids)) == list(theirs.detokenize(ids).numpy())
    path = ours.save(tmp_path / "tokenizer.model")
    assert SentencePieceTokenizer.load(path).model_proto == ours.model_proto


def batches(path, tokenizer, n, **kwargs):
    stream = numpy_token_batches(path, tokenizer, max_tokens=64, max_length=12, **kwargs)
    return [next(stream) for _ in range(n)]


def test_bucketed_batches_in_a_seeded_order(tmp_path):
    pairs = write_pairs(tmp_path / "pairs.tsv")
    tokenizer = SentencePieceText.train([t for p in pairs for t in p], vocab_size=60)
    first = batches(tmp_path / "pairs.tsv", tokenizer, 40, seed=3)
    again = batches(tmp_path / "pairs.tsv", tokenizer, 40, seed=3)
    other = batches(tmp_path / "pairs.tsv", tokenizer, 40, seed=4)
    same = [
        np.array_equal(a[1], b[1]) and np.array_equal(a[0]["source"], b[0]["source"])
        for a, b in zip(first, again)
    ]
    assert all(same)
    assert not all(
        a[1].shape == b[1].shape and np.array_equal(a[1], b[1]) for a, b in zip(first, other)
    )
    bounds = bucket_boundaries(12)
    sizes = dict(zip(bounds, bucket_batch_sizes(bounds, 64)))
    for x, y in first:
        src, target_in = x["source"], x["target_in"]
        longest = max(np.count_nonzero(src, axis=1).max(), np.count_nonzero(y, axis=1).max())
        bucket = min(b for b in bounds if longest < b)
        assert len(y) == sizes[bucket] and len(y) * (bucket - 1) <= max(64, bucket - 1)
        assert src.shape[1] <= 12 and y.shape[1] <= 12
        assert (np.sum(y == tokenizer.end_id, axis=1) == 1).all()  # every target ends once
        assert not (target_in == tokenizer.end_id).any()
        body = target_in[:, 1:] != 0
        np.testing.assert_array_equal(target_in[:, 1:][body], y[:, :-1][body])  # shifted by one
        assert (target_in[:, 0] == tokenizer.start_id).all()
    # token dropout: `<unk>` in the sources only, the same for the same seed
    noisy = batches(tmp_path / "pairs.tsv", tokenizer, 20, seed=3, token_dropout=0.5)
    assert any((x["source"] == tokenizer.unk_id).any() for x, _ in noisy)
    clean = batches(tmp_path / "pairs.tsv", tokenizer, 20, seed=3)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(noisy, clean))  # targets untouched
    lines, src_tokens, tgt_tokens, longest = count_pairs_tokens(tmp_path / "pairs.tsv", tokenizer)
    assert lines == len(pairs) and src_tokens > 0 and tgt_tokens > src_tokens - 1


def test_a_resumed_stream_skips_exactly_the_batches_trained(tmp_path):
    from keras_attn.train import Run

    pairs = write_pairs(tmp_path / "pairs.tsv")
    tokenizer = SentencePieceText.train([t for p in pairs for t in p], vocab_size=60)
    whole = batches(tmp_path / "pairs.tsv", tokenizer, 12, seed=1)
    args = types.SimpleNamespace(
        epochs=4,
        seed=1,
        out=str(tmp_path / "run"),
        distribute="none",
        batch_size=4,
        resume=True,
        verbose=0,
    )
    run = Run(args)
    run.initial_epoch = 2
    stream = numpy_token_batches(
        tmp_path / "pairs.tsv", tokenizer, max_tokens=64, max_length=12, seed=1
    )
    resumed, steps = run.stream(stream, 3)
    assert steps == 3
    for (x, y), (wx, wy) in zip([next(resumed) for _ in range(6)], whole[6:]):
        np.testing.assert_array_equal(y, wy)
        np.testing.assert_array_equal(x["source"], wx["source"])


BLOCKER = """
import importlib.abc, sys

class BlockTensorFlow(importlib.abc.MetaPathFinder):  # a machine without TensorFlow
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text", "tf_keras"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, BlockTensorFlow())
"""


def test_the_pipeline_runs_where_tensorflow_cannot_be_imported(tmp_path):
    write_pairs(tmp_path / "pairs.tsv")
    program = BLOCKER + textwrap.dedent(
        f"""
        import numpy as np
        from keras_attn.train.numpy_text import (
            SentencePieceText, numpy_token_batches, read_pairs, tensorflow_available,
        )
        from keras_attn.train import Run
        from keras_attn.train.evaluate import decode_texts

        assert not tensorflow_available()
        pairs = read_pairs({str(tmp_path / "pairs.tsv")!r})
        tokenizer = SentencePieceText.train([t for p in pairs for t in p], vocab_size=60)
        stream = numpy_token_batches({str(tmp_path / "pairs.tsv")!r}, tokenizer, max_tokens=64)
        x, y = next(stream)
        ids = np.asarray(tokenizer.tokenize([s for s, _ in pairs[:3]], add_end=True).to_list()[0])[None]
        texts, _ = decode_texts(lambda s: {{"sequences": s, "lengths": np.full(len(s), s.shape[1])}}, ids, tokenizer)
        assert texts == [pairs[0][0]], texts
        assert "tensorflow" not in sys.modules
        print("ok", y.shape)
        """
    )
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr[-3000:]
