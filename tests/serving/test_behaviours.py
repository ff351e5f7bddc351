"""The served behaviours composed in one list (`keras_attn.serving.signatures.BEHAVIOURS`): the
behaviours the settings turn on run their hooks in the list's order, each answer wrapping the
one before it; a behaviour the settings leave off contributes nothing."""

import pytest
import tensorflow as tf

from keras_attn.serving import signatures as signatures_module
from keras_attn.serving import specs
from keras_attn.serving.behaviours import Behaviour
from keras_attn.serving.settings import ServingSettings
from keras_attn.serving.signatures import BEHAVIOURS, ServingSignatures

SOURCES = [b"hello world", b"the lazy dog"]


class Recorder(Behaviour):
    """A behaviour that writes each hook it runs in `log` and its `mark` after the answer."""

    def __init__(self, mark, setting, log):
        self.name, self.mark, self.settings, self.log = mark, mark, (setting,), log

    def prepare(self, signatures):
        self.log.append((self.mark, "prepare"))

    def signatures(self, signatures):
        self.log.append((self.mark, "signatures"))
        return {}

    def request(self, signatures, spec, inputs, texts, rows):
        self.log.append((self.mark, "request"))
        return rows

    def step(self, signatures, step, state, rows):
        self.log.append((self.mark, "step"))
        return step, state

    def answer(self, signatures, spec, search, answer, xla):
        self.log.append((self.mark, "answer"))

        def marked(inputs, texts, config):
            out = answer(inputs, texts, config)
            return dict(out, outputs=tf.strings.join([out["outputs"], self.mark]))

        return marked


def serving_signatures(toy, **settings):
    model, tokenizer = toy
    spec = tf.TensorSpec([None], tf.string, name="inputs")
    settings = ServingSettings(beam_size=2, max_length=4, **settings)
    return ServingSignatures(model, settings, spec, tokenizer, tokenizer)


def answers(signatures):
    function = signatures.function(specs.SPEC["serving_default"])
    return [a.decode("utf-8") for a in function(tf.constant(SOURCES))["outputs"].numpy()]


def test_the_hooks_run_in_the_lists_order_and_a_disabled_behaviour_adds_nothing(toy, monkeypatch):
    log = []
    first = Recorder("A", "copy_source", log)
    off = Recorder("C", "keep_placeholders", log)  # its setting left off
    last = Recorder("B", "word_rules", log)
    plain = answers(serving_signatures(toy))
    monkeypatch.setattr(signatures_module, "BEHAVIOURS", (first, off, last))
    ruled = serving_signatures(toy, copy_source=True, word_rules=True)
    assert ruled.behaviours == (first, last)
    assert log == [("A", "prepare"), ("B", "prepare")]
    del log[:]
    assert sorted(ruled.exported) == sorted(specs.SIGNATURES)
    assert log == [("A", "signatures"), ("B", "signatures")]
    del log[:]
    got = answers(ruled)
    # the answers wrap in the list's order (A's inside B's), the search's hooks run so too
    assert got == [answer + "AB" for answer in plain]
    assert log == [
        ("A", "answer"),
        ("B", "answer"),
        ("A", "request"),
        ("B", "request"),
        ("A", "step"),
        ("B", "step"),
    ]


def test_the_list_holds_each_behaviour_once_and_default_settings_enable_none(toy):
    assert len(set(BEHAVIOURS)) == len(BEHAVIOURS)
    assert all(isinstance(unit, Behaviour) for unit in BEHAVIOURS)
    plain = serving_signatures(toy)
    assert plain.behaviours == ()
    assert sorted(plain.exported) == sorted(specs.SIGNATURES)
    assert plain.tracked() == []
    # the settings turn on the behaviours that read them, in the list's order
    on = serving_signatures(toy, copy_source=True, xla=("serving_default",))
    assert [unit.name for unit in on.behaviours] == [
        unit.name for unit in BEHAVIOURS if unit.settings[0] in ("copy_source", "xla")
    ]
    assert len(on.behaviours) == 2
    assert sorted(on.exported) == sorted([*specs.SIGNATURES, "serving_default_xla"])


@pytest.mark.parametrize("setting", ["copy_source", "word_rules", "keep_placeholders"])
def test_a_behaviour_on_changes_only_what_its_hooks_change(toy, setting):
    """Each real behaviour on alone: it is the one the export keeps, and the signatures
    exported are those of the default settings (only the XLA twins add rows)."""
    signatures = serving_signatures(toy, **{setting: True})
    (unit,) = signatures.behaviours
    assert setting in unit.settings
    assert sorted(signatures.exported) == sorted(specs.SIGNATURES)
