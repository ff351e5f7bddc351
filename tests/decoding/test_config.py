"""The knob table and the decoding config: one message per range, one validated object."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding.config import KNOBS, DecodingConfig, check_knob


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): nothing here builds Keras objects."""
    yield


def _outside(knob):
    """A value just outside the knob's range, or None when the range is unbounded there."""
    if knob.maximum is not None:
        return knob.maximum + (1 if knob.dtype == "int32" else 0.5)
    if knob.minimum is not None:
        return knob.minimum - 1
    return None


@pytest.mark.parametrize("name", list(KNOBS))
def test_every_knob_refuses_out_of_range_with_the_table_message(name):
    knob = KNOBS[name]
    assert knob.dtype in ("int32", "float32") and knob.help
    if knob.default is not None:
        assert check_knob(name, knob.default) == knob.default
    value = _outside(knob)
    if value is None:
        return
    with pytest.raises(ValueError) as info:
        check_knob(name, value)
    assert str(info.value) == f"`{name}` must be {knob.requirement}. Received: {name}={value!r}"
    # the same words from a config, and from a search's keyword
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        DecodingConfig(**{name: value})


def test_messages_state_the_range():
    with pytest.raises(ValueError, match=r"^`top_p` must be a number in \(0, 1\]\. "):
        check_knob("top_p", 1.5)
    with pytest.raises(ValueError, match=r"`beam_size` must be an integer >= 1\. Received"):
        check_knob("beam_size", 0)
    with pytest.raises(ValueError, match=r"greedy_search.*Received: temperature=0\.0$"):
        check_knob("temperature", 0.0)
    for name, bad in (("top_k", 1.5), ("top_k", True), ("top_p", False), ("top_p", "0.5")):
        with pytest.raises(ValueError, match=f"`{name}` must be"):
            check_knob(name, bad)
    with pytest.raises(ValueError, match="`name` must be one of"):
        check_knob("beam_width", 3)


def test_check_knob_normalises_python_values():
    assert type(check_knob("top_p", 1)) is float
    assert type(check_knob("beam_size", np.int64(3))) is int
    assert check_knob("seed", None) is None
    assert check_knob("max_length", tf.constant(5)) == 5  # known while tracing


def test_tensor_knob_is_checked_at_run_time():
    run = tf.function(
        lambda v: DecodingConfig(top_p=v).top_p, input_signature=[tf.TensorSpec([], tf.float32)]
    )
    assert float(run(tf.constant(0.5))) == 0.5
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`top_p` must be a number in \(0"):
        run(tf.constant(1.5))


def test_config_is_frozen_and_builds_from_keywords():
    config = DecodingConfig(max_length=7, top_p=1, bad_token_ids=[3, 4])
    assert config.top_p == 1.0 and config.bad_token_ids == (3, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_length = 3
    assert config.replace(beam_size=2).beam_size == 2
    with pytest.raises(ValueError, match="no field 'beam_width'"):
        config.replace(beam_width=2)
    # every keyword given overrides the config (its default too); the others stay
    built = DecodingConfig.build(config, {"max_length": 50, "beam_size": 3})
    assert (built.max_length, built.beam_size, built.top_p) == (50, 3, 1.0)
    assert built.bad_token_ids == (3, 4)
    assert DecodingConfig.build(None, {"top_k": 5}) == DecodingConfig(top_k=5)
    with pytest.raises(ValueError, match="`config` must be a DecodingConfig"):
        DecodingConfig.build({"max_length": 3})
    with pytest.raises(ValueError, match="`min_length` must be <= `max_length`"):
        DecodingConfig(min_length=9, max_length=3)
    with pytest.raises(ValueError, match="bad_token_ids"):
        DecodingConfig(bad_token_ids=[[1, 2]])
    with pytest.raises(ValueError, match="report_invalid"):
        DecodingConfig(report_invalid=1)


def test_table_matches_the_config_defaults():
    """Every knob is a field of the config; a config built without arguments holds the
    table's defaults as they are (checking them changes none: an int default of a float knob
    would come back a float)."""
    fields = {f.name for f in dataclasses.fields(DecodingConfig)}
    default = DecodingConfig()
    for name, knob in KNOBS.items():
        assert name in fields, name
        value = getattr(default, name)
        assert value == knob.default and type(value) is type(knob.default), name


def test_searches_take_the_config_or_the_keywords():
    from keras_attn.decoding import beam_search, greedy_search, sample_search
    from tests.decoding.toy import HashModel

    model = HashModel(5, 3, 4, seed=2)
    h0, start = tf.constant([3, 8]), tf.constant([1, 2])
    config = DecodingConfig(beam_size=2, max_length=4, length_penalty=0.6, min_length=2)
    by_config = beam_search(model.step_hash, h0, start, 0, config=config)
    by_keywords = beam_search(
        model.step_hash, h0, start, 0, beam_size=2, max_length=4, length_penalty=0.6, min_length=2
    )
    assert by_config["sequences"].shape == (2, 2, 4)
    for key in by_config:
        np.testing.assert_array_equal(by_config[key].numpy(), by_keywords[key].numpy())
    # a keyword given overrides the config
    wider = beam_search(model.step_hash, h0, start, 0, config=config, beam_size=3)
    assert wider["sequences"].shape == (2, 3, 4)
    # greedy reads the knobs it uses and ignores beam_size
    greedy = greedy_search(model.step_hash, h0, start, 0, config=config)
    np.testing.assert_array_equal(
        greedy["sequences"].numpy(),
        greedy_search(
            model.step_hash, h0, start, 0, max_length=4, length_penalty=0.6, min_length=2
        )["sequences"].numpy(),
    )
    sampled = sample_search(model.step_hash, h0, start, 0, config=config.replace(top_k=1, seed=3))
    np.testing.assert_array_equal(sampled["sequences"].numpy(), greedy["sequences"].numpy())
    with pytest.raises(ValueError, match="`top_p` must be a number in"):
        sample_search(model.step_hash, h0, start, 0, config=config, top_p=2.0)
