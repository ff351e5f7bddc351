"""`stop_after`: a search run to a step limit is the same search's first steps (its answer the
hypotheses so far), and says whether it ended by itself (docs/decoding.md, "Stopping after
some steps")."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search, greedy_search
from tests.decoding.toy import HashModel

END, T, B = 0, 9, 3


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): these tests build no Keras objects."""
    yield


def toy():
    model = HashModel(vocab=7, width=4, max_length=T, seed=3, scale=1.5)
    h0 = tf.constant([5, 40, 99], tf.int32)
    return model, h0, tf.constant([1, 2, 3], tf.int32)


def numpy_of(out):
    return {k: np.asarray(v) for k, v in out.items()}


def test_a_beam_stopped_after_some_steps_is_the_full_beams_start():
    model, h0, start = toy()
    knobs = dict(beam_size=3, max_length=T, length_penalty=0.6)
    full = numpy_of(beam_search(model.step_hash, h0, start, END, **knobs))
    assert "done" not in full and "steps" not in full  # only asked for
    ended = numpy_of(beam_search(model.step_hash, h0, start, END, stop_after=T + 5, **knobs))
    needed = int(ended["steps"])  # where the search ends by itself
    assert ended["done"] and 3 <= needed <= T
    previous = None
    for limit in range(1, T + 2):
        part = numpy_of(beam_search(model.step_hash, h0, start, END, stop_after=limit, **knobs))
        steps = int(part["steps"])
        assert steps == min(limit, needed)
        assert bool(part["done"]) == (limit >= needed)
        sequences = part["sequences"]  # [B, K, T]
        for b in range(B):
            rows = sequences[b, :, :steps]
            # the tokens every hypothesis shares are the start of the final best
            shared = 0
            while shared < steps and (rows[:, shared] == rows[0, shared]).all():
                shared += 1
            best = full["sequences"][b, 0]
            np.testing.assert_array_equal(rows[0, :shared], best[:shared])
            if previous is not None and not part["done"]:
                # each hypothesis descends from one of the step before (the same search)
                before = previous[b, :, : steps - 1]
                for row in rows:
                    assert any((row[: steps - 1] == old).all() for old in before), (b, row)
        if part["done"]:
            for key in full:
                np.testing.assert_allclose(part[key], full[key], atol=1e-6, err_msg=key)
        else:
            assert steps == limit
        previous = sequences
    assert bool(part["done"])


def test_greedy_stopped_after_some_steps_holds_the_full_answers_first_tokens():
    model, h0, start = toy()
    full = numpy_of(greedy_search(model.step_hash, h0, start, END, max_length=T))
    for limit in (1, 2, 5):
        part = numpy_of(
            greedy_search(model.step_hash, h0, start, END, max_length=T, stop_after=limit)
        )
        assert not part["done"] and int(part["steps"]) == limit
        np.testing.assert_array_equal(part["sequences"][:, :limit], full["sequences"][:, :limit])
    # a tensor limit, as a served request gives it
    part = numpy_of(
        greedy_search(model.step_hash, h0, start, END, max_length=T, stop_after=tf.constant(T))
    )
    assert part["done"]
    np.testing.assert_array_equal(part["sequences"], full["sequences"])


def test_a_bad_limit_is_refused_by_name():
    model, h0, start = toy()
    with pytest.raises(ValueError, match="`stop_after` must be an integer >= 1"):
        greedy_search(model.step_hash, h0, start, END, max_length=T, stop_after=0)
    with pytest.raises(ValueError, match="stop_after"):
        greedy_search(model.step_hash, h0, start, END, max_length=T, stop_after=1.5)

    @tf.function
    def run(limit):
        return greedy_search(model.step_hash, h0, start, END, max_length=T, stop_after=limit)

    with pytest.raises(tf.errors.InvalidArgumentError, match="`stop_after` must be an integer"):
        run(tf.constant(0))
