"""Serve an exported dates translator the way TensorFlow Serving does and score it.

    python benchmarks/served_dates.py runs/quality/dates-convs2s/export/1 --n-train 15000

Loads the SavedModel in a fresh TensorFlow-only process (`keras_attn.serving.harness`), replays
its warm-up requests, sends the held-out test dates (the split `train_translator.py` makes with the
same `--n-train/--n-val/--n-test/--seed`) through the `beam_search` signature (beam 4) and prints
the exact match of the best hypotheses as JSON.
"""

import argparse
import json

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

import numpy as np

from keras_attn.data import dates_splits
from keras_attn.serving.harness import ServingRequest, run_server_way


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("export_dir")
    p.add_argument("--n-train", type=int, default=20000)
    p.add_argument("--n-val", type=int, default=300)
    p.add_argument("--n-test", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--max-length", type=int, default=20)
    args = p.parse_args(argv)
    test = dates_splits(args.n_train, args.n_val, args.n_test, seed=args.seed)["test"]
    requests = [
        ServingRequest(
            "beam_search",
            {
                "inputs": np.array([s.encode() for s, _ in test[i : i + 500]], object),
                "beam_size": np.int32(args.beam_size),
                "max_length": np.int32(args.max_length),
                "length_penalty": np.float32(0.0),
                "coverage_penalty": np.float32(0.0),
            },
        )
        for i in range(0, len(test), 500)
    ]
    result = run_server_way(args.export_dir, requests, replay_warmup=True, timeout=1800)
    failed = [r.error_message for r in result.warmup + result.responses if not r.ok]
    if failed:
        raise SystemExit(f"served requests failed: {failed[:2]}")
    outputs = [o.decode() for r in result.responses for o in r.outputs["outputs"][:, 0]]
    exact = float(np.mean([o == t for o, (_, t) in zip(outputs, test)]))
    print(json.dumps({"served_beam4_test_exact_match": exact, "test_examples": len(outputs)}))


if __name__ == "__main__":
    main()
