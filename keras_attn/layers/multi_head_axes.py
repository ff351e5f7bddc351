"""`MultiHeadAttention` over the axes of inputs of rank > 3 (`attention_axes`, Keras'
semantics): the axes not attended are folded into the batch and the attended ones into one,
so the one head-major attention runs; the context is unfolded before the output projection.
"""

from keras import ops

from keras_attn.layers import masks, scoring
from keras_attn.layers import multi_head_projection as proj


def _fold(x, perm, outer):
    """Projections `[B, ..., N, H]` permuted by `perm` to `[batch axes..., N, attended...,
    H]`, then the `outer` batch axes folded into one and the attended axes into one:
    head-major `[B', N, T', H]`."""
    x = ops.transpose(x, perm)
    return ops.reshape(x, (-1, x.shape[outer], _prod(x.shape[outer + 1 : -1]), x.shape[-1]))


def _prod(dims):
    out = 1
    for d in dims:
        out *= d
    return out


class AttentionAxes:
    """The rank > 3 path of `MultiHeadAttention` (a mixin: it reads `attention_axes` and
    calls the layer's projections, `_attend` and `_output`)."""

    def _normalized_axes(self, rank):
        """The attention axes of the `[B, ..., N, H]` projections (rank `rank + 1`)."""
        projected = rank + 1
        if self.attention_axes is None:
            return tuple(range(1, projected - 2))
        axes = tuple(a if a >= 0 else (projected - 1) + a for a in self.attention_axes)
        if any(not 1 <= a < projected - 2 for a in axes) or len(set(axes)) != len(axes):
            raise ValueError(
                f"`attention_axes` must name distinct axes of the inputs other than batch "
                f"and features (for rank-{rank} inputs: 1 to {rank - 2}, or negative). "
                f"Received: attention_axes={self.attention_axes}"
            )
        return axes

    def _call_axes(
        self, query, value, key, attention_mask, use_causal_mask, return_attention_scores, training
    ):
        """Inputs of rank > 3 (what they do not take refused by `_check_axes_call` first):
        attention over `attention_axes` (Keras' semantics). The other axes are folded into the
        batch and the attended ones into one, so the one attention (`_attend`, head-major)
        runs; its context is unfolded for `_output`."""
        value = query if value is None else value
        key = value if key is None else key
        q = proj.project(self._query_dense, query)
        q = q * ops.cast(self._scale(), q.dtype)
        k = proj.project(self._key_dense, key)
        v = proj.project(self._value_dense, value)
        rank = len(q.shape)  # of the projections [B, ..., N, H]
        batch_axes = [i for i in range(rank - 2) if i not in self._axes]
        perm = batch_axes + [rank - 2] + list(self._axes) + [rank - 1]
        q_attended = [q.shape[a] for a in self._axes]
        k_attended = [k.shape[a] for a in self._axes]
        if None in q_attended + k_attended + [q.shape[a] for a in batch_axes[1:]]:
            raise ValueError(
                "With inputs of rank > 3, every axis but the batch must have a known size. "
                f"Received: query.shape={tuple(query.shape)}, value.shape={tuple(value.shape)}"
            )
        visible = None
        if attention_mask is not None:
            m = scoring.to_bool_mask(attention_mask)
            outer = [ops.shape(q)[0]] + [q.shape[a] for a in batch_axes[1:]]
            m = ops.broadcast_to(m, outer + q_attended + k_attended)
            visible = ops.reshape(m, (-1, 1, _prod(q_attended), _prod(k_attended)))
        if use_causal_mask:  # along the one attention axis, as on sequences
            causal = masks.position_mask(
                ops.arange(q_attended[0], dtype="int32"),
                ops.arange(k_attended[0], dtype="int32"),
                causal=True,
            )
            visible = masks.logical_and(visible, causal[None, None])
        outer = len(batch_axes)
        context, weights = self._attend(
            *(_fold(x, perm, outer) for x in (q, k, v)), visible, training, return_attention_scores
        )
        folded = tuple(q.shape[a] for a in perm[1:-1])  # [outer..., N, attended...]
        context = ops.reshape(context, (-1,) + folded + (self.value_dim,))
        context = ops.transpose(context, [perm.index(i) for i in range(rank)])
        gate = proj.project(self._gate_dense, query) if self.use_gate else None
        output = self._output(context, gate)
        if return_attention_scores:
            return output, ops.reshape(weights, (-1,) + folded + tuple(k_attended))
        return output

    def _check_axes_call(self, query, use_causal_mask, cache, keras_masks):
        """What inputs of rank > 3 do not take (`ValueError`)."""
        for name, given in (
            ("cache", cache),
            ("sliding_window", self.sliding_window),
            ("rotary_max_wavelength", self.rotary_max_wavelength),
            (
                "query_mask / value_mask / key_mask",
                next((m for m in keras_masks if m is not None), None),
            ),
        ):
            if given is not None:
                raise ValueError(
                    f"`{name.split(' ')[0]}` works on sequences ([batch, length, dim]) only, "
                    f"not with inputs of rank {len(query.shape)}. Received: query.shape="
                    f"{tuple(query.shape)}, {name}={given!r}"
                )
        if use_causal_mask and len(self._axes) > 1:
            raise ValueError(
                "`use_causal_mask` orders the positions of one attention axis; it cannot be "
                f"used with several. Received: attention_axes={self.attention_axes!r}, "
                "use_causal_mask=True"
            )
