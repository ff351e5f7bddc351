"""The searches' call surface: `config=`, a constraints object and keyword overrides.

The rule (docs/decoding.md, "The call surface"): a keyword given explicitly wins over the
config (and over the constraints object), whatever its value, the default included; a keyword
not given leaves the config's value alone; a keyword that is not in the one table, or that the
search does not read, is refused by name.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import (
    DecodingConfig,
    beam_search,
    engine,
    greedy_search,
    sample_search,
)
from tests.decoding.toy import HashModel

END = 0
SEARCHES = {"beam": beam_search, "greedy": greedy_search, "sample": sample_search}


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): these tests build no Keras objects."""
    yield


def _toy():
    model = HashModel(5, 3, 4, seed=2)
    return model, tf.constant([3, 8]), tf.constant([1, 2])


def test_an_explicit_keyword_equal_to_its_default_wins_over_the_config():
    model, h0, start = _toy()
    config = DecodingConfig(beam_size=8, max_length=4)
    out = beam_search(model.step_hash, h0, start, END, config=config, beam_size=4)
    assert out["sequences"].shape == (2, 4, 4)  # a beam of 4, not the config's 8
    # not given: the config's value stands
    out = beam_search(model.step_hash, h0, start, END, config=config)
    assert out["sequences"].shape == (2, 8, 4)
    # max_length at its default (50) given explicitly wins over the config's 4
    out = greedy_search(model.step_hash, h0, start, END, config=config, max_length=50)
    assert out["sequences"].shape == (2, 50)


# (keyword, a config value other than the default, the default given explicitly)
CONFIG_CASES = [
    ("beam_size", 8, 4),
    ("max_length", 9, 50),
    ("length_penalty", 0.6, 0.0),
    ("coverage_penalty", 0.3, 0.0),
    ("eos_penalty", 0.5, 0.0),
    ("min_length", 3, 0),
    ("no_repeat_ngram_size", 2, 0),
    ("repetition_penalty", 1.5, 1.0),
    ("temperature", 0.7, 1.0),
    ("top_k", 5, 0),
    ("top_p", 0.9, 1.0),
    ("seed", 7, None),
    ("bad_token_ids", (3,), None),
    ("report_invalid", True, False),
    ("stop_after", 3, None),
]


def _spy(monkeypatch):
    """Replaces the engine by a spy that records what a search hands it."""
    seen = {}

    def fake_run(inputs, strategy, config, *a, **kw):
        seen.update(strategy=strategy, config=config, kwargs=kw)
        return {"sequences": tf.zeros([2, 1, 1], tf.int32)}

    # `engine.run`: where every search hands its resolved config (`decode` resolves, then runs)
    monkeypatch.setattr(engine, "run", fake_run)
    return seen


@pytest.mark.parametrize("name, config_value, explicit", CONFIG_CASES)
def test_every_config_keyword_given_explicitly_wins(monkeypatch, name, config_value, explicit):
    from keras_attn.decoding.call import KEYWORDS

    seen = _spy(monkeypatch)
    model, h0, start = _toy()
    config = DecodingConfig(**{name: config_value})
    assert getattr(config, name) != explicit  # the case tells the two apart
    for search in KEYWORDS[name].searches:
        seen.clear()
        SEARCHES[search](model.step_hash, h0, start, END, config=config, **{name: explicit})
        assert getattr(seen["config"], name) == explicit, (search, name)
        seen.clear()
        SEARCHES[search](model.step_hash, h0, start, END, config=config)
        assert getattr(seen["config"], name) == getattr(config, name), (search, name)
    if name == "beam_size":
        beam_search(model.step_hash, h0, start, END, config=config, beam_size=explicit)
        assert seen["strategy"].width == explicit


def test_the_table_covers_every_config_field_and_every_constraint():
    import dataclasses

    from keras_attn.decoding.call import KEYWORDS, Constraints

    fields = {f.name for f in dataclasses.fields(DecodingConfig)}
    fields |= {f.name for f in dataclasses.fields(Constraints)}
    assert set(KEYWORDS) == fields
    assert {name for name, _, _ in CONFIG_CASES} == {
        name for name, kw in KEYWORDS.items() if kw.holder == "config"
    }


def test_unknown_and_unread_keywords_are_refused_by_name():
    model, h0, start = _toy()
    with pytest.raises(ValueError, match=r"`beam_width`.*Received: beam_width=3"):
        beam_search(model.step_hash, h0, start, END, beam_width=3)
    with pytest.raises(ValueError, match=r"`greedy_search` does not read `beam_size`"):
        greedy_search(model.step_hash, h0, start, END, beam_size=3)
    with pytest.raises(ValueError, match=r"`beam_search` does not read `temperature`"):
        beam_search(model.step_hash, h0, start, END, temperature=0.5)
    with pytest.raises(ValueError, match=r"`top_p` must be a number in"):
        sample_search(model.step_hash, h0, start, END, top_p=2.0)


def _numpy(out):
    return {key: np.asarray(value) for key, value in out.items()}


def test_constraints_object_equals_the_loose_keywords_and_keywords_override_it():
    from keras_attn.decoding.call import Constraints

    model, h0, start = _toy()
    prefix = np.array([[2, -1], [3, 4]], np.int32)
    phrases = np.array([[[4, 1]], [[1, -1]]], np.int32)
    constraints = Constraints(prefix_ids=prefix, constraint_ids=phrases)
    by_object = _numpy(
        beam_search(
            model.step_hash, h0, start, END, beam_size=2, max_length=4, constraints=constraints
        )
    )
    by_keywords = _numpy(
        beam_search(
            model.step_hash,
            h0,
            start,
            END,
            beam_size=2,
            max_length=4,
            prefix_ids=prefix,
            constraint_ids=phrases,
        )
    )
    assert set(by_object) == set(by_keywords) and "constraints_met" in by_object
    for key in by_object:
        np.testing.assert_array_equal(by_object[key], by_keywords[key])
    assert (by_object["sequences"][0, :, 0] == 2).all()
    # an explicit keyword wins over the object's field
    other = np.array([[1, -1], [1, -1]], np.int32)
    out = _numpy(
        greedy_search(
            model.step_hash, h0, start, END, max_length=4, constraints=constraints, prefix_ids=other
        )
    )
    assert (out["sequences"][:, 0] == 1).all()
    # ... None included: the prefix is gone, the phrases stay
    out = _numpy(
        greedy_search(
            model.step_hash, h0, start, END, max_length=4, constraints=constraints, prefix_ids=None
        )
    )
    plain = _numpy(
        greedy_search(model.step_hash, h0, start, END, max_length=4, constraint_ids=phrases)
    )
    for key in plain:
        np.testing.assert_array_equal(out[key], plain[key])


def test_constraints_are_validated_once_and_frozen():
    import dataclasses

    from keras_attn.decoding.call import Constraints

    with pytest.raises(ValueError, match="`prefix_ids` must have each row right-padded"):
        Constraints(prefix_ids=[[1, -1, 2]])
    with pytest.raises(ValueError, match="`constraint_alt_ids` needs `constraint_ids`"):
        Constraints(constraint_alt_ids=[[[1]]])
    with pytest.raises(ValueError, match="`budget_ids`, `budget_costs` and `budgets` go together"):
        Constraints(budget_ids=[3])
    with pytest.raises(ValueError, match=r"`suppress_ids` must have shape \[S, L\]"):
        Constraints(suppress_ids=[1, 2])
    with pytest.raises(ValueError, match="`prefix_ids` must not hold a sequence of `suppress_ids`"):
        Constraints(prefix_ids=[[1, 2]], suppress_ids=[[1, 2]])
    constraints = Constraints(prefix_ids=[[1, 2]])
    with pytest.raises(dataclasses.FrozenInstanceError):
        constraints.prefix_ids = None
    assert Constraints().empty and not constraints.empty
    assert constraints.replace(prefix_ids=None).empty
    model, h0, start = _toy()
    with pytest.raises(ValueError, match="`constraints` must be a Constraints"):
        beam_search(model.step_hash, h0, start, END, constraints={"prefix_ids": [[1, 2]] * 2})


def test_each_knob_is_range_checked_once_per_call(monkeypatch):
    """The config checks every knob; the strategy a search builds from it checks none again
    (a tensor knob checked twice would carry two assertions into the graph)."""
    from keras_attn.decoding import config as config_module

    checked = []
    check = config_module.Knob.check

    def counting(knob, value):
        checked.append(knob.name)
        return check(knob, value)

    monkeypatch.setattr(config_module.Knob, "check", counting)
    model, h0, start = _toy()
    beam_search(model.step_hash, h0, start, END, beam_size=3, max_length=4)
    assert checked.count("beam_size") == 1
    checked.clear()
    sample_search(
        model.step_hash, h0, start, END, max_length=4, temperature=0.5, top_k=2, top_p=0.9, seed=3
    )
    assert [checked.count(name) for name in ("temperature", "top_k", "top_p")] == [1, 1, 1]


def test_strategies_built_by_hand_refuse_out_of_range_knobs():
    from keras_attn.decoding import Beam, Sampling

    with pytest.raises(ValueError, match=r"`beam_size` must be an integer >= 1\. Received"):
        Beam(0)
    with pytest.raises(ValueError, match=r"`temperature` must be .*greedy_search"):
        Sampling(temperature=0)
    with pytest.raises(ValueError, match=r"`top_p` must be a number in \(0, 1\]"):
        Sampling(top_p=1.5)
    assert Beam(3).width == 3 and Sampling(top_k=2).top_k == 2


def test_the_typed_keywords_of_each_function_are_those_the_table_gives_it():
    """Each search's `**keywords` is typed with the names it takes (a type checker refuses any
    other, an editor leads from a keyword to its declaration): the same names as the table
    `KEYWORDS`, by which `resolve` refuses any other at run time."""
    import inspect

    from keras_attn.decoding import call, forced_search, generate, modes

    def reads(mode, holder=None):
        return {
            name
            for name, kw in call.KEYWORDS.items()
            if mode in kw.searches and holder in (None, kw.holder)
        }

    every_search = {name for name, kw in call.KEYWORDS.items() if kw.searches == modes.NAMES}
    expected = {
        beam_search: (call.BeamKeywords, reads("beam")),
        greedy_search: (call.EngineKeywords, reads("greedy")),
        engine.decode: (call.EngineKeywords, every_search),
        sample_search: (call.SampleKeywords, reads("sample")),
        forced_search: (call.ForcedKeywords, reads("greedy", "config")),
        generate: (call.GenerateKeywords, set(call.KEYWORDS) - {"max_length"}),
    }
    for function, (typed, names) in expected.items():
        assert set(typed.__optional_keys__) == names, function.__name__
        annotation = inspect.signature(function).parameters["keywords"].annotation
        assert annotation.endswith(f"{typed.__name__}]"), (function.__name__, annotation)
