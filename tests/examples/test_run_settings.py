"""The example scripts' settings: one read-only `RunSettings` per run, built the same way by
every script (`keras_attn.train.parse_run_args`, with the script's `--smoke` sizes)."""

import importlib.util
import pathlib

import pytest

from keras_attn import train
from keras_attn.train.args import RunSettings

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The scripts that build their settings with `parse_run_args` (the translator resolves its
# `TranslatorConfig`; demo.py and attention_maps.py take no run flags).
SCRIPTS = (
    "sequential_classifier.py",
    "train_captioner.py",
    "train_classifier_han.py",
    "train_reader_aoa.py",
)


def _parser():
    parser = train.base_parser("a script", epochs=7, batch_size=16)
    parser.add_argument("--units", type=int, default=64)
    return parser


def test_epochs_and_the_scripts_smoke_sizes():
    plain = train.parse_run_args(_parser(), [], smoke=dict(units=4))
    assert (plain.epochs, plain.units, plain.batch_size) == (7, 64, 16)
    smoke = train.parse_run_args(_parser(), ["--smoke"], smoke=dict(units=4))
    assert (smoke.epochs, smoke.units) == (1, 4)
    given = train.parse_run_args(_parser(), ["--smoke", "--epochs", "3"], smoke=dict(units=4))
    assert given.epochs == 3
    assert not hasattr(smoke, "default_epochs")


def test_settings_are_read_only():
    settings = train.parse_run_args(_parser(), ["--units", "8"])
    with pytest.raises(AttributeError, match="read-only"):
        settings.units = 5
    changed = settings.replace(units=5)
    assert (changed.units, settings.units) == (5, 8)
    with pytest.raises(ValueError, match="no setting 'unit'"):
        settings.replace(unit=5)
    with pytest.raises(AttributeError, match="no setting 'nope'"):
        settings.nope  # noqa: B018


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_builds_its_settings_the_same_way(script):
    spec = importlib.util.spec_from_file_location(script[:-3], ROOT / "examples" / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    plain, smoke = module.parse_args([]), module.parse_args(["--smoke"])
    assert isinstance(plain, RunSettings) and isinstance(smoke, RunSettings)
    assert smoke.epochs == 1 and plain.epochs > 1
    shrunk = [name for name in plain.as_dict() if plain.as_dict()[name] != smoke.as_dict()[name]]
    assert set(shrunk) > {"smoke", "epochs"}, shrunk  # the script's smoke sizes applied
