"""The translator recipe in the environment `keras-attn[jax]` makes (`.venv-notf`, no
TensorFlow): `examples/train_translator.py` trains a smoke run on JAX, scores it with sacrebleu,
is resumed, and imports nothing that `keras-attn[jax]` does not install. The run's export on the
TensorFlow side is tests/test_jax_only_recipe.py."""

import importlib.metadata
import json
import os
import re
import subprocess
import sys

import numpy as np
import sacrebleu
import tomllib
from packaging.requirements import Requirement

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Runs the script as `python examples/train_translator.py ARGS` would, then prints the
# distributions of the modules it imported (those imported before it, at start-up, left out;
# so are names no distribution installs: extension modules' helpers, `__mp_main__`).
RUN_AND_LIST_IMPORTS = """
import importlib.metadata, json, runpy, sys
before = set(sys.modules)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
owners = importlib.metadata.packages_distributions()
tops = {m.split(".")[0] for m in set(sys.modules) - before}
tops -= set(sys.stdlib_module_names) | {"__main__"}
print("IMPORTED " + json.dumps(sorted({d for m in tops for d in owners.get(m, [])})))
"""


def write_pairs(path, n=200):
    """Phrases of a small vocabulary and their reversals: a smoke-size model already shares
    characters with the references (chrF above zero)."""
    words = "red green blue cat dog bird sun moon tree river".split()
    rng = np.random.default_rng(1)
    lines = []
    for _ in range(n):
        phrase = list(rng.choice(words, size=int(rng.integers(1, 6))))
        lines.append(" ".join(phrase) + "\t" + " ".join(reversed(phrase)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def train(argv):
    """The recipe in a subprocess of this environment; (its output, the distributions it
    imported)."""
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    script = os.path.join(ROOT, "examples", "train_translator.py")
    proc = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST_IMPORTS, script, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    (listed,) = [line for line in proc.stdout.splitlines() if line.startswith("IMPORTED ")]
    return output, {canonical(d) for d in json.loads(listed[len("IMPORTED ") :])}


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_by(requirements):
    """The distributions that installing `requirements` brings, read from the installed
    packages' metadata: each requirement, then what it requires (its extras' too), and so on."""
    found, todo = set(), [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonical(req.name)
        for wanted in [""] + sorted(req.extras):
            if (name, wanted) in found:
                continue
            found.add((name, wanted))
            if name == "keras-attn":
                continue  # its own extras are expanded from pyproject.toml below
            for line in importlib.metadata.requires(name) or []:
                todo.append((Requirement(line), wanted))
    return {name for name, _ in found}


def jax_extra():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    return installed_by(project["dependencies"] + project["optional-dependencies"]["jax"])


def test_the_recipe_trains_scores_and_resumes_with_what_the_jax_extra_installs(tmp_path):
    data, out = tmp_path / "pairs.tsv", tmp_path / "run"
    write_pairs(data)
    argv = ["--smoke", "--data", str(data), "--out", str(out), "--model", "bahdanau"]
    argv += ["--steps-per-epoch", "2", "--n-val", "8", "--heatmaps", "1"]
    argv += ["--schedule", "constant", "--verbose", "2"]

    log, imported = train([*argv, "--epochs", "1"])
    # heat maps asked for, matplotlib absent here (as on many JAX machines): said, not a crash
    assert "Attention heat maps skipped: matplotlib is not installed" in log
    for name in ("run_config.json", "tokenizer.model", "final.weights.h5", "test.hyp.txt"):
        assert (out / name).exists(), name
    first = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["epoch"] for line in first] == [1]

    # resumed: epoch 1 kept as it was, epoch 2 trained from its checkpoint
    log, imported_resumed = train([*argv, "--epochs", "2", "--resume"])
    assert re.search(r"Resumed from \S+ \(epoch 1 of 2\)", log), log[-3000:]
    lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines[:1] == first and [json.loads(line)["epoch"] for line in lines] == [1, 2]
    assert all(0.0 <= json.loads(line)["val_chrf"] <= 100.0 for line in lines)

    # scored through sacrebleu: the test split's answers against its references
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["epochs_trained"] == 2
    hyps = (out / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    pairs = [line.split("\t") for line in (out / "data" / "test.tsv").read_text().splitlines()]
    references = [target for _, target in pairs]
    assert len(hyps) == len(references) > 10
    chrf = sacrebleu.corpus_chrf(hyps, [references]).score
    bleu = sacrebleu.corpus_bleu(hyps, [references], tokenize="13a").score
    assert chrf > 0.0
    assert (results["test_chrf"], results["test_bleu"]) == (chrf, bleu)

    # everything the two runs imported comes with `pip install keras-attn[jax]`
    assert "sentencepiece" in imported and "sacrebleu" in imported
    assert not (imported | imported_resumed) - jax_extra() - {"keras-attn"}


# pytest and what it requires: in the lock to run these tests, not for the recipe.
TEST_TOOLS = {"pytest", "pytest-xdist", "execnet", "iniconfig", "pluggy", "pygments"}


def test_the_lock_pins_what_the_jax_extra_installs():
    with open(os.path.join(ROOT, "requirements-jax.lock"), encoding="utf-8") as f:
        lines = [line.split("#")[0].strip() for line in f]
    pinned = {canonical(Requirement(line).name) for line in lines if line}
    assert pinned - TEST_TOOLS == jax_extra() - TEST_TOOLS
    assert TEST_TOOLS <= pinned
