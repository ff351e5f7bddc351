"""Compiled once, called many times: the searches and `generate` on JAX (decoding/compiled.py).

Compilations are counted with JAX's own event (`jax.monitoring`, one
"/jax/core/compile/backend_compile_duration" per program XLA compiles), around each call:

- every search (`greedy_search`, `beam_search`, `sample_search`, `forced_search`, `decode` with
  a strategy of one's own) compiles one program on its first call, none on a second call with
  the same shapes, none for a new batch size within its bucket (3 then 4);
- request knobs away from their neutral value (`length_penalty`, `temperature`, `top_k`,
  `top_p`, the controls `min_length`, `no_repeat_ngram_size`, `repetition_penalty`, the seed,
  a strategy's tensor) are arguments: a new value compiles nothing and is used;
- new weights (`assign`, `fit`) compile nothing and are used, whether the step function holds
  its layer in its closure or reads a variable through a global;
- `generate` on a small `Transformer` and `RNNSeq2Seq`: the same, a new source length within
  its bucket (5 then 7 columns) compiling nothing either.

Every answer is compared with an uncached reference: the same call inside a fresh `jax.jit`
(traced there, it skips the cache and reads the variables as they are now); the padded rows and
columns never change the real rows' answers. The checks that raise eagerly (a NaN logit, an id
outside the vocabulary) still raise from the compiled program. On TensorFlow nothing of this
runs (its `tf.function` paths are unchanged): the module is JAX's.
"""

import gc
import weakref

import keras
import numpy as np
import pytest

if keras.backend.backend() != "jax":
    pytest.skip("compiled searches are the JAX backend's", allow_module_level=True)

import jax
from jax import monitoring
from keras import ops

from keras_attn import models
from keras_attn.decoding import (
    Strategy,
    beam_search,
    compiled,
    decode,
    forced_search,
    generate,
    greedy_search,
    sample_search,
)
from keras_attn.decoding.strategies import pick

V = 8
_COMPILES = [0]


def _listen(event, duration, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES[0] += 1


monitoring.register_event_duration_secs_listener(_listen)


def counted(fn):
    """`(outputs as NumPy, programs XLA compiled while `fn` ran)`."""
    before = _COMPILES[0]
    out = fn()
    out = {key: np.asarray(value) for key, value in out.items()}
    return out, _COMPILES[0] - before


def reference(fn, *args):
    """`fn(*args)` inside a fresh `jax.jit` (a new function: JAX's own cache, keyed on the
    function, is not reused): traced there, it skips the cache and reads the variables now."""
    return {key: np.asarray(value) for key, value in jax.jit(lambda *a: fn(*a))(*args).items()}


def assert_same(out, ref):
    assert sorted(out) == sorted(ref)
    for key in out:
        if out[key].dtype.kind in "ib":
            np.testing.assert_array_equal(out[key], ref[key], err_msg=key)
        else:
            np.testing.assert_allclose(out[key], ref[key], rtol=1e-5, atol=1e-5, err_msg=key)


TABLE = np.log(np.random.default_rng(0).dirichlet(np.ones(V), size=V)).astype("float32")


def table_step(tokens, state, step):
    """A bigram model with attention over the state's `[B, 4]` source rows."""
    logits = ops.take(ops.convert_to_tensor(TABLE), tokens, axis=0)
    attention = ops.softmax(state["source"] * ops.cast(step + 1, "float32"), axis=-1)
    return logits, state, attention


def inputs(batch):
    rng = np.random.default_rng(batch)
    state = {"source": rng.normal(size=(batch, 4)).astype("float32")}
    return state, (np.arange(batch) % (V - 1) + 1).astype("int32")


class Biased(Strategy):
    """A strategy of one's own: the most likely token after adding `bias [V]` to the
    log-probs (a tensor attribute: an argument of the program)."""

    def __init__(self, bias):
        self.bias = np.asarray(bias, "float32")

    def select(self, inputs):
        def choose(log_probs):
            bias = ops.convert_to_tensor(self.bias)[None, :]
            return ops.cast(ops.argmax(log_probs + bias, axis=-1), "int32")

        return pick(inputs, choose)


TARGETS = np.array([[3, 4, -1], [5, -1, -1], [6, 6, 2], [2, 3, 4]], "int32")
SEARCHES = {
    "greedy": lambda s, t, b: greedy_search(table_step, s, t, 0, max_length=5),
    "beam": lambda s, t, b: beam_search(
        table_step, s, t, 0, beam_size=3, max_length=5, length_penalty=0.6
    ),
    "sample": lambda s, t, b: sample_search(
        table_step, s, t, 0, max_length=5, temperature=0.8, top_k=4, seed=7
    ),
    "forced": lambda s, t, b: forced_search(table_step, s, t, 0, max_length=5, targets=TARGETS[:b]),
    "strategy": lambda s, t, b: decode(
        table_step, s, t, 0, Biased(np.linspace(0, 1, V)), max_length=5
    ),
}


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_a_search_compiles_one_program_and_reuses_it(name):
    search = SEARCHES[name]
    state3, start3 = inputs(3)
    first, n = counted(lambda: search(state3, start3, 3))
    assert n == 1  # one program, not one per op
    assert_same(first, reference(lambda s, t: search(s, t, 3), state3, start3))
    again, n = counted(lambda: search(state3, start3, 3))
    assert n == 0
    assert_same(again, first)
    # batch 4: the bucket batch 3 was padded to, so the same program
    state4, start4 = inputs(4)
    four, n = counted(lambda: search(state4, start4, 4))
    assert n == 0
    assert_same(four, reference(lambda s, t: search(s, t, 4), state4, start4))


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the options are the CPU's")
def test_programs_compile_with_the_cpu_options(monkeypatch):
    """On the CPU a search's program is compiled with `CPU_COMPILER_OPTIONS` (the `reference`
    of every test here compiles with XLA's defaults: the answers agree); `{}` gives XLA's
    defaults. `jax.jit` is wrapped by a spy that records the options and compiles as it is."""
    seen, real = [], jax.jit

    def spy(fn, **kwargs):
        seen.append(kwargs.get("compiler_options"))
        return real(fn, **kwargs)

    monkeypatch.setattr(jax, "jit", spy)
    state, tokens = inputs(2)
    out = greedy_search(lambda t, s, i: table_step(t, s, i), state, tokens, 0, max_length=5)
    assert seen == [compiled.CPU_COMPILER_OPTIONS]
    assert_same(
        {k: np.asarray(v) for k, v in out.items()},
        reference(lambda s, t: greedy_search(table_step, s, t, 0, max_length=5), state, tokens),
    )
    monkeypatch.setattr(compiled, "CPU_COMPILER_OPTIONS", {})
    seen.clear()
    greedy_search(lambda t, s, i: table_step(t, s, i), state, tokens, 0, max_length=5)
    assert seen == [None]
    # an option this XLA does not have (an older one lacks some) is left out, not an error
    options = {"xla_backend_optimization_level": 1, "xla_no_such_option": 1}
    monkeypatch.setattr(compiled, "CPU_COMPILER_OPTIONS", options)
    monkeypatch.setattr(compiled, "_REFUSED", set())
    seen.clear()
    out, n = counted(
        lambda: greedy_search(lambda t, s, i: table_step(t, s, i), state, tokens, 0, max_length=5)
    )
    # XLA reports the refused attempt as a compilation too: two events, one program
    assert seen == [options, {"xla_backend_optimization_level": 1}] and n == 2
    assert_same(
        out, reference(lambda s, t: greedy_search(table_step, s, t, 0, max_length=5), state, tokens)
    )
    seen.clear()  # a later program asks without it: one compilation
    _, n = counted(
        lambda: greedy_search(lambda t, s, i: table_step(t, s, i), state, tokens, 0, max_length=5)
    )
    assert seen == [{"xla_backend_optimization_level": 1}] and n == 1


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the options are the CPU's")
def test_a_program_built_before_its_option_was_refused_still_runs(monkeypatch):
    """A program jitted with an option that another program's call then found refused drops
    it on its own first call too (the refusal is the process's, the retry the program's)."""
    monkeypatch.setattr(compiled, "CPU_COMPILER_OPTIONS", {"xla_no_such_option": 1})
    monkeypatch.setattr(compiled, "_REFUSED", set())
    program = compiled._Program(lambda x: {"y": x + 1}, [])
    assert program.options == {"xla_no_such_option": 1}
    compiled._REFUSED.add("xla_no_such_option")  # found by another program meanwhile
    out, checks = program(np.float32(1))
    assert float(out["y"]) == 2.0 and checks == [] and program.options == {}


def test_knobs_are_arguments():
    state, start = inputs(3)

    def beam(alpha):
        return beam_search(
            table_step,
            state,
            start,
            0,
            beam_size=3,
            max_length=5,
            length_penalty=alpha,
            coverage_penalty=0.2,
        )

    first, n = counted(lambda: beam(0.6))
    assert n == 1
    other, n = counted(lambda: beam(2.0))
    assert n == 0
    assert_same(other, reference(lambda: beam(2.0)))
    assert not np.allclose(other["scores"], first["scores"])

    def sample(temperature, top_k, top_p, seed):
        return sample_search(
            table_step,
            state,
            start,
            0,
            max_length=5,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
        )

    first, n = counted(lambda: sample(0.7, 3, 0.9, 1))
    assert n == 1
    draws = set()
    for knobs in ((1.5, 5, 0.8, 1), (1.5, 5, 0.8, 2), (3.0, 7, 0.95, 3)):
        out, n = counted(lambda: sample(*knobs))
        assert n == 0
        assert_same(out, reference(lambda: sample(*knobs)))
        draws.add(out["sequences"].tobytes())
    assert len(draws) == 3
    # a strategy's tensor: a new bias, the same program, the bias's answer
    biased = [
        counted(lambda b=b: decode(table_step, state, start, 0, Biased(b), max_length=5))
        for b in (np.zeros(V), np.eye(V)[5] * 100)
    ]
    assert biased[1][1] == 0
    assert (biased[1][0]["sequences"][:, :, :-1] == 5).all()


# logits that favour the end token (0), then 3, 4, 5, 6: each control changes the answer
ROW = np.array([2.0, -9.0, -9.0, 1.9, 1.5, 1.0, 0.5, -9.0], "float32")


def row_step(tokens, state, step):
    return ops.broadcast_to(ops.convert_to_tensor(ROW), (ops.shape(tokens)[0], V)), state, None


@pytest.mark.parametrize(
    "knob, values",
    [("min_length", (2, 4)), ("no_repeat_ngram_size", (1, 2)), ("repetition_penalty", (1.5, 3.0))],
)
def test_controls_are_arguments(knob, values):
    """A control away from its neutral value is an argument: a new value compiles nothing and
    is used (the answer is the uncached one, and differs from the first value's)."""
    state, start = inputs(3)
    # the n-gram and penalty rows without the end token's pull, so that they run on
    row = {} if knob == "min_length" else {"bad_token_ids": [0]}

    def run(value):
        return greedy_search(row_step, state, start, 0, max_length=6, **{knob: value}, **row)

    first, n = counted(lambda: run(values[0]))
    assert n == 1
    assert_same(first, reference(lambda: run(values[0])))
    second, n = counted(lambda: run(values[1]))
    assert n == 0
    assert_same(second, reference(lambda: run(values[1])))
    assert not np.array_equal(first["sequences"], second["sequences"])


def test_padding_changes_no_real_row_of_samples_whatever_the_threefry_setting():
    """The copies padding the batch never change the real rows' draws: each row draws with
    its own key, also where JAX's random bits of a `[N, V]` draw depend on N."""
    state, start = inputs(3)

    def run(s, t):
        return sample_search(table_step, s, t, -1, max_length=6, seed=5)

    setting = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", False)
    try:
        out, _ = counted(lambda: run(state, start))  # padded to 4 rows
        assert_same(out, reference(run, state, start))  # 3 rows
    finally:
        jax.config.update("jax_threefry_partitionable", setting)


def test_seed_none_draws_anew_each_call_without_compiling():
    state, start = inputs(4)
    out = [
        counted(lambda: sample_search(table_step, state, start, -1, max_length=6)) for _ in range(3)
    ]
    assert [n for _, n in out[1:]] == [0, 0]
    assert len({o["sequences"].tobytes() for o, _ in out}) == 3


def layer_step(embedding):
    def step(tokens, state, step):
        return embedding(tokens), state, None

    return step


def test_new_weights_of_a_closed_over_layer_compile_nothing_and_are_used():
    embedding = keras.layers.Embedding(V, V)
    embedding.build((None,))
    step = layer_step(embedding)
    state, start = inputs(3)

    def run():
        return beam_search(step, state, start, 0, beam_size=2, max_length=4)

    before, n = counted(run)
    assert n == 1
    table = np.full((V, V), -5.0, "float32")
    table[:, 6] = 5.0
    embedding.embeddings.assign(table)
    after, n = counted(run)
    assert n == 0
    assert_same(after, reference(run))
    assert (after["sequences"][:, 0, :] == 6).all()
    assert not (before["sequences"][:, 0, :] == 6).all()


HIDDEN = {}  # a variable the step reads through a global: not in its closure


def hidden_step(tokens, state, step):
    return ops.take(HIDDEN["table"], tokens, axis=0), state, None


def test_a_variable_read_through_a_global_is_an_argument_too():
    HIDDEN["table"] = keras.Variable(TABLE)
    state, start = inputs(3)

    def run():
        return greedy_search(hidden_step, state, start, 0, max_length=4)

    before, _ = counted(run)
    assert_same(before, reference(run))
    table = np.full((V, V), -5.0, "float32")
    table[:, 3] = 5.0
    HIDDEN["table"].assign(table)
    after, n = counted(run)
    assert n == 0
    assert (after["sequences"] == 3).all()
    assert_same(after, reference(run))


def test_a_closure_rebound_to_other_objects_is_another_program():
    table = TABLE

    def step(tokens, state, step):
        return ops.take(ops.convert_to_tensor(table), tokens, axis=0), state, None

    state, start = inputs(3)
    first, _ = counted(lambda: greedy_search(step, state, start, 0, max_length=4))
    table = np.where(np.eye(V, k=1) > 0, 5.0, -5.0).astype("float32")  # next id
    second, n = counted(lambda: greedy_search(step, state, start, 0, max_length=4))
    assert n == 1
    assert_same(second, reference(lambda: greedy_search(step, state, start, 0, max_length=4)))
    assert not np.array_equal(first["sequences"], second["sequences"])


def test_checks_still_raise_from_the_compiled_program():
    state, start = inputs(3)

    def nan_step(tokens, state, step):
        logits = ops.take(ops.convert_to_tensor(TABLE), tokens, axis=0)
        return ops.where(step >= 1, logits * np.nan, logits), state, None

    with pytest.raises(ValueError, match="step_fn"):
        greedy_search(nan_step, state, start, 0, max_length=4)
    targets = np.array([[1, 2], [3, V], [4, -1]], "int32")
    with pytest.raises(ValueError, match="targets"):
        forced_search(table_step, state, start, 0, max_length=4, targets=targets)
    # the same program with ids in the vocabulary answers
    out = forced_search(table_step, state, start, 0, max_length=4, targets=targets % V)
    assert np.asarray(out["sequences"]).shape == (3, 4)


def test_the_cache_does_not_keep_a_step_function_alive():
    def step(tokens, state, step):
        return ops.take(ops.convert_to_tensor(TABLE), tokens, axis=0), state, None

    state, start = inputs(2)
    greedy_search(step, state, start, 0, max_length=3)
    assert compiled.programs(step) == 1
    ref = weakref.ref(step)
    del step
    gc.collect()
    assert ref() is None


# --------------------------------------------------------------------------------- generate
SOURCE = np.array([[5, 6, 7, 8, 0], [4, 9, 10, 0, 0], [11, 5, 4, 6, 7]], "int32")
SOURCE4 = np.array(
    [[5, 6, 7, 8, 9, 10, 0], [4, 9, 0, 0, 0, 0, 0], [11, 5, 4, 6, 7, 8, 9], [3, 4, 0, 0, 0, 0, 0]],
    "int32",
)


def small_model(kind):
    if kind == "rnn":
        model = models.RNNSeq2Seq(12, V, 8, 8, attention="bahdanau")
    else:
        model = models.Transformer(12, V, 2, 8, 2, 16, dropout=0.0)
    model({"source": SOURCE, "target_in": np.ones((3, 4), "int32")})
    return model


@pytest.mark.parametrize(
    "kind, search, kw",
    [("transformer", "greedy", {}), ("rnn", "beam", {"beam_size": 3, "length_penalty": 0.6})],
)
def test_generate_compiles_once_and_follows_fit(kind, search, kw):
    model = small_model(kind)

    def run(source):
        return generate(model, source, 1, 2, search, max_length=4, **kw)

    first, n = counted(lambda: run(SOURCE))
    assert n == 1
    assert_same(first, reference(run, SOURCE))
    again, n = counted(lambda: run(SOURCE))
    assert n == 0
    # 4 rows of 7 columns: the buckets of 3 rows of 5 columns (4 and 8)
    four, n = counted(lambda: run(SOURCE4))
    assert n == 0
    assert_same(four, reference(run, SOURCE4))

    # new weights by fit: nothing compiled, the new weights' answer
    model.compile(keras.optimizers.Adam(0.05), models.MaskedSequenceLoss())
    target = np.array([[1, 3, 4, 5], [1, 6, 7, 0], [1, 3, 3, 3]], "int32")
    model.fit({"source": SOURCE, "target_in": target}, np.roll(target, -1, axis=1), verbose=0)
    fitted, n = counted(lambda: run(SOURCE))
    assert n == 0
    assert_same(fitted, reference(run, SOURCE))
    # and new weights by assign: a bias that makes token 6 the answer everywhere
    model.output_layer.bias.assign(np.where(np.arange(V) == 6, 100.0, 0.0).astype("float32"))
    out, n = counted(lambda: run(SOURCE))
    assert n == 0
    assert (out["sequences"].reshape(3, -1)[:, 0] == 6).all()
    assert not (first["sequences"].reshape(3, -1)[:, 0] == 6).all()


def test_a_step_limit_is_an_argument():
    # `stop_after`: one program for every limit (a later one compiles nothing), each answer
    # that of a fresh `jax.jit` of the same call
    state, start = inputs(3)

    def limited(limit):
        return beam_search(table_step, state, start, 0, beam_size=3, max_length=6, stop_after=limit)

    first, compiled = counted(lambda: limited(2))
    assert compiled == 1 and int(first["steps"]) == 2 and not first["done"]
    for limit in (3, 6):
        out, compiled = counted(lambda: limited(limit))
        assert compiled == 0, limit
        assert_same(out, reference(limited, np.int32(limit)))
    assert bool(out["done"])
