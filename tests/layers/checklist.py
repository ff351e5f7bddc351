"""The Keras layer checklist (docs/layers.md, first paragraph), as one reusable function.

`run_layer_checklist` takes a layer class, its constructor arguments and a
dict of call inputs (call-argument name -> NumPy array, in positional order)
and checks, each step able to fail:

1. `get_config` / `from_config` and `serialize` / `deserialize` round trips;
2. building from shapes creates the expected number of weights;
3. a symbolic call gives the eager call's shapes and dtypes (and the
   attention scores too, where the layer returns them);
4. masks: a Keras mask on the first input is passed on to the output;
5. one `fit` step with `jit_compile=True` changes the trainable weights and
   gives a finite loss;
6. `mixed_float16` and `mixed_bfloat16`: outputs in the compute dtype and
   equal to the float32 layer's outputs with the same weights
   (`compare_mixed_precision`, tolerance `mixed_precision_tolerance` units of
   the dtype's rounding relative to the output scale);
7. a `.keras` save/load of a model holding the layer gives identical outputs.
"""

import os
import tempfile

import keras
import numpy as np
from keras import ops


class _MaskReader(keras.layers.Layer):
    """Outputs the Keras mask it receives as float (or -1 when there is none)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        if mask is None:
            return -ops.ones(ops.shape(inputs)[:2])
        return ops.cast(mask, "float32")


def _first(outputs):
    return outputs[0] if isinstance(outputs, (tuple, list)) else outputs


def _as_list(outputs):
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


def _leaves(outputs):
    """Every tensor of the outputs, nested ones included (a decoder's returned caches)."""
    return [o for o in keras.tree.flatten(outputs) if o is not None]


def _model(layer, inputs, call_kwargs, first_only=False):
    sym = {
        name: keras.Input(shape=arr.shape[1:], batch_size=None, dtype=str(arr.dtype), name=name)
        for name, arr in inputs.items()
    }
    out = layer(**sym, **call_kwargs)
    if first_only:
        out = _first(out)
    return keras.Model(sym, out)


def _float_input_names(inputs):
    return [k for k, v in inputs.items() if np.issubdtype(v.dtype, np.floating)]


# Unit roundoff (half the machine epsilon) of the compute dtypes of the mixed policies.
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
# Smallest positive normal number: below it a dtype keeps only an absolute precision, so
# rounding `x` errs by at most `u * max(|x|, SMALLEST_NORMAL)`.
SMALLEST_NORMAL = {"float16": 2.0**-14, "bfloat16": 2.0**-126}
# The default `mixed_precision_tolerance`, in units of u times the output scale. With
# the inputs already rounded, a layer a few operations deep (projections, a softmax, a
# weighted sum) rounds its weights once (u relative), each intermediate once and its
# output once: a handful of u of the output scale (the attention layers measure 1-2 u).
# 8 leaves room for sums of a few hundred terms while still failing a path that
# overflows or computes a whole stage (a score, a softmax) in half precision.
DEFAULT_MIXED_TOLERANCE = 8


def round_to(x, compute_dtype):
    """`x` (NumPy float32) rounded to `compute_dtype` and back: what a mixed layer sees."""
    if not np.issubdtype(np.asarray(x).dtype, np.floating):
        return x
    return ops.convert_to_numpy(ops.cast(ops.cast(x, compute_dtype), "float32"))


def compare_mixed_precision(
    layer_cls,
    init_kwargs,
    inputs,
    call_kwargs=None,
    tolerance=None,
    policies=("mixed_float16", "mixed_bfloat16"),
):
    """Each mixed policy against float32, with the same weights and the same inputs.

    The inputs are rounded to the compute dtype first (the mixed layer would
    round them anyway), so what is compared is only what the layer computes:
    every floating output must satisfy
    `|mixed - float32| <= tolerance * u * max(|float32 output|, 1)`
    with `u` the compute dtype's unit roundoff (`tolerance` defaults to
    `DEFAULT_MIXED_TOLERANCE`). A path that overflows, or loses more than a
    few roundings (a softmax or a score in half precision), fails. Returns
    `{policy: [(mixed, reference), ...]}` as float32 NumPy arrays for further checks.
    """
    call_kwargs = dict(call_kwargs or {})
    tolerance = DEFAULT_MIXED_TOLERANCE if tolerance is None else tolerance
    results = {}
    for policy in policies:
        compute = policy.split("_", 1)[1]
        fed = {k: round_to(v, compute) for k, v in inputs.items()}
        layer = layer_cls(**{**init_kwargs, "dtype": policy})
        outs = _as_list(layer(**fed, **call_kwargs))
        assert keras.backend.standardize_dtype(outs[0].dtype) == compute, (policy, outs[0].dtype)
        for w in layer.weights:
            assert keras.backend.standardize_dtype(w.dtype) in (
                "float32",
                "int32",
                "int64",
                "bool",
            ), (
                w.path,
                w.dtype,
            )
        ref_layer = layer_cls(**{**init_kwargs, "dtype": "float32"})
        ref_layer(**fed, **call_kwargs)  # build
        ref_layer.set_weights(layer.get_weights())
        refs = _as_list(ref_layer(**fed, **call_kwargs))
        assert len(refs) == len(outs)
        pairs = []
        for i, (o, r) in enumerate(zip(outs, refs)):
            if "float" not in keras.backend.standardize_dtype(o.dtype):
                np.testing.assert_array_equal(ops.convert_to_numpy(o), ops.convert_to_numpy(r))
                continue
            got = ops.convert_to_numpy(ops.cast(o, "float32"))
            want = ops.convert_to_numpy(ops.cast(r, "float32"))
            assert np.all(np.isfinite(got)), f"non-finite output {i} under {policy}"
            bound = (
                tolerance
                * UNIT_ROUNDOFF[compute]
                * max(float(np.max(np.abs(want), initial=0.0)), 1.0)
            )
            err = float(np.max(np.abs(got - want), initial=0.0))
            assert err <= bound, (
                f"output {i} under {policy} differs from float32 by {err:.3g} > {bound:.3g} "
                f"({tolerance} roundings of the output scale)"
            )
            pairs.append((got, want))
        results[policy] = pairs
    return results


def run_layer_checklist(
    layer_cls,
    init_kwargs,
    inputs,
    call_kwargs=None,
    expected_output_shapes=None,
    expected_num_trainable_weights=None,
    expected_num_non_trainable_weights=0,
    build_shapes=None,
    mask_input=None,
    expect_mask_out=True,
    run_training=True,
    run_mixed_precision=True,
    run_saving=True,
    training_call_kwargs=None,
    mixed_precision_tolerance=None,
):
    """Run the checklist. `expected_output_shapes` is a list (one per output).

    `mixed_precision_tolerance`: see `compare_mixed_precision` (the default
    fits a layer a few operations deep; a deeper block may pass a larger one).
    """
    call_kwargs = dict(call_kwargs or {})
    training_call_kwargs = dict(training_call_kwargs or {})

    # 1. config round trips -------------------------------------------------
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    clone = layer_cls.from_config(config)
    assert clone.get_config() == config, "from_config(get_config()) changed the config"
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(revived) is layer_cls
    assert revived.get_config() == config

    # 2. build from shapes --------------------------------------------------
    layer = layer_cls(**init_kwargs)
    shapes = build_shapes or {f"{k}_shape": v.shape for k, v in inputs.items()}
    layer.build(**shapes)
    assert layer.built
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights, [
            w.path for w in layer.trainable_weights
        ]
    assert len(layer.non_trainable_weights) == expected_num_non_trainable_weights, [
        w.path for w in layer.non_trainable_weights
    ]

    # 3. eager vs symbolic shapes and dtypes -----------------------------------
    layer = layer_cls(**init_kwargs)
    eager = _as_list(layer(**inputs, **call_kwargs))
    if expected_output_shapes is not None:
        assert [tuple(o.shape) for o in eager] == [tuple(s) for s in expected_output_shapes]
    for o in eager:
        arr = ops.convert_to_numpy(o)
        if np.issubdtype(arr.dtype, np.floating):
            assert np.all(np.isfinite(arr)), "eager output is not finite"
    sym_layer = layer_cls(**init_kwargs)
    sym_inputs = {
        name: keras.Input(shape=arr.shape[1:], dtype=str(arr.dtype), name=name)
        for name, arr in inputs.items()
    }
    symbolic = _as_list(sym_layer(**sym_inputs, **call_kwargs))
    assert len(symbolic) == len(eager)
    for s, e in zip(symbolic, eager):
        assert tuple(s.shape)[1:] == tuple(e.shape)[1:], (s.shape, e.shape)
        assert keras.backend.standardize_dtype(s.dtype) == keras.backend.standardize_dtype(e.dtype)

    # 4. masks in and out -------------------------------------------------------
    name = mask_input or next(iter(inputs))
    if len(inputs[name].shape) == 3:
        layer = layer_cls(**init_kwargs)
        sym = {
            k: keras.Input(shape=v.shape[1:], dtype=str(v.dtype), name=k) for k, v in inputs.items()
        }
        masked = dict(sym)
        masked[name] = keras.layers.Masking(mask_value=0.0)(sym[name])
        out = _first(layer(**masked, **call_kwargs))
        model = keras.Model(sym, out)
        fed = dict(inputs)
        arr = np.array(inputs[name])
        arr[:, -1, :] = 0.0  # last step of every example masked
        fed[name] = arr
        if expect_mask_out:
            # The mask must come out of the layer attached to its output, with
            # the query's values: read it back with a downstream layer.
            read = keras.Model(sym, _MaskReader()(out))
            got = ops.convert_to_numpy(read(fed))
            np.testing.assert_array_equal(got, np.any(arr != 0.0, axis=-1).astype("float32"))
        result = ops.convert_to_numpy(model(fed))
        assert np.all(np.isfinite(result))

    # 5. one fit step with jit_compile=True --------------------------------------
    if run_training:
        layer = layer_cls(**init_kwargs)
        model = _model(layer, inputs, {**call_kwargs, **training_call_kwargs}, first_only=True)
        target = np.random.RandomState(0).normal(size=ops.shape(model(inputs))).astype("float32")
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=True)
        before = [ops.convert_to_numpy(w) for w in layer.trainable_weights]
        history = model.fit(inputs, target, epochs=1, batch_size=len(target), verbose=0)
        assert np.isfinite(history.history["loss"][0])
        after = [ops.convert_to_numpy(w) for w in layer.trainable_weights]
        if before:
            assert any(not np.allclose(b, a) for b, a in zip(before, after)), (
                "no trainable weight changed in a fit step"
            )

    # 6. mixed precision: compute dtype, float32 weights, values close to float32 --------
    if run_mixed_precision:
        compare_mixed_precision(
            layer_cls, init_kwargs, inputs, call_kwargs, tolerance=mixed_precision_tolerance
        )

    # 7. .keras save / load ----------------------------------------------------------
    if run_saving:
        layer = layer_cls(**init_kwargs)
        model = _model(layer, inputs, call_kwargs)
        expected = [ops.convert_to_numpy(o) for o in _as_list(model(inputs))]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.keras")
            model.save(path)
            loaded = keras.saving.load_model(path)
        got = [ops.convert_to_numpy(o) for o in _as_list(loaded(inputs))]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)


# ------------------------------------------------------------ padding is inert
def _default_loss(outputs):
    """A loss that reaches every floating output (squares, so no gradient is trivially 0)."""
    total = 0.0
    for o in outputs:
        if "float" in keras.backend.standardize_dtype(o.dtype):
            total = total + ops.sum(ops.square(ops.cast(o, "float32")))
    return total


def outputs_and_gradients(layer, inputs, call_kwargs=None, loss_of_outputs=None):
    """Outputs of `layer(**inputs, **call_kwargs)` and the gradient of a loss of them.

    `inputs`: name -> float array, the differentiable call arguments (masks and
    other flags go in `call_kwargs`). Returns `(outputs, weight_grads, input_grads)`
    as NumPy arrays: `weight_grads` in the order of `layer.trainable_variables`,
    `input_grads` a dict like `inputs`. Works on TensorFlow and JAX; the layer is
    built by a first call if needed.
    """
    call_kwargs = dict(call_kwargs or {})
    loss_of_outputs = loss_of_outputs or _default_loss
    if not layer.built:
        layer(**inputs, **call_kwargs)
    if keras.backend.backend() == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]
        xs = {k: jax.numpy.asarray(v) for k, v in inputs.items()}

        def f(tv, xs):
            out, _ = layer.stateless_call(tv, non_trainable, **xs, **call_kwargs)
            out = _leaves(out)
            return loss_of_outputs(out), out

        (_, out), (gw, gx) = jax.value_and_grad(f, argnums=(0, 1), has_aux=True)(trainable, xs)
        return (
            [np.asarray(o) for o in out],
            [np.asarray(g) for g in gw],
            {k: np.asarray(g) for k, g in gx.items()},
        )
    import tensorflow as tf

    xs = {k: tf.constant(v) for k, v in inputs.items()}
    with tf.GradientTape() as tape:
        tape.watch(list(xs.values()))
        out = _leaves(layer(**xs, **call_kwargs))
        loss = loss_of_outputs(out)
    variables = list(layer.trainable_variables)
    grads = tape.gradient(loss, variables + list(xs.values()))
    gw, gx = grads[: len(variables)], grads[len(variables) :]

    def zero(g, like):
        return np.zeros(like.shape, "float32") if g is None else np.asarray(g)

    return (
        [ops.convert_to_numpy(o) for o in out],
        [zero(g, v) for g, v in zip(gw, variables)],
        {k: zero(g, xs[k]) for k, g in zip(xs, gx)},
    )


PADDING_FILLS = (float("nan"), float("inf"), -float("inf"), 1e30, 300.0)


def _jax_gradient_function(layer, call_kwargs, loss_of_outputs):
    """JAX: `outputs_and_gradients` of layers like `layer` as one compiled function of
    `(layer, inputs)`: traced and compiled once, then evaluated with each layer's own variables
    (trainable and not: seeds included). Eager JAX would retrace and recompile an RNN's scan
    for every fresh layer; the compiled function is what `fit` runs on JAX anyway."""
    import jax

    def f(trainable, non_trainable, xs):
        out, _ = layer.stateless_call(trainable, non_trainable, **xs, **call_kwargs)
        out = _leaves(out)
        return loss_of_outputs(out), out

    grad = jax.jit(jax.value_and_grad(f, argnums=(0, 2), has_aux=True))

    def run(other, inputs):
        assert type(other) is type(layer)  # a twin: same class, same variables
        assert [v.shape for v in other.variables] == [v.shape for v in layer.variables]
        (_, out), (gw, gx) = grad(
            [v.value for v in other.trainable_variables],
            [v.value for v in other.non_trainable_variables],
            {k: jax.numpy.asarray(v) for k, v in inputs.items()},
        )
        return (
            [np.asarray(o) for o in out],
            [np.asarray(g) for g in gw],
            {k: np.asarray(g) for k, g in gx.items()},
        )

    return run


def check_padding_is_inert(
    make_layer, inputs, padded, call_kwargs=None, loss_of_outputs=None, fills=PADDING_FILLS
):
    """Whatever masked positions hold, no output and no gradient changes.

    `make_layer()` gives a fresh, built layer with the same weights (and seeds)
    each time;
    `padded`: name -> bool array of the entries of `inputs[name]` that are
    masked (the masks themselves go in `call_kwargs`). The outputs and the
    gradients (weights and inputs) with each of `fills` at the padded entries
    must equal those with zeros there, and the gradient at padded entries
    must be 0. On JAX every evaluation runs one compiled function
    (`_jax_gradient_function`); on TensorFlow, eagerly.
    """
    clean = {
        k: np.where(padded[k], 0.0, v).astype(v.dtype) if k in padded else v
        for k, v in inputs.items()
    }
    first = make_layer()
    if keras.backend.backend() == "jax":
        if not first.built:
            first(**clean, **dict(call_kwargs or {}))
        compiled = _jax_gradient_function(
            first, dict(call_kwargs or {}), loss_of_outputs or _default_loss
        )

        def evaluate(layer, xs):
            return compiled(layer, xs)
    else:

        def evaluate(layer, xs):
            return outputs_and_gradients(layer, xs, call_kwargs, loss_of_outputs)

    want_out, want_gw, want_gx = evaluate(first, clean)
    for name, where in padded.items():
        assert where.any(), name
        np.testing.assert_array_equal(want_gx[name][where], 0.0)
    for fill in fills:
        dirty = {
            k: np.where(padded[k], fill, v).astype(v.dtype) if k in padded else v
            for k, v in inputs.items()
        }
        out, gw, gx = evaluate(make_layer(), dirty)
        for o, w in zip(out, want_out):
            np.testing.assert_array_equal(o, w, err_msg=f"output changed with padding {fill}")
        for g, w in zip(gw, want_gw):
            np.testing.assert_array_equal(
                g, w, err_msg=f"weight gradient changed with padding {fill}"
            )
        for k in gx:
            np.testing.assert_array_equal(
                gx[k], want_gx[k], err_msg=f"gradient of {k} with padding {fill}"
            )
