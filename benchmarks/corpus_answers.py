"""What a user of the corpus translator is served, answer by answer: the test split of unseen
packages translated four ways by one trained run, each scored on what docs/real_data.md
promises (chrF and BLEU, no invalid text, placeholders kept per syntax, no loops, names and
codes copied whole). Writes the section `answers-<RUN_DIR's name>` of benchmarks/RESULTS.md.

    python -m benchmarks.corpus_answers --run runs/quality/corpus-es

The run is a finished `train_translator.py --corpus LANG --export DIR` run (`make quality`'s
`corpus-es` row is one). The four columns:

- copy: the source unchanged (the bar);
- greedy: the run's own greedy decode of its scored weights (`RUN/test.hyp.txt`);
- served: the run's weights exported by the library as it is now with the word rules off
  (`keras-attn export RUN EXPORT --no-word-rules`), its `serving_default` loaded as TF Serving
  loads it (answers in `RUN/answers/served.txt`);
- served, word rules: the same with them on (`--word-rules`, a translator run's own export
  unless told otherwise; answers in `RUN/answers/served_word_rules.txt`). The run's own export
  at training time answered `RUN/test.served.txt`.

"Cut words": answers that lack a source word which the reference keeps as it is but hold a
strict prefix of it (`Loti` -> `Lo`). "Names and codes": the test pairs whose reference keeps a
capitalised or digit-holding source word as it is (where copying it is the answer).

A second table scores the held-out names (`RUN/data/test_names.tsv`, else the built corpus's:
`keras_attn.data.corpora.build_names`, ISO names of regions, currencies, scripts and
languages that no corpus catalogue holds) the same four ways, the greedy column through the
export's `greedy` signature: chrF, the answers equal to their reference, the names whose
reference is the name itself kept whole, and the cut words.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common  # noqa: E402


def _read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def scores(pairs, answers):
    """The row values of one column: `{name: value}`."""
    from keras_attn.text.placeholders import placeholders_kept_by_syntax
    from keras_attn.train.evaluate import (
        copied_words_pairs,
        cut_words,
        loop_rate,
        replacement_answers,
        score,
        text_scores,
    )

    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    out = text_scores(answers, pairs)
    out["fffd"] = len(replacement_answers(sources, answers))
    out["cut"] = len(cut_words(sources, references, answers))
    out["by_syntax"] = placeholders_kept_by_syntax(sources, answers)
    names = set(copied_words_pairs(pairs))
    chosen = [(p, a) for p, a in zip(pairs, answers) if p in names]
    named = score("chrf", [a for _, a in chosen], [p[1] for p, _ in chosen])
    out["names_chrf"], out["names"] = named["chrf"], len(chosen)
    out["loop_rate"] = loop_rate(answers)
    return out


def name_scores(pairs, answers):
    """The names table's values of one column: `{name: value}`."""
    from keras_attn.train.evaluate import cut_words, score

    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    same = [i for i, (s, t) in enumerate(pairs) if s == t]
    return {
        "chrf": score("chrf", answers, references)["chrf"],
        "exact": sum(a == t for a, t in zip(answers, references)) / max(len(pairs), 1),
        "whole": sum(answers[i] == sources[i] for i in same) / max(len(same), 1),
        "same": len(same),
        "cut": len(cut_words(sources, references, answers)),
    }


def _names_pairs(run_dir):
    """The held-out names the run is scored on (module docstring), or None."""
    from keras_attn.data import corpora, load_tsv

    path = os.path.join(run_dir, "data", corpora.NAMES_FILE)
    if not os.path.exists(path):
        with open(os.path.join(run_dir, "data", "manifest.json"), encoding="utf-8") as f:
            built = json.load(f).get("built_corpus")
        path = os.path.join(built, corpora.NAMES_FILE) if built else None
    if not path or not os.path.exists(path):
        return None
    return load_tsv(path)[0]


def measure(run_dir, batch_size=64):
    """`{column: scores}` for the run in `run_dir` (module docstring)."""
    from keras_attn.data import load_tsv
    from keras_attn.train import export_run
    from keras_attn.train.evaluate import loop_rate
    from keras_attn.train.translator import served_answers

    pairs = load_tsv(os.path.join(run_dir, "data", "test.tsv"))[0]
    columns = {
        "copy": [s for s, _ in pairs],
        "greedy": _read_lines(os.path.join(run_dir, "test.hyp.txt")),
    }
    names = _names_pairs(run_dir)
    name_sources = [s for s, _ in names or ()]
    name_columns = {"copy": name_sources}
    exported, served = {}, {}
    os.makedirs(os.path.join(run_dir, "answers"), exist_ok=True)
    for column, word_rules, name in (
        ("served", False, "served"),
        ("served, word rules", True, "served_word_rules"),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.time()
            path = export_run(run_dir, os.path.join(tmp, "export"), word_rules=word_rules)
            exported[name] = round(time.time() - start, 1)
            start = time.time()
            columns[column] = served_answers(path, [s for s, _ in pairs], batch_size)
            served[name] = round(time.time() - start, 1)
            if names and not word_rules:  # the export's greedy is the run's greedy decode
                name_columns["greedy"] = served_answers(path, name_sources, batch_size, "greedy")
            if names:
                name_columns[column] = served_answers(path, name_sources, batch_size)
        with open(os.path.join(run_dir, "answers", name + ".txt"), "w", encoding="utf-8") as f:
            f.write("".join(a.replace("\n", " ") + "\n" for a in columns[column]))
    for name, answers in columns.items():
        if len(answers) != len(pairs):
            raise SystemExit(f"{name}: {len(answers)} answers for {len(pairs)} pairs")
    results = {name: scores(pairs, answers) for name, answers in columns.items()}
    results["_references"] = {"loop_rate": loop_rate([t for _, t in pairs]), "pairs": len(pairs)}
    results["_seconds"] = {"export": exported, "serve": served}
    if names:
        results["_names"] = {c: name_scores(names, a) for c, a in name_columns.items()}
        results["_names_total"] = len(names)
        with open(os.path.join(run_dir, "answers", "names.json"), "w", encoding="utf-8") as f:
            json.dump({"pairs": names, "answers": name_columns}, f, ensure_ascii=False, indent=0)
    return results


def _pct(x):
    return "n/a" if x != x else f"{100 * x:.1f}%"


def markdown(run_dir, results):
    columns = [c for c in results if not c.startswith("_")]
    refs = results["_references"]
    syntaxes = sorted({s for c in columns for s in results[c]["by_syntax"]})
    rows = [
        ["chrF / BLEU"] + [f"{results[c]['chrf']:.1f} / {results[c]['bleu']:.1f}" for c in columns],
        ["answers with U+FFFD (source without)"] + [str(results[c]["fffd"]) for c in columns],
        ["placeholders kept"] + [_pct(results[c]["placeholders_kept"]) for c in columns],
    ]
    for syntax in syntaxes:
        held = [results[c]["by_syntax"].get(syntax, float("nan")) for c in columns]
        rows.append([f"... `{syntax}`"] + [_pct(x) for x in held])
    rows += [
        [f"loop rate (references {_pct(refs['loop_rate'])})"]
        + [_pct(results[c]["loop_rate"]) for c in columns],
        ["answers with a cut word"] + [str(results[c]["cut"]) for c in columns],
        [f"names and codes: chrF ({results['copy']['names']} pairs)"]
        + [f"{results[c]['names_chrf']:.1f}" for c in columns],
    ]
    with open(os.path.join(run_dir, "run_config.json"), encoding="utf-8") as f:
        corpus = json.load(f)["args"].get("corpus")
    seconds = results["_seconds"]
    names = results.get("_names")
    names_table = []
    if names:
        first = next(iter(names.values()))
        named = list(names)
        names_table = [
            "",
            f"Held-out names ({results['_names_total']} pairs, {first['same']} of them kept as "
            "they are by their reference):",
            "",
            common.table(
                ["", *named],
                [
                    ["chrF"] + [f"{names[c]['chrf']:.1f}" for c in named],
                    ["answer = reference"] + [_pct(names[c]["exact"]) for c in named],
                    ["name kept whole (reference = source)"]
                    + [_pct(names[c]["whole"]) for c in named],
                    ["answers with a cut word"] + [str(names[c]["cut"]) for c in named],
                ],
            ),
        ]
    return "\n".join(
        [
            f"### What the corpus translator serves: {corpus}, test split of unseen packages "
            f"({refs['pairs']} pairs)",
            "",
            "`python -m benchmarks.corpus_answers --run " + run_dir.replace(os.sep, "/") + "` "
            f"(each export took about {max(seconds['export'].values()):.0f} s, serving the "
            f"split {max(seconds['serve'].values()):.0f} s); docs/real_data.md explains the "
            "columns.",
            "",
            common.table(["", *columns], rows),
            *names_table,
        ]
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="a finished corpus run with --export")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument(
        "--table-only", action="store_true", help="rewrite the section from RUN/answers.json"
    )
    args = p.parse_args(argv)
    run_dir = os.path.relpath(os.path.abspath(args.run), ROOT)
    stored = os.path.join(ROOT, run_dir, "answers.json")
    if args.table_only:
        with open(stored, encoding="utf-8") as f:
            results = json.load(f)
    else:
        results = measure(os.path.join(ROOT, run_dir), args.batch_size)
        with open(stored, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    text = markdown(run_dir, results)
    common.write_section(f"answers-{os.path.basename(run_dir.rstrip('/'))}", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
