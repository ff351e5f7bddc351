"""A fourth strategy written outside the package runs through the public engine.

`DiverseBeam` (Vijayakumar et al. 2018, Hamming diversity): the beam is split into G groups
of W hypotheses; group g ranks its candidates by cumulative log-prob minus `strength` times
the number of earlier groups' hypotheses of the same example that chose that token at this
step. It uses only `keras_attn.decoding`'s public names: `Strategy`, `Setup`, `StepInputs`,
`Selection`, `decode`.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import (
    DecodingConfig,
    Selection,
    Setup,
    StepInputs,
    Strategy,
    beam_search,
    decode,
)
from tests.decoding.toy import HashModel

NEG = -1e9


class DiverseBeam(Strategy):
    def __init__(self, groups, group_width, strength):
        self.groups, self.group_width, self.strength = groups, group_width, strength
        self.width = groups * group_width

    def prepare(self, setup: Setup) -> None:
        self.batch, self.vocab = setup.batch, setup.vocab
        self.end = setup.end_token

    def select(self, inputs: StepInputs) -> Selection:
        b, g, w, v = self.batch, self.groups, self.group_width, self.vocab
        hyp = inputs.hypotheses
        finished = tf.reshape(hyp["finished"], [b, g, w])
        closed = finished
        if inputs.first:  # every row is the same hypothesis: one row per group offers
            closed = closed | (tf.range(w) > 0)[None, None, :]
        base = tf.where(closed, float("-inf"), tf.reshape(hyp["log_probs"], [b, g, w]))
        cand = tf.maximum(base[..., None] + tf.reshape(inputs.log_probs, [b, g, w, v]), NEG)
        if inputs.allowed is not None:
            cand = tf.where(tf.reshape(inputs.allowed, [b, g, w, v]), cand, NEG)
        # a finished hypothesis offers itself, unchanged, in the end token's slot
        end_slot = tf.one_hot(self.end, v, on_value=True, off_value=False)
        own = tf.reshape(hyp["log_probs"], [b, g, w])[..., None]
        cand = tf.where(finished[..., None] & end_slot, own, cand)
        chosen_so_far = tf.zeros([b, v])
        parents, tokens, values = [], [], []
        for group in range(g):
            flat = tf.reshape(cand[:, group], [b, w * v])
            ranked = flat - self.strength * tf.tile(chosen_so_far, [1, w])
            _, index = tf.math.top_k(ranked, k=w)
            value = tf.gather(flat, index, batch_dims=1)
            parents.append(index // v + group * w)
            tokens.append(index % v)
            values.append(value)
            chosen_so_far += tf.reduce_sum(tf.one_hot(index % v, v), axis=1)
        rows = tf.range(b)[:, None] * self.width
        parents = tf.reshape(tf.concat(parents, 1) + rows, [-1])
        tokens = tf.reshape(tf.concat(tokens, 1), [-1])
        values = tf.reshape(tf.concat(values, 1), [-1])
        return Selection(parents, tokens, values, values <= NEG / 2, {})


MODEL = HashModel(vocab=5, width=3, max_length=5, seed=3)
H0 = tf.constant([4, 17], tf.int32)
START = tf.constant([1, 2], tf.int32)
END = 0


def run(strategy, config=None):
    return decode(MODEL.step_hash, H0, START, END, strategy, config or DecodingConfig(max_length=5))


def as_numpy(out):
    return {key: value.numpy() for key, value in out.items()}


def test_one_group_without_diversity_is_the_beam():
    ours = as_numpy(run(DiverseBeam(1, 3, 0.0)))
    beam = as_numpy(beam_search(MODEL.step_hash, H0, START, END, beam_size=3, max_length=5))
    for key in ("sequences", "lengths", "scores", "log_probs", "token_log_probs"):
        np.testing.assert_allclose(ours[key], beam[key], atol=1e-5, err_msg=key)


def test_diversity_separates_the_groups_first_tokens():
    plain = as_numpy(run(DiverseBeam(3, 1, 0.0)))
    diverse = as_numpy(run(DiverseBeam(3, 1, 100.0)))
    # without diversity the three groups are three copies of one greedy search
    assert all(len({tuple(s) for s in row}) == 1 for row in plain["sequences"])
    # with it, no two groups share a first token (5 tokens, 3 groups)
    for row, lengths in zip(diverse["sequences"], diverse["lengths"]):
        assert len({s[0] for s in row}) == 3
    # and the engine's bookkeeping holds for the new strategy: the reported log-prob is the
    # model's own of the returned sequence, the per-token log-probs sum to it
    for b in range(2):
        for k in range(3):
            y = list(diverse["sequences"][b, k, : diverse["lengths"][b, k]])
            log_prob, _, _ = MODEL.reference(int(H0[b]), int(START[b]), y, None, 0, 0, 0)
            assert diverse["log_probs"][b, k] == pytest.approx(log_prob, abs=1e-4)
            assert diverse["token_log_probs"][b, k].sum() == pytest.approx(log_prob, abs=1e-4)


def test_new_strategy_in_tf_function_xla_and_savedmodel(tmp_path):
    strategy_args = (3, 1, 100.0)
    eager = as_numpy(run(DiverseBeam(*strategy_args)))

    def search(h0):
        out = decode(
            MODEL.step_hash,
            h0,
            START,
            END,
            DiverseBeam(*strategy_args),
            DecodingConfig(max_length=5),
        )
        return {key: out[key] for key in ("sequences", "scores", "token_log_probs")}

    spec = [tf.TensorSpec([2], tf.int32)]
    graph = tf.function(search, input_signature=spec, autograph=False)
    xla = tf.function(search, input_signature=spec, autograph=False, jit_compile=True)
    module = tf.Module()
    module.search = graph
    tf.saved_model.save(module, str(tmp_path / "diverse"))
    loaded = tf.saved_model.load(str(tmp_path / "diverse"))
    for name, fn in (("graph", graph), ("xla", xla), ("savedmodel", loaded.search)):
        out = as_numpy(fn(H0))
        np.testing.assert_array_equal(out["sequences"], eager["sequences"], err_msg=name)
        np.testing.assert_allclose(out["scores"], eager["scores"], atol=1e-5, err_msg=name)
        np.testing.assert_allclose(
            out["token_log_probs"], eager["token_log_probs"], atol=1e-5, err_msg=name
        )


def test_decode_refuses_what_is_not_a_strategy():
    with pytest.raises(ValueError, match="`strategy` must be a Strategy"):
        decode(MODEL.step_hash, H0, START, END, "beam")
    with pytest.raises(TypeError):
        Strategy()  # select is abstract


def test_the_engine_gives_the_new_strategy_the_constraints():
    """Prefix, phrases and suppression are the engine's: a strategy that knows nothing of them
    still returns sequences that meet them."""
    prefix = np.array([[3, -1], [-1, -1]], np.int32)
    phrases = np.array([[[2, 4]], [[4, -1]]], np.int32)
    out = as_numpy(
        decode(
            MODEL.step_hash,
            H0,
            START,
            END,
            DiverseBeam(2, 1, 100.0),
            DecodingConfig(max_length=5),
            prefix_ids=prefix,
            constraint_ids=phrases,
            suppress_ids=np.array([[1, 1]], np.int32),
        )
    )
    assert out["constraints_met"].all()
    assert (out["sequences"][0, :, 0] == 3).all()
    for row, lengths in zip(out["sequences"], out["lengths"]):
        for y, n in zip(row, lengths):
            assert not any(a == b == 1 for a, b in zip(y[: n - 1], y[1:n]))


def test_the_beam_keeps_no_score_buffer_when_scores_are_the_log_probs():
    from keras_attn.decoding import Beam

    calls = []

    class Spy(Beam):
        def initial_state(self, n_rows):
            buffers = super().initial_state(n_rows)
            calls.append(sorted(buffers))
            return buffers

    for config, kept in (
        (DecodingConfig(max_length=5), []),
        (DecodingConfig(max_length=5, length_penalty=0.6), ["scores"]),
        (DecodingConfig(max_length=5, eos_penalty=0.3), ["scores"]),
    ):
        calls.clear()
        spied = decode(MODEL.step_hash, H0, START, END, Spy(3), config)
        assert calls == [kept]
        # the same hypotheses and scores as the beam search itself, which brute force checks
        want = beam_search(MODEL.step_hash, H0, START, END, beam_size=3, config=config)
        for key in want:
            np.testing.assert_allclose(spied[key].numpy(), want[key].numpy(), rtol=1e-6)
        if not kept:  # without penalties the scores are the log-probs
            np.testing.assert_array_equal(spied["scores"].numpy(), spied["log_probs"].numpy())
