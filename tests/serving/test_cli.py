"""`keras-attn inspect` and `keras-attn translate` on the exported toy model."""

import argparse
import io
import json
import os

import numpy as np
import pytest

from keras_attn import cli
from tests.serving.doubles import SavedModelRunner


def run(argv):
    out = io.StringIO()
    code = cli.main(argv, out=out)
    return code, out.getvalue()


def test_inspect_text(toy_export):
    code, text = run(["inspect", toy_export])
    assert code == 0
    assert (
        "signature 'beam_search'" in text
        and "signature 'greedy'" in text
        and "signature 'serving_default'" in text
    )
    assert "input  beam_size          int32    []" in text
    assert "output alignments         float32  [?, ?, ?, ?]" in text
    assert "ops TensorFlow Serving lacks: none" in text
    assert "assets: tokenizer_vocab.txt" in text
    assert "warm-up records: 7" in text


def test_inspect_json_on_the_base_directory(toy_export):
    import os

    code, text = run(["inspect", os.path.dirname(toy_export), "--json"])
    report = json.loads(text)
    assert code == 0 and report["path"] == toy_export
    (mg,) = report["meta_graphs"]
    assert mg["tags"] == ["serve"] and mg["disallowed_ops"] == []
    assert mg["signatures"]["beam_search"]["outputs"]["lengths"] == {
        "dtype": "int32",
        "shape": "[?, ?]",
    }
    warm = {w["signature_name"]: w for w in report["warmup"]}
    assert set(warm) == {
        "serving_default",
        "beam_search",
        "greedy",
        "beam_search_controls",
        "greedy_controls",
        "sample",
        "beam_search_constrained",
    }
    assert warm["beam_search"]["inputs"]["beam_size"] == "int32[] 3"


def test_translate_n_best(toy_export):
    code, text = run(["translate", toy_export, "hello world", "fox", "--n-best", "2", "--json"])
    assert code == 0
    payload = json.loads(text)
    # Defaults come from the export (beam 3, max_length 6, no penalties): same as a direct call.
    ref = SavedModelRunner(toy_export).run(
        "beam_search",
        {
            "inputs": np.array([b"hello world", b"fox"], object),
            "beam_size": np.int32(3),
            "max_length": np.int32(6),
            "length_penalty": np.float32(0),
            "coverage_penalty": np.float32(0),
        },
    )
    for item, outputs, scores in zip(payload, ref["outputs"], ref["scores"]):
        assert [h["output"] for h in item["hypotheses"]] == [o.decode() for o in outputs[:2]]
        np.testing.assert_allclose([h["score"] for h in item["hypotheses"]], scores[:2], rtol=1e-6)
    # The same columns whatever --n-best: input number, rank, score, output.
    for n_best in (1, 2):
        code, text = run(["translate", toy_export, "hello world", "fox", "--n-best", str(n_best)])
        rows = [line.split("\t", 3) for line in text.splitlines()]
        assert code == 0 and len(rows) == 2 * n_best
        assert [(r[0], r[1]) for r in rows] == [
            (str(i), str(k)) for i in (1, 2) for k in range(1, n_best + 1)
        ]
        for (_, k, score, output), outputs, scores in zip(
            rows,
            np.repeat(ref["outputs"][:, :n_best], 1, 0).reshape(-1),
            ref["scores"][:, :n_best].reshape(-1),
        ):
            assert output == outputs.decode() and float(score) == pytest.approx(scores, abs=1e-4)


def test_translate_starts_from_the_settings_the_export_wrote(toy_export, tmp_path):
    """The settings a flag leaves out are those in the export's search_settings.json (not its
    warm-up requests, which send length_penalty 0 here)."""
    import shutil

    from keras_attn.serving.request import SETTINGS_FILE

    copy = tmp_path / "1"
    shutil.copytree(toy_export, copy)
    written = {"beam_size": 2, "max_length": 5, "length_penalty": 2.0, "coverage_penalty": 0.0}
    (copy / SETTINGS_FILE).write_text(json.dumps(written), encoding="utf-8")
    code, text = run(["translate", str(copy), "hello world", "--n-best", "2", "--json"])
    assert code == 0
    ref = SavedModelRunner(toy_export).run(
        "beam_search",
        {
            "inputs": np.array([b"hello world"], object),
            "beam_size": np.int32(2),
            "max_length": np.int32(5),
            "length_penalty": np.float32(2.0),
            "coverage_penalty": np.float32(0),
        },
    )
    (item,) = json.loads(text)
    assert [h["output"] for h in item["hypotheses"]] == [o.decode() for o in ref["outputs"][0]]
    np.testing.assert_allclose(
        [h["score"] for h in item["hypotheses"]], ref["scores"][0], rtol=1e-6
    )


def test_translate_errors(toy_export, capsys):
    code, _ = run(["translate", toy_export, "fox", "--beam-size", "0"])
    assert code == 2 and "beam_size" in capsys.readouterr().err
    code, _ = run(["inspect", toy_export + "_missing"])
    assert code == 2 and "export_dir" in capsys.readouterr().err
    code, _ = run(["nope"])
    assert code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err


def test_export_from_a_keras_file(toy, toy_export, tmp_path, capsys):
    model, tokenizer = toy
    model_file = str(tmp_path / "toy.keras")
    model.save(model_file)
    vocab = tokenizer.save(str(tmp_path / "vocab.txt"))
    code, text = run(
        [
            "export",
            model_file,
            vocab,
            str(tmp_path / "exported"),
            "--version",
            "2",
            "--beam-size",
            "3",
            "--max-length",
            "6",
            "--max-input-length",
            "16",
            "--litert",
            str(tmp_path / "toy.tflite"),
        ]
    )
    exported, lite = text.split()
    assert code == 0 and exported == str(tmp_path / "exported" / "2")
    assert lite == str(tmp_path / "toy.tflite") and os.path.getsize(lite) > 0
    # The streaming client's signatures are part of the export unless --no-step-signatures.
    import tensorflow as tf

    keys = set(tf.saved_model.load(exported).signatures)
    assert {"encode", "decode_step", "detokenize", "beam_search"} <= keys, keys
    # Same weights and settings as the fixture's export: the same n-best.
    args = ["hello world", "the lazy dog", "--n-best", "3", "--json"]
    assert json.loads(run(["translate", exported] + args)[1]) == json.loads(
        run(["translate", toy_export] + args)[1]
    )
    code, text = run(
        ["export", model_file, vocab, str(tmp_path / "y"), "--quantize", "dynamic_int8"]
    )
    assert code == 2 and "--quantize applies to --litert only" in capsys.readouterr().err
    code, _ = run(["export", model_file, str(tmp_path / "missing.txt"), str(tmp_path / "x")])
    assert code == 2


def test_check_replays_the_warmup_in_a_fresh_process(toy_export):
    code, text = run(["check", toy_export])
    assert code == 0, text
    assert "loads without keras_attn: True" in text
    for name in (
        "serving_default",
        "beam_search",
        "greedy",
        "beam_search_controls",
        "greedy_controls",
        "sample",
        "beam_search_constrained",
    ):
        assert f"warm-up {name}: ok" in text
    assert "outputs [1, 3]" in text  # beam_search: the export's beam of 3, one warm-up input


def test_corrupt_saved_model_is_a_clear_error(toy_export, tmp_path, capsys):
    import shutil

    broken = tmp_path / "1"
    shutil.copytree(toy_export, broken)
    (broken / "saved_model.pb").write_bytes(b"\x0a\xff\xff\xff garbage, not a SavedModel")
    for command in (["inspect", str(broken)], ["translate", str(broken), "fox"]):
        code, _ = run(command)
        err = capsys.readouterr().err
        assert code == 2 and "export_dir" in err and "saved_model.pb" in err, err
        assert "Traceback" not in err


def test_broken_utf8_lines_do_not_stop_the_batch(toy_export, monkeypatch):
    import os
    import sys

    # argv: Python hands undecodable bytes over as surrogate escapes.
    broken_arg = os.fsdecode(b"fo\xffx")
    code, text = run(["translate", toy_export, "hello", broken_arg, "fo\ufffdx"])
    rows = [line.split("\t", 3) for line in text.splitlines()]
    assert code == 0 and [r[0] for r in rows] == ["1", "2", "3"]
    assert rows[1][1:] == rows[2][1:]  # broken bytes read as U+FFFD, as the served model does
    # stdin: one line of broken UTF-8 between two good ones.
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(b"hello\nfo\xffx\nfo\xef\xbf\xbdx\n"))
    )
    code, text = run(["translate", toy_export, "--n-best", "2"])
    rows = [line.split("\t", 3) for line in text.splitlines()]
    assert code == 0 and [r[0] for r in rows] == ["1", "1", "2", "2", "3", "3"]
    assert [r[1:] for r in rows[2:4]] == [r[1:] for r in rows[4:6]]


def test_n_best_larger_than_the_beam_is_refused(toy_export, capsys):
    code, text = run(["translate", toy_export, "fox", "--n-best", "5", "--beam-size", "2"])
    err = capsys.readouterr().err
    assert code == 2 and text == "" and "n_best=5" in err and "beam_size=2" in err
    code, _ = run(["translate", toy_export, "fox", "--n-best", "2", "--greedy"])
    assert code == 2 and "n_best=2" in capsys.readouterr().err


def test_translate_with_controls_and_sampling(toy_export, capsys):
    texts = np.array([b"hello world", b"fox"], object)
    runner = SavedModelRunner(toy_export)
    code, text = run(
        [
            "translate",
            toy_export,
            "hello world",
            "fox",
            "--min-length",
            "4",
            "--no-repeat-ngram-size",
            "2",
            "--json",
        ]
    )
    ref = runner.run(
        "beam_search_controls",
        {
            "inputs": texts,
            "beam_size": np.int32(3),
            "max_length": np.int32(6),
            "length_penalty": np.float32(0),
            "coverage_penalty": np.float32(0),
            "min_length": np.int32(4),
            "no_repeat_ngram_size": np.int32(2),
            "repetition_penalty": np.float32(1.0),
        },
    )
    assert code == 0
    assert [item["hypotheses"][0]["output"] for item in json.loads(text)] == [
        o.decode() for o in ref["outputs"][:, 0]
    ]
    code, text = run(
        [
            "translate",
            toy_export,
            "hello world",
            "fox",
            "--sample",
            "--temperature",
            "0.8",
            "--top-p",
            "0.9",
            "--seed",
            "5",
            "--json",
        ]
    )
    ref = runner.run(
        "sample",
        {
            "inputs": texts,
            "temperature": np.float32(0.8),
            "top_k": np.int32(0),
            "top_p": np.float32(0.9),
            "seed": np.int32(5),
            "max_length": np.int32(6),
            "min_length": np.int32(0),
            "no_repeat_ngram_size": np.int32(0),
            "repetition_penalty": np.float32(1.0),
        },
    )
    assert code == 0
    assert [item["hypotheses"][0]["output"] for item in json.loads(text)] == [
        o.decode() for o in ref["outputs"]
    ]
    # A knob outside its documented range: the served error, exit status 2, no "nan" line.
    code, text = run(["translate", toy_export, "fox", "--length-penalty", "-1000"])
    assert code == 2 and text == "" and "length_penalty" in capsys.readouterr().err
    code, _ = run(["translate", toy_export, "fox", "--seed", "1"])
    assert code == 2 and "--sample" in capsys.readouterr().err


# ---- the command itself -----------------------------------------------------------------


def _python(code, **env):
    import os
    import subprocess
    import sys

    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", **env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=300
    )


def test_version_and_help_import_no_tensorflow():
    import keras_attn

    code = (
        "import sys\n"
        "from keras_attn import cli\n"
        "for argv in (['--help'], ['--version'], ['export', '--help'], ['inspect', '--help']):\n"
        "    try:\n"
        "        cli.main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in ('tensorflow', 'keras', 'jax') if m in sys.modules))\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("[]"), done.stdout
    assert f"keras-attn {keras_attn.__version__}\n" in done.stdout
    assert "Inspect, try, check and export" in done.stdout  # the top-level description


def test_every_option_has_help_with_its_default():
    parser = cli.build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        formatter = cli.HelpFormatter(name)
        for action in sub._actions:
            if not action.option_strings or action.dest == "help":
                continue
            text = formatter._get_help_string(action) or ""
            assert "default: " in text, (name, action.option_strings, text)
        assert sub.description, name


def _bad_value(knob):
    """A value just outside the knob's documented range (from the decoding table)."""
    step = 1 if knob.dtype == "int32" else 0.5
    if knob.maximum is not None:
        return knob.maximum + step
    return knob.minimum - step


@pytest.mark.parametrize(
    "name", [n for n in __import__("keras_attn.serving.specs").serving.specs.REQUEST_PARAMS]
)
def test_every_knob_is_checked_before_the_graph(toy_export, name, capsys, monkeypatch):
    from keras_attn.decoding import KNOBS, DecodingConfig
    from keras_attn.serving.client import SavedModelClient

    knob = KNOBS[name]
    if knob.minimum is None and knob.maximum is None:  # the seed: any integer that fits int32
        value = 2**31
        expected = (
            "`seed` must fit in int32 (a request carries it as one). Received: seed=2147483648"
        )
    else:
        value = _bad_value(knob)
        with pytest.raises(ValueError) as api:
            DecodingConfig(**{name: value})
        expected = str(api.value)

    def never(self):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(SavedModelClient, "signatures", property(never))
    mode = ["--sample"] if name in ("temperature", "top_k", "top_p", "seed") else []
    flag = "--" + name.replace("_", "-")
    code, text = run(["translate", toy_export, "x", *mode, flag, str(value)])
    err = capsys.readouterr().err
    assert code == 2 and text == ""
    assert err == f"keras-attn translate: error: {flag}: {expected}\n"


def test_top_p_above_one_is_a_one_line_error(toy_export, capsys):
    code, _ = run(["translate", toy_export, "x", "--sample", "--top-p", "1.5"])
    assert code == 2
    assert capsys.readouterr().err == (
        "keras-attn translate: error: --top-p: `top_p` must be a number in (0, 1]. "
        "Received: top_p=1.5\n"
    )


def test_a_missing_extra_is_named_in_one_line(toy_export, capsys, monkeypatch):
    import sys

    from keras_attn import _pins

    for module in [m for m in sys.modules if m.split(".")[0] == "tensorflow_serving"]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "tensorflow_serving", None)
    code, _ = run(["inspect", toy_export])
    assert code == 2
    tf_minor = ".".join(_pins.tensorflow_version().split(".")[:2])
    assert capsys.readouterr().err == (
        "keras-attn inspect: error: this command needs `tensorflow_serving`, not installed "
        f'here: pip install "keras-attn[serving]" "tensorflow-serving-api=={tf_minor}.*"\n'
    )


def test_no_warning_from_our_code(toy_export):
    code = (
        "import sys\n"
        "from keras_attn import cli\n"
        f"sys.exit(cli.main(['translate', {toy_export!r}, 'fox', '--n-best', '2']))\n"
    )
    done = _python(code, PYTHONWARNINGS="default")
    assert done.returncode == 0, done.stderr
    lines = [
        line for line in done.stderr.splitlines() if "keras_attn" in line or "deprecat" in line
    ]
    assert lines == [], done.stderr


def test_greedy_with_a_max_length_goes_to_greedy_controls(toy_export):
    code, text = run(["translate", toy_export, "hello world", "--greedy", "--max-length", "3"])
    ref = SavedModelRunner(toy_export).run(
        "greedy_controls",
        {
            "inputs": np.array([b"hello world"], object),
            "max_length": np.int32(3),
            "min_length": np.int32(0),
            "no_repeat_ngram_size": np.int32(0),
            "repetition_penalty": np.float32(1.0),
        },
    )
    (row,) = [line.split("\t", 3) for line in text.splitlines()]
    assert code == 0 and row[3] == ref["outputs"][0].decode()
    assert float(row[2]) == pytest.approx(ref["scores"][0], abs=1e-4)


def test_translate_with_a_prefix_and_constraints(toy_export, capsys):
    argv = ["translate", toy_export, "hello world", "fox", "--max-length", "12"]
    argv += ["--prefix", "the", "--constraint", "dog", "--constraint", "ox", "--json"]
    code, text = run(argv)
    assert code == 0
    ref = SavedModelRunner(toy_export).run(
        "beam_search_constrained",
        {
            "inputs": np.array([b"hello world", b"fox"], object),
            "prefix": np.array([b"the", b"the"], object),
            "constraints": np.array([[b"dog", b"ox"]] * 2, object),
            "beam_size": np.int32(3),
            "max_length": np.int32(12),
            "length_penalty": np.float32(0),
            "coverage_penalty": np.float32(0),
        },
    )
    for item, outputs in zip(json.loads(text), ref["outputs"]):
        best = item["hypotheses"][0]["output"]
        assert best == outputs[0].decode()
        assert best.startswith("the") and "dog" in best and "ox" in best
    # the constrained signature takes the beam knobs only
    code, _ = run(["translate", toy_export, "fox", "--constraint", "ox", "--min-length", "2"])
    assert code == 2 and "beam_search_constrained" in capsys.readouterr().err
    code, _ = run(["translate", toy_export, "fox", "--prefix", "a", "--greedy"])
    assert code == 2 and "--prefix" in capsys.readouterr().err


def test_the_server_way_loader_logs_no_deprecation(toy_export):
    """`keras-attn check` and `run_in_process` load with TensorFlow's TF1 loader (what the
    server runs); TensorFlow's notice that it is deprecated is not shown to the user."""
    code = (
        "from keras_attn.serving.harness import run_in_process\n"
        f"result = run_in_process({toy_export!r}, replay_warmup=True)\n"
        "print(all(r.ok for r in result.warmup), len(result.warmup))\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["True", "7"], done.stdout
    assert "deprecat" not in done.stderr.lower(), done.stderr


# ---- the real command, in a subprocess: one line per failure, nothing loaded too early ------

# A double for an environment without some packages: a `sys.meta_path` finder placed first,
# refusing the listed top-level modules the way Python refuses a module that is not installed
# (ModuleNotFoundError; `importlib.util.find_spec` raises it too). The packages themselves
# stay installed, so this process and the tests beside it are not affected.
MISSING_PACKAGES_DOUBLE = """
import importlib.abc, sys

class MissingPackages(importlib.abc.MetaPathFinder):
    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None

missing = [n for n in sys.argv.pop(1).split(",") if n]
sys.meta_path.insert(0, MissingPackages(missing))
"""

# Runs `python -m keras_attn.cli ARGS` (runpy, as `-m` does) after the double, then reports
# whether Keras or TensorFlow was imported: `__loaded__ [...]` on stdout.
COMMAND = (
    MISSING_PACKAGES_DOUBLE
    + """
import runpy
sys.argv[0] = "keras-attn"
try:
    runpy.run_module("keras_attn.cli", run_name="__main__", alter_sys=True)
except SystemExit as done:
    code = done.code
print("__loaded__", sorted(m for m in ("tensorflow", "keras") if m in sys.modules))
sys.exit(code)
"""
)


def keras_attn_command(*argv, missing=(), timeout=600):
    """`(exit code, stdout without the report line, stderr, loaded modules)` of the real
    command in a fresh process; TensorFlow's logs are left at their most verbose, so only the
    command's own silencing keeps them away."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", PYTHONWARNINGS="ignore")
    done = subprocess.run(
        [sys.executable, "-c", COMMAND, ",".join(missing), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    lines = done.stdout.splitlines()
    assert lines and lines[-1].startswith("__loaded__ "), done.stdout + done.stderr
    loaded = json.loads(lines[-1][len("__loaded__ ") :].replace("'", '"'))
    return done.returncode, "\n".join(lines[:-1]), done.stderr, loaded


def _tf_minor():
    from keras_attn import _pins

    return ".".join(_pins.tensorflow_version().split(".")[:2])


def test_check_without_the_serving_extra_names_the_whole_install(toy_export):
    code, out, err, loaded = keras_attn_command("check", toy_export, missing=["tensorflow_serving"])
    assert code == 2 and out == "" and loaded == []
    assert err == (
        "keras-attn check: error: this command needs `tensorflow_serving`, not installed here: "
        f'pip install "keras-attn[serving]" "tensorflow-serving-api=={_tf_minor()}.*"\n'
    )


def test_check_without_the_serving_extra_and_tf_text_names_both(toy_export):
    code, _, err, _ = keras_attn_command(
        "check", toy_export, missing=["tensorflow_serving", "tensorflow_text"]
    )
    assert code == 2 and len(err.splitlines()) == 1
    assert err.endswith(
        f'pip install "keras-attn[serving]" "tensorflow-text=={_tf_minor()}.*" '
        f'"tensorflow-serving-api=={_tf_minor()}.*"\n'
    )


def test_check_without_tensorflow_names_the_whole_install(toy_export):
    # No TensorFlow: TF Text and the serving protos cannot import either; pip picks the pair.
    code, out, err, loaded = keras_attn_command(
        "check",
        toy_export,
        missing=["tensorflow", "tensorflow_text", "tensorflow_serving"],
    )
    assert code == 2 and out == "" and loaded == []
    assert err == (
        "keras-attn check: error: this command needs `tensorflow`, `tensorflow_text`, "
        "`tensorflow_serving`, not installed here: "
        'pip install "keras-attn[serving]" "tensorflow-text" "tensorflow-serving-api"\n'
    )


def test_check_of_a_corrupt_saved_model_is_one_line(toy_export, tmp_path):
    import shutil

    broken = tmp_path / "1"
    shutil.copytree(toy_export, broken)
    (broken / "saved_model.pb").write_bytes(b"\x0a\xff\xff\xff garbage, not a SavedModel")
    code, out, err, _ = keras_attn_command("check", str(broken))
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(
        "keras-attn check: error: `export_dir` does not load the way TensorFlow Serving loads "
        "it: OSError: Cannot parse file"
    )
    assert f"Received: export_dir={str(broken)!r}" in err


def test_check_of_an_export_without_warmup_loads_it_and_says_so(toy_export, tmp_path):
    import shutil

    bare = tmp_path / "1"
    shutil.copytree(toy_export, bare)
    shutil.rmtree(bare / "assets.extra")
    code, out, err, _ = keras_attn_command("check", str(bare))
    assert code == 1 and err == "", err
    assert out.splitlines() == [
        f"SavedModel: {bare} loads without keras_attn: True",
        f"  no warm-up requests: {bare / 'assets.extra' / 'tf_serving_warmup_requests'} "
        "does not exist",
    ]


@pytest.mark.parametrize("command", ["inspect", "translate", "check"])
def test_a_missing_directory_does_not_exist(command, tmp_path):
    missing = str(tmp_path / "no_such_export")
    code, out, err, loaded = keras_attn_command(command, missing)
    assert code == 2 and out == "" and loaded == []
    assert err == (
        f"keras-attn {command}: error: `export_dir` does not exist. "
        f"Received: export_dir={missing!r}\n"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["check", "--timeout", "0"],
            "--timeout: `timeout` must be a finite number of seconds > 0. Received: timeout=0",
        ),
        (
            ["check", "--timeout", "-5"],
            "--timeout: `timeout` must be a finite number of seconds > 0. Received: timeout=-5",
        ),
        (
            ["check", "--timeout", "nan"],
            "--timeout: `timeout` must be a finite number of seconds > 0. Received: timeout=nan",
        ),
        (
            ["translate", "--n-best", "0"],
            "--n-best: `n_best` must be an integer >= 1. Received: n_best=0",
        ),
    ],
)
def test_timeout_and_n_best_are_checked_before_anything_loads(toy_export, argv, message):
    command, *flags = argv
    code, out, err, loaded = keras_attn_command(command, toy_export, "hello", *flags)
    assert code == 2 and out == "" and loaded == []
    assert err == f"keras-attn {command}: error: {message}\n"


@pytest.mark.parametrize(
    "name, value",
    [("max_length", 0), ("beam_size", 2.5), ("top_k", -1), ("top_p", 0), ("temperature", -1)],
)
def test_request_flags_are_checked_before_anything_loads(toy_export, name, value):
    from keras_attn.decoding import DecodingConfig

    with pytest.raises(ValueError) as api:  # the Python API's words
        DecodingConfig(**{name: value})
    flag = "--" + name.replace("_", "-")
    mode = ["--sample"] if name in ("top_k", "top_p", "temperature") else []
    code, out, err, loaded = keras_attn_command(
        "translate", toy_export, "hello", *mode, flag, str(value)
    )
    assert code == 2 and out == "" and loaded == []
    assert err == f"keras-attn translate: error: {flag}: {api.value}\n"


def test_export_version_is_checked_before_anything_loads(tmp_path):
    code, out, err, loaded = keras_attn_command(
        "export",
        str(tmp_path / "m.keras"),
        str(tmp_path / "v.txt"),
        str(tmp_path),
        "--version",
        "-1",
    )
    assert code == 2 and out == "" and loaded == []
    assert err == (
        "keras-attn export: error: --version: `version` must be an integer >= 0. "
        "Received: version=-1\n"
    )


@pytest.mark.parametrize("command", ["inspect", "translate", "check", "export"])
def test_help_imports_neither_keras_nor_tensorflow(command):
    code, out, err, loaded = keras_attn_command(command, "--help")
    assert code == 0 and loaded == [], err
    assert out.startswith(f"usage: keras-attn {command}")
    if command != "export":  # where an export's limits are found
        assert "are shown here when EXPORT_DIR comes before --help" in " ".join(out.split())


def test_help_states_the_limits_of_the_export_given(toy_export):
    from keras_attn.serving.settings import ServingSettings

    code, out, _, loaded = keras_attn_command("translate", toy_export, "--help")
    assert code == 0 and loaded == []
    # The fixture exports max_length 6: requests may ask for 4 x 6; the beam limit's default.
    limit = ServingSettings().beam_size_limit
    assert (
        f"a request may ask for beam_size up to {limit} and max_length up to {4 * 6}."
        in " ".join(out.split())
    ), out


def test_text_after_flags_and_no_tensorflow_logs(toy_export):
    ref = SavedModelRunner(toy_export).run("greedy", {"inputs": np.array([b"le 3 mars 1999"])})
    code, out, err, _ = keras_attn_command("translate", toy_export, "--greedy", "le 3 mars 1999")
    assert code == 0 and err == "", err  # TF_CPP_MIN_LOG_LEVEL=0 in its environment
    (row,) = [line.split("\t", 3) for line in out.splitlines()]
    assert row[:2] == ["1", "1"] and row[3] == ref["outputs"][0].decode()
    assert float(row[2]) == pytest.approx(ref["scores"][0], abs=1e-4)


def test_a_graph_error_is_one_line_and_verbose_shows_tensorflow(toy_export):
    argv = ("translate", toy_export, "fox", "--max-length", "100000")
    code, out, err, _ = keras_attn_command(*argv)
    assert code == 2 and out == ""
    assert err == (
        "keras-attn translate: error: InvalidArgumentError: `max_length` must be an integer in "
        "[1, 24]. Received: max_length=100000\n"
    )
    code, _, verbose_err, _ = keras_attn_command(*argv, "--verbose")
    assert code == 2 and verbose_err.endswith(err)
    assert len(verbose_err.splitlines()) > 1  # TensorFlow's own lines, shown on request


@pytest.mark.processes
def test_export_of_a_training_run_directory(tmp_path):
    import tensorflow_text  # noqa: F401  (registers the TF Text ops the run's export holds)

    from tests.examples.helpers import run_script
    from tests.examples.test_jax_training import _write_pairs

    data, run, export = tmp_path / "pairs.tsv", tmp_path / "run", tmp_path / "export"
    _write_pairs(data)
    argv = ["--data", str(data), "--out", str(run), "--smoke", "--model", "bahdanau"]
    argv += ["--epochs", "1", "--heatmaps", "0", "--no-keep-placeholders"]
    run_script("train_translator.py", *argv)
    code, out, err, _ = keras_attn_command("export", str(run), str(export))
    assert code == 0 and err == "" and out == str(export / "1"), err
    # The export answers as the run decoded its test split (greedy).
    sources = [line.split("\t")[0] for line in (run / "data" / "test.tsv").read_text().splitlines()]
    hyps = (run / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    served = SavedModelRunner(out).run("greedy", {"inputs": np.array(sources, object)})
    assert [o.decode("utf-8") for o in served["outputs"]] == hyps
    # A model file's setting flags do not apply to a run: refused before anything loads.
    code, out, err, loaded = keras_attn_command(
        "export", str(run), str(tmp_path / "again"), "--max-input-length", "8"
    )
    assert code == 2 and loaded == [] and "Received: --max-input-length" in err
