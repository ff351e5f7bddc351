"""The decoding engine on TensorFlow and on JAX: the same n-best for the same step function.

The test process runs on TensorFlow. The JAX side runs once per module in a subprocess
(`python -m tests.decoding.test_backends OUT` with `KERAS_BACKEND=jax`), started before this
process decodes the same cases on TensorFlow, so both run at once; it writes its results as
NumPy arrays, and each test compares one case.

- A toy step function written with `keras.ops` (a rolling hash of the prefix looked up in fixed
  random tables, with attention), through beam search and greedy search with every control
  (length, coverage and EOS penalties, min_length, no_repeat_ngram_size, repetition_penalty,
  bad ids), with constraints (prefix, phrases, suppressed sequences) and without end token;
- real models: `RNNSeq2Seq` (Bahdanau) and the cached `Transformer`, small, with the same
  weights on both backends (drawn in NumPy), through `generate`;
- on JAX only: the eager call gives what `jax.jit` gives (the JAX side of the comparisons runs
  under `jax.jit`, one case eagerly too); sampling with the same seed gives the same tokens
  (eagerly and under `jax.jit`), another seed other tokens, `top_k=1` the greedy sequence; a step returning NaN raises eagerly and gives empty rows under `jax.jit` (with
  `report_invalid=True` the flag set), as does one `+inf` logit; an end token outside the vocabulary is refused; the
  searches on the toy step import no TensorFlow; `end_token=-1` compiles no end slot; the
  engine's log-softmax is `jax.nn.log_softmax`'s, its per-row normaliser NaN in exactly the
  rows the NaN check must flag.

Sequences, lengths and `constraints_met` must be equal; scores, log-probs, per-token log-probs
and alignments equal to 1e-4.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

# the JAX side runs in a subprocess: make test-processes (CI) runs this module
pytestmark = pytest.mark.processes

V, S, B, R = 9, 5, 3, 37  # vocabulary, attention width, batch, hash table rows
MAX_LENGTH = 6
H0 = np.array([3, 11, 20], np.int32)
START = np.array([1, 1, 1], np.int32)

CONTROLS = dict(
    length_penalty=0.6,
    coverage_penalty=0.2,
    eos_penalty=0.3,
    min_length=2,
    no_repeat_ngram_size=2,
    repetition_penalty=1.3,
    bad_token_ids=[4],
)
CONSTRAINTS = dict(
    prefix_ids=np.array([[2, -1], [3, 5], [-1, -1]], np.int32),
    constraint_ids=np.array([[[6, 2], [7, -1]], [[1, -1], [-1, -1]], [[8, 3], [-1, -1]]], np.int32),
    suppress_ids=np.array([[3, 3], [5, 6]], np.int32),
)
BUDGET = dict(
    budget_ids=np.array([2, 6, 7, -1], np.int32),
    budget_costs=np.array([[1, 0], [1, 1], [0, 2], [9, 9]], np.int32),
    budgets=np.array([[2, 1], [0, 3], [1, 0]], np.int32),
    constraint_alt_ids=np.array(
        [[[5, -1], [-1, -1]], [[-1, -1], [-1, -1]], [[-1, 1], [-1, -1]]], np.int32
    ),
)
TOY_CASES = {
    "beam-controls": dict(search="beam", beam_size=3, **CONTROLS),
    "beam-budget": dict(search="beam", beam_size=3, **CONTROLS, **CONSTRAINTS, **BUDGET),
    "beam-all": dict(search="beam", beam_size=3, **CONTROLS, **CONSTRAINTS),
    "beam-no-end": dict(search="beam", beam_size=2, end_token=-1),
    "greedy-all": dict(search="greedy", **CONTROLS, **CONSTRAINTS),
}
EAGER_CASES = ("beam-all",)  # also decoded eagerly on JAX (the others under jax.jit only)
MODEL_CASES = {
    "rnn-beam": ("rnn", dict(search="beam", beam_size=3, length_penalty=0.6, coverage_penalty=0.2)),
    "transformer-all": ("transformer", dict(search="beam", beam_size=3, **CONTROLS, **CONSTRAINTS)),
}
SOURCE = np.array([[5, 6, 7, 8, 0], [4, 9, 10, 0, 0], [11, 5, 4, 6, 7]], np.int32)
EXACT = ("sequences", "lengths", "constraints_met")


def _tables():
    rng = np.random.RandomState(0)
    logits = (rng.randn(R, V) * 2.0).astype(np.float32)
    attention = np.exp(rng.randn(R, S) * 1.5)
    attention = (attention / attention.sum(-1, keepdims=True)).astype(np.float32)
    return logits, attention


def toy_step():
    """`(step_fn, initial_state)`: a keras.ops step whose distribution depends on the prefix."""
    from keras import ops

    logits_table, attention_table = _tables()

    def step_fn(tokens, state, step):
        h = (state["h"] * 31 + tokens + 1) % R
        logits = ops.take(ops.convert_to_tensor(logits_table), h, axis=0)
        attention = ops.take(ops.convert_to_tensor(attention_table), h, axis=0)
        return logits, {"h": h}, attention

    return step_fn, {"h": H0}


def run_toy(case, step_fn=None, state=None):
    from keras_attn.decoding import beam_search, greedy_search

    kwargs = dict(TOY_CASES[case])
    search = {"beam": beam_search, "greedy": greedy_search}[kwargs.pop("search")]
    end = kwargs.pop("end_token", 0)
    if step_fn is None:
        step_fn, state = toy_step()
    return search(step_fn, state, START, end, max_length=MAX_LENGTH, **kwargs)


def build_model(kind):
    """A small model with weights drawn in NumPy (the same on every backend), built
    symbolically (no computation)."""
    import keras

    from keras_attn import models

    if kind == "rnn":
        model = models.RNNSeq2Seq(12, V, 8, 8, attention="bahdanau")
    else:
        model = models.Transformer(12, V, 2, 8, 2, 16, dropout=0.0)
    model(
        {
            "source": keras.KerasTensor(SOURCE.shape, "int32"),
            "target_in": keras.KerasTensor((B, 4), "int32"),
        }
    )
    rng = np.random.RandomState(1)
    model.set_weights([(rng.randn(*w.shape) * 0.5).astype(w.dtype) for w in model.get_weights()])
    return model


def run_model(case, model):
    from keras_attn.decoding import generate

    kwargs = dict(MODEL_CASES[case][1])
    return generate(model, SOURCE, 1, 0, max_length=MAX_LENGTH, **kwargs)


def _numpy(out):
    return {key: np.asarray(value) for key, value in out.items()}


def tf_side():
    """The same cases on TensorFlow (this process): `{case: {key: array}}`."""
    out = {case: _numpy(run_toy(case)) for case in TOY_CASES}
    built = {kind: build_model(kind) for kind in ("rnn", "transformer")}
    for case, (kind, _) in MODEL_CASES.items():
        out[case] = _numpy(run_model(case, built[kind]))
    return out


def jax_side(path):
    """Everything the JAX side decodes, saved to `path` (an .npz of `case/key` arrays)."""
    import jax
    import keras

    assert keras.backend.backend() == "jax", keras.backend.backend()
    from keras import ops

    from keras_attn.decoding import beam_search, greedy_search, sample_search

    saved = {}

    def keep(name, out):
        for key, value in _numpy(out).items():
            saved[f"{name}/{key}"] = value

    step_fn, state = toy_step()
    for case in TOY_CASES:
        keep(case, jax.jit(lambda h, case=case: run_toy(case, step_fn, {"h": h}))(H0))
    for case in EAGER_CASES:
        keep(f"eager:{case}", run_toy(case))
    # the engine alone (the models import keras_attn.text, whose tokenizers are TensorFlow's)
    saved["tensorflow imported"] = np.array("tensorflow" in sys.modules)
    for case, (kind, _) in MODEL_CASES.items():
        model = build_model(kind)

        def decode(values, model=model, case=case):
            # the variables' values enter as arguments, as in a training loop
            with keras.StatelessScope(list(zip(model.variables, values))):
                return run_model(case, model)

        keep(case, jax.jit(decode)([v.value for v in model.variables]))

    # sampling: one compiled function, called with two seeds (and the first one twice)
    def sample(h, seed):
        state = {"h": h}
        kwargs = dict(max_length=MAX_LENGTH, seed=seed)
        return (
            sample_search(step_fn, state, START, 0, temperature=2.0, top_p=0.95, **kwargs),
            sample_search(step_fn, state, START, 0, top_k=1, **kwargs, **CONTROLS),
            greedy_search(step_fn, state, START, 0, max_length=MAX_LENGTH, **CONTROLS),
        )

    compiled = jax.jit(sample)
    a, top1, greedy = compiled(H0, np.int32(7))
    keep("sample:a", a)
    keep("sample:top1", top1)
    keep("greedy:top1", greedy)
    keep("sample:a-again", compiled(H0, np.int32(7))[0])
    keep("sample:b", compiled(H0, np.int32(8))[0])
    keep(
        "sample:eager",
        sample_search(
            step_fn, state, START, 0, temperature=2.0, top_p=0.95, max_length=MAX_LENGTH, seed=7
        ),
    )

    # invalid logits: NaN from step 2 on
    def nan_step(tokens, state, step):
        logits, state, attention = step_fn(tokens, state, step)
        return ops.where(step >= 2, float("nan"), logits), state, attention

    nan_kwargs = dict(beam_size=2, max_length=MAX_LENGTH)
    try:
        beam_search(nan_step, state, START, 0, **nan_kwargs)
        saved["nan:eager-error"] = np.array("")
    except ValueError as error:
        saved["nan:eager-error"] = np.array(str(error))
    keep(
        "nan:jit",
        jax.jit(
            lambda h: beam_search(nan_step, {"h": h}, START, 0, report_invalid=True, **nan_kwargs)
        )(H0),
    )

    # one +inf logit, in one row, from step 2 on
    def inf_step(tokens, state, step):
        logits, state, attention = step_fn(tokens, state, step)
        one = (ops.arange(V)[None, :] == 3) & (ops.arange(B * 2)[:, None] == 4)
        return ops.where(one & (step >= 2), float("inf"), logits), state, attention

    keep(
        "inf:jit",
        jax.jit(
            lambda h: beam_search(inf_step, {"h": h}, START, 0, report_invalid=True, **nan_kwargs)
        )(H0),
    )
    try:
        greedy_search(step_fn, state, START, V, max_length=MAX_LENGTH)
        saved["end:error"] = np.array("")
    except ValueError as error:
        saved["end:error"] = np.array(str(error))

    # what the compiled loop holds: an end token of -1 (a Python int, no end token) is known
    # when tracing, as on TensorFlow, so no finished hypothesis offers an end slot (fewer
    # operations in the loop's body), and the loop runs a count XLA knows (its condition reads
    # no finished flags)
    def search_of(end_token):
        def search(h):
            out = beam_search(step_fn, {"h": h}, START, end_token, beam_size=2, max_length=4)
            return out["sequences"]

        return search

    def body_ops(end_token):
        jaxpr = jax.make_jaxpr(search_of(end_token))(H0).jaxpr
        loops = [e for e in jaxpr.eqns if e.primitive.name == "while"]
        assert len(loops) == 1, [e.primitive.name for e in jaxpr.eqns]
        return len(loops[0].params["body_jaxpr"].jaxpr.eqns)

    def trip_count_known(end_token):
        compiled = jax.jit(search_of(end_token)).lower(H0).compile().as_text()
        return "known_trip_count" in compiled

    saved["body ops"] = np.array([body_ops(-1), body_ops(0)])

    # one step of the beam over the whole vocabulary: one top-k per row (shared by the
    # log-softmax, which reads its maximum off it, and the beam), one over each example's
    # K * K candidates, and no other reduction to a maximum over V; greedy the same with k = 1
    # (its choice), no argmax
    def loop_body(search):
        eqns = jax.make_jaxpr(search)(H0).jaxpr.eqns
        loop = [e for e in eqns if e.primitive.name == "while"]
        return loop[0].params["body_jaxpr"].jaxpr.eqns

    def wide_maxima(eqns):
        names = ("reduce_max", "reduce", "argmax")
        return sum(e.primitive.name in names and e.invars[0].aval.shape[-1:] == (V,) for e in eqns)

    def top_k_shapes(eqns):
        return [
            tuple(e.invars[0].aval.shape) + (e.params["k"],)
            for e in eqns
            if e.primitive.name == "top_k"
        ]

    def greedy_of(h):
        return greedy_search(step_fn, {"h": h}, START, -1, max_length=4)["sequences"]

    for name, search in (("beam", search_of(-1)), ("greedy", greedy_of)):
        eqns = loop_body(search)
        saved[f"{name} top_k inputs"] = np.array(top_k_shapes(eqns))
        saved[f"{name} wide maxima"] = np.array(wide_maxima(eqns))
    saved["trip count known"] = np.array([trip_count_known(-1), trip_count_known(0)])

    # the engine's log-softmax on JAX: jax.nn.log_softmax's numbers, with the per-row probe
    # the NaN check reads, eagerly and under jax.jit
    from keras_attn.decoding import backend as kb

    x = (np.random.RandomState(3).randn(6, V) * 3.0).astype(np.float32)
    x[1, 2], x[2, 4], x[3, :], x[4, ::2], x[5, 0] = np.nan, np.inf, -np.inf, -np.inf, np.inf
    x[5, 1] = np.nan
    for name, fn in (("eager", kb.log_softmax), ("jit", jax.jit(kb.log_softmax))):
        log_probs, probe = fn(x)
        saved[f"log_softmax:{name}"] = np.asarray(log_probs)
        saved[f"log_softmax:{name}-probe"] = np.asarray(probe)
    saved["log_softmax:jax"] = np.asarray(jax.jit(jax.nn.log_softmax)(x))
    # rows as wide as a vocabulary, so that the compiled `exp` and sum run in vector lanes: one
    # NaN, one +inf, or a few NaN anywhere in a row still make its probe NaN
    wide = np.random.RandomState(4).randn(6, 4103).astype(np.float32)
    wide[1, 2049], wide[2, 4102], wide[3, 17], wide[4, 1000:1003] = np.nan, np.nan, np.inf, np.nan
    saved["log_softmax:wide-probe"] = np.asarray(jax.jit(kb.log_softmax)(wide)[1])

    # the same, with each row's maximum read off its top-k (the beam's path): no reduction
    # takes the maximum, the flag rides on the sum
    def with_top(x):
        return kb.log_softmax(x, kb.reduce_max(kb.top_k(x, 3)[0], axis=-1, keepdims=True))

    for name, fn in (("eager", with_top), ("jit", jax.jit(with_top))):
        log_probs, probe = fn(x)
        saved[f"log_softmax:top-{name}"] = np.asarray(log_probs)
        saved[f"log_softmax:top-{name}-probe"] = np.asarray(probe)
    saved["log_softmax:top-wide-probe"] = np.asarray(jax.jit(with_top)(wide)[1])
    np.savez(path, **saved)


@pytest.fixture(scope="module")
def jax_process(tmp_path_factory):
    """The JAX side, started first so that it runs while this process decodes on TensorFlow."""
    path = tmp_path_factory.mktemp("jax_decoding") / "out.npz"
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    log = open(path.with_suffix(".log"), "w+", encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.decoding.test_backends", str(path)],
        env=env,
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc, path, log
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def tf_results(jax_process):
    return tf_side()


@pytest.fixture(scope="module")
def jax_results(jax_process, tf_results):
    proc, path, log = jax_process
    try:
        code = proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = "timeout"
    log.seek(0)
    assert code == 0, log.read()[-6000:]
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


def _case(results, name):
    prefix = name + "/"
    return {key[len(prefix) :]: value for key, value in results.items() if key.startswith(prefix)}


def assert_same(expected, actual):
    assert sorted(expected) == sorted(actual)
    for key in expected:
        if key in EXACT:
            np.testing.assert_array_equal(actual[key], expected[key], err_msg=key)
        else:
            np.testing.assert_allclose(actual[key], expected[key], atol=1e-4, err_msg=key)


@pytest.mark.parametrize("case", sorted(TOY_CASES) + sorted(MODEL_CASES))
def test_same_n_best_on_tensorflow_and_jax(tf_results, jax_results, case):
    expected = tf_results[case]
    assert_same(expected, _case(jax_results, case))
    # not a degenerate case: every row found a hypothesis
    assert np.all(expected["lengths"][..., 0] > 0)


@pytest.mark.parametrize("case", EAGER_CASES)
def test_jax_eager_equals_jax_jit(jax_results, case):
    assert_same(_case(jax_results, case), _case(jax_results, f"eager:{case}"))


def test_sampling_on_jax_is_reproducible_by_seed(jax_results):
    a = _case(jax_results, "sample:a")
    assert_same(a, _case(jax_results, "sample:a-again"))
    assert_same(a, _case(jax_results, "sample:eager"))
    # another seed, other draws (temperature 2 over 9 tokens: equal by chance ~never)
    assert not np.array_equal(a["sequences"], _case(jax_results, "sample:b")["sequences"])
    # top_k=1 leaves one token to draw: greedy's, with the same controls
    assert_same(_case(jax_results, "greedy:top1"), _case(jax_results, "sample:top1"))


def test_invalid_logits_on_jax(jax_results):
    assert "`step_fn` returned NaN" in str(jax_results["nan:eager-error"])
    for case in ("nan:jit", "inf:jit"):
        jitted = _case(jax_results, case)
        assert bool(jitted["invalid"]), case
        assert np.all(jitted["scores"] == -np.inf) and np.all(jitted["lengths"] == 0)


def test_log_softmax_on_jax_and_its_nan_rows(jax_results):
    """The engine's log-softmax equals jax.nn.log_softmax bit for bit; its per-row probe is
    NaN exactly in the rows holding a NaN or +inf logit or only -inf (those whose log-probs
    hold a NaN), and nowhere else (a row with some -inf is valid)."""
    bad_rows = np.array([False, True, True, True, False, True])
    # without and with the maximum handed in (read off the row's top-k)
    for prefix in ("", "top-"):
        for name in ("eager", "jit"):
            log_probs = jax_results[f"log_softmax:{prefix}{name}"]
            expected = jax_results["log_softmax:jax"]
            np.testing.assert_array_equal(log_probs, expected)  # bit for bit
            probe = jax_results[f"log_softmax:{prefix}{name}-probe"]
            assert probe.shape == (6, 1)
            np.testing.assert_array_equal(np.isnan(probe[:, 0]), bad_rows)
            np.testing.assert_array_equal(np.isnan(log_probs).any(axis=1), bad_rows)
        wide = jax_results[f"log_softmax:{prefix}wide-probe"][:, 0]
        np.testing.assert_array_equal(np.isnan(wide), [False, True, True, True, True, False])


def test_jax_compiles_no_end_slot_without_an_end_token(jax_results):
    without, with_end = jax_results["body ops"].tolist()
    assert without < with_end, (without, with_end)


def test_jax_step_reads_the_vocabulary_once_for_its_maxima(jax_results):
    # beam_size 2 over a batch of START's rows: [N, V] once (k = K), then [B, K * K]
    b = len(START)
    assert jax_results["beam top_k inputs"].tolist() == [[2 * b, V, 2], [b, 4, 2]]
    assert int(jax_results["beam wide maxima"]) == 0
    # greedy: each row's best once, which is its choice
    assert jax_results["greedy top_k inputs"].tolist() == [[b, V, 1]]
    assert int(jax_results["greedy wide maxima"]) == 0


def test_jax_loop_count_is_known_without_an_end_token(jax_results):
    # no end token: the loop runs max_length - 1 times, a count XLA reads off the loop; with
    # one, the loop may stop early, when every row has ended
    assert jax_results["trip count known"].tolist() == [True, False]


def test_jax_refuses_bad_end_token_and_imports_no_tensorflow(jax_results):
    assert "`end_token` must be an id of the vocabulary" in str(jax_results["end:error"])
    assert not bool(jax_results["tensorflow imported"])


if __name__ == "__main__":
    jax_side(sys.argv[1])
