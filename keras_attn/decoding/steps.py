"""One decoding step per decoder family, used by the models, the searches and the exporter.

The step functions of the two decoder families live here, once:

- `transformer_decode_step(layers, embed, project, tokens, state, step)`: one token
  through a stack of `TransformerDecoderLayer`s with key/value caches;
  `keras_attn.models.Transformer.decode_step` calls it with the model's own embedding and
  output projection.
- `rnn_decode_step(cell, embed, project, tokens, state, step)`: one token through an
  `AttentionRNNCell`; `keras_attn.models.RNNSeq2Seq.decode_step` calls it.

Both read and write the same state layout as the models' `initial_decode_state` (see
docs/decoding.md): Transformer `{"self_cache", "per_example": {"cross_cache",
"source_mask"}}`, RNN `{"cell", "per_example": {"memory", "source_mask", "projected_key"}}`.
What is under `"per_example"` has one row per example, never tiled nor reordered by the
searches; the K hypotheses of an example read the same rows (docs/decoding.md,
"Per-example state").

The builders `transformer_step` and `rnn_step` wrap the same functions for a decoder
assembled from loose layers: each returns `(step_fn, initial_state)` ready for
`beam_search` / `greedy_search` / `sample_search`. Everything the step needs per example
(encoder memory, its mask, projected keys, cross-attention caches) travels in the state,
never in a closure, under `"per_example"`: the searches keep it with one row per example,
and a step groups its `N = B K` query rows by example (`K = N // B`) to attend it.

- `transformer_step`: `cached=True` (the default) keeps each layer's self-attention
  key/value cache `[N, max_length, heads, head_dim]` in the state and feeds one token per
  step (`self_attention_cache_index = step`); the encoder keys/values of every layer are
  projected once (`compute_cross_cache`). `cached=False` keeps the fed tokens in a
  `[N, max_length]` buffer and recomputes the prefix every step: `recompute="prefix"`
  (the default) runs tokens `0..step` through the stack (shapes grow, so not under XLA nor
  on JAX, whose loop is always compiled),
  `recompute="buffer"` the whole fixed-size, causally masked buffer (static shapes,
  compiles with XLA). Both read position `step`; they are the reference the cache is
  tested against and the baselines of `benchmarks/decoding_speed.py`.
  The step's attention is the last layer's cross-attention averaged over heads.
- `rnn_step`: the state holds the cell's states, the memory, its mask and the projected
  keys (computed once). The attention is the cell's weights.
"""

from keras import ops

from keras_attn.decoding import backend as kb
from keras_attn.decoding.shapes import PER_EXAMPLE
from keras_attn.layers.positional import PositionalEncoding


def transformer_decode_step(layers, embed, project, tokens, state, step, training=False):
    """One cached step of a `TransformerDecoderLayer` stack.

    Args:
      layers: the decoder layers (all with or all without cross-attention).
      embed: `embed(ids [N, 1] int32, step) -> [N, 1, d]` (embedding, scale, positions).
      project: `project(x [N, 1, d]) -> logits [N, 1, V]` (final norm, output layer).
      tokens: `[N]` ids fed at position `step`.
      state: `{"self_cache": [(k, v)] per layer, "per_example": {"cross_cache": [(k, v)]
        per layer (with cross-attention; zero at the rows where `source_mask` is False, as
        `transformer_initial_state` makes it), "source_mask": [B, S] bool (optional)}}`
        (the `"per_example"` part, B rows, read by the K hypotheses of each example); the
        same keys at the top level, tiled to N rows, are read as well.
      step: the position being fed (scalar int).
    Returns `(logits [N, V], state, attention [N, S] or None)`: the attention is the last
    layer's cross-attention averaged over heads (float32), None without cross-attention.
    """
    x = embed(ops.expand_dims(ops.cast(tokens, "int32"), 1), step)
    source = state.get(PER_EXAMPLE, state)  # B rows (per example), else tiled with the rest
    cross = "cross_cache" in source
    mask = source.get("source_mask")
    last = len(layers) - 1
    new_self, attention = [], None
    for i, layer in enumerate(layers):
        want_scores = cross and i == last
        out = layer(
            x,
            self_attention_cache=state["self_cache"][i],
            self_attention_cache_index=step,
            return_attention_scores=want_scores,
            training=training,
            cross_attention_cache=source["cross_cache"][i] if cross else None,
            encoder_padding_mask=mask if cross else None,
            # transformer_initial_state zeroed the padding rows once.
            cross_attention_cache_zeroed=cross,
        )
        x = out[0]
        if want_scores:
            attention = ops.mean(ops.cast(out[1][:, :, 0, :], "float32"), axis=1)
        new_self.append(tuple(out[-1][0]))
    logits = project(x)[:, 0, :]
    new_state = dict(state)
    new_state["self_cache"] = new_self
    return logits, new_state, attention


def transformer_initial_state(layers, batch, max_length, memory=None, source_mask=None):
    """`initial_decode_state` of a cached Transformer stack (see `transformer_decode_step`):
    the self-attention caches per hypothesis, the cross caches and the source mask once per
    example (under `"per_example"`, docs/decoding.md)."""
    # One row per step: sliding-window layers get ring caches (docs/multi_head.md).
    state = {
        "self_cache": [tuple(layer.init_cache(batch, max_length, ring=True)) for layer in layers]
    }
    source = {}
    if source_mask is not None:
        source_mask = kb.convert(source_mask, "bool")
        source["source_mask"] = source_mask
    if memory is not None:
        # Padding rows zeroed here, once, not at every step (transformer_decode_step).
        source["cross_cache"] = [
            tuple(layer.compute_cross_cache(memory, source_mask)) for layer in layers
        ]
    if source:
        state[PER_EXAMPLE] = source
    return state


def rnn_decode_step(cell, embed, project, tokens, state, step, training=False):
    """One step of an `AttentionRNNCell` decoder.

    Args:
      cell: a built `AttentionRNNCell`.
      embed: `embed(ids [N] int32) -> [N, d]`.
      project: the cell's output `[N, H]` -> logits `[N, V]`.
      state: `{"cell": [...], "per_example": {"memory": [B, S, Dv], "source_mask": [B, S]
        bool (optional), "projected_key": (optional)}}` (`rnn_initial_state`), or the same
        keys beside `"cell"`, tiled to N rows.
    Returns `(logits [N, V], state, attention [N, S] float32)`.
    """
    x = embed(ops.cast(tokens, "int32"))
    source = state.get(PER_EXAMPLE, state)  # B rows (per example), else tiled with the rest
    output, new_cells, weights = cell.loop_step(
        x,
        state["cell"],
        source["memory"],
        source.get("source_mask"),
        source.get("projected_key"),
        step,
        training,
    )
    new_state = dict(state)
    new_state["cell"] = new_cells
    return project(output), new_state, ops.cast(weights, "float32")


def rnn_initial_state(cell, memory, source_mask=None, cell_states=None, per_example=True):
    """`initial_decode_state` of an `AttentionRNNCell` decoder (keys projected once).

    The memory, its mask and the projected keys go under `"per_example"` (one row per
    example, read by its K hypotheses) when `per_example` is True and the cell's attention
    allows it (`AttentionRNNCell.per_example_memory`); else they sit beside the cell states
    and are tiled with them."""
    memory = kb.convert(memory)
    if cell_states is None:
        cell_states = cell.get_initial_state(kb.dim(memory, 0))
    source = {"memory": memory}
    if source_mask is not None:
        source["source_mask"] = kb.convert(source_mask, "bool")
    keys = cell.project_memory(memory)
    if keys is not None:
        source["projected_key"] = keys
    state = {"cell": list(cell_states)}
    if per_example and cell.per_example_memory:
        state[PER_EXAMPLE] = source
    else:
        state.update(source)
    return state


def _position_rows(positional_encoding, embedding, scale, max_length):
    """`[max_length, d]`: what a sinusoidal `PositionalEncoding` adds at each position,
    computed once before the search's loop (a step then adds one row instead of computing
    its sines and cosines: about 15 ops fewer per step). None for any other positional
    encoding, or one with a `max_length` of its own (called at each step)."""
    if not (
        isinstance(positional_encoding, PositionalEncoding)
        and positional_encoding.mode == "sinusoidal"
        and positional_encoding.max_length is None
    ):
        return None
    probe = _embed(embedding, kb.zeros((1, 1), "int32"), scale)  # its depth and dtype
    zeros = kb.zeros(kb.shape_of(1, max_length, probe.shape[-1]), kb.dtype_name(probe))
    return positional_encoding(zeros)[0]  # 0 + PE[p]: exactly the rows a step would add


def _embed(embedding, tokens, scale):
    x = embedding(tokens)
    if scale is not None:
        x = x * ops.cast(scale, x.dtype)
    return x


def transformer_step(
    decoder_layers,
    embedding,
    output_layer,
    encoder_output=None,
    encoder_mask=None,
    positional_encoding=None,
    max_length=50,
    batch_size=None,
    embedding_scale=None,
    cached=True,
    training=False,
    recompute="prefix",
):
    """`(step_fn, initial_state)` for a stack of `TransformerDecoderLayer`s.

    Args:
      decoder_layers: list of built `TransformerDecoderLayer`s (all with or all
        without cross-attention).
      embedding: tokens `[N, T]` int -> `[N, T, d_model]` (e.g. `keras.layers.Embedding`).
      output_layer: `[N, T, d_model]` -> logits `[N, T, V]` (e.g. `keras.layers.Dense`).
      encoder_output: `[B, S, d_enc]`, required with cross-attention.
      encoder_mask: optional bool `[B, S]` (True = real position).
      positional_encoding: optional `PositionalEncoding` (called with `start_index`).
      max_length: the most tokens the search will generate (the cache length);
        pass the search's `max_length` (a Python int or scalar tensor).
      batch_size: B, needed only without `encoder_output`.
      embedding_scale: optional factor on the embeddings (e.g. `sqrt(d_model)`).
      cached: key/value caches (True) or recompute the prefix every step (False).
      training: passed to the layers (dropout); False for decoding.
      recompute: without a cache, what each step runs through the stack: "prefix"
        (tokens `0..step`) or "buffer" (all `max_length` positions, causally masked;
        use it under XLA, which needs static shapes).
    """
    if recompute not in ("prefix", "buffer"):
        raise ValueError(
            f'`recompute` must be "prefix" or "buffer". Received: recompute={recompute!r}'
        )
    layers, cross = _decoder_layers(decoder_layers, encoder_output)
    if encoder_output is not None:
        encoder_output = kb.convert(encoder_output)
        batch = kb.dim(encoder_output, 0)
    elif batch_size is not None:
        batch = batch_size
    else:
        raise ValueError("Pass `batch_size` when there is no `encoder_output`. Received: None")
    embed = _Embedder(embedding, embedding_scale, positional_encoding)
    if cached:
        state = transformer_initial_state(layers, batch, max_length, encoder_output, encoder_mask)
        step_embed = embed.at_step
        table = _position_rows(positional_encoding, embedding, embedding_scale, max_length)
        if table is not None:

            def step_embed(ids, step):  # the row of position `step`, computed before the loop
                return _embed(embedding, ids, embedding_scale) + kb.take(table, step)

        def cached_step(tokens, state, step):
            return transformer_decode_step(
                layers, step_embed, output_layer, tokens, state, step, training=training
            )

        return cached_step, state

    state = {"tokens": kb.zeros(kb.shape_of(batch, max_length), "int32")}
    if encoder_mask is not None:
        state["source_mask"] = kb.convert(encoder_mask, "bool")
    if cross:
        state["encoder_output"] = encoder_output
    return _uncached_step(layers, cross, embed, output_layer, recompute, training), state


def _decoder_layers(decoder_layers, encoder_output):
    """`(layers, cross)`: the stack as a list, checked (all with or all without
    cross-attention, `encoder_output` given exactly with it), and whether it has it."""
    layers = list(decoder_layers)
    if not layers:
        raise ValueError("`decoder_layers` must hold at least one layer. Received: []")
    cross = {bool(layer.cross_attention) for layer in layers}
    if len(cross) != 1:
        raise ValueError(
            "`decoder_layers` must all have cross-attention or all not. "
            f"Received: cross_attention={[layer.cross_attention for layer in layers]}"
        )
    cross = cross.pop()
    if cross and encoder_output is None:
        raise ValueError(
            "Decoder layers with cross-attention need `encoder_output`. Received: encoder_output=None"
        )
    if not cross and encoder_output is not None:
        raise ValueError(
            "`encoder_output` was given but the decoder layers have no cross-attention. "
            "Received: cross_attention=False"
        )
    return layers, cross


class _Embedder:
    """Token ids -> the decoder's input: the embedding, its scale, the positions."""

    def __init__(self, embedding, scale, positional_encoding):
        self.embedding, self.scale, self.positional_encoding = embedding, scale, positional_encoding

    def at_step(self, ids, step):
        """`ids` `[N, 1]` at position `step`."""
        x = _embed(self.embedding, ids, self.scale)
        if self.positional_encoding is not None:
            x = self.positional_encoding(x, start_index=step)
        return x

    def prefix(self, ids):
        """`ids` `[N, T]` at positions `0..T-1`."""
        x = _embed(self.embedding, ids, self.scale)
        if self.positional_encoding is not None:
            x = self.positional_encoding(x)
        return x


def _uncached_step(layers, cross, embed, output_layer, recompute, training):
    """`transformer_step`'s step without a cache: the fed tokens kept in the state's buffer,
    the prefix (or the whole masked buffer) run through the stack every step."""
    last = len(layers) - 1

    def uncached_step(tokens, state, step):
        buffer = state["tokens"]
        length = kb.dim(buffer, 1)
        column = ops.equal(kb.range_(length), step)[None, :]
        buffer = ops.where(column, tokens[:, None], buffer)
        fed = buffer[:, : step + 1] if recompute == "prefix" else buffer
        read = step if recompute == "buffer" else -1  # the position whose logits we want
        x = embed.prefix(fed)
        attention = None
        for i, layer in enumerate(layers):
            want_scores = cross and i == last
            out = layer(
                x,
                encoder_sequence=state["encoder_output"] if cross else None,
                encoder_padding_mask=state.get("source_mask") if cross else None,
                return_attention_scores=want_scores,
                training=training,
            )
            if want_scores:
                x, scores = out
                row = kb.take(scores, read % kb.dim(scores, 2), axis=2)  # [N, heads, S]
                attention = ops.mean(ops.cast(row, "float32"), axis=1)
            else:
                x = out
        final = kb.take(x, [read % kb.dim(x, 1)], axis=1)  # [N, 1, d]: only it is projected
        logits = output_layer(final)[:, 0, :]
        new_state = dict(state)
        new_state["tokens"] = buffer
        return logits, new_state, attention

    return uncached_step


def rnn_step(
    cell,
    embedding,
    output_layer,
    memory,
    memory_mask=None,
    initial_cell_state=None,
    training=False,
):
    """`(step_fn, initial_state)` for an `AttentionRNNCell` decoder.

    Args:
      cell: a built `AttentionRNNCell`.
      embedding: tokens `[N]` int -> `[N, d]` (e.g. `keras.layers.Embedding`).
      output_layer: the cell's output `[N, H]` -> logits `[N, V]`.
      memory: encoder outputs `[B, S, Dv]`.
      memory_mask: optional bool `[B, S]`.
      initial_cell_state: the cell's flat state list (batch B), e.g. from the
        encoder; zeros (`cell.get_initial_state`) by default.
      training: passed to the cell (dropout); False for decoding.
    """
    state = rnn_initial_state(cell, memory, memory_mask, initial_cell_state)

    def step_fn(tokens, state, step):
        return rnn_decode_step(
            cell, embedding, output_layer, tokens, state, step, training=training
        )

    return step_fn, state
