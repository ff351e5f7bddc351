"""JAX training compiles each program once: in a JAX process (`KERAS_BACKEND=jax`, a
subprocess), the XLA compilations are read from JAX's compile log.

- `fit` over two epochs of the translator's model, each one pass over the training pairs in
  length-bucketed token batches (each bucket's last batch partial), padded by `Run.stream` to
  their bucket's width and rows: epoch 1 compiles the train step once per bucket, partial
  batches included, and epoch 2 (the same buckets, the pairs in another order) compiles
  nothing at all;
- the compilation cache (`use_compilation_cache`, on by default): a second smoke run of
  `examples/train_translator.py` in the same run directory loads every program the first one
  compiled and compiles none, and without the cache (`--no-compilation-cache`) it compiles
  them all again.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 900  # a machine shared with other work can be 10x slower than idle

# A JAX process: the translator's smoke model trained two epochs on one pass of token batches.
TWO_EPOCHS = textwrap.dedent(
    r"""
    import json, logging, sys
    import jax

    jax.config.update("jax_log_compiles", True)
    epoch = [0]
    compiles = []

    class Compiles(logging.Handler):
        def emit(self, record):
            found = record.getMessage()
            if found.startswith("Finished XLA compilation of "):
                compiles.append((epoch[0], found.split()[4]))

    logging.getLogger("jax").addHandler(Compiles())

    import keras
    import numpy as np
    from keras_attn.train import batching, translator

    path, out = sys.argv[1], sys.argv[2]
    config = translator.parse_args(
        ["--data", path, "--smoke", "--layers", "1", "--max-tokens", "96", "--max-seq", "24",
         "--no-compilation-cache", "--out", out, "--epochs", "2", "--verbose", "0"],
        prepare_data=True,
    )
    text = translator.TextRun(config)
    shapes = batching.BucketShapes(config.max_tokens, config.max_seq)
    one_pass = batching.token_batches(
        text.train_path, text.tokenizer, max_tokens=config.max_tokens,
        max_length=config.max_seq, seed=0, chunk=32, repeat=False,
    )
    plan = []  # (rows, its bucket's width, the rows of its bucket's full batch) of each batch
    for x, y in one_pass:
        width = shapes.width(max(x["source"].shape[1], x["target_in"].shape[1]))
        plan.append((int(y.shape[0]), width, shapes.rows(width)))
    dataset, steps = text.run.stream(one_pass.repeat(), len(plan), shapes)
    seen = set()
    for x, y in dataset.take(steps):
        seen.add((*x["source"].shape, x["target_in"].shape[1], y.shape[1]))
    model = translator.build_model(config, text.tokenizer.vocab_size, 2 * steps, steps)

    class Epochs(keras.callbacks.Callback):
        def on_epoch_begin(self, e, logs=None):
            epoch[0] = e + 1

    epoch[0] = 1  # the first step's compilations belong to epoch 1
    model.fit(dataset, epochs=2, steps_per_epoch=steps, verbose=0, callbacks=[Epochs()])
    print("@@ " + json.dumps({"plan": plan, "shapes": sorted(seen), "compiles": compiles}))
    """
)


def _pairs_file(path, n=240, seed=0):
    """`n` pairs of words of independent lengths (1 ... 18 words a side): many length buckets."""
    rng = np.random.RandomState(seed)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta", "zeta"]
    words += ["".join(rng.choice(list("bcdfghklmnprst"), size=4)) + "a" for _ in range(40)]
    lines = []
    for _ in range(n):
        src = " ".join(rng.choice(words, size=rng.randint(1, 19)))
        tgt = " ".join(rng.choice(words, size=rng.randint(1, 19)).tolist()[::-1]).upper()
        lines.append(f"{src}\t{tgt}\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


def _jax_env(**extra):
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _run(argv, env):
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done


@pytest.mark.processes
def test_two_epochs_compile_the_train_step_once_per_bucket_and_epoch_2_nothing(tmp_path):
    path = _pairs_file(tmp_path / "pairs.tsv")
    done = _run([sys.executable, "-c", TWO_EPOCHS, str(path), str(tmp_path / "run")], _jax_env())
    line = next(x for x in done.stdout.splitlines() if x.startswith("@@ "))
    found = json.loads(line[3:])
    plan, shapes, compiles = found["plan"], found["shapes"], found["compiles"]
    buckets = {(full, width) for _, width, full in plan}
    assert len(buckets) >= 4, plan  # the pass spans several buckets ...
    partial = [(rows, full) for rows, _, full in plan if rows < full]
    assert partial, plan  # ... and ends some of them with a partial batch
    assert all(rows <= full for rows, _, full in plan), plan
    # one padded shape per bucket: every batch has its bucket's full rows and width
    assert sorted((r, s, t, u) for r, s, t, u in shapes) == sorted(
        (full, width, width, width) for full, width in buckets
    ), (shapes, plan)
    steps = [e for e, name in compiles if name == "jit(train_step)"]
    assert steps.count(1) == len(buckets), compiles
    # epoch 2 trains on the same buckets: nothing at all is compiled again
    assert [c for c in compiles if c[0] == 2] == [], compiles


def _compiled(stderr):
    """`(compilations, persistent cache hits)` in a run's JAX compile log (`JAX_LOG_COMPILES`):
    JAX logs a program loaded from the cache as compiled too, and its hit beside it."""
    finished = len(re.findall(r"Finished XLA compilation of ", stderr))
    hits = len(re.findall(r"Persistent compilation cache hit for ", stderr))
    return finished - hits, hits


@pytest.mark.processes
def test_a_repeated_smoke_run_loads_what_the_first_compiled_and_compiles_nothing(tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, os.path.join(ROOT, "examples", "train_translator.py")]
    argv += ["--smoke", "--heatmaps", "0", "--verbose", "0", "--out", str(out)]
    env = _jax_env(JAX_LOG_COMPILES="1")
    first = _compiled(_run(argv, env).stderr)
    entries = sorted(p.name for p in (out / "jax_cache").iterdir() if p.name.endswith("-cache"))
    assert first[0] >= 3 and first[1] == 0, first  # train steps, decoding, ... all compiled
    assert len(entries) == first[0], (entries, first)  # each kept in RUN_DIR/jax_cache
    second = _compiled(_run(argv, env).stderr)
    assert second == (0, first[0]), (first, second)  # every one loaded, none compiled
    kept = sorted(p.name for p in (out / "jax_cache").iterdir() if p.name.endswith("-cache"))
    assert kept == entries
    # the cache is what spared them: without it the same run compiles them all again
    third = _compiled(_run([*argv, "--no-compilation-cache"], env).stderr)
    assert third == (first[0], 0), (first, third)
