"""keras.io's KerasHub translation recipe against our translator: same corpus, same minutes,
same scorer.

The recipe a Keras user would copy for a translator is keras.io's "English-to-Spanish
translation with KerasHub". This benchmark builds it here as the recipe describes it and trains
it on the English -> Spanish corpus our translator trains on (the training split `make corpora`
builds from software catalogues, docs/real_data.md), for a wall-clock budget:

- **lowercased text** on both sides, as the recipe prepares its pairs;
- one WordPiece vocabulary per side, 15,000 ids, learned from the training split with
  `keras_hub.tokenizers.compute_word_piece_vocabulary` (reserved `[PAD]`, `[UNK]`, `[START]`,
  `[END]`), read back by `keras_hub.tokenizers.WordPieceTokenizer`;
- batches of 64 pairs made as the recipe makes them (batched, then tokenized and packed to 40
  source / 41 target ids by `keras_hub.layers.StartEndPacker`, the batches shuffled in a buffer
  of 2,048, cached);
- `TokenAndPositionEmbedding` (256 wide, 40 positions) + one `TransformerEncoder` and one
  `TransformerDecoder` (feed-forward 2,048, 8 heads), dropout 0.5, a softmax `Dense` over the
  Spanish vocabulary; no padding mask, as the recipe's code passes none (`--mask-padding`
  gives the embeddings `mask_zero=True`, which the recipe's text describes);
- RMSprop, sparse categorical cross-entropy, Keras' defaults otherwise (`jit_compile="auto"`);
- greedy decoding with `keras_hub.samplers.GreedySampler` over the whole model called again at
  each step (the recipe's `next`), up to 40 positions, `[START]` / `[END]` / `[PAD]` removed
  from the detokenized text. Here batched (64 sources a call, one traced `tf.function`); the
  recipe translates one sentence at a time, with the same answers.

Training stops before the step that would end past the budget (`--minutes`); the epochs column
counts passes over the training pairs. Then both systems are scored on the corpus's test split
(whole packages no training pair comes from) and, where `make catalogue-samples` has fetched
them, on the catalogue samples that ship a Spanish translation (Airflow's web UI, Vorta,
MediaWiki, the Read the Docs theme: at most `--catalogue-pairs` pairs each, a seeded draw), with
the scorer our translator's runs use (`keras_attn.train.evaluate.score`: sacrebleu's chrF and
BLEU against the references as they are, cased).

`--ours-run RUN_DIR` scores a finished run of that command instead (`make quality`'s
`runs/quality/corpus-es` is the 45-minute one; the run's budget must be `--minutes`).
`--ours` trains our translator for the same minutes through its own entry,
`examples/train_translator.py --corpus es --time-budget MINUTES --steps-per-epoch 300` (the
recipe of docs/real_data.md; its budget counts its validation after each epoch), and scores the
weights that run chose with the same scorer (greedy decoding, as for the recipe).

Tokens/s: source + target tokens of the pairs trained on, padding excluded, each system
counting its own tokens (WordPiece for the recipe, the run's SentencePiece for ours), per
second of training. The recipe's tokens are the training split's tokens per batch on average
(its batches are shuffled); ours are counted in the batches of its seeded stream.

    .venv/bin/python benchmarks/keras_hub_recipe.py --minutes 15 --ours
    .venv/bin/python benchmarks/keras_hub_recipe.py --minutes 45 --ours
    .venv/bin/python benchmarks/keras_hub_recipe.py --minutes 45 --ours-run runs/quality/corpus-es
    .venv/bin/python benchmarks/keras_hub_recipe.py --smoke --ours     # checks it runs; writes nothing

Each run writes its table to the section `keras-hub-recipe-MINUTES` of benchmarks/RESULTS.md (`--smoke`:
printed only, unless `--results FILE` is given). keras-hub must be installed (`make bench`
installs it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SECTION = "keras-hub-recipe-{minutes:g}"  # one section per budget
TITLE = "### The KerasHub translation recipe against our translator"

# The recipe's sizes.
RECIPE = dict(
    embed_dim=256,
    intermediate_dim=2048,
    num_heads=8,
    max_length=40,
    vocabulary=15000,
    batch=64,
    shuffle=2048,
    dropout=0.5,
)
# `--smoke`: a model small enough to train a few steps in seconds, on the splits our
# translator's `--smoke` keeps (its first 400 training pairs, 50 of each other split).
SMOKE_RECIPE = dict(RECIPE, embed_dim=32, intermediate_dim=64, num_heads=2, vocabulary=500)
SMOKE_PAIRS = dict(train=400, test=50)
RESERVED = ("[PAD]", "[UNK]", "[START]", "[END]")
# Our translator's entry, as docs/real_data.md runs it on the corpus.
OURS_STEPS_PER_EPOCH = 300
SMOKE_OURS_STEPS_PER_EPOCH = 10
# The catalogue samples (tools/catalogue_samples.py) that ship an English -> Spanish translation.
TRANSLATED_SAMPLES = ("airflow-ui", "vorta", "mediawiki", "sphinx-rtd-theme")
MAX_CHARS = 200  # as the corpus: longer strings are not translated by either system


# ------------------------------------------------------------------------------------ data
def corpus_splits(corpus_dir, smoke=False):
    """`(train, test)` pairs of the built corpus in `corpus_dir` (`--smoke`: the sizes our
    translator's `--smoke` keeps); an error saying how to build it where it is missing."""
    from keras_attn.data.corpora import load_corpus

    if not os.path.exists(os.path.join(corpus_dir, "manifest.json")):
        raise SystemExit(
            f"keras_hub_recipe.py: no built corpus in {corpus_dir}: run `make corpora` "
            "(or give --corpus-dir)"
        )
    splits, _ = load_corpus(corpus_dir)
    train, test = splits["train"], splits["test"]
    if smoke:
        train, test = train[: SMOKE_PAIRS["train"]], test[: SMOKE_PAIRS["test"]]
    return train, test


def _flatten(data, prefix=()):
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _flatten(value, prefix + (key,))
        elif isinstance(value, str) and not key.startswith("@"):  # MediaWiki's @metadata
            yield prefix + (key,), value


def _json_pairs(folder):
    """English -> Spanish messages of the JSON files under `folder` whose English file (in an
    `en` folder or named `en.json`) has a Spanish twin (`es`), joined on the key."""
    pairs = []
    for directory, _, files in os.walk(folder):
        for name in sorted(files):
            if not name.endswith(".json"):
                continue
            parts = os.path.join(directory, name).split(os.sep)
            if parts[-1] == "en.json":
                twin = parts[:-1] + ["es.json"]
            elif len(parts) > 1 and parts[-2] == "en":
                twin = parts[:-2] + ["es", parts[-1]]
            else:
                continue
            twin = os.sep.join(twin)
            if not os.path.exists(twin):
                continue
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                english = dict(_flatten(json.load(f)))
            with open(twin, encoding="utf-8") as f:
                spanish = dict(_flatten(json.load(f)))
            pairs += [(english[k], spanish[k]) for k in english if k in spanish]
    return pairs


def _ts_pairs(folder):
    """Source -> translation of the Spanish Qt `.ts` files under `folder` (finished, singular)."""
    import xml.etree.ElementTree as ET

    pairs = []
    for directory, _, files in os.walk(folder):
        for name in sorted(files):
            if not name.endswith(".es.ts"):
                continue
            for message in ET.parse(os.path.join(directory, name)).getroot().iter("message"):
                translation = message.find("translation")
                if translation is None or translation.get("type") or message.get("numerus"):
                    continue
                pairs.append((message.findtext("source") or "", translation.text or ""))
    return pairs


def _po_pairs(folder):
    """msgid -> msgstr of the Spanish `.po` files under `folder` (reviewed, singular)."""
    from keras_attn.data.catalogues import read_catalogue

    pairs = []
    for directory, _, files in os.walk(folder):
        if "es" not in directory.split(os.sep):
            continue
        for name in sorted(files):
            if name.endswith(".po"):
                path = os.path.join(directory, name)
                pairs += [(s, t) for s, t, kind in read_catalogue(path) if kind == "ok"]
    return pairs


def catalogue_sample_pairs(folder, limit=None, seed=0):
    """`{sample: [(English, Spanish)]}` of the catalogue samples in `folder` that ship a
    Spanish translation: both sides stripped and non-empty, one line, at most `MAX_CHARS`
    characters, the translation differing from its source (as the corpus keeps its pairs),
    one pair per source; at most `limit` pairs per sample (a seeded draw). Samples not
    fetched are left out."""
    readers = {"json": _json_pairs, "ts": _ts_pairs, "po": _po_pairs}
    kinds = {"airflow-ui": "json", "mediawiki": "json", "vorta": "ts", "sphinx-rtd-theme": "po"}
    out = {}
    for sample in TRANSLATED_SAMPLES:
        path = os.path.join(folder, sample)
        if not os.path.exists(os.path.join(path, ".done")):
            continue
        kept = {}
        for source, target in readers[kinds[sample]](path):
            source, target = source.strip(), target.strip()
            if not source or not target or source == target or source in kept:
                continue
            if max(len(source), len(target)) > MAX_CHARS or any(
                c in source + target for c in "\t\n\r"
            ):
                continue
            kept[source] = target
        pairs = list(kept.items())
        if limit is not None and len(pairs) > limit:
            order = np.random.default_rng(seed).permutation(len(pairs))[:limit]
            pairs = [pairs[i] for i in sorted(order)]
        if pairs:
            out[sample] = pairs
    return out


def default_samples_dir():
    from keras_attn.data.corpora import default_cache_dir

    return os.path.join(default_cache_dir(), "catalogue-samples")


# ---------------------------------------------------------------------------------- scores
def scores(translate, parts):
    """`{part: {"chrf", "bleu"}}` (`keras_attn.train.evaluate.score`) of `translate(sources)`
    on each non-empty list of pairs of `parts`."""
    from keras_attn.train.evaluate import score

    return {
        name: score("chrf", translate([s for s, _ in pairs]), [t for _, t in pairs])
        for name, pairs in parts.items()
        if pairs
    }


def all_pairs(catalogues):
    """The pairs of every catalogue sample, one list."""
    return [pair for pairs in catalogues.values() for pair in pairs]


# ---------------------------------------------------------------------------------- recipe
class Budget(keras.callbacks.Callback):
    """Stops `fit` before the step that would end past `seconds` (the longest step so far after
    the first, which traces the step, taken as the next one's length), counting the steps
    trained and the seconds they took (the tracing included)."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds
        self.steps, self.longest, self.seconds_trained = 0, 0.0, 0.0

    def on_train_begin(self, logs=None):
        self.start, self.steps, self.longest = time.time(), 0, 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self.step_start = time.time()

    def on_train_batch_end(self, batch, logs=None):
        now = time.time()
        self.steps += 1
        if self.steps > 1:
            self.longest = max(self.longest, now - self.step_start)
        if now - self.start + self.longest > self.seconds:
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        self.seconds_trained = time.time() - self.start


class Recipe:
    """The KerasHub recipe (module docstring) on `train` pairs, with the sizes of `cfg`."""

    def __init__(self, train, cfg=RECIPE, mask_padding=False, seed=0):
        import keras_hub
        import tensorflow as tf

        keras.utils.set_random_seed(seed)
        self.cfg, self.seed = cfg, seed
        self.pairs = [(s.lower(), t.lower()) for s, t in train]
        t0 = time.time()
        self.tokenizers = []
        for side in (0, 1):
            texts = tf.data.Dataset.from_tensor_slices([p[side] for p in self.pairs])
            vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
                texts.batch(1000).prefetch(2),
                vocabulary_size=cfg["vocabulary"],
                reserved_tokens=list(RESERVED),
            )
            self.tokenizers.append(
                keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary, lowercase=False)
            )
        self.vocabulary_seconds = time.time() - t0
        source, target = self.tokenizers
        n = cfg["max_length"]
        self.source_packer = keras_hub.layers.StartEndPacker(
            sequence_length=n, pad_value=source.token_to_id("[PAD]")
        )
        self.target_packer = keras_hub.layers.StartEndPacker(
            sequence_length=n + 1,
            start_value=target.token_to_id("[START]"),
            end_value=target.token_to_id("[END]"),
            pad_value=target.token_to_id("[PAD]"),
        )
        self.model = self._model(mask_padding)
        self.model.compile("rmsprop", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    def _model(self, mask_padding):
        import keras_hub

        cfg = self.cfg
        sizes = [t.vocabulary_size() for t in self.tokenizers]

        def embed(side, ids):
            return keras_hub.layers.TokenAndPositionEmbedding(
                vocabulary_size=sizes[side],
                sequence_length=cfg["max_length"],
                embedding_dim=cfg["embed_dim"],
                mask_zero=mask_padding,
            )(ids)

        source = keras.Input(shape=(None,), name="encoder_inputs")
        memory = keras_hub.layers.TransformerEncoder(
            intermediate_dim=cfg["intermediate_dim"], num_heads=cfg["num_heads"]
        )(inputs=embed(0, source))
        target = keras.Input(shape=(None,), name="decoder_inputs")
        x = keras_hub.layers.TransformerDecoder(
            intermediate_dim=cfg["intermediate_dim"], num_heads=cfg["num_heads"]
        )(decoder_sequence=embed(1, target), encoder_sequence=memory)
        x = keras.layers.Dropout(cfg["dropout"])(x)
        probabilities = keras.layers.Dense(sizes[1], activation="softmax")(x)
        return keras.Model([source, target], probabilities, name="transformer")

    def dataset(self):
        import tensorflow as tf

        source_tok, target_tok = self.tokenizers

        def prepare(source, target):
            source = self.source_packer(source_tok(source))
            target = self.target_packer(target_tok(target))
            return {"encoder_inputs": source, "decoder_inputs": target[:, :-1]}, target[:, 1:]

        data = tf.data.Dataset.from_tensor_slices(
            ([s for s, _ in self.pairs], [t for _, t in self.pairs])
        )
        data = data.batch(self.cfg["batch"]).map(prepare, num_parallel_calls=tf.data.AUTOTUNE)
        return data.shuffle(self.cfg["shuffle"], seed=self.seed).prefetch(16).cache()

    def tokens_per_pass(self):
        """Source + target tokens of one pass over the training pairs, padding excluded (the
        source cut to 40 ids; the target's 40 predicted ids: its words, cut to 39, and
        `[END]`)."""
        n, total = self.cfg["max_length"], 0
        for side, tokenizer in enumerate(self.tokenizers):
            for i in range(0, len(self.pairs), 4096):
                rows = tokenizer([p[side] for p in self.pairs[i : i + 4096]])  # lists, eagerly
                lengths = np.array([len(r) for r in rows])
                kept = np.minimum(lengths, n) if side == 0 else np.minimum(lengths, n - 1) + 1
                total += int(kept.sum())
        return total

    def train(self, minutes):
        """Train for `minutes` of wall clock; returns the training figures."""
        batches = math.ceil(len(self.pairs) / self.cfg["batch"])
        budget = Budget(minutes * 60.0)
        self.model.fit(self.dataset(), epochs=10**6, callbacks=[budget], verbose=0)
        passes = budget.steps / batches
        tokens = passes * self.tokens_per_pass()
        return {
            "minutes": budget.seconds_trained / 60.0,
            "steps": budget.steps,
            "epochs": passes,
            "tokens_per_second": tokens / budget.seconds_trained,
            "jit_compile": bool(self.model.jit_compile),
        }

    def translator(self):
        """`translate(sources) -> answers`: the recipe's greedy decoding, batched."""
        import keras_hub
        import tensorflow as tf

        source_tok, target_tok = self.tokenizers
        n, batch = self.cfg["max_length"], self.cfg["batch"]
        start, end = target_tok.token_to_id("[START]"), target_tok.token_to_id("[END]")
        pad = target_tok.token_to_id("[PAD]")
        sampler = keras_hub.samplers.GreedySampler()
        model = self.model

        @tf.function
        def generate(source_ids):
            def next(prompt, cache, index):
                return model([source_ids, prompt])[:, index - 1, :], None, cache

            prompt = tf.concat([tf.fill([batch, 1], start), tf.fill([batch, n - 1], pad)], axis=1)
            return sampler(next, prompt, stop_token_ids=[end], index=1)

        def translate(sources):
            answers = []
            for i in range(0, len(sources), batch):
                chunk = [s.lower() for s in sources[i : i + batch]]
                rows = len(chunk)
                ids = self.source_packer(source_tok(chunk + [""] * (batch - rows)))
                ids = tf.constant(np.asarray(ids), tf.int32)
                texts = target_tok.detokenize(generate(ids))[:rows]
                for text in texts:
                    text = text.decode("utf-8") if isinstance(text, bytes) else str(text)
                    for token in RESERVED[0:1] + RESERVED[2:]:
                        text = text.replace(token, "")
                    answers.append(text.strip())
            return answers

        return translate


def run_recipe(train, test, catalogues, minutes, cfg, mask_padding):
    recipe = Recipe(train, cfg, mask_padding=mask_padding)
    print(
        f"recipe: {len(train)} training pairs, WordPiece vocabularies "
        f"{[t.vocabulary_size() for t in recipe.tokenizers]} in {recipe.vocabulary_seconds:.0f}s",
        flush=True,
    )
    figures = recipe.train(minutes)
    print(f"recipe trained: {figures}", flush=True)
    figures.update(scores(recipe.translator(), {"test": test, "catalogues": all_pairs(catalogues)}))
    return figures


# ------------------------------------------------------------------------------------- ours
def ours_command(minutes, out, corpus_dir, smoke):
    command = [
        sys.executable,
        os.path.join(ROOT, "examples", "train_translator.py"),
        "--corpus",
        "es",
        "--corpus-dir",
        corpus_dir,
        "--time-budget",
        f"{minutes:g}",
        "--steps-per-epoch",
        str(SMOKE_OURS_STEPS_PER_EPOCH if smoke else OURS_STEPS_PER_EPOCH),
        "--heatmaps",
        "0",
        "--out",
        out,
    ]
    if smoke:  # ours' tiny sizes; epochs until the budget
        command += ["--smoke", "--epochs", "1000"]
    return command


def ours_tokens(out, steps):
    """`(pairs, tokens)` in the first `steps` batches of the run's seeded stream (source +
    target tokens, padding excluded): what the run trained on."""
    from benchmarks.train_step_profile import run_batches
    from keras_attn.text import SentencePieceTokenizer
    from keras_attn.train.export import run_config

    tokenizer = SentencePieceTokenizer.load(os.path.join(out, "tokenizer.model"))
    pairs = tokens = 0
    for inputs, target in run_batches(out, tokenizer, run_config(out), steps):
        pairs += len(target)
        tokens += int((inputs["source"] != tokenizer.pad_id).sum())
        tokens += int((target != tokenizer.pad_id).sum())
    return pairs, tokens


def run_ours(minutes, out, corpus_dir, smoke, catalogues, train_pairs):
    """Our translator trained by its own entry for `minutes`, in its own process; its scores."""
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    command = ours_command(minutes, out, corpus_dir, smoke)
    print("ours: " + " ".join(command), flush=True)
    subprocess.run(command, check=True, env=env, cwd=ROOT)
    return ours_figures(out, smoke, catalogues, train_pairs)


def check_ours_run(out, minutes):
    """`--ours-run`: a run of our translator's command on the es corpus with `--time-budget
    minutes` and `OURS_STEPS_PER_EPOCH`, scored (`results.json`); else SystemExit naming it."""
    path = os.path.join(out, "run_config.json")
    if not os.path.isfile(os.path.join(out, "results.json")) or not os.path.isfile(path):
        raise SystemExit(
            f"keras_hub_recipe.py: --ours-run must be a finished run directory of "
            f"examples/train_translator.py (run_config.json, results.json). Received: {out}"
        )
    with open(path, encoding="utf-8") as f:
        given = json.load(f)["args"]
    want = {"corpus": "es", "time_budget": minutes, "steps_per_epoch": OURS_STEPS_PER_EPOCH}
    wrong = {k: given.get(k) for k, v in want.items() if given.get(k) != v}
    if wrong:
        raise SystemExit(
            f"keras_hub_recipe.py: --ours-run must be a run of {want} (--minutes {minutes:g}). "
            f"Received: {out} with {wrong}"
        )
    return out


def ours_figures(out, smoke, catalogues, train_pairs):
    """The scores and speed of our translator's run in `out`."""
    from keras_attn.train.evaluate import decode_texts, greedy_decoder
    from keras_attn.train.export import run_model
    from keras_attn.train.translator import source_ids

    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        epochs = [json.loads(line) for line in f if line.strip()]
    seconds = sum(e["epoch_seconds"] for e in epochs)
    per_epoch = SMOKE_OURS_STEPS_PER_EPOCH if smoke else OURS_STEPS_PER_EPOCH
    # the batches each epoch trained (a budget stops the last one early; a run written before
    # `epoch_steps` was recorded counts whole epochs)
    steps = sum(e.get("epoch_steps", per_epoch) for e in epochs)
    pairs, tokens = ours_tokens(out, steps)
    figures = {
        "minutes": results["train_seconds"] / 60.0,
        "steps": steps,
        "epochs": pairs / train_pairs,
        "tokens_per_second": tokens / seconds,
        "run_epochs": len(epochs),
        "weights": results.get("weights"),
        "test": {"chrf": results["test_chrf"], "bleu": results["test_bleu"]},
    }
    if catalogues:
        _, model, tokenizer, max_length, _ = run_model(out)
        decode = greedy_decoder(model, tokenizer.end_id, tokenizer.start_id, max_length)

        def translate(sources):
            ids = source_ids(tokenizer, [(s, "") for s in sources])
            return decode_texts(decode, ids, tokenizer)[0]

        figures.update(scores(translate, {"catalogues": all_pairs(catalogues)}))
    return figures


# ------------------------------------------------------------------------------------ table
def _cell(figures, part):
    found = figures.get(part)
    return ("n/a", "n/a") if found is None else (f"{found['chrf']:.1f}", f"{found['bleu']:.1f}")


def report(rows, minutes, train, test, catalogues, cfg, mask_padding, info, ours_run=None):
    """The section's Markdown: how it was measured, the table, the machine."""
    table_rows = []
    for name, figures in rows:
        table_rows.append(
            (
                name,
                f"{figures['minutes']:.1f}",
                f"{figures['steps']}",
                f"{figures['epochs']:.2f}",
                f"{figures['tokens_per_second']:.0f}",
                *_cell(figures, "test"),
                *_cell(figures, "catalogues"),
            )
        )
    samples = (
        ", ".join(f"{name} {len(pairs)}" for name, pairs in catalogues.items())
        if catalogues
        else "not fetched (`make catalogue-samples`)"
    )
    recipe = dict(rows).get("KerasHub recipe", {})
    steps_per_epoch = SMOKE_OURS_STEPS_PER_EPOCH if cfg is SMOKE_RECIPE else OURS_STEPS_PER_EPOCH
    lines = [
        f"{TITLE}, {minutes:g} minutes",
        "",
        f"`benchmarks/keras_hub_recipe.py --minutes {minutes:g}"
        + ((f" --ours-run {ours_run}" if ours_run else " --ours") if len(rows) > 1 else "")
        + (" --mask-padding" if mask_padding else "")
        + "`: keras.io's KerasHub English-to-Spanish recipe (lowercased text, WordPiece "
        f"{cfg['vocabulary']} ids a side, embeddings {cfg['embed_dim']}, feed-forward "
        f"{cfg['intermediate_dim']}, {cfg['num_heads']} heads, {cfg['max_length']} positions, "
        f"batch {cfg['batch']}, RMSprop, "
        + ("padding masked" if mask_padding else "no padding mask, as its code")
        + f", jit_compile {recipe.get('jit_compile', 'n/a')}, `GreedySampler`) and our "
        "translator (`examples/train_translator.py --corpus es --time-budget "
        f"{minutes:g} --steps-per-epoch {steps_per_epoch}`, scored greedily) trained "
        f"for {minutes:g} minutes each, "
        + (
            "ours in a run of its own (the directory named), alone on the machine, "
            if ours_run
            else "one after the other, "
        )
        + f"on the same {len(train)} "
        "English -> Spanish training pairs (`make corpora`), scored by the same sacrebleu chrF "
        f"/ BLEU on the test split ({len(test)} pairs of packages no training pair comes "
        f"from) and on the catalogue samples with a Spanish translation ({samples}). Epochs: "
        "passes over the training pairs. Tokens/s: source + target tokens trained on, "
        "padding excluded, each system counting its own tokens (WordPiece / SentencePiece).",
        "",
        common.table(
            [
                "system",
                "minutes trained",
                "steps",
                "epochs",
                "tokens/s",
                "test chrF",
                "test BLEU",
                "catalogues chrF",
                "catalogues BLEU",
            ],
            table_rows,
        ),
        "",
        common.machine_markdown(info),
    ]
    return "\n".join(lines)


# -------------------------------------------------------------------------------------- run
def ours_dir(args):
    """Our run's directory: `--out`, else a new one; a directory holding files is refused (a
    run appends to its metrics.jsonl and resumes from its checkpoints)."""
    if args.out is None and args.smoke:
        import tempfile

        return tempfile.mkdtemp(prefix="keras_hub_recipe_ours_")
    out = os.path.abspath(
        args.out or os.path.join("runs", "keras_hub_recipe", f"ours-{args.minutes:g}min")
    )
    if os.path.isdir(out) and os.listdir(out):
        raise SystemExit(
            f"keras_hub_recipe.py: {out} holds files (an earlier run): remove it or give --out"
        )
    return out


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--minutes", type=float, default=None, help="training budget of each system"
    )
    parser.add_argument("--ours", action="store_true", help="also train our translator")
    parser.add_argument(
        "--ours-run",
        metavar="RUN_DIR",
        default=None,
        help="score this finished run of our translator's command with --time-budget MINUTES "
        "(e.g. make quality's runs/quality/corpus-es for 45) instead of training it again",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny splits and models, half a minute each unless --minutes: checks it runs",
    )
    parser.add_argument("--mask-padding", action="store_true", help="the recipe with mask_zero")
    parser.add_argument(
        "--corpus-dir", default=None, help="default: the corpus `make corpora` builds"
    )
    parser.add_argument(
        "--samples", default=None, help="default: where `make catalogue-samples` puts them"
    )
    parser.add_argument("--catalogue-pairs", type=int, default=500, help="at most, per sample")
    parser.add_argument(
        "--out",
        default=None,
        help="ours' run directory, new or empty (default: runs/keras_hub_recipe/ours-MINUTESmin; "
        "--smoke: a temporary one)",
    )
    parser.add_argument("--results", default=None, help="the RESULTS.md file to write")
    args = parser.parse_args(argv)
    if args.ours and args.ours_run:
        parser.error("give --ours (train ours) or --ours-run (score a run), not both")
    if args.minutes is None:
        if not args.smoke:
            parser.error("--minutes is required (or --smoke)")
        args.minutes = 0.5
    if not args.minutes > 0:
        parser.error(f"--minutes must be > 0. Received: minutes={args.minutes}")
    if args.catalogue_pairs < 1:
        parser.error(
            f"--catalogue-pairs must be >= 1. Received: catalogue_pairs={args.catalogue_pairs}"
        )
    return args


def main(argv=None):
    args = parse_args(argv)
    if keras.backend.backend() != "tensorflow":
        raise SystemExit(
            "keras_hub_recipe.py: the recipe tokenizes with TensorFlow: run it with "
            f"KERAS_BACKEND=tensorflow. Received: KERAS_BACKEND={keras.backend.backend()}"
        )
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        raise SystemExit(
            "keras_hub_recipe.py: keras-hub is not installed (`make bench` installs it)"
        ) from None
    import warnings

    # the recipe's own warnings (a mask handed to a layer that ignores it)
    warnings.filterwarnings("ignore", category=UserWarning)
    from keras_attn.data.corpora import built_dir

    corpus_dir = args.corpus_dir or built_dir("es")
    ours_run = None  # checked before the recipe trains
    if args.ours_run:
        ours_run = check_ours_run(os.path.abspath(args.ours_run), args.minutes)
    cfg = SMOKE_RECIPE if args.smoke else RECIPE
    info = common.machine_info()
    train, test = corpus_splits(corpus_dir, args.smoke)
    limit = 20 if args.smoke else args.catalogue_pairs
    catalogues = catalogue_sample_pairs(args.samples or default_samples_dir(), limit)
    rows = [
        (
            "KerasHub recipe",
            run_recipe(train, test, catalogues, args.minutes, cfg, args.mask_padding),
        )
    ]
    if ours_run:
        figures = ours_figures(ours_run, False, catalogues, len(train))
        rows.append(("keras_attn translator", figures))
    elif args.ours:
        out = ours_dir(args)
        rows.append(
            (
                "keras_attn translator",
                run_ours(args.minutes, out, corpus_dir, args.smoke, catalogues, len(train)),
            )
        )
    text = report(
        rows, args.minutes, train, test, catalogues, cfg, args.mask_padding, info, args.ours_run
    )
    print(text)
    results = args.results or (None if args.smoke else common.RESULTS)
    if results:
        section = SECTION.format(minutes=args.minutes)
        common.write_section(section, text, results)
        print(f"wrote the section {section} of {results}")


if __name__ == "__main__":
    main()
