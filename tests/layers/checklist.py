"""The Keras layer checklist of DESIGN.md, as one reusable function.

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
6. `mixed_float16` and `mixed_bfloat16`: finite outputs in the compute dtype;
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
):
    """Run the checklist. `expected_output_shapes` is a list (one per output)."""
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
        assert keras.backend.standardize_dtype(s.dtype) == keras.backend.standardize_dtype(
            e.dtype
        )

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

    # 6. mixed precision ---------------------------------------------------------
    if run_mixed_precision:
        for policy, compute in (("mixed_float16", "float16"), ("mixed_bfloat16", "bfloat16")):
            layer = layer_cls(**{**init_kwargs, "dtype": policy})
            outs = _as_list(layer(**inputs, **call_kwargs))
            first = outs[0]
            assert keras.backend.standardize_dtype(first.dtype) == compute, (policy, first.dtype)
            for w in layer.weights:
                assert keras.backend.standardize_dtype(w.dtype) in ("float32", "int32", "int64", "bool"), (
                    w.path,
                    w.dtype,
                )
            for o in outs:
                arr = ops.convert_to_numpy(ops.cast(o, "float32")) if "float" in str(o.dtype) else None
                if arr is not None:
                    assert np.all(np.isfinite(arr)), f"non-finite output under {policy}"

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
