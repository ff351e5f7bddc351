"""An attention decoder cell around any Keras RNN cell, and the layer that runs it.

`AttentionRNNCell` combines a Keras RNN cell (`LSTMCell`, `GRUCell`,
`SimpleRNNCell`, ...) with one of our cross-attention layers
(`BahdanauAttention`, `LuongAttention`, `HardAttention`) into one decoder
step. `AttentionDecoder` runs that step over a whole target sequence with
`keras.ops.scan` (teacher forcing); a beam search calls the cell itself, one
step at a time.

How the encoder memory reaches the cell: it is an explicit argument of every
step, never state stored on a layer during `call` and never part of the
recurrent state. The per-source work of the attention (projecting the keys)
is done once with `cell.project_memory(memory)` and handed to each step as
`projected_key=`.

The step::

    output, new_states, weights = cell(
        inputs,            # [B, Din], the previous target token's features
        states,            # flat list of [B, size_i] tensors (see state layout)
        memory,            # [B, S, Dv], the encoder outputs (or one row per example
                           # for K query rows each: see `per_example_memory`)
        memory_mask=None,  # [B, S] bool
        projected_key=None,  # cell.project_memory(memory), computed once
        position=None,     # int step index, forwarded to attention layers
                           # whose `call` accepts `position=` (local-m)
        training=None,
    )
    # output [B, cell.output_size], weights [B, S]

State layout (a flat list of plain tensors, so a beam search can tile and
reorder it with one gather per entry):

- the wrapped cell's states, flattened in its own order (`[h, c]` for
  `LSTMCell`, `[h]` for `GRUCell` and `SimpleRNNCell`);
- Luong style with `input_feeding=True` only: then the previous attentional
  vector `h~_{t-1}` `[B, attention_dim]`.

`cell.state_size` lists their sizes and `cell.get_initial_state(batch_size)`
gives zeros (the zero attentional vector included).
"""

import inspect

import keras
from keras import ops

from keras_attn._checks import check_bool as _check_bool
from keras_attn.layers import scoring
from keras_attn.layers.base import (
    CrossAttention,
    check_choice,
    check_float_tensor,
    check_positive_int,
    config_of,
    revived,
    walk_layers,
)

STYLES = ("bahdanau", "luong")


def _as_layer(name, obj):
    """A layer instance, or deserialized from its `serialize_keras_object` dict."""
    if isinstance(obj, dict):
        obj = keras.saving.deserialize_keras_object(obj)
    return obj


def _accepts_position(layer):
    """Whether the attention layer's `call` (or its `attend`) takes `position=`."""
    for method in ("call", "attend"):
        fn = getattr(layer, method, None)
        if fn is None:
            continue
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):  # pragma: no cover - builtins
            continue
        if "position" in params:
            return True
    return False


def _flat_state_sizes(cell):
    size = cell.state_size
    sizes = list(size) if isinstance(size, (list, tuple)) else [size]
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int):
            raise ValueError(
                "`cell` must have a flat `state_size` (an int or a list of ints, as "
                "LSTMCell, GRUCell and SimpleRNNCell have). "
                f"Received: cell={cell!r} with state_size={size!r}"
            )
    return sizes


@keras.saving.register_keras_serializable(package="keras_attn")
class AttentionRNNCell(keras.layers.Layer):
    """A Keras RNN cell with cross-attention over an encoder memory.

    Styles (`y` the step input, `s`/`h` the wrapped cell's first state, i.e.
    its output, `c` the context):

    - `"bahdanau"` (Bahdanau et al. 2015): attend with the previous state,
      `c_i = attn(s_{i-1}, memory)`, then run the cell on `[y_{i-1}; c_i]`.
      The output is the cell output `s_i`, or `[s_i; c_i]` with
      `output_context=True` (what Bahdanau's output layer reads besides
      `y_{i-1}`, which the caller already has).
    - `"luong"` (Luong et al. 2015): run the cell on `[y_t; h~_{t-1}]` (input
      feeding; just `y_t` with `input_feeding=False`), attend with the new
      `h_t`, `c_t = attn(h_t, memory)`, and output the attentional vector
      `h~_t = tanh(W_c [c_t; h_t])`, `W_c [Dv + H, attention_dim]`, no bias
      (eq. 5 of the paper). With input feeding `h~_t` is the last state entry.

    Args:
        cell: a Keras RNN cell with a flat `state_size` (its first state is
            the one that attends), or its `serialize_keras_object` dict.
        attention: one of our cross-attention layers (a `CrossAttention`
            subclass), or its serialized dict. Its query is the cell's
            `h` (`[B, H]`), its value the memory.
        style: `"bahdanau"` or `"luong"`.
        attention_dim: size of `h~` (Luong style only; defaults to `H`).
        input_feeding: Luong style: feed `h~_{t-1}` to the cell (default True).
            Ignored in Bahdanau style, which always feeds the context.
        output_context: Bahdanau style only: output `[s_i; c_i]`.

    Dtype policy: one policy for the whole step. With `dtype=...` the wrapper
    gives its policy to the wrapped cell and attention layer (if not built
    yet); without it, the wrapper takes the wrapped cell's policy and gives
    that to the attention layer. `AttentionDecoder` does the same with its
    `AttentionRNNCell`, so `AttentionDecoder(cell, dtype="mixed_float16")`
    runs everything in mixed precision.

    Call: see the module docstring; returns `(output, new_states, weights)`.
    """

    def __init__(
        self,
        cell,
        attention,
        style="bahdanau",
        attention_dim=None,
        input_feeding=True,
        output_context=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.style = check_choice("style", style, STYLES)
        cell = _as_layer("cell", cell)
        if not isinstance(cell, keras.layers.Layer) or not hasattr(cell, "state_size"):
            raise ValueError(
                "`cell` must be a Keras RNN cell (a layer with `state_size`, such as "
                f"keras.layers.LSTMCell). Received: cell={cell!r}"
            )
        if isinstance(cell, AttentionRNNCell):
            raise ValueError(
                f"`cell` cannot itself be an AttentionRNNCell. Received: cell={cell!r}"
            )
        self._cell_state_sizes = _flat_state_sizes(cell)
        attention = _as_layer("attention", attention)
        if not isinstance(attention, CrossAttention):
            raise ValueError(
                "`attention` must be one of keras_attn's cross-attention layers "
                "(BahdanauAttention, LuongAttention, HardAttention). "
                f"Received: attention={attention!r}"
            )
        self.input_feeding = _check_bool("input_feeding", input_feeding)
        self.output_context = _check_bool("output_context", output_context)
        if self.style == "luong":
            self.attention_dim = check_positive_int("attention_dim", attention_dim, allow_none=True)
            if self.output_context:
                raise ValueError(
                    "`output_context=True` is for the Bahdanau style only; the Luong style "
                    "outputs the attentional vector, which already mixes in the context. "
                    f"Received: output_context={output_context!r} with style={style!r}"
                )
        else:
            if attention_dim is not None:
                raise ValueError(
                    "`attention_dim` is for the Luong style only. "
                    f"Received: attention_dim={attention_dim!r} with style={style!r}"
                )
            self.attention_dim = None
        self.cell = cell
        self.attention = attention
        self.units = self._cell_state_sizes[0]
        self._forward_position = _accepts_position(attention)
        # Without `dtype`, take the wrapped cell's policy; either way the
        # whole step then runs under one policy (saved in the config).
        given = kwargs.get("dtype") is not None
        self._adopt_dtype_policy(self.dtype_policy if given else cell.dtype_policy)

    def _adopt_dtype_policy(self, policy):
        """Give `policy` to this cell and its unbuilt sublayers."""
        if self.built:
            return
        self.dtype_policy = policy
        for top in (self.cell, self.attention):
            for sub in walk_layers(top):
                if not sub.built:
                    sub.dtype_policy = policy

    # ------------------------------------------------------------- sizes
    @property
    def _feeds_attentional(self):
        return self.style == "luong" and self.input_feeding

    @property
    def _attentional_dim(self):
        return self.attention_dim or self.units

    @property
    def state_size(self):
        sizes = list(self._cell_state_sizes)
        if self._feeds_attentional:
            sizes.append(self._attentional_dim)
        return sizes

    @property
    def output_size(self):
        if self.style == "luong":
            return self._attentional_dim
        if self.output_context:
            if not self.built:
                raise ValueError(
                    "`output_size` with `output_context=True` needs the memory size: "
                    "build the cell first."
                )
            return self.units + self.memory_dim
        return self.units

    def get_initial_state(self, batch_size):
        """Zeros for every state entry (the zero attentional vector included)."""
        return [ops.zeros((batch_size, size), dtype=self.compute_dtype) for size in self.state_size]

    def cell_input_dim(self, input_dim):
        """Size of what the wrapped cell receives for a step input of `input_dim`."""
        if self.style == "bahdanau":
            return input_dim + self.memory_dim
        return input_dim + (self._attentional_dim if self.input_feeding else 0)

    # ------------------------------------------------------------- build
    def build(self, inputs_shape, memory_shape):
        inputs_shape = tuple(inputs_shape)
        memory_shape = tuple(memory_shape)
        if len(inputs_shape) != 2 or inputs_shape[-1] is None:
            raise ValueError(
                "`inputs` of one step must have shape [batch, dim] with a known dim. "
                f"Received: inputs.shape={inputs_shape}"
            )
        if len(memory_shape) != 3 or memory_shape[-1] is None:
            raise ValueError(
                "`memory` must have shape [batch, source_length, dim] with a known dim. "
                f"Received: memory.shape={memory_shape}"
            )
        batch = inputs_shape[0]
        self.input_dim = int(inputs_shape[-1])
        self.memory_dim = int(memory_shape[-1])
        if not self.attention.built:
            self.attention.build((batch, self.units), memory_shape)
        if not self.cell.built:
            self.cell.build((batch, self.cell_input_dim(self.input_dim)))
        if self.style == "luong":
            self.attentional_kernel = self.add_weight(
                name="attentional_kernel",
                shape=(self.memory_dim + self.units, self._attentional_dim),
                initializer="glorot_uniform",
            )
        self.built = True

    def project_memory(self, memory, memory_mask=None):
        """The attention's per-source work; pass the result as `projected_key=`.

        With `memory_mask [B, S]` the masked rows are zeroed (by selection)
        before the projection, so whatever they hold reaches no gradient.
        """
        memory = ops.convert_to_tensor(memory, dtype=self.compute_dtype)
        return self.attention.project_keys(
            scoring.zero_masked(memory, scoring.to_bool_mask(memory_mask))
        )

    # -------------------------------------------------------------- call
    def _check_states(self, states):
        if not isinstance(states, (list, tuple)):
            states = [states]
        if len(states) != len(self.state_size):
            raise ValueError(
                f"`states` must be a flat list of {len(self.state_size)} tensors with sizes "
                f"{self.state_size}. Received: {len(states)} tensors"
            )
        return list(states)

    @property
    def per_example_memory(self):
        """Whether a step may read a memory of one row per example for several query rows
        (beam search, docs/decoding.md): the attention scores each query row on its own
        (Bahdanau; Luong global and local-p). Not with Luong local-m, whose window follows
        the query's row, nor with hard attention or another layer: keep their memory tiled."""
        from keras_attn.layers.bahdanau import BahdanauAttention
        from keras_attn.layers.luong import LuongAttention

        attention = self.attention
        if isinstance(attention, LuongAttention):
            return attention.alignment != "local-m"
        return isinstance(attention, BahdanauAttention)

    def _attend(self, query, memory, memory_mask, projected_key, position, training):
        kwargs = {}
        if position is not None and self._forward_position:
            kwargs["position"] = position
        # A memory of fewer rows than the query is per example: the K query rows of an
        # example (rows b K .. b K + K - 1) attend its memory row together, `[B, K, H]`.
        rows, memory_rows = query.shape[0], memory.shape[0]
        grouped = rows is None or rows != memory_rows
        if grouped and rows is not None and memory_rows is not None:
            if not self.per_example_memory:
                raise ValueError(
                    "A memory of one row per example (fewer rows than the query) needs an "
                    "attention that scores each query row on its own (Bahdanau, Luong global "
                    "or local-p): keep the memory tiled to the query's rows. Received: "
                    f"query.shape={tuple(query.shape)}, memory.shape={tuple(memory.shape)} "
                    f"with attention={type(self.attention).__name__}"
                )
        if grouped:
            query = ops.reshape(query, (ops.shape(memory)[0], -1, query.shape[-1]))
        context, weights = self.attention(
            query,
            memory,
            value_mask=memory_mask,
            return_attention_scores=True,
            projected_key=projected_key,
            training=training,
            **kwargs,
        )[:2]
        if grouped:
            context = ops.reshape(context, (-1, context.shape[-1]))
            weights = ops.reshape(weights, (-1, ops.shape(weights)[-1]))
        return context, weights

    def call(
        self,
        inputs,
        states,
        memory,
        memory_mask=None,
        projected_key=None,
        position=None,
        training=None,
    ):
        states = self._check_states(states)
        n = len(self._cell_state_sizes)
        cell_states = states[:n]
        # Without `projected_key` the attention layer projects the memory itself
        # (masked rows zeroed first; a local one projects only its window).
        memory_mask = scoring.to_bool_mask(memory_mask)
        if self.style == "bahdanau":
            context, weights = self._attend(
                cell_states[0], memory, memory_mask, projected_key, position, training
            )
            cell_inputs = ops.concatenate([inputs, ops.cast(context, inputs.dtype)], axis=-1)
            output, new_cell_states = self.cell(cell_inputs, cell_states, training=training)
            new_cell_states = self._flatten_cell_states(new_cell_states)
            if self.output_context:
                output = ops.concatenate([output, ops.cast(context, output.dtype)], axis=-1)
            return output, new_cell_states, weights
        cell_inputs = inputs
        if self.input_feeding:
            cell_inputs = ops.concatenate([inputs, ops.cast(states[n], inputs.dtype)], axis=-1)
        h, new_cell_states = self.cell(cell_inputs, cell_states, training=training)
        new_cell_states = self._flatten_cell_states(new_cell_states)
        context, weights = self._attend(h, memory, memory_mask, projected_key, position, training)
        mixed = ops.concatenate([ops.cast(context, h.dtype), h], axis=-1)
        attentional = ops.tanh(ops.matmul(mixed, ops.cast(self.attentional_kernel, h.dtype)))
        new_states = new_cell_states + ([attentional] if self.input_feeding else [])
        return attentional, new_states, weights

    def loop_step(self, inputs, states, memory, memory_mask, projected_key, position, training):
        """One step of a loop over the cell (`AttentionDecoder`, a search's step, a model's
        own teacher-forced loop): the cell called as in the module docstring, the new states
        cast to the dtypes of `states`, so a loop's carry keeps its dtypes. Returns `(output,
        new_states, weights)`."""
        output, new_states, weights = self(
            inputs,
            list(states),
            memory,
            memory_mask=memory_mask,
            projected_key=projected_key,
            position=position,
            training=training,
        )
        return output, [ops.cast(n, o.dtype) for n, o in zip(new_states, states)], weights

    @staticmethod
    def _flatten_cell_states(new_states):
        if isinstance(new_states, (list, tuple)):
            return list(new_states)
        return [new_states]

    def compute_output_spec(self, inputs, states, memory, *args, **kwargs):
        # The shapes follow from `inputs` and `memory`; the other arguments of `call` change
        # none of them.
        batch = inputs.shape[0]
        dtype = self.compute_dtype
        output = keras.KerasTensor((batch, self.output_size), dtype=dtype)
        new_states = [keras.KerasTensor((batch, s), dtype=dtype) for s in self.state_size]
        weights = keras.KerasTensor((batch, memory.shape[1]), dtype=dtype)
        return output, new_states, weights

    # ------------------------------------------------------------ config
    def get_config(self):
        return {**super().get_config(), **config_of(self, AttentionRNNCell.__init__)}

    @classmethod
    def from_config(cls, config):
        return cls(**revived(config, "cell", "attention"))


@keras.saving.register_keras_serializable(package="keras_attn")
class AttentionDecoder(keras.layers.Layer):
    """Runs an `AttentionRNNCell` over a whole target sequence (teacher forcing).

    `decoder(inputs, memory, memory_mask=None, initial_state=None, mask=None,
    training=None)` with `inputs [B, T, Din]` (the shifted target features),
    `memory [B, S, Dv]`, `initial_state` a flat list in the cell's layout
    (zeros by default). Keys are projected once per call. The loop is one
    `keras.ops` loop (`scan`; on TensorFlow a `while_loop` with
    `maximum_iterations`, which XLA can differentiate), so it trains under
    `jit_compile=True` and accepts an unknown target length.

    Masks: the Keras mask of `inputs` (filled in by Keras as `inputs_mask`),
    or an explicit `mask [B, T]` (which wins), freezes
    the states at padded steps, as `keras.layers.RNN` does; those steps output
    zeros and zero attention weights, and the mask is passed on with the
    outputs. The memory's Keras mask (or `memory_mask [B, S]`) is honoured by
    the attention. Step `t` is forwarded as `position=t` to attention layers
    whose call accepts it (Luong local-m).

    Args:
        cell: an `AttentionRNNCell` (or its serialized dict).
        return_sequences: outputs of every step `[B, T, Dout]` (default) or of
            the last unmasked step `[B, Dout]`.
        return_state: also return the final states (the cell's flat layout).
        return_attention: also return the attention weights of every step
            `[B, T, S]`.

    Returns `outputs`, then `attention` if asked, then the states if asked
    (a single tensor when nothing else is asked, a tuple otherwise).
    """

    def __init__(
        self,
        cell,
        return_sequences=True,
        return_state=False,
        return_attention=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        cell = _as_layer("cell", cell)
        if not isinstance(cell, AttentionRNNCell):
            raise ValueError(f"`cell` must be an AttentionRNNCell. Received: cell={cell!r}")
        self.cell = cell
        self.return_sequences = _check_bool("return_sequences", return_sequences)
        self.return_state = _check_bool("return_state", return_state)
        self.return_attention = _check_bool("return_attention", return_attention)
        self.supports_masking = True
        if kwargs.get("dtype") is not None:
            self.cell._adopt_dtype_policy(self.dtype_policy)
        else:
            self.dtype_policy = self.cell.dtype_policy

    def build(self, inputs_shape, memory_shape):
        inputs_shape = tuple(inputs_shape)
        memory_shape = tuple(memory_shape)
        if len(inputs_shape) != 3:
            raise ValueError(
                "`inputs` must have shape [batch, target_length, dim]. "
                f"Received: inputs.shape={inputs_shape}"
            )
        if not self.cell.built:
            self.cell.build((inputs_shape[0], inputs_shape[-1]), memory_shape)
        self.built = True

    def get_initial_state(self, batch_size):
        return self.cell.get_initial_state(batch_size)

    def _configure_dropout(self, batch, initial_state):
        inner = self.cell.cell
        if not hasattr(inner, "get_dropout_mask"):
            return False
        # As keras.layers.RNN does: draw the wrapped cell's dropout masks once,
        # before the loop, so the loop body stays stateless (JAX, XLA).
        step_input = ops.zeros(
            (batch, self.cell.cell_input_dim(self.cell.input_dim)), dtype=self.compute_dtype
        )
        inner.get_dropout_mask(step_input)
        inner.get_recurrent_dropout_mask(initial_state[0])
        return True

    def call(
        self,
        inputs,
        memory,
        memory_mask=None,
        initial_state=None,
        mask=None,
        training=None,
        inputs_mask=None,
    ):
        cell = self.cell
        if len(inputs.shape) != 3:
            raise ValueError(
                f"`inputs` must have rank 3. Received: inputs.shape={tuple(inputs.shape)}"
            )
        self._check_call_inputs(inputs, memory, mask, memory_mask)
        mask = scoring.to_bool_mask(mask if mask is not None else inputs_mask)
        memory_mask = scoring.to_bool_mask(memory_mask)
        batch = ops.shape(inputs)[0]
        if initial_state is None:
            states = cell.get_initial_state(batch)
        else:
            states = cell._check_states(initial_state)
            states = [ops.cast(s, self.compute_dtype) for s in states]
        keys = cell.project_memory(memory, memory_mask)
        dropout_set = self._configure_dropout(batch, states)

        length = ops.shape(inputs)[1]
        time_major = ops.transpose(inputs, (1, 0, 2))
        time_mask = None if mask is None else ops.transpose(mask, (1, 0))
        out0 = ops.zeros((batch, cell.output_size), dtype=self.compute_dtype)
        w0 = ops.zeros((batch, ops.shape(memory)[1]), dtype=self.compute_dtype)

        def step(carry, x_t, m_t, t):
            old_states, old_out, old_w = carry
            if m_t is not None:  # a padded step may hold anything: it reaches no gradient
                x_t = ops.where(ops.expand_dims(m_t, -1), x_t, ops.zeros((), dtype=x_t.dtype))
            out, new_states, w = cell.loop_step(
                x_t, old_states, memory, memory_mask, keys, t, training
            )
            out = ops.cast(out, old_out.dtype)
            w = ops.cast(w, old_w.dtype)
            if m_t is not None:
                keep = ops.expand_dims(m_t, -1)
                new_states = [ops.where(keep, n, o) for n, o in zip(new_states, old_states)]
                out = ops.where(keep, out, old_out)
                w = ops.where(keep, w, old_w)
            return (tuple(new_states), out, w)

        init = (tuple(states), out0, w0)
        if keras.backend.backend() == "tensorflow":
            final, outs, ws = self._loop_with_buffers(step, init, time_major, time_mask, length)
        else:
            final, outs, ws = self._loop_with_scan(step, init, time_major, time_mask, length)
        final_states, last_out, _ = final
        if dropout_set:
            cell.cell.reset_dropout_mask()
            cell.cell.reset_recurrent_dropout_mask()
        outs = ops.transpose(outs, (1, 0, 2))
        ws = ops.transpose(ws, (1, 0, 2))
        if mask is not None:
            keep = ops.expand_dims(mask, -1)
            outs = ops.where(keep, outs, ops.zeros_like(outs))
            ws = ops.where(keep, ws, ops.zeros_like(ws))
        result = (outs if self.return_sequences else last_out,)
        if self.return_attention:
            result += (ws,)
        if self.return_state:
            result += tuple(final_states)
        return result[0] if len(result) == 1 else result

    def _check_call_inputs(self, inputs, memory, mask, memory_mask):
        check_float_tensor("inputs", inputs)
        check_float_tensor("memory", memory)
        cell = self.cell
        for name, x, dim in (
            ("inputs", inputs, cell.input_dim),
            ("memory", memory, cell.memory_dim),
        ):
            if len(x.shape) != 3 or x.shape[-1] != dim:
                raise ValueError(
                    f"`{name}` must have shape [batch, length, {dim}], as when the layer was "
                    f"built. Received: {name}.shape={tuple(x.shape)}"
                )
        if inputs.shape[0] == 0:
            raise ValueError(
                "`inputs` must hold at least one example (batch 0 has nothing to decode). "
                f"Received: inputs.shape={tuple(inputs.shape)}"
            )
        if memory.shape[1] == 0:
            raise ValueError(
                "`memory` must have at least one source position to attend to. "
                f"Received: memory.shape={tuple(memory.shape)}"
            )
        if None not in (inputs.shape[0], memory.shape[0]) and inputs.shape[0] != memory.shape[0]:
            raise ValueError(
                "`inputs` and `memory` must have the same batch size. "
                f"Received: inputs.shape={tuple(inputs.shape)}, memory.shape={tuple(memory.shape)}"
            )
        for name, m, x in (("mask", mask, inputs), ("memory_mask", memory_mask, memory)):
            if m is None:
                continue
            shape = tuple(m.shape)
            if len(shape) != 2 or any(
                a is not None and b is not None and a != b for a, b in zip(shape, x.shape[:2])
            ):
                raise ValueError(
                    f"`{name}` must have shape [batch, length] = {tuple(x.shape[:2])}. "
                    f"Received: {name}.shape={shape}"
                )

    def _loop_with_scan(self, step, init, time_major, time_mask, length):
        xs = {"x": time_major, "t": ops.arange(length, dtype="int32")}
        if time_mask is not None:
            xs["m"] = time_mask
        # Random draws inside the loop (attention dropout, hard attention's
        # sampling) update seed-generator variables. On JAX an update made
        # inside `scan` must not escape it, so the non-trainable variables
        # travel in the carry, the step runs in a StatelessScope that reads
        # them from there, and their final values are assigned after the loop.
        carried = list(self.cell.non_trainable_variables)
        fixed = [(v, v.value) for v in self.cell.trainable_variables]

        def body(carry, x):
            inner, values = carry
            with keras.StatelessScope(fixed + list(zip(carried, values))) as scope:
                new = step(inner, x["x"], x.get("m"), x["t"])
            values = [
                ops.cast(scope.get_current_value(v), old.dtype) for v, old in zip(carried, values)
            ]
            return (new, values), (new[1], new[2])

        (final, values), (outs, ws) = ops.scan(body, (init, [v.value for v in carried]), xs)
        for v, value in zip(carried, values):
            v.assign(value)
        return final, outs, ws

    @staticmethod
    def _loop_with_buffers(step, init, time_major, time_mask, length):
        # On TensorFlow `keras.ops.scan` builds a while loop without
        # `maximum_iterations`, which XLA cannot differentiate; this loop
        # sets it and writes each step into preallocated [T, B, .] buffers
        # (`scatter_update`, which has a gradient; XLA updates them in place).
        _, out0, w0 = init
        outs = ops.zeros((length,) + tuple(ops.shape(out0)), dtype=out0.dtype)
        ws = ops.zeros((length,) + tuple(ops.shape(w0)), dtype=w0.dtype)

        def cond(t, carry, outs, ws):
            return t < length

        def body(t, carry, outs, ws):
            m_t = None if time_mask is None else ops.take(time_mask, t, axis=0)
            new = step(carry, ops.take(time_major, t, axis=0), m_t, t)
            row = ops.reshape(t, (1, 1))
            outs = ops.scatter_update(outs, row, ops.expand_dims(new[1], 0))
            ws = ops.scatter_update(ws, row, ops.expand_dims(new[2], 0))
            return t + 1, new, outs, ws

        t0 = ops.zeros((), dtype="int32")
        _, final, outs, ws = ops.while_loop(
            cond, body, (t0, init, outs, ws), maximum_iterations=length
        )
        return final, outs, ws

    def compute_output_spec(self, inputs, memory, *args, **kwargs):
        # The shapes follow from `inputs` and `memory`; the other arguments of `call` change
        # none of them.
        batch, length = inputs.shape[0], inputs.shape[1]
        dtype = self.compute_dtype
        size = self.cell.output_size
        shape = (batch, length, size) if self.return_sequences else (batch, size)
        result = (keras.KerasTensor(shape, dtype=dtype),)
        if self.return_attention:
            result += (keras.KerasTensor((batch, length, memory.shape[1]), dtype=dtype),)
        if self.return_state:
            result += tuple(
                keras.KerasTensor((batch, s), dtype=dtype) for s in self.cell.state_size
            )
        return result[0] if len(result) == 1 else result

    def compute_mask(self, inputs, previous_mask=None):
        out_mask = previous_mask if self.return_sequences else None
        if not self.return_attention and not self.return_state:
            return out_mask
        masks = [out_mask]
        if self.return_attention:
            masks.append(previous_mask)
        if self.return_state:
            masks.extend([None] * len(self.cell.state_size))
        return masks

    def get_config(self):
        return {**super().get_config(), **config_of(self, AttentionDecoder.__init__)}

    @classmethod
    def from_config(cls, config):
        return cls(**revived(config, "cell"))
