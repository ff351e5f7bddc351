"""Worker program of tests/examples/test_multi_worker.py: which training examples does this
worker get? Builds the example scripts' dataset (`keras_attn.train.Run.batches`) of example indices,
distributes it the way `fit` does (`strategy.experimental_distribute_dataset`) under the
`TF_CONFIG` of this process and writes the indices it received, step by step, as JSON.

    python tests/examples/shard_probe.py OUT.json N BATCH EPOCHS SEED
"""

import json
import os
import sys

import numpy as np

from keras_attn import train


def main(path, n, batch, epochs, seed):
    args = train.parse_run_args(
        train.base_parser("shard probe"),
        [
            "--distribute",
            "multi-worker",
            "--batch-size",
            str(batch),
            "--epochs",
            str(epochs),
            "--seed",
            str(seed),
            "--out",
            os.path.dirname(path),
        ],
    )
    run = train.Run(args)
    strategy = run.strategy
    ids = np.arange(n, dtype=np.int32)
    dataset, steps = run.batches(ids[:, None], ids)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    seen = []
    for _ in range(steps * epochs):
        _, y = next(iterator)
        seen.append(
            [int(i) for part in strategy.experimental_local_results(y) for i in np.asarray(part)]
        )
    with open(path, "w", encoding="utf-8") as f:
        json.dump(
            {
                "chief": run.chief,
                "replicas": strategy.num_replicas_in_sync,
                "steps": steps,
                "seen": seen,
            },
            f,
        )


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
