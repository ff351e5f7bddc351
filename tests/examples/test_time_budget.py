"""`--time-budget`: training stops after the last epoch that fits, and the budget is the run's:
a resumed run counts the epochs already trained (`metrics.jsonl`), so resuming a run whose
budget is spent (to export it, say) trains nothing. A fake clock stands in for the wall clock
(the `time` of `keras_attn.train`'s callbacks and run loop), each epoch taking the seconds the test sets."""

import json
import time
import types

import keras
import numpy as np
import pytest

from keras_attn import train
from keras_attn.train import callbacks, loop


class FakeClock:
    """`time.time()` that moves only when an epoch ends (`EPOCH` seconds per epoch)."""

    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now


EPOCH = 10.0


class Tick(keras.callbacks.Callback):
    """Moves the clock by `seconds` per training batch (one batch per epoch here)."""

    def __init__(self, clock, seconds=EPOCH):
        super().__init__()
        self.clock, self.seconds = clock, seconds

    def on_train_batch_end(self, batch, logs=None):
        self.clock.now += self.seconds


@pytest.fixture
def clock(monkeypatch):
    clock = FakeClock()
    fake = types.SimpleNamespace(time=clock.time, process_time=time.process_time)
    monkeypatch.setattr(callbacks, "time", fake)
    monkeypatch.setattr(loop, "time", fake)
    return clock


def fit_epochs(clock, budget, spent=0.0, longest=0.0, epochs=20):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.zeros((4, 2), "float32"), np.zeros((4, 1), "float32")
    history = model.fit(
        x,
        y,
        epochs=epochs,
        verbose=0,
        callbacks=[Tick(clock), train.TimeBudget(budget, spent, longest)],
    )
    return len(history.history["loss"])


def test_stops_after_the_last_epoch_that_fits(clock):
    # after 3 epochs (30 s) another would end at 40 s > 35 s
    assert fit_epochs(clock, budget=35.0) == 3
    assert fit_epochs(clock, budget=40.0) == 4  # 40 s: the fourth ends exactly at the budget


def test_a_resumed_run_counts_what_it_already_spent(clock):
    # 20 s spent before, epochs of 10 s: one more epoch (30 s), then 40 s would pass 35 s
    assert fit_epochs(clock, budget=35.0, spent=20.0, longest=EPOCH) == 1
    # the longest earlier epoch counts too: after two more (40 s) a 25 s one would pass 60 s
    assert fit_epochs(clock, budget=60.0, spent=20.0, longest=25.0) == 2
    assert fit_epochs(clock, budget=60.0, spent=20.0, longest=0.0) == 4


def write_metrics(out, seconds):
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "metrics.jsonl", "w", encoding="utf-8") as f:
        for epoch, s in enumerate(seconds, 1):
            f.write(json.dumps({"epoch": epoch, "loss": 1.0, "epoch_seconds": s}) + "\n")


def test_spent_epoch_seconds_reads_the_epochs_before_the_resume(tmp_path):
    write_metrics(tmp_path, [12.0, 30.0, 9.0])
    assert train.spent_epoch_seconds(str(tmp_path), 2) == (42.0, 30.0)
    assert train.spent_epoch_seconds(str(tmp_path), 3) == (51.0, 30.0)
    assert train.spent_epoch_seconds(str(tmp_path), 0) == (0.0, 0.0)
    assert train.spent_epoch_seconds(str(tmp_path / "none"), 2) == (0.0, 0.0)


def run_args(out, budget):
    return types.SimpleNamespace(
        epochs=30,
        smoke=False,
        seed=1,
        out=str(out),
        distribute="none",
        batch_size=4,
        resume=True,
        verbose=0,
        time_budget=budget,
    )


def test_a_resumed_run_whose_budget_is_spent_trains_nothing(tmp_path, capsys, clock):
    out = tmp_path / "run"
    write_metrics(out, [600.0, 600.0, 600.0])  # three epochs of 10 min
    run = train.Run(run_args(out, budget=35))  # minutes: a fourth would end at 40
    run.initial_epoch = 3
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    data = (np.zeros((4, 2), "float32"), np.zeros((4, 1), "float32"))
    assert run.fit(model, data, steps=1) is None
    assert "nothing to do" in capsys.readouterr().out
    assert run.train_seconds == 1800.0  # the run's training time: the epochs trained before
    # with room for one more epoch of 10 min it trains that one
    run = train.Run(run_args(out, budget=45))
    run.initial_epoch = 3
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensors(data).repeat()
    history = run.fit(model, dataset, steps=1, extra_callbacks=[Tick(clock, 600.0)])
    assert history is not None and len(history.history["loss"]) == 1
    assert run.train_seconds == 1800.0 + 600.0
