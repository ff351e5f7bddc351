"""One settings object per export, one writer for every export, one table of served inputs."""

import dataclasses
import inspect
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.serving import ServingSettings, export_text_model, specs
from keras_attn.serving.harness import read_warmup_requests, run_in_process


def test_settings_are_frozen_and_checked_once():
    settings = ServingSettings(beam_size=3, max_length=6)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.beam_size = 5
    assert settings.max_length_limit == 24 and settings.max_input_length == 256
    with pytest.raises(ValueError, match=r"`beam_size_limit` must be an integer >= 3"):
        ServingSettings(beam_size=3, beam_size_limit=2)
    with pytest.raises(ValueError, match="length_penalty"):
        settings.replace(length_penalty=-1)
    with pytest.raises(ValueError, match="no field 'beam'"):
        settings.replace(beam=2)
    # The defaults that depend on others are resolved again; what was given stays.
    assert settings.replace(max_length=10).max_length_limit == 40
    bound = settings.for_model(8)
    assert (bound.max_length, bound.max_length_limit, bound.max_input_length) == (6, 8, 8)
    with pytest.raises(ValueError, match="learned position table has 4 rows"):
        settings.for_model(4)
    assert ServingSettings().replace(text_input=False).max_input_length is None


def test_old_calls_keep_working_or_say_what_to_write(toy, tmp_path):
    model, tokenizer = toy
    with pytest.raises(ValueError, match=r"version=2\)"):
        export_text_model(model, tokenizer, str(tmp_path), 2)
    with pytest.raises(TypeError, match="fields of ServingSettings: beam_size, max_length"):
        export_text_model(model, tokenizer, str(tmp_path), beam_width=2)
    assert not os.listdir(tmp_path)


def test_a_settings_object_exports_as_its_keywords(toy, toy_export, tmp_path):
    model, tokenizer = toy
    settings = ServingSettings(beam_size=3, max_length=6, max_input_length=16)
    path = export_text_model(model, tokenizer, str(tmp_path / "toy"), settings)
    by_object = read_warmup_requests(path)
    by_keywords = read_warmup_requests(toy_export)  # the same settings, given as keywords
    assert [r.signature_name for r in by_object] == [r.signature_name for r in by_keywords]
    for a, b in zip(by_object, by_keywords):
        assert a.inputs.keys() == b.inputs.keys()
        for alias in a.inputs:
            np.testing.assert_array_equal(a.inputs[alias], b.inputs[alias])
    # keywords beside an object override it
    with pytest.raises(ValueError, match="beam_size_limit"):
        export_text_model(model, tokenizer, str(tmp_path / "x"), settings, beam_size_limit=2)


def _parameters(function):
    return [
        p
        for p in inspect.signature(function).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("self", "settings")
    ]


def test_no_public_function_takes_more_than_eight_parameters():
    from keras_attn.cli import check as check_command
    from keras_attn.cli import errors as cli_errors
    from keras_attn.cli import export as export_command
    from keras_attn.cli import inspect as inspect_command
    from keras_attn.cli import parser as cli_parser
    from keras_attn.cli import translate as translate_command
    from keras_attn.models import raw_text_export
    from keras_attn.serving import (
        client,
        export,
        harness,
        inspection,
        ops_check,
        signatures,
        writer,
    )

    too_long = []
    modules = (export, writer, signatures, client, harness, inspection, ops_check, specs)
    commands = (check_command, export_command, inspect_command, translate_command)
    for module in modules + commands + (cli_errors, cli_parser, raw_text_export):
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if dataclasses.is_dataclass(obj):  # the configured objects themselves
                continue
            members = [(name, obj)]
            if inspect.isclass(obj):
                members = [
                    (f"{name}.{m}", f)
                    for m, f in vars(obj).items()
                    if inspect.isfunction(f) and (not m.startswith("_") or m == "__init__")
                ]
            for label, function in members:
                if inspect.isfunction(function) and len(_parameters(function)) > 8:
                    too_long.append(label)
    assert too_long == []
    assert len(_parameters(export_text_model)) <= 8


def test_the_exported_signatures_are_the_table(toy_export):
    from keras_attn.serving.inspection import inspect_export

    (graph,) = inspect_export(toy_export)["meta_graphs"]
    assert list(graph["signatures"]) == sorted(specs.SIGNATURES)
    for name, signature in graph["signatures"].items():
        expected = {"inputs": "string"}
        expected.update({a.name: "string" for a in specs.TEXT_ARGUMENTS.get(name, ())})
        expected.update({k: specs.request_param(k).dtype for k in specs.SIGNATURES[name]})
        assert {a: s["dtype"] for a, s in signature["inputs"].items()} == expected
        assert set(signature["outputs"]) == set(specs.OUTPUTS[name])
    # Every warm-up request carries every input of its signature, each within the table's range.
    for request in read_warmup_requests(toy_export):
        aliases = specs.SIGNATURES[request.signature_name]
        strings = [a.name for a in specs.TEXT_ARGUMENTS.get(request.signature_name, ())]
        assert set(request.inputs) == {"inputs", *strings, *aliases}
        for alias in aliases:
            value = request.inputs[alias]
            assert value.dtype == np.dtype(specs.request_param(alias).dtype)
            specs.request_param(alias).check(value.item())


def test_routing_takes_the_smallest_signature():
    assert specs.route("beam", {"beam_size"}) == "beam_search"
    assert specs.route("beam", {"beam_size", "min_length"}) == "beam_search_controls"
    assert specs.route("beam", {"beam_size", "prefix"}) == "beam_search_constrained"
    assert specs.route("beam", {"constraints"}) == "beam_search_constrained"
    with pytest.raises(ValueError, match="beam_search_constrained"):
        specs.route("beam", {"constraints", "min_length"})
    assert specs.route("greedy", set()) == "greedy"
    assert specs.route("greedy", {"max_length"}) == "greedy_controls"
    with pytest.raises(ValueError, match="takes only"):
        specs.route("greedy", {"top_p"})
    filled = specs.request_values("greedy_controls", {"min_length": 2})
    assert filled == {
        "max_length": 50,
        "min_length": 2,
        "no_repeat_ngram_size": 0,
        "repetition_penalty": 1.0,
    }


class _Doubler(tf.Module):
    def __init__(self):
        self.scale = tf.Variable(2.0)


def test_raw_text_exports_go_through_the_one_writer(tmp_path, monkeypatch):
    from keras_attn.models import raw_text_export
    from keras_attn.serving import writer

    model = _Doubler()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def serving_default(x):
        return {"y": x * model.scale}

    calls = []
    write = writer.write_savedmodel
    monkeypatch.setattr(
        writer, "write_savedmodel", lambda *a, **k: calls.append(k) or write(*a, **k)
    )
    functions = {"serving_default": serving_default.get_concrete_function()}
    warmup = {"serving_default": {"x": np.array([1.5], np.float32)}}
    path = raw_text_export.write_savedmodel(model, functions, str(tmp_path), 1, warmup=warmup)
    assert len(calls) == 1 and path == str(tmp_path / "1")
    result = run_in_process(
        path, [("serving_default", {"x": np.array([3.0], np.float32)})], replay_warmup=True
    )
    np.testing.assert_allclose(result.responses[0].outputs["y"], [6.0])
    assert [r.outputs["y"].tolist() for r in result.warmup] == [[3.0]]
    with pytest.raises(ValueError, match="already exists"):
        raw_text_export.write_savedmodel(model, functions, str(tmp_path), 1)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def callback(x):
        return {"y": tf.numpy_function(lambda v: v, [x], tf.float32)}

    with pytest.raises(ValueError, match="ops TensorFlow Serving does not have"):
        raw_text_export.write_savedmodel(
            model, {"serving_default": callback.get_concrete_function()}, str(tmp_path), 2
        )
    assert sorted(os.listdir(tmp_path)) == ["1"]


def test_setting_flags_are_made_from_the_settings_fields():
    import argparse

    from keras_attn.serving import settings as module

    parser = argparse.ArgumentParser()
    dests = module.add_setting_flags(parser)
    assert set(dests) == {f.name for f in dataclasses.fields(ServingSettings)} - {
        "text_input",
        "position_limit",
        "extra_signatures",
        "known_words",  # a list of texts: the exporter of a run passes its training sources
        "keep_unknown_words",  # reads known_words: the exporter of a run turns it on with them
    }
    helps = {a.dest: a.help for a in parser._actions}
    assert (
        helps["beam_size"] == "serving_default's beam and the warm-up requests' beam (default: 4)"
    )
    assert helps["xla_batch_sizes"].endswith("(default: 1,8,32)")
    # Nothing given: the settings' own defaults, resolved as the constructor resolves them.
    assert module.settings_from_args(parser.parse_args([])) == ServingSettings()
    args = parser.parse_args(
        ["--beam-size", "3", "--max-length", "6", "--xla", "--xla-batch-sizes", "4,1"]
    )
    expected = ServingSettings(beam_size=3, max_length=6, xla=True, xla_batch_sizes=(1, 4))
    assert module.settings_from_args(args) == expected
    assert module.settings_from_args(args, changes={"keep_placeholders": True}).keep_placeholders
    # Only the named flags, and a bad value is refused by the setting's own check.
    small = argparse.ArgumentParser()
    assert module.add_setting_flags(small, ("beam_size", "xla")) == ("beam_size", "xla")
    assert module.given_settings(small.parse_args(["--no-xla"]), ("beam_size", "xla")) == {
        "xla": False
    }
    with pytest.raises(ValueError, match="`beam_size` must be an integer >= 1"):
        module.settings_from_args(small.parse_args(["--beam-size", "0"]), ("beam_size", "xla"))
    with pytest.raises(SystemExit):
        parser.parse_args(["--xla-batch-sizes", "1,x"])
    # Left out of the namespace unless given.
    quiet = argparse.ArgumentParser()
    module.add_setting_flags(quiet, ("beam_size", "xla"), default=argparse.SUPPRESS)
    assert vars(quiet.parse_args(["--xla"])) == {"xla": True}


def test_extra_signatures_are_exported_beside_the_table(toy, tmp_path):
    """Another module's signatures go into the export through the `extra_signatures` setting:
    its functions beside the search signatures, its warm-up requests in the warm-up file."""
    from keras_attn.serving.inspection import inspect_export

    model, tokenizer = toy

    def functions(signatures):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def source_lengths(inputs):
            ids = signatures.source_ids(signatures.checked_inputs(inputs))
            return {"lengths": tf.reduce_sum(tf.cast(ids != tokenizer.pad_id, tf.int32), 1)}

        return {"source_lengths": source_lengths.get_concrete_function()}

    def warmup(signatures, inputs):
        return [("source_lengths", {"inputs": inputs})]

    row = specs.ExtraSignatures(("source_lengths",), functions, warmup)
    path = export_text_model(
        model, tokenizer, str(tmp_path / "toy"), beam_size=2, max_length=4, extra_signatures=[row]
    )
    (graph,) = inspect_export(path)["meta_graphs"]
    assert sorted(graph["signatures"]) == sorted([*specs.SIGNATURES, "source_lengths"])
    requests = read_warmup_requests(path)
    assert [r.signature_name for r in requests][-1] == "source_lengths"
    result = run_in_process(
        path, [("source_lengths", {"inputs": np.array([b"hello", b""], object)})]
    )
    assert result.responses[0].outputs["lengths"].tolist() == [5, 0]
    with pytest.raises(ValueError, match=r"already used \(.greedy.\)"):
        ServingSettings(extra_signatures=[specs.ExtraSignatures(("greedy",), functions)])
    with pytest.raises(ValueError, match=r"must be a list of keras_attn\.serving\.specs"):
        ServingSettings(extra_signatures=[functions])


def test_each_served_behaviour_names_its_own_settings():
    from keras_attn.serving.signatures import BEHAVIOURS

    fields = {f.name for f in dataclasses.fields(ServingSettings)}
    named = [name for unit in BEHAVIOURS for name in unit.settings]
    assert all(unit.settings for unit in BEHAVIOURS)
    assert set(named) <= fields and len(named) == len(set(named))
