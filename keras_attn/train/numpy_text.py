"""The text recipe's data without TensorFlow: SentencePiece trained and applied with the
`sentencepiece` package, and length-bucketed token batches from a NumPy pipeline.

`SentencePieceText` writes and reads the same model file, with the same ids, as
`keras_attn.text.SentencePieceTokenizer` (which runs in a TensorFlow graph, for export), so a run
trained with it exports on a machine with TensorFlow (`keras_attn.train.export.export_run`).

`numpy_token_batches` yields the batches `token_batches` makes (the same buckets, at most
`max_tokens` positions per batch, the same cut to `max_length`), in an order that depends only
on the seed: each pass over the file is a permutation drawn from `(seed, pass)`, read in chunks,
each example put in its length bucket, a batch emitted when its bucket is full. So a resumed run
that skips the batches already trained (`Run.stream`) trains on the same batches as an
uninterrupted one. The file's lines are held in memory (the tf.data pipeline streams them).
"""

import os

import numpy as np

from keras_attn._ids import END_ID, PAD_ID, START_ID, UNK_ID
from keras_attn.text import byte_pieces
from keras_attn.text.sentencepiece_options import train_model_proto
from keras_attn.train.batching import bucket_batch_sizes, bucket_boundaries


def tensorflow_available():
    """Whether TensorFlow can be imported here."""
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return False
    return True


class RaggedIds(list):
    """Rows of ids (lists), with the two reads the recipe makes of a ragged tensor."""

    def to_list(self):
        return [list(r) for r in self]

    def row_lengths(self):
        return np.array([len(r) for r in self], np.int64)


class SentencePieceText:
    """A SentencePiece model applied in Python (`sentencepiece`), with the reserved ids of
    `keras_attn.text` (pad 0, `<s>` 1, `</s>` 2, `<unk>` 3) and `SentencePieceTokenizer`'s
    `tokenize` / `detokenize` / `save` / `load` / `train`."""

    pad_id, start_id, end_id, unk_id = PAD_ID, START_ID, END_ID, UNK_ID

    def __init__(self, model_proto, model_file=None):
        import sentencepiece as spm

        if not isinstance(model_proto, (bytes, bytearray)) or not model_proto:
            raise ValueError(
                "`model_proto` must be the non-empty bytes of a SentencePiece model. "
                f"Received: model_proto of type {type(model_proto).__name__}"
            )
        self.model_proto, self.model_file = bytes(model_proto), model_file
        self.processor = spm.SentencePieceProcessor()
        self.processor.LoadFromSerializedProto(self.model_proto)
        got = tuple(
            f() for f in (self.processor.pad_id, self.processor.bos_id, self.processor.eos_id)
        ) + (self.processor.unk_id(),)
        if got != (PAD_ID, START_ID, END_ID, UNK_ID):
            raise ValueError(
                f"The SentencePiece model must use pad=0, bos=1, eos=2, unk=3. Received: {got}"
            )
        size = self.processor.get_piece_size()
        self.vocabulary = [self.processor.id_to_piece(i) for i in range(size)]
        self.byte_pieces = byte_pieces
        self.byte_values = self.byte_pieces.byte_values(processor=self.processor)

    @property
    def vocab_size(self):
        return len(self.vocabulary)

    @classmethod
    def train(cls, texts, vocab_size=8000, **options):
        """Train on str sentences as `SentencePieceTokenizer.train` does (the same settings, so
        the same model file)."""
        return cls(train_model_proto(texts, vocab_size, **options))

    def save(self, path):
        with open(path, "wb") as f:
            f.write(self.model_proto)
        self.model_file = os.fspath(path)
        return self.model_file

    @classmethod
    def load(cls, path):
        with open(path, "rb") as f:
            return cls(f.read(), model_file=os.fspath(path))

    def tokenize(self, strings, add_start=False, add_end=False, max_length=None):
        """str (or UTF-8 bytes) sentences -> `RaggedIds`, as `Tokenizer.tokenize`: content cut so
        that a row, markers included, has at most `max_length` ids."""
        texts = [
            s.decode("utf-8", errors="replace") if isinstance(s, bytes) else str(s) for s in strings
        ]
        rows = self.processor.encode(texts)
        budget = None
        if max_length is not None:
            budget = int(max_length) - int(bool(add_start)) - int(bool(add_end))
        start, end = [START_ID] * bool(add_start), [END_ID] * bool(add_end)
        return RaggedIds(start + list(r[:budget]) + end for r in rows)

    def detokenize(self, ids):
        """Ids `[..., T]` -> an object array `[...]` of UTF-8 bytes, read as
        `SentencePieceTokenizer.detokenize` reads them (stop at the first end or pad, start ids
        skipped, byte pieces that complete no character dropped)."""
        ids = np.asarray(ids)
        flat = ids.reshape(-1, ids.shape[-1])
        texts = [
            self.byte_pieces.decode(self.processor, row.tolist(), self.byte_values).encode("utf-8")
            for row in flat
        ]
        return np.array(texts, dtype=object).reshape(ids.shape[:-1])


def read_pairs(path):
    """The `(source, target)` lines of a TSV file that `token_batches` keeps (both fields
    non-empty; a third field and beyond ignored)."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) >= 2 and fields[0] and fields[1]:
                pairs.append((fields[0], fields[1]))
    return pairs


def _padded(rows, pad_id):
    out = np.full((len(rows), max(len(r) for r in rows)), pad_id, np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _batch(examples, pad_id, end_id):
    """`[(source ids, target ids)]` -> `({"source", "target_in"}, target_out)`."""
    src = _padded([s for s, _ in examples], pad_id)
    tgt = _padded([t for _, t in examples], pad_id)
    target_in = tgt[:, :-1].copy()
    target_in[target_in == end_id] = pad_id
    return {"source": src, "target_in": target_in}, tgt[:, 1:].copy()


def numpy_token_batches(
    path, tokenizer, max_tokens=4096, max_length=128, seed=0, chunk=256, token_dropout=0.0
):
    """An endless generator of `({"source", "target_in"}, target_out)` int32 NumPy batches of a
    `source<TAB>target` file (the module's docstring). `token_dropout`: each source token
    becomes `unk_id` with this probability, drawn from `(seed, chunk index)`."""
    pairs = read_pairs(path)
    if not pairs:
        raise ValueError(f"No `source<TAB>target` lines in the file. Received: path={path!r}")
    boundaries = bucket_boundaries(max_length)
    sizes = bucket_batch_sizes(boundaries, max_tokens)
    buckets = [[] for _ in sizes]
    index, epoch = 0, 0
    while True:
        order = np.random.default_rng([int(seed), epoch]).permutation(len(pairs))
        for start in range(0, len(order), chunk):
            part = [pairs[i] for i in order[start : start + chunk]]
            src = tokenizer.tokenize([s for s, _ in part], max_length=max_length)
            tgt = tokenizer.tokenize(
                [t for _, t in part], add_start=True, add_end=True, max_length=max_length + 1
            )
            if token_dropout:
                noise = np.random.default_rng([int(seed), index, 1])
                src = [
                    [
                        tokenizer.unk_id if u < token_dropout else t
                        for t, u in zip(r, noise.random(len(r)))
                    ]
                    for r in src
                ]
            index += 1
            for s, t in zip(src, tgt):
                length = max(len(s), len(t) - 1)
                b = int(np.searchsorted(boundaries, length, side="right"))
                buckets[b].append((s, t))
                if len(buckets[b]) == sizes[b]:
                    yield _batch(buckets[b], tokenizer.pad_id, tokenizer.end_id)
                    buckets[b] = []
        epoch += 1


def count_pairs_tokens(path, tokenizer, max_length=128):
    """`(lines, source tokens, target tokens, longest target)` as `count_tokens` counts them."""
    pairs = read_pairs(path)
    src = tokenizer.tokenize([s for s, _ in pairs], max_length=max_length).row_lengths()
    tgt = tokenizer.tokenize([t for _, t in pairs], max_length=max_length - 1).row_lengths()
    return len(pairs), int(src.sum()), int(tgt.sum()) + len(pairs), int(tgt.max(initial=0))
