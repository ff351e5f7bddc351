"""The search loop in the client: streaming over the step signatures, and LiteRT on the CPU.

Model: the dates translator architecture (`RNNSeq2Seq`, LSTM, Luong general attention, a
character vocabulary) trained briefly on `make_dates` pairs, exported once with the search and
the step signatures (`keras_attn.serving.steps`) and as LiteRT files (float32 and dynamic-range
int8, `keras_attn.serving.litert`). Batch 1, in this process, on the CPU:

- whole answer: the loaded SavedModel's in-graph `greedy` and `beam_search` (K=4) signatures
  (the `serve` MetaGraph in a `tf.compat.v1.Session`, as TF Serving runs it);
- streaming: the client loop (`keras_attn.serving.streaming`) over the same SavedModel's
  `encode` / `decode_step`: time to the first streamed text and time per token, as ratios to
  the in-graph whole-answer time of the same search;
- LiteRT: file sizes, ms per `decode_step` call (beam of 4), the n-best of the client loop over
  the float32 file against the in-graph `beam_search` (answers equal), and the int8 file's
  top-1 agreement with it.

With `--run RUN_DIR` (a finished `train_translator.py --corpus LANG` run, e.g. `make
quality`'s `runs/quality/corpus-es`), the same three paths for that text model (the
Transformer with copy attention, its SentencePiece model): the run exported again with its
step signatures and as LiteRT files, the first test-split sources answered by the in-graph
`beam_search`, the streaming client over the SavedModel and the client over each `.tflite`.

With `--pace`, the pace of streaming against the graph's (its own section of RESULTS.md): a
small text Transformer with copy attention (2 layers, d 64, untrained weights drawn once, so
every answer runs to max_length), exported twice with the step signatures, with the recipe's
settings (`keep_placeholders`, `word_rules`) and without; batch 1, greedy and beam (K=4), in
the same run and interleaved: the in-graph search's whole answer (the `serve` MetaGraph in a
session), and the streaming client over that SavedModel in process, over gRPC and over REST
(TensorFlow Serving's PredictionService protos and REST JSON on loopback, answered by the
serving tests' protocol stand-ins from the SavedModel in this process), and over the
`.tflite` file (no placeholders or word rules there). Over gRPC and REST a beam asks
`beam_search_steps` (the server runs the search to a step limit that doubles each request);
the rows marked "per step" ask the packed step signatures (a request per step, the state as
one binary tensor handed back unread), those marked "leaves" the leaf signatures (every
state tensor as numbers, each way, each step); "SavedModel, search steps" is
`beam_search_steps` in process. "transport ms" is
one `detokenize` call of one id through the path: what a step pays beyond the graph's own work.

    .venv/bin/python benchmarks/streaming.py [--repeats 5] [--run RUN_DIR [--sources 24]]
    .venv/bin/python benchmarks/streaming.py --pace [--repeats 5]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

BEAM = 4
MAX_LENGTH = 24
TRAIN_PAIRS = 3000
EPOCHS = 3
EVAL = 24


def train_dates():
    """`(model, tokenizer, held-out sources)`: the dates architecture after a short fit."""
    import keras
    import numpy as np

    from keras_attn.data.dates import make_dates
    from keras_attn.models import RNNSeq2Seq
    from keras_attn.models.common import MaskedSequenceLoss, teacher_forcing
    from keras_attn.text import CharTokenizer

    keras.utils.set_random_seed(0)
    pairs = make_dates(TRAIN_PAIRS + EVAL, seed=1)
    train, held_out = pairs[:TRAIN_PAIRS], pairs[TRAIN_PAIRS:]
    tokenizer = CharTokenizer.build([s for s, _ in pairs] + [t for _, t in pairs])
    source = tokenizer.tokenize_padded([s for s, _ in train], length=40).numpy()
    target = tokenizer.tokenize_padded(
        [t for _, t in train], length=MAX_LENGTH + 1, add_start=True, add_end=True
    )
    target_in, target_out = (np.asarray(x) for x in teacher_forcing(target))
    model = RNNSeq2Seq(
        tokenizer.vocab_size, tokenizer.vocab_size, 32, 64, attention="luong", score="general"
    )
    model.compile(keras.optimizers.Adam(3e-3), MaskedSequenceLoss())
    model.fit(
        {"source": source, "target_in": target_in},
        target_out,
        batch_size=64,
        epochs=EPOCHS,
        verbose=0,
    )
    return model, tokenizer, [s for s, _ in held_out]


def export_all(model, tokenizer, directory):
    """The SavedModel (search and step signatures) and the two LiteRT files."""
    from keras_attn.serving.export import export_text_model
    from keras_attn.serving.litert import export_litert
    from keras_attn.serving.steps import STEP_SIGNATURES

    settings = dict(max_length=MAX_LENGTH, max_input_length=40)
    saved = export_text_model(
        model,
        tokenizer,
        os.path.join(directory, "dates"),
        extra_signatures=[STEP_SIGNATURES],
        **settings,
    )
    lite = {
        kind: export_litert(
            model,
            os.path.join(directory, f"dates_{kind}.tflite"),
            None if kind == "float32" else "dynamic_int8",
            tokenizer=tokenizer,
            **settings,
        )
        for kind in ("float32", "int8")
    }
    return saved, lite


def in_graph(client, signature, text, max_length=MAX_LENGTH):
    import numpy as np

    inputs = {"inputs": np.array([text.encode()], object)}
    if signature == "beam_search":
        inputs.update(
            beam_size=np.int32(BEAM),
            max_length=np.int32(max_length),
            length_penalty=np.float32(0.0),
            coverage_penalty=np.float32(0.0),
        )
    return client.predict(signature, inputs)


def stream_times(steps, text, mode, max_length=MAX_LENGTH):
    """`(seconds to the first text, seconds in all, tokens, seconds to the first text shown)`
    of one streamed answer: the first text is the first settled piece (`event.pieces`, which
    never changes); the first shown, the first best hypothesis's text (`event.best`, which a
    beam may rewrite: what `keras-attn translate --stream` shows in a terminal)."""
    from keras_attn.serving.streaming import stream

    knobs = dict(beam_size=BEAM, length_penalty=0.0, coverage_penalty=0.0) if mode == "beam" else {}
    t0 = time.perf_counter()
    first = shown = None
    for event in stream(steps, [text], mode, max_length=max_length, **knobs):
        now = time.perf_counter() - t0
        if first is None and event.pieces[0]:
            first = now
        if shown is None and (event.pieces[0] or (event.best and event.best[0])):
            shown = now
    total = time.perf_counter() - t0
    lengths = event.result["lengths"]
    tokens = int(lengths[0, 0] if mode == "beam" else lengths[0])
    return first if first is not None else total, total, max(tokens, 1), shown or total


def step_ms(device, text, repeats):
    """Median ms of one LiteRT `decode_step` call on a beam of `BEAM` hypotheses."""
    import numpy as np

    from keras_attn.serving.steps import STATE_PREFIX

    encoded = device.encode([text], MAX_LENGTH)
    request = {"tokens": np.full([BEAM], device.manifest["start_id"], np.int32), "step": 0}
    for name, value in encoded.items():
        if name.startswith(STATE_PREFIX):
            per_example = name.startswith(STATE_PREFIX + "per_example_")
            request[name] = value if per_example else np.repeat(value, BEAM, axis=0)
    device.decode_step(request)
    times = []
    for _ in range(max(repeats, 3) * 10):
        t0 = time.perf_counter()
        device.decode_step(request)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def lite_rows(sizes, ms, same_nbest, same_top1, n, digits, prefix=""):
    """The table rows of the two LiteRT files: size, ms per step, answers against in-graph."""
    return [
        [
            prefix + name,
            common.fmt(sizes[kind], 0),
            common.fmt(ms[kind], digits),
            f"{what} equal {same}/{n}",
        ]
        for kind, name, what, same in (
            ("float32", "float32", "n-best", same_nbest),
            ("int8", "dynamic int8", "top-1", same_top1),
        )
    ]


def run(repeats=5):
    from keras_attn.serving.litert import LiteRTModel
    from keras_attn.serving.streaming import ServeSessionClient, StepClient, search

    model, tokenizer, sources = train_dates()
    with tempfile.TemporaryDirectory() as tmp:
        saved, lite = export_all(model, tokenizer, tmp)
        client = ServeSessionClient(saved)
        steps = StepClient(client)
        text = sources[0]
        rows, checks = [], {}
        for mode, signature in (("greedy", "greedy"), ("beam", "beam_search")):
            whole, first, per_token = [], [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                in_graph(client, signature, text)
                whole.append(time.perf_counter() - t0)
                f, total, tokens, _ = stream_times(steps, text, mode)
                first.append(f)
                per_token.append(total / tokens)
            w = statistics.median(whole)
            rows.append(
                [
                    mode if mode == "greedy" else f"beam (K={BEAM})",
                    common.fmt(1000 * w, 1),
                    common.fmt(1000 * statistics.median(first), 1),
                    common.fmt(statistics.median(f_ / w_ for f_, w_ in zip(first, whole))),
                    common.fmt(1000 * statistics.median(per_token), 1),
                    common.fmt(statistics.median(p / w_ for p, w_ in zip(per_token, whole)), 3),
                ]
            )
        stream_table = common.table(
            [
                "search (batch 1)",
                "in-graph whole answer ms",
                "streamed first text ms",
                "first text / whole answer",
                "streamed ms per token",
                "per token / whole answer",
            ],
            rows,
        )
        # LiteRT: the n-best against the in-graph beam search, int8 top-1 agreement
        float_device, int8_device = (LiteRTModel(lite[k]) for k in ("float32", "int8"))
        same_nbest = same_top1 = 0
        for source in sources:
            want = [t.decode() for t in in_graph(client, "beam_search", source)["outputs"][0]]
            got = search(float_device, [source], "beam", beam_size=BEAM, max_length=MAX_LENGTH)
            same_nbest += got["outputs"][0] == want
            q = search(int8_device, [source], "beam", beam_size=BEAM, max_length=MAX_LENGTH)
            same_top1 += q["outputs"][0][0] == want[0]
        n = len(sources)
        sizes = {k: os.path.getsize(p) / 1024 for k, p in lite.items()}
        ms = {
            k: step_ms(d, text, repeats)
            for k, d in (("float32", float_device), ("int8", int8_device))
        }
        lite_table = common.table(
            [
                "LiteRT file",
                "size KiB",
                f"ms per decode_step (K={BEAM})",
                "answers vs in-graph beam_search",
            ],
            lite_rows(sizes, ms, same_nbest, same_top1, n, digits=3),
        )
        checks["LiteRT float32 n-best equals the in-graph beam search"] = same_nbest == n
        checks["int8 file smaller than float32"] = sizes["int8"] < sizes["float32"]
        client.close()
    text_out = (
        f"### Streaming and on-device decoding\n\n"
        f"Dates architecture (RNNSeq2Seq LSTM 64, Luong general) after {EPOCHS} epochs on "
        f"{TRAIN_PAIRS} `make_dates` pairs; max_length {MAX_LENGTH}; batch 1 on the CPU; "
        f"medians of {repeats} runs. The streamed times include a request per step (in "
        f"process: no network).\n\n{stream_table}\n\n{lite_table}\n\n"
        f"{common.machine_markdown(common.machine_info())}"
    )
    return text_out, checks


def text_run(run_dir, n=24, repeats=3):
    """The three paths for the text model of a corpus run (module docstring): `(markdown,
    checks)`."""
    import numpy as np

    from keras_attn.data import load_tsv
    from keras_attn.serving.litert import LiteRTModel, export_litert
    from keras_attn.serving.streaming import ServeSessionClient, StepClient, search
    from keras_attn.text.placeholders import extract_placeholders
    from keras_attn.train import export_run
    from keras_attn.train.export import run_model

    pairs = load_tsv(os.path.join(run_dir, "data", "test.tsv"))[0][:n]
    sources = [s for s, _ in pairs]
    with tempfile.TemporaryDirectory() as tmp:
        saved = export_run(run_dir, os.path.join(tmp, "text"))
        _, model, tokenizer, max_length, _ = run_model(run_dir)
        lite = {
            kind: export_litert(
                model,
                os.path.join(tmp, f"text_{kind}.tflite"),
                None if kind == "float32" else "dynamic_int8",
                tokenizer=tokenizer,
                max_length=max_length,
            )
            for kind in ("float32", "int8")
        }
        client = ServeSessionClient(saved)
        steps = StepClient(client)
        devices = {k: LiteRTModel(p) for k, p in lite.items()}
        knobs = dict(
            beam_size=BEAM, max_length=max_length, length_penalty=0.0, coverage_penalty=0.0
        )
        same = {"stream": 0, "float32": 0, "int8": 0}
        # A .tflite file carries no keep_placeholders (docs/serving.md, "On device"): the
        # device's answers are compared on the sources without placeholders.
        plain = [s for s in sources if not extract_placeholders(s)]
        for source in sources:
            inputs = {
                "inputs": np.array([source.encode()], object),
                "beam_size": np.int32(BEAM),
                "max_length": np.int32(max_length),
                "length_penalty": np.float32(0.0),
                "coverage_penalty": np.float32(0.0),
            }
            want = [t.decode() for t in client.predict("beam_search", inputs)["outputs"][0]]
            same["stream"] += search(steps, [source], "beam", **knobs)["outputs"][0] == want
            if source not in plain:
                continue
            same["float32"] += (
                search(devices["float32"], [source], "beam", **knobs)["outputs"][0] == want
            )
            same["int8"] += (
                search(devices["int8"], [source], "beam", **knobs)["outputs"][0][0] == want[0]
            )
        sizes = {k: os.path.getsize(p) / 1024 for k, p in lite.items()}
        ms = {k: step_ms(d, sources[0], repeats) for k, d in devices.items()}
        client.close()
    rows = [
        ["SavedModel, streaming client", "", "", f"n-best equal {same['stream']}/{n}"],
        *lite_rows(
            sizes, ms, same["float32"], same["int8"], len(plain), digits=2, prefix="LiteRT "
        ),
    ]
    text = (
        f"#### The corpus translator ({os.path.basename(os.path.normpath(run_dir))})\n\n"
        f"The first {n} sources of its test split, beam {BEAM}, max_length {max_length}; "
        f"against the in-graph `beam_search` of the same export (which keeps placeholders); "
        f"the LiteRT files, which do not, on the {len(plain)} of them without placeholders.\n\n"
        + common.table(
            ["path", "size KiB", f"ms per decode_step (K={BEAM})", "answers vs in-graph"], rows
        )
    )
    checks = {
        "text model: streamed n-best equals the in-graph beam search": same["stream"] == n,
        "text model: LiteRT float32 n-best equals the in-graph beam search": same["float32"]
        == len(plain),
    }
    return text, checks


PACE_LENGTH = 32
PACE_TEXT = "Delete %s for {name}?"
PACE_VOCABULARY = ["the quick brown fox jumps over the lazy dog 0123456789 %s {name} ?.,!"]


def pace_exports(directory):
    """`(model, tokenizer, {"plain": saved, "recipe": saved}, tflite)`: the small Transformer
    with copy attention exported with the step signatures, without and with the recipe's
    settings, and its float32 `.tflite` file."""
    import keras
    import numpy as np

    from keras_attn.models import Transformer
    from keras_attn.serving.export import export_text_model
    from keras_attn.serving.litert import export_litert
    from keras_attn.serving.steps import STEP_SIGNATURES
    from keras_attn.text import CharTokenizer

    keras.utils.set_random_seed(0)
    tokenizer = CharTokenizer.build(PACE_VOCABULARY + [PACE_TEXT])
    vocab = tokenizer.vocab_size
    model = Transformer(vocab, vocab, 2, 64, 4, 128, dropout=0.0, copy_attention=True)
    model(
        {
            "source": keras.KerasTensor((2, 5), "int32"),
            "target_in": keras.KerasTensor((2, 4), "int32"),
        }
    )
    rng = np.random.RandomState(0)
    model.set_weights([(rng.randn(*w.shape) * 0.3).astype(w.dtype) for w in model.get_weights()])
    settings = dict(max_length=PACE_LENGTH, max_input_length=32)
    saved = {
        name: export_text_model(
            model,
            tokenizer,
            os.path.join(directory, name),
            extra_signatures=[STEP_SIGNATURES],
            **settings,
            **extra,
        )
        for name, extra in (
            ("plain", {}),
            ("recipe", dict(keep_placeholders=True, word_rules=True)),
        )
    }
    lite = export_litert(
        model, os.path.join(directory, "pace.tflite"), tokenizer=tokenizer, **settings
    )
    return model, tokenizer, saved, lite


def transport_ms(steps, repeats):
    """Median ms of one `detokenize` call of one id through `steps`' path."""
    times = []
    for _ in range(max(repeats, 3) * 5):
        t0 = time.perf_counter()
        steps.detokenize([[3]])
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def pace_rows(client, paths, repeats):
    """One row per (path, search): the in-graph whole answer of `client` (a session) against
    the streaming client over each of `paths` (`{name: step client}`), interleaved."""
    modes = (("greedy", "greedy", 1.5), ("beam", "beam_search", 2.0))
    transport = {name: transport_ms(steps, repeats) for name, steps in paths.items()}
    samples = {(n, m): [] for n in paths for m, _, _ in modes}
    whole = {m: [] for m, _, _ in modes}
    tokens = {}
    for mode, signature, _ in modes:  # warm-up: traced and loaded once
        in_graph(client, signature, PACE_TEXT, PACE_LENGTH)
        for steps in paths.values():
            stream_times(steps, PACE_TEXT, mode, PACE_LENGTH)
    for _ in range(repeats):
        for mode, signature, _ in modes:
            t0 = time.perf_counter()
            in_graph(client, signature, PACE_TEXT, PACE_LENGTH)
            whole[mode].append(time.perf_counter() - t0)
            for name, steps in paths.items():
                first, total, n, shown = stream_times(steps, PACE_TEXT, mode, PACE_LENGTH)
                tokens[mode] = n
                samples[name, mode].append((first, total / n, shown))
    rows, checks = [], {}
    for name in paths:
        for mode, _, bound in modes:
            w = statistics.median(whole[mode])
            per_token_graph = w / tokens[mode]
            first = statistics.median(f for f, _, _ in samples[name, mode])
            shown = statistics.median(f for _, _, f in samples[name, mode])
            per_token = statistics.median(p for _, p, _ in samples[name, mode])
            label = mode if mode == "greedy" else f"beam (K={BEAM})"
            allowed = bound * per_token_graph + transport[name] / 1000
            rows.append(
                [
                    name,
                    label,
                    common.fmt(1000 * w, 1),
                    common.fmt(1000 * per_token_graph, 2),
                    common.fmt(1000 * first, 1),
                    common.fmt(1000 * shown, 1),
                    common.fmt(1000 * per_token, 2),
                    common.fmt(per_token / per_token_graph),
                    common.fmt(transport[name], 2),
                ]
            )
            checks[f"{name} {label}: per token within {bound}x the graph's + transport"] = (
                per_token <= allowed
            )
            checks[f"{name} {label}: first text before the in-graph whole answer"] = first < w
            checks[f"{name} {label}: first text shown before the in-graph whole answer"] = shown < w
    return rows, checks


def pace(repeats=5):
    """The pace section (module docstring): `(markdown, checks)`."""
    from keras_attn.serving.client import GrpcClient, RestClient
    from keras_attn.serving.litert import LiteRTModel
    from keras_attn.serving.streaming import ServeSessionClient, StepClient
    from tests.serving.doubles import SavedModelRunner, grpc_double, rest_double

    headers = [
        "path",
        "search (batch 1)",
        "in-graph whole ms",
        "in-graph ms/token",
        "streamed first text ms",
        "streamed first text shown ms",
        "streamed ms/token",
        "streamed / in-graph per token",
        "transport ms",
    ]
    parts, checks = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        _, _, saved, lite = pace_exports(tmp)
        for name, path in saved.items():
            runner = SavedModelRunner(path)
            with (
                ServeSessionClient(path) as client,
                grpc_double(runner, "pace") as (target, _),
                rest_double(runner, "pace") as (url, _),
            ):
                grpc, rest = GrpcClient(target, "pace"), RestClient(url, "pace")
                paths = {
                    "SavedModel": StepClient(client),
                    "SavedModel, search steps": StepClient(client, search_steps=True),
                    "gRPC": StepClient(grpc),
                    "gRPC, per step": StepClient(grpc, search_steps=False),
                    "gRPC, leaves": StepClient(grpc, packed=False, search_steps=False),
                    "REST": StepClient(rest),
                    "REST, per step": StepClient(rest, search_steps=False),
                    "REST, leaves": StepClient(rest, packed=False, search_steps=False),
                }
                if name == "plain":
                    paths[".tflite"] = LiteRTModel(lite)
                rows, found = pace_rows(client, paths, repeats)
            what = (
                "without the recipe's settings"
                if name == "plain"
                else "with the recipe's settings (`keep_placeholders`, `word_rules`)"
            )
            parts.append(f"Exported {what}:\n\n" + common.table(headers, rows))
            checks.update({f"{name}: {k}": v for k, v in found.items()})
    text = (
        "### Streaming at the graph's pace (`benchmarks/streaming.py --pace`)\n\n"
        f"A small text Transformer with copy attention (2 layers, d 64), untrained (every "
        f"answer runs to max_length {PACE_LENGTH}); source {PACE_TEXT!r}; batch 1 on the CPU; "
        f"medians of {repeats} interleaved runs. The in-graph times are the SavedModel's "
        "`greedy` / `beam_search` run in a `tf.compat.v1.Session`; gRPC and REST go over loopback "
        "to the serving tests' protocol stand-ins (Python servers: TensorFlow Serving's own "
        "JSON and proto handling is C++). A beam streams through `beam_search_steps` (the "
        "server runs the search to 2, 4, 8, ... steps, no state sent) on the gRPC and REST rows "
        'and on "SavedModel, search steps"; a request per step (`decode_step_packed`, the '
        'state as one binary tensor) on the rows marked "per step", and with the state\'s '
        'leaves as numbers on those marked "leaves" (greedy reads ahead with `decode_steps` '
        "on every row). "
        "First text: the first piece that no later step changes (for a beam, the prefix every "
        "live hypothesis shares); first text shown: the best hypothesis's first text, which a "
        "beam may rewrite, as `keras-attn translate --stream` shows it in a terminal.\n\n"
        + "\n\n".join(parts)
        + "\n\n"
        + common.machine_markdown(common.machine_info())
    )
    return text, checks


def main():
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--run", help="a finished corpus run: its text model too")
    parser.add_argument("--sources", type=int, default=EVAL, help="test sources compared")
    parser.add_argument("--pace", action="store_true", help="streaming against the graph's pace")
    args = parser.parse_args()
    parts, checks = [], {}
    if args.pace:
        text, found = pace(args.repeats)
        common.write_section("streaming-pace", text)
    elif args.run:  # its own section of RESULTS.md (the rest is make bench's)
        text, found = text_run(args.run, args.sources, args.repeats)
        common.write_section("streaming-text", text)
    else:
        text, found = run(args.repeats)
    parts.append(text)
    checks.update(found)
    print("\n\n".join(parts))
    for k, v in checks.items():
        print(("MET   " if v else "MISSED") + " " + k)


if __name__ == "__main__":
    main()
