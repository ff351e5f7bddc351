"""The call convention shared by the cross-attention layers (docs/layers.md, "Cross-attention").

`CrossAttention` owns everything that is the same for Bahdanau, Luong and
hard attention: argument checks, the one-step `[B, Dq]` query, Keras masks
in and out, `key` defaulting to `value`, attention dropout, zeroing masked
queries and the shape of the returned tuple. A subclass only creates its
weights in `build_score` and computes `(context, weights)` in `attend`.
"""

import inspect

import keras
from keras import ops

from keras_attn._checks import (  # noqa: F401  (re-exported: the layers import them from here)
    check_choice,
    check_float_tensor,
    check_positive_int,
    check_rate,
)
from keras_attn.layers import rng, scoring


def walk_layers(layer, include_self=True):
    """Every layer reachable from `layer` through its attributes (nested layers, lists,
    tuples and dicts of layers), each once, depth first; public attributes only, so it
    does not depend on Keras' private tracking."""
    seen, order = set(), []

    def visit(obj):
        if isinstance(obj, keras.layers.Layer):
            if id(obj) in seen:
                return
            seen.add(id(obj))
            order.append(obj)
            for value in vars(obj).values():
                visit(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                visit(value)
        elif isinstance(obj, dict):
            for value in obj.values():
                visit(value)

    visit(layer)
    return order if include_self else order[1:]


def keyword_parameters(init):
    """The parameters of the constructor `init` (its signature, `__signature__` where it has
    one) that are named: `self`, `*args` and `**kwargs` left out."""
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [
        p
        for p in inspect.signature(init).parameters.values()
        if p.kind in named and p.name != "self"
    ]


def handed_on_signature(init, base_init, leave_out=()):
    """The signature the tools show (`help()`, `inspect.signature`, an editor's hints) for a
    constructor `init` that names only its own arguments and hands the others of `base_init`
    on: one table of arguments (`base_init`'s), not a copy that drifts from it. Set it as
    `init.__signature__`. It lists `init`'s positional parameters, then `base_init`'s named
    ones that `init` does not name and `leave_out` does not hold, with their defaults (taken
    by position too where `init` has `*args`, else by keyword only), then `init`'s
    keyword-only ones, then `**kwargs` (Keras' arguments: `name`, `dtype`, ...)."""
    kinds = inspect.Parameter
    own = list(inspect.signature(init).parameters.values())
    names = {p.name for p in own}
    by_position = any(p.kind == kinds.VAR_POSITIONAL for p in own)
    handed = [
        p if by_position else p.replace(kind=kinds.KEYWORD_ONLY)
        for p in keyword_parameters(base_init)
        if p.name not in names and p.name not in leave_out
    ]
    named = [p for p in own if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)]
    ordered = sorted(named + handed, key=lambda p: p.kind == kinds.KEYWORD_ONLY)
    return inspect.Signature([*ordered, inspect.Parameter("kwargs", kinds.VAR_KEYWORD)])


def config_of(obj, init, attributes=None, values=None):
    """The config entries of `obj` (a layer or model): `{name: value}` for every parameter of
    its constructor `init`, read from the attribute of that name (`attributes` maps the
    others: `{argument: attribute}`, and `values` gives those kept in no attribute:
    `{argument: value}`); Keras objects (layers, initializers, regularizers, constraints)
    serialized. One place writes a config from the
    constructor's arguments, so the config and the constructor cannot drift apart."""
    attributes, values = attributes or {}, values or {}
    config = {}
    for parameter in keyword_parameters(init):
        if parameter.name in values:
            value = values[parameter.name]
        else:
            value = getattr(obj, attributes.get(parameter.name, parameter.name))
        if hasattr(value, "get_config"):
            value = keras.saving.serialize_keras_object(value)
        config[parameter.name] = value
    return config


def revived(config, *names):
    """A copy of `config` with the Keras objects serialized under `names` deserialized, for
    a `from_config` whose constructor takes layers."""
    config = dict(config)
    for name in names:
        config[name] = keras.saving.deserialize_keras_object(config[name])
    return config


def feature_dim(shape, name, rank=None):
    """The last dimension of `name`'s `shape`, which must be known; the rank must be `rank`
    (3: `[batch, length, dim]`), or at least 2 when `rank` is None (`ValueError`)."""
    shape = tuple(shape)
    if (len(shape) != rank if rank else len(shape) < 2) or shape[-1] is None:
        layout = "rank 3 ([batch, length, dim])" if rank == 3 else "rank >= 2 ([..., dim])"
        raise ValueError(
            f"`{name}` must have {layout} with a known last dimension. "
            f"Received: {name}.shape={shape}"
        )
    return int(shape[-1])


class CrossAttention(keras.layers.Layer):
    """Base class: `layer(query, value, key=None, value_mask=None, ...)`.

    Subclasses set `self.scorer` (a `scoring.Score`) in `__init__` and implement:
      - `build_extra(query_dim, key_dim)` (optional): weights that come after
        the score's, in the order each layer documents.
      - `attend(query, keys, value, value_mask, return_weights, training, **kw)`
        with `query [B, Tq, Dq]` (always 3-D here, masked query rows already
        zeroed), `keys` already projected by `project_keys` with masked rows
        zeroed (unless `projects_keys_in_attend`, see below), `value_mask` a
        bool `[B, Tv]` tensor or None; returns `(context [B, Tq, Dv], weights)`
        where `weights` is `[B, Tq, Tv]` in the compute dtype (or None when not
        asked for), plus any extra outputs: `(context, weights, *extras)`.
        `attend` must select away the masked rows of `value` (e.g.
        `scoring.zero_masked`) before using them: padding may hold NaN.
      - `call_options(query, value, query_mask, projected_key, **options)`
        (optional): the layer's own call arguments (`options`, e.g. Luong's
        `position`) checked and turned into the keywords of `attend`; the
        default takes none. The layers share this one `call`.
      - `projects_keys_in_attend = True` for a layer that projects cheaper
        than all keys (a gathered window only; or the query instead, as
        Luong's `general` score can): `keys` are then the raw `key` (or the
        caller's `projected_key`) as given, and `attend` zeroes the masked
        rows of what it uses and projects it (`Score(raw_keys=True)`).

    Scores and softmaxes are computed in float32 under mixed precision
    (`scoring.Score`, `scoring.masked_softmax`); the weights are cast back to
    the compute dtype for the weighted sum.

    Decoders call `project_keys(key)` once per source and pass the result as
    `projected_key=` to every step, so per-source work is not repeated.

    The weights returned are the attention distribution before dropout;
    the context is computed from the dropped-out weights.
    """

    def __init__(self, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.dropout = check_rate("dropout", dropout)
        self.supports_masking = True
        self._dropout_layer = (
            rng.Dropout(self.dropout, dtype=self.dtype_policy) if self.dropout > 0 else None
        )

    # ------------------------------------------------------------------ build
    def build(self, query_shape, value_shape, key_shape=None):
        query_shape = tuple(query_shape)
        value_shape = tuple(value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        if len(query_shape) not in (2, 3):
            raise ValueError(
                f"`query` must have rank 3 ([batch, Tq, dim]) or rank 2 ([batch, dim]) "
                f"for one decoder step. Received: query.shape={query_shape}"
            )
        for name, shape in (("value", value_shape), ("key", key_shape)):
            if len(shape) != 3:
                raise ValueError(
                    f"`{name}` must have rank 3 ([batch, Tv, dim]). Received: {name}.shape={shape}"
                )
        if (
            key_shape[1] is not None
            and value_shape[1] is not None
            and key_shape[1] != value_shape[1]
        ):
            raise ValueError(
                "`key` and `value` must have the same number of positions. "
                f"Received: key.shape={key_shape}, value.shape={value_shape}"
            )
        self.query_dim = feature_dim(query_shape, "query")
        self.key_dim = feature_dim(key_shape, "key")
        self.value_dim = feature_dim(value_shape, "value")
        self.scorer.build(self, self.query_dim, self.key_dim)
        self.build_extra(self.query_dim, self.key_dim)
        self.built = True

    def build_extra(self, query_dim, key_dim):
        """Weights after the score's (none by default)."""

    # Whether `call` hands `attend` the keys as given (unprojected when no
    # `projected_key` is passed); see the class docstring.
    projects_keys_in_attend = False

    def project_keys(self, key):
        """The per-source part of the score: call once, pass as `projected_key=`."""
        return self.scorer.project_keys(key)

    def attend(self, query, keys, value, value_mask, return_weights, training, **kwargs):
        raise NotImplementedError  # pragma: no cover - abstract

    # ------------------------------------------------------------------- call
    def call(
        self,
        query,
        value,
        key=None,
        value_mask=None,
        return_attention_scores=False,
        training=None,
        query_mask=None,
        projected_key=None,
        **options,
    ):
        attend_options = self.call_options(query, value, query_mask, projected_key, **options)
        if key is None:
            key = value
        self._check_call_shapes(query, value, key, value_mask)
        mask = scoring.to_bool_mask(value_mask)
        # Masked key rows may hold anything (NaN, inf): they are selected away
        # before the projection, so they reach neither the scores nor the
        # gradient of the key kernel.
        if self.projects_keys_in_attend:
            # `attend` zeroes the masked rows of what it uses and projects
            # only that (unless projected already), e.g. a gathered window.
            keys = key if projected_key is None else projected_key
        elif projected_key is not None:
            keys = scoring.zero_masked(projected_key, mask)
        else:
            keys = self.project_keys(scoring.zero_masked(key, mask))
        single_step = len(query.shape) == 2
        if single_step:
            query = ops.expand_dims(query, 1)
        query_keep = None
        if query_mask is not None and not single_step:
            # A masked query row may hold anything: select it away before it
            # is used, so it reaches no output and no gradient.
            query_keep = scoring.to_bool_mask(query_mask)
            query = scoring.zero_masked(query, query_keep)
        outputs = self.attend(
            query, keys, value, mask, bool(return_attention_scores), training, **attend_options
        )
        context, weights, extras = outputs[0], outputs[1], tuple(outputs[2:])
        if query_keep is not None:
            context = scoring.zero_masked(context, query_keep)
        if single_step:
            context = ops.squeeze(context, 1)
            weights = None if weights is None else ops.squeeze(weights, 1)
            extras = tuple(ops.squeeze(e, 1) for e in extras)
        result = (context,)
        if return_attention_scores:
            result += (weights,)
        result += extras
        return result[0] if len(result) == 1 else result

    def call_options(self, query, value, query_mask, projected_key, **options):
        """The keywords `call` hands to `attend`, from the call arguments a subclass adds
        (checked here, before the shared checks). This layer adds none."""
        if options:
            raise ValueError(
                f"{type(self).__name__} takes no call argument "
                f"{', '.join(f'`{name}`' for name in sorted(options))}. "
                f"Received: {', '.join(f'{k}={v!r}' for k, v in sorted(options.items()))}"
            )
        return {}

    def _check_call_shapes(self, query, value, key, value_mask):
        for name, x in (("query", query), ("value", value), ("key", key)):
            check_float_tensor(name, x)
        if len(query.shape) not in (2, 3):
            raise ValueError(
                f"`query` must have rank 3 or 2. Received: query.shape={tuple(query.shape)}"
            )
        if query.shape[-1] is not None and query.shape[-1] != self.query_dim:
            raise ValueError(
                f"`query` last dimension must be {self.query_dim}, as when the layer was built. "
                f"Received: query.shape={tuple(query.shape)}"
            )
        for name, x, dim in (("value", value, self.value_dim), ("key", key, self.key_dim)):
            if len(x.shape) != 3:
                raise ValueError(
                    f"`{name}` must have rank 3. Received: {name}.shape={tuple(x.shape)}"
                )
            if x.shape[-1] is not None and x.shape[-1] != dim:
                raise ValueError(
                    f"`{name}` last dimension must be {dim}, as when the layer was built. "
                    f"Received: {name}.shape={tuple(x.shape)}"
                )
        batches = {
            name: x.shape[0]
            for name, x in (("query", query), ("value", value), ("key", key))
            if x.shape[0] is not None
        }
        if len(set(batches.values())) > 1:
            raise ValueError(
                "`query`, `value` and `key` must have the same batch size. Received: "
                + ", ".join(
                    f"{name}.shape={tuple(x.shape)}"
                    for name, x in (("query", query), ("value", value), ("key", key))
                )
            )
        if value_mask is not None:
            mshape = tuple(value_mask.shape)
            if len(mshape) != 2 or any(
                a is not None and b is not None and a != b
                for a, b in zip(mshape, tuple(value.shape[:2]))
            ):
                raise ValueError(
                    "`value_mask` must have shape [batch, Tv] matching `value`. "
                    f"Received: value_mask.shape={mshape}, value.shape={tuple(value.shape)}"
                )

    def apply_dropout(self, weights, training):
        if self._dropout_layer is None:
            return weights
        return self._dropout_layer(weights, training=training)

    def compute_mask(self, query, previous_mask=None):
        # The query's mask is passed on to the context (not for a one-step query).
        if previous_mask is None or len(query.shape) != 3:
            return None
        return previous_mask

    def get_config(self):
        config = super().get_config()
        config["dropout"] = self.dropout
        return config
