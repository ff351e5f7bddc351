"""Batches for `fit`: in-memory arrays in a seeded order per epoch, and streamed, length-
bucketed token batches of a TSV corpus (tf.data)."""

import os

import keras
import numpy as np

from keras_attn._checks import check_int


def epoch_order(n, seed, epoch):
    """The example order of `epoch` (0-based): a permutation depending only on `(seed, epoch)`."""
    return np.random.default_rng([int(seed), int(epoch)]).permutation(n)


# On JAX a compiled train step has static shapes: each new batch shape compiles it again. There
# every integer `[B, T]` tensor of a batch is padded (masked like any other padding) to the width
# of the length bucket its longest row falls in (`bucket_width`), the same width for the source
# and both target tensors, and, given the batch plan (`BucketShapes`), its rows to the rows of a
# full batch of that bucket (rows of padding only: no token of theirs reaches the loss, the
# gradients or the metrics), so that a run compiles one train step per bucket, a bucket's last,
# partial batch included, rather than one per pair of widths and row count.
#
# The buckets stay as fine on JAX as on TensorFlow (boundaries about 1.25 times the previous):
# coarser ones compile fewer train steps once, but pad every pass over the data more. On the
# translator's large corpus (`benchmarks/jax_vs_tf.py --parts train,buckets` measures it) boundaries
# 1.5 or 2 times apart use 8 or 5 buckets instead of 14, but 19% or 31% of a pass's positions
# are padding instead of 12%: within one or two passes the extra batches cost what the fewer
# compilations saved, and a run trains tens of passes. With the compilation cache
# (`loop.use_compilation_cache`) a repeated or resumed run compiles nothing again anyway.


def pads_to_buckets():
    """Whether batches are padded to their bucket's width and rows: on JAX (see above)."""
    return keras.backend.backend() == "jax"


def _next_boundary(boundary, growth=1.25):
    """The length bucket boundary after `boundary`: about `growth` times it, at least 2 more."""
    return max(boundary + 2, int(boundary * growth))


def bucket_width(width, first=8, max_length=None):
    """The width of the length bucket holding a row of `width` tokens: the bucket's longest
    (`b - 1` for the smallest boundary `b > width` of `8, 10, 12, 15, ...`, as
    `bucket_boundaries` draws them), so every batch of one bucket gets one width. With
    `max_length` (the longest row kept, `bucket_boundaries`' last bucket ends there): at most
    `max_length` for a row that fits it."""
    width = check_int("width", width, minimum=0)
    boundary = first
    while boundary <= width:
        boundary = _next_boundary(boundary)
    if max_length is not None and width <= max_length:
        return min(boundary - 1, check_int("max_length", max_length))
    return boundary - 1


def bucket_widths(up_to, first=8):
    """Every `bucket_width` up to the first at least `up_to`, ascending."""
    widths = [first - 1]
    while widths[-1] < up_to:
        widths.append(_next_boundary(widths[-1] + 1) - 1)
    return widths


class BucketShapes:
    """The shapes of a length-bucketed batch plan (`token_batches`: at most `max_tokens` token
    positions per batch, rows cut to `max_length` tokens), which a JAX batch is padded to: a
    row of `w` tokens' bucket's width (`width(w)`, `bucket_width`) and the rows of that
    bucket's full batch (`rows(bucket width)`, `bucket_batch_sizes`)."""

    def __init__(self, max_tokens, max_length):
        self.max_tokens = check_int("max_tokens", max_tokens)
        self.max_length = check_int("max_length", max_length)

    def width(self, width):
        return bucket_width(width, max_length=self.max_length)

    def rows(self, width):
        """The rows of a full batch whose rows are `width` tokens wide (a bucket's width)."""
        return batch_rows(self.max_tokens, width)


def batch_rows(max_tokens, width):
    """The rows of a batch of rows `width` tokens wide holding at most `max_tokens` positions,
    padding included: at least one."""
    return max(1, int(max_tokens) // int(width))


def _common_width(tensors):
    """The widest `[B, T]` integer tensor among `tensors`: `T` (a scalar tensor), or None."""
    import tensorflow as tf

    widths = [tf.shape(t)[1] for t in tensors if _is_ids(t)]
    return tf.reduce_max(tf.stack(widths)) if widths else None


def _is_ids(tensor):
    return tensor.shape.rank == 2 and tensor.dtype.is_integer


def _bucket_width_tf(width, up_to=4096, max_length=None):
    """`bucket_width` of a scalar int tensor (widths up to `up_to`)."""
    import tensorflow as tf

    table = tf.constant(bucket_widths(up_to), tf.int32)
    width = tf.cast(width, tf.int32)
    bucket = tf.gather(table, tf.searchsorted(table, tf.reshape(width, [1]))[0])
    if max_length is not None:
        bucket = tf.where(width <= max_length, tf.minimum(bucket, max_length), bucket)
    return bucket


def _trim(tensor, pad_id=0, to_bucket=False):
    """Cut trailing all-padding columns of a `[B, T]` int batch; `to_bucket`: keep the
    `bucket_width` of what is left (at most `T`)."""
    import tensorflow as tf

    used = tf.reduce_any(tf.not_equal(tensor, pad_id), axis=0)
    width = tf.maximum(tf.reduce_max(tf.where(used, tf.range(1, tf.shape(tensor)[1] + 1), 0)), 1)
    if to_bucket:
        width = tf.minimum(_bucket_width_tf(width), tf.shape(tensor)[1])
    return tensor[:, :width]


def _pad_to_bucket(batch, pad_id=0, shapes=None):
    """`batch` (a nest of tensors) with every `[B, T]` int tensor padded with `pad_id` to the
    `bucket_width` of the widest of them; other tensors as they are. With `shapes` (a
    `BucketShapes`): the width capped at its `max_length`, and every tensor's rows padded (with
    `pad_id`) to `shapes.rows` of that width."""
    import tensorflow as tf

    flat = tf.nest.flatten(batch)
    width = _common_width(flat)
    if width is None:
        return batch
    width = _bucket_width_tf(width, max_length=None if shapes is None else shapes.max_length)
    rows = None
    if shapes is not None:
        rows = tf.maximum(shapes.max_tokens // width, 1)

    def pad(t):
        if rows is not None:
            more = tf.maximum(rows - tf.shape(t)[0], 0)
            t = tf.pad(t, [[0, more]] + [[0, 0]] * (t.shape.rank - 1), constant_values=pad_id)
        if not _is_ids(t):
            return t
        return tf.pad(t, [[0, 0], [0, width - tf.shape(t)[1]]], constant_values=pad_id)

    return tf.nest.pack_sequence_as(batch, [pad(t) for t in flat])


def pad_numpy_to_bucket(x, y, pad_id=0, shapes=None):
    """`_pad_to_bucket` of a NumPy `(x, y)` batch (`x` a dict of arrays)."""
    arrays = [*x.values(), y]
    widths = [a.shape[1] for a in arrays if a.ndim == 2 and np.issubdtype(a.dtype, np.integer)]
    if not widths:
        return x, y
    width = bucket_width(max(widths)) if shapes is None else shapes.width(max(widths))
    rows = None if shapes is None else shapes.rows(width)

    def pad(a):
        if rows is not None and len(a) < rows:
            a = np.pad(a, [(0, rows - len(a))] + [(0, 0)] * (a.ndim - 1), constant_values=pad_id)
        if a.ndim != 2 or not np.issubdtype(a.dtype, np.integer) or a.shape[1] == width:
            return a
        return np.pad(a, [(0, 0), (0, width - a.shape[1])], constant_values=pad_id)

    return {k: pad(v) for k, v in x.items()}, pad(y)


def encode_pairs(pairs, source_tokenizer, target_tokenizer=None, max_source=None, max_target=None):
    """(source, target) str pairs -> `(x, y)` for `fit`: `x = {"source", "target_in"}`,
    `y` = target_out (teacher forcing: `target_in = [start, y..]`, `y = [y.., end]`)."""
    from keras_attn.data.padding import pad_ids

    target_tokenizer = target_tokenizer or source_tokenizer
    sources = [s for s, _ in pairs]
    targets = [t for _, t in pairs]
    src = source_tokenizer.tokenize(sources, max_length=max_source)
    tgt = target_tokenizer.tokenize(
        targets,
        add_start=True,
        add_end=True,
        max_length=None if max_target is None else max_target + 1,
    )
    src = pad_ids(src.to_list())
    tgt = pad_ids(tgt.to_list())
    target_in = tgt[:, :-1].copy()
    target_in[target_in == target_tokenizer.end_id] = target_tokenizer.pad_id
    return {"source": src, "target_in": target_in}, tgt[:, 1:].copy()


def bucket_boundaries(max_length, first=8, growth=1.25):
    """Length bucket boundaries `8, 10, 12, ... > max_length` (each about `growth` times the
    previous), the last one past `max_length` so that every kept example has a bucket."""
    bounds, b = [], first
    while b <= max_length:
        bounds.append(b)
        b = _next_boundary(b, growth)
    bounds.append(max_length + 1)
    return bounds


def bucket_batch_sizes(boundaries, max_tokens):
    """Examples per batch in each bucket: a batch of bucket `i` (lengths below `boundaries[i]`)
    holds at most `max_tokens` positions counting padding (`size * (boundaries[i] - 1)`), and
    at least one example. The bucket past the last boundary is never used (lengths are cut)."""
    return [batch_rows(max_tokens, b - 1) for b in boundaries] + [1]


def token_batches(
    path,
    tokenizer,
    max_tokens=4096,
    max_length=128,
    seed=0,
    shuffle_buffer=20000,
    chunk=256,
    repeat=True,
    source_transform=None,
):
    """An endless, seeded `tf.data.Dataset` of `({"source", "target_in"}, target_out)` batches
    read from a `source<TAB>target` file and tokenized in the graph.

    Memory is bounded whatever the file's size: lines are streamed (`TextLineDataset`), shuffled
    in a buffer of `shuffle_buffer` lines (re-shuffled each pass, seeded), tokenized `chunk`
    at a time and grouped into length buckets (`bucket_boundaries`), each batch holding at most
    `max_tokens` token positions, padding included (`bucket_batch_sizes`; as fairseq's
    `--max-tokens`). Sequences are cut to `max_length` tokens (target: start/end included).
    `source_transform(ids, index) -> ids` (ragged `[chunk, None]` int32, the chunk's index in
    the stream) is applied to the source ids (e.g. `token_dropout`). The order depends only on `seed`."""
    import tensorflow as tf

    boundaries = bucket_boundaries(max_length)
    sizes = bucket_batch_sizes(boundaries, max_tokens)
    lines = tf.data.TextLineDataset(os.fspath(path))
    lines = lines.filter(lambda line: tf.strings.regex_full_match(line, "[^\\t]+\\t[^\\t]+.*"))
    lines = lines.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        lines = lines.repeat()

    def tokenize(index, batch):
        fields = tf.strings.split(batch, "\t", maxsplit=2).to_tensor("", shape=[None, 2])
        src = tokenizer.tokenize(fields[:, 0], max_length=max_length)
        tgt = tokenizer.tokenize(
            fields[:, 1], add_start=True, add_end=True, max_length=max_length + 1
        )
        if source_transform is not None:
            src = source_transform(src, index)
        # Dense rows and their lengths: unbatched below into one tensor per sequence.
        return src.to_tensor(), src.row_lengths(), tgt.to_tensor(), tgt.row_lengths()

    examples = (
        lines.batch(chunk)
        .enumerate()
        .map(tokenize)
        .unbatch()
        .map(lambda src, ns, tgt, nt: (src[:ns], tgt[:nt]))
    )

    def length(src, tgt):
        return tf.maximum(tf.shape(src)[0], tf.shape(tgt)[0] - 1)

    batches = examples.bucket_by_sequence_length(
        length,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=sizes,
        padded_shapes=([None], [None]),
        padding_values=(tokenizer.pad_id, tokenizer.pad_id),
    )

    def split(src, tgt):
        target_in = tgt[:, :-1]
        target_in = tf.where(tf.equal(target_in, tokenizer.end_id), tokenizer.pad_id, target_in)
        return {"source": src, "target_in": target_in}, tgt[:, 1:]

    return batches.map(split)


def token_dropout(rate, unk_id, seed=0):
    """A `source_transform` for `token_batches`: each source token becomes `unk_id` with
    probability `rate` (word dropout, Sennrich & Zhang 2019); the noise of chunk `index` is a
    stateless function of `(seed, index)`, so a resumed stream draws the same."""
    import tensorflow as tf

    def transform(ids, index):
        values = ids.flat_values
        noise = tf.random.stateless_uniform(
            tf.shape(values), seed=tf.stack([tf.cast(seed, tf.int64), tf.cast(index, tf.int64)])
        )
        return ids.with_flat_values(tf.where(noise < rate, tf.cast(unk_id, values.dtype), values))

    return transform


def count_tokens(path, tokenizer, max_length=128, chunk=4096):
    """`(lines, source tokens, target tokens, longest target)` of a TSV file, tokenized as
    `token_batches` does (to size a Keras epoch and the decoding limit)."""
    lines, src_total, tgt_total, longest = 0, 0, 0, 0
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    rows = [r for r in rows if len(r) >= 2 and r[0] and r[1]]
    for i in range(0, len(rows), chunk):
        part = rows[i : i + chunk]
        src = tokenizer.tokenize([r[0] for r in part], max_length=max_length).row_lengths()
        tgt = tokenizer.tokenize([r[1] for r in part], max_length=max_length - 1).row_lengths()
        lines += len(part)
        src, tgt = np.asarray(src), np.asarray(tgt)
        src_total += int(src.sum())
        tgt_total += int(tgt.sum()) + len(part)
        longest = max(longest, int(tgt.max(initial=0)))
    return lines, src_total, tgt_total, longest
