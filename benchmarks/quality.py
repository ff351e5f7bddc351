"""Quality to reach: train each configuration with the example scripts and write the
table to benchmarks/RESULTS.md (section `quality`). Not a test; it takes long on a CPU.

    python benchmarks/quality.py                     # every row
    python benchmarks/quality.py --only dates-bahdanau classifier
    python benchmarks/quality.py --list

Each row runs its script in a subprocess (`examples/...`, output under runs/quality/<row>) and
reads the script's `results.json`; a row that fails or is skipped stays in the table as "not run".
Rows already measured are kept from `benchmarks/quality.json` unless re-run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common  # noqa: E402

STORE = os.path.join(HERE, "quality.json")
DATES = [
    "--n-train",
    "20000",
    "--n-test",
    "2000",
    "--n-val",
    "300",
    "--batch-size",
    "128",
    "--learning-rate",
    "5e-3",
    "--units",
    "96",
    "--embedding-dim",
    "32",
]

# name: (task, model, metric key in results.json, target, script, args)
ROWS = {
    "dates-bahdanau": (
        "dates (held out by date)",
        "RNN + Bahdanau",
        "test_exact_match",
        0.98,
        "train_translator.py",
        ["--model", "bahdanau", "--epochs", "8", *DATES],
    ),
    "dates-luong-general-global": (
        "dates (held out by date)",
        "RNN + Luong general global",
        "test_exact_match",
        0.98,
        "train_translator.py",
        ["--model", "luong-general-global", "--epochs", "12", *DATES],
    ),
    "dates-transformer": (
        "dates (held out by date)",
        "Transformer",
        "test_exact_match",
        0.98,
        "train_translator.py",
        [
            "--model",
            "transformer",
            "--epochs",
            "10",
            *DATES[:-6],
            "--units",
            "128",
            "--learning-rate",
            "1e-3",
            "--dropout",
            "0.1",
        ],
    ),
    "dates-luong-local-p": (
        "dates (held out by date)",
        "RNN + Luong general local-p",
        "test_exact_match",
        0.95,
        "train_translator.py",
        ["--model", "luong-general-local-p", "--epochs", "16", "--window", "16", *DATES],
    ),
    "strips-soft": (
        "digit strips",
        "Show-Attend-Tell soft",
        "test_exact_match",
        0.90,
        "train_captioner.py",
        ["--attention", "soft", "--epochs", "45", "--learning-rate", "3e-3"],
    ),
    "strips-soft-attention": (
        "digit strips",
        "Show-Attend-Tell soft: attention argmax in the digit's box",
        "test_attention_in_box",
        0.80,
        None,
        "strips-soft",
    ),
    "strips-hard": (
        "digit strips",
        "Show-Attend-Tell hard",
        "test_exact_match",
        0.80,
        "train_captioner.py",
        [
            "--attention",
            "hard",
            "--epochs",
            "15",
            "--learning-rate",
            "3e-3",
            "--normalize-reward",
            "--reinforce-weight",
            "0.02",
        ],
    ),
    "strips-hard-attention": (
        "digit strips",
        "Show-Attend-Tell hard: attention argmax in the digit's box",
        "test_attention_in_box",
        0.80,
        None,
        "strips-hard",
    ),
    "classifier": (
        "digits row by row",
        "Sequential(PE, MHA, pooling)",
        "test_accuracy",
        0.95,
        "sequential_classifier.py",
        ["--epochs", "60"],
    ),
    # the rest of the attention family (data: docs/attention_family.md).
    "han": (
        "gettext messages: language of the formatted one",
        "HAN (bag of words: see results)",
        "test_accuracy",
        0.85,
        "train_classifier_han.py",
        ["--epochs", "8", "--learning-rate", "3e-3"],
    ),
    "han-attention": (
        "gettext messages: language of the formatted one",
        "HAN: sentence attention argmax on the evidence",
        "test_attention_on_evidence",
        0.80,
        None,
        "han",
    ),
    "aoa": (
        "cloze on stdlib docstrings",
        "AoA reader: accuracy / most-frequent-candidate accuracy",
        "test_accuracy_over_baseline",
        2.0,
        "train_reader_aoa.py",
        ["--epochs", "2", "--learning-rate", "2e-3"],
    ),
    "dates-convs2s": (
        "dates (held out by date)",
        "ConvS2S",
        "test_exact_match",
        0.98,
        "train_translator.py",
        [
            "--model",
            "convs2s",
            "--epochs",
            "8",
            "--n-train",
            "15000",
            "--n-test",
            "2000",
            "--n-val",
            "300",
            "--batch-size",
            "128",
            "--learning-rate",
            "5e-3",
            "--units",
            "96",
            "--embedding-dim",
            "48",
            "--layers",
            "3",
            "--dropout",
            "0.05",
        ],
    ),
}

# Figures stored with a row that the table's single metric does not show (baselines, serving).
ALSO = {
    "han": ("test_bag_of_words_accuracy", "test_majority_accuracy"),
    "aoa": ("test_accuracy", "test_most_frequent_candidate_accuracy", "note"),
    "dates-convs2s": ("served_beam4_test_exact_match", "served_command"),
    "corpus-es": ("served_command",),
    "corpus-zh": ("served_command",),
    "corpus-es-15": ("served_command",),
}


# Real-size corpora (docs/real_data.md, `make corpora`): English -> Spanish / Chinese gettext
# catalogues of about 118 packages; `test` holds whole packages training never sees
# (leave-domains-out), `test_in_domain` a sample of the training packages' pairs. Targets
# relative to the run's own baselines, computed by the script on the same split: chrF >= copying
# the source + 10, BLEU above copying it; placeholders kept in >= 99% of the served answers;
# the served answers' loop rate at most the references'. A target is a number, None (a
# baseline row), or `(op, key, offset)`: compare with `result[key] + offset`.
def _built_test(language):
    from keras_attn.data import corpora

    return os.path.join(corpora.built_dir(language), "test.tsv")


# Training budgets (minutes), one run per language, each alone on the machine (the epochs a
# budget buys depend on what else runs; the served scoring adds about 10 minutes). `corpus-es-15` / `corpus-es-90`:
# the en->es command with a third of / twice the budget (a run resumed with a larger
# `--time-budget` trains the epochs that fit the rest of it: `--resume` counts the epochs
# already trained).
for _run, _lang, _name, _budget in (
    ("corpus-es", "es", "en->es", "45"),
    ("corpus-zh", "zh", "en->zh", "40"),
    ("corpus-es-15", "es", "en->es, 15 min", "15"),
    ("corpus-es-90", "es", "en->es, 90 min", "90"),
):
    _task = f"real-size corpus {_name}"
    _args = ["--corpus", _lang, "--time-budget", _budget, "--steps-per-epoch", "300"]
    _args += ["--export", os.path.join("runs", "quality", f"{_run}-export")]
    ROWS.update(
        {
            _run: (
                _task + ", leave-domains-out test",
                "Transformer + copy attention",
                "test_chrf",
                (">=", "test_copy_source_chrf", 10.0),
                "train_translator.py",
                _args,
            ),
            f"{_run}-bleu": (
                _task + ", leave-domains-out test",
                "Transformer + copy attention",
                "test_bleu",
                (">", "test_copy_source_bleu", 0.0),
                None,
                _run,
            ),
            f"{_run}-in-domain": (
                _task + ", in-domain test",
                "Transformer + copy attention",
                "test_in_domain_chrf",
                (">=", "test_in_domain_copy_source_chrf", 10.0),
                None,
                _run,
            ),
            f"{_run}-served-placeholders": (
                _task + ", leave-domains-out test, served",
                "exported serving_default (beam 4, keep_placeholders)",
                "served_test_placeholders_kept",
                (">=", None, 0.99),
                None,
                _run,
            ),
            f"{_run}-served-loops": (
                _task + ", leave-domains-out test, served",
                "exported serving_default (beam 4, keep_placeholders)",
                "served_test_loop_rate",
                ("<=", "test_reference_loop_rate", 0.0),
                None,
                _run,
            ),
        }
    )


# The en->es command on the corpus built with `keep_identical` (CACHE/built-identical/es, `make
# corpora`): the same held-out splits, training also on the identical entries that are
# translations (names, codes, cognates; docs/real_data.md).
def _identical_dir(language):
    from keras_attn.data import corpora

    return corpora.built_dir(language, keep_identical=True)


ROWS["corpus-es-identical"] = (
    "real-size corpus en->es, identical entries kept, leave-domains-out test",
    "Transformer + copy attention",
    "test_chrf",
    (">=", "test_copy_source_chrf", 10.0),
    "train_translator.py",
    ["--corpus", "es", "--corpus-dir", _identical_dir("es"), "--time-budget", "45"]
    + ["--steps-per-epoch", "300"]
    + ["--export", os.path.join("runs", "quality", "corpus-es-identical-export")],
)
# A user's own small corpus: the Spanish leave-domains-out test split (2,795 pairs of packages
# the corpus model never saw) as a `--data` TSV, split 80/10/10 by the script.
ROWS.update(
    {
        "small-es-scratch": (
            "2,795-pair en->es TSV (--data)",
            "Transformer + copy attention, from scratch, small-corpus defaults",
            "test_chrf",
            (">=", "test_copy_source_chrf", 0.0),
            "train_translator.py",
            ["--data", _built_test("es"), "--time-budget", "30"],
        ),
        "small-es-finetuned": (
            "2,795-pair en->es TSV (--data)",
            "fine-tuned from corpus-es (--init-from)",
            "test_chrf",
            (">=", "test_copy_source_chrf", 10.0),
            "train_translator.py",
            [
                "--data",
                _built_test("es"),
                "--init-from",
                os.path.join("runs", "quality", "corpus-es"),
                "--time-budget",
                "15",
            ],
        ),
    }
)


def _command(script, args):
    """The row's command as a user types it (the home directory written `~`)."""
    line = "python examples/" + script + " " + " ".join(args)
    return line.replace(os.path.expanduser("~"), "~")


def target_of(target, result):
    """`(op, bound)` of a row's target for `result` (docs at the ROWS above)."""
    if isinstance(target, tuple):
        op, key, offset = target
        return op, (result.get(key, float("nan")) if key else 0.0) + offset
    return ">=", target


def run_row(name, timeout):
    _, _, _, _, script, args = ROWS[name]
    out = os.path.join(ROOT, "runs", "quality", name)
    cmd = [
        sys.executable,
        os.path.join(ROOT, "examples", script),
        "--out",
        out,
        "--verbose",
        "2",
        "--heatmaps",
        "0",
        *args,
    ]
    print(f"[quality] {name}: {' '.join(cmd[1:])}", flush=True)
    start = time.time()
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
    if os.path.isdir(os.path.join(out, "checkpoints")):
        import shutil

        shutil.rmtree(out)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], flush=True)
        raise RuntimeError(f"{name} failed with exit code {proc.returncode}")
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    results["wall_seconds"] = round(time.time() - start, 1)
    results["command"] = _command(script, args)
    return results


def load_store():
    if os.path.exists(STORE):
        with open(STORE, encoding="utf-8") as f:
            return json.load(f)
    return {}


def write_table(store):
    rows = []
    for name, (task, model, key, target, script, _) in ROWS.items():
        source = name if script else ROWS[name][5]
        result = store.get(source)
        if result is None or key not in result:
            rows.append(
                [
                    task,
                    model,
                    key,
                    "not run",
                    "baseline"
                    if target is None
                    else "see docs/real_data.md"
                    if isinstance(target, tuple)
                    else f">= {target:.2f}",
                    "",
                    "",
                ]
            )
            continue
        value = result[key]
        if target is None:  # a baseline, not a target
            rows.append([task, model, key, f"{value:.4f}", "baseline", "", ""])
            continue
        op, bound = target_of(target, result)
        ok = {">=": value >= bound, ">": value > bound, "<=": value <= bound}[op]
        rows.append(
            [
                task,
                model,
                key,
                f"{value:.4f}",
                f"{op} {bound:.4f}",
                "yes" if ok else "no",
                f"{result.get('train_seconds', 0):.0f} s ({result.get('epochs_trained', result.get('epochs'))} epochs)",
            ]
        )
    headers = ["task", "model", "metric", "value", "target", "reached", "train time"]
    commands = "\n".join(
        f"- `{name}`: `{store[name]['command']}`"
        for name in ROWS
        if name in store and "command" in store[name]
    )
    also = "\n".join(
        f"- `{name}`: "
        + "; ".join(
            f"{key} = {store[name][key]:.4f}"
            if isinstance(store[name][key], float)
            else f"{key}: {store[name][key]}"
            for key in keys
            if key in store[name]
        )
        for name, keys in ALSO.items()
        if name in store
    )
    missing = [name for name, row in ROWS.items() if (name if row[4] else row[5]) not in store]
    text = (
        "## Quality to reach\n\n"
        "Written by `make quality` (`benchmarks/quality.py`); test splits held out as described in "
        "`keras_attn/data` (dates: test dates never seen in training; digit strips: test images never "
        "seen in training; digits: a stratified 20% test split). Train times are wall clock on the machine "
        "below; its load average at the start of the run is recorded with it.\n\n"
        + common.table(headers, rows)
        + "\n\nMachine:\n\n"
        + common.machine_markdown(common.machine_info())
        + ("\n\nCommands:\n\n" + commands if commands else "")
        + (
            "\n\nAlso measured (baselines on the same test split, serving):\n\n" + also
            if also
            else ""
        )
        + ("\n\nNot run yet: " + ", ".join(missing) if missing else "")
    )
    common.write_section("quality", text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=None, help="rows to run (default: all)")
    p.add_argument("--list", action="store_true")
    p.add_argument("--timeout", type=int, default=4 * 3600, help="seconds per row")
    p.add_argument("--table-only", action="store_true", help="rewrite RESULTS.md from quality.json")
    p.add_argument(
        "--record",
        nargs=2,
        metavar=("ROW", "RUN_DIR"),
        help="store the results.json of a run of ROW's exact command made by hand (e.g. with "
        "its own CPU priority) in RUN_DIR, then rewrite the table",
    )
    args = p.parse_args(argv)
    if args.record:
        name, run_dir = args.record
        if name not in ROWS or not ROWS[name][4]:
            raise SystemExit(f"unknown row: {name}; see --list")
        with open(os.path.join(run_dir, "results.json"), encoding="utf-8") as f:
            results = json.load(f)
        _, _, _, _, script, row_args = ROWS[name]
        expected = {}
        if "--copy" in row_args or "--no-copy" in row_args:
            expected["copy"] = "--copy" in row_args
        if "--epochs" in row_args:
            expected["epochs"] = int(row_args[row_args.index("--epochs") + 1])
        found = {k: results[k] for k in expected if k in results}
        if found != {k: expected[k] for k in found}:
            raise SystemExit(f"{run_dir} was not run with {name}'s flags: {found} != {expected}")
        results["command"] = _command(script, row_args)
        store = load_store()
        store[name] = results
        with open(STORE + ".tmp", "w", encoding="utf-8") as f:
            json.dump(store, f, indent=1)
        os.replace(STORE + ".tmp", STORE)
        write_table(store)
        return
    if args.list:
        print("\n".join(ROWS))
        return
    store = load_store()
    names = [n for n in (args.only or ROWS) if ROWS[n][4]]
    unknown = [n for n in (args.only or []) if n not in ROWS]
    if unknown:
        raise SystemExit(f"unknown rows: {unknown}; see --list")
    if not args.table_only:
        for name in names:
            try:
                store[name] = run_row(name, args.timeout)
            except Exception as err:  # keep going: the table says which rows are missing
                print(f"[quality] {name}: {err}", flush=True)
                continue
            # Other quality processes may run at the same time: merge with what they stored.
            fresh = load_store()
            fresh[name] = store[name]
            store = fresh
            with open(STORE + ".tmp", "w", encoding="utf-8") as f:
                json.dump(store, f, indent=1)
            os.replace(STORE + ".tmp", STORE)
            print(f"[quality] {name}: {json.dumps(store[name])}", flush=True)
            write_table(store)
    write_table(store)
    print(f"Wrote {common.RESULTS}")


if __name__ == "__main__":
    main()
