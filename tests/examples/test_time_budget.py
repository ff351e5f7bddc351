"""`--time-budget`: training stops at the batch after which the budget would be passed by the
time an epoch's end takes (its validation, its checkpoint), the epoch it stops in ending as any
other; and the budget is the run's: a resumed run counts the epochs already trained
(`metrics.jsonl`, `time_budget.json`), so resuming a run whose budget is spent (to export it,
say) trains nothing. A fake clock stands in for the wall clock (the `time` of
`keras_attn.train`'s callbacks and run loop), each batch and epoch end taking the seconds the
test sets."""

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
    """Moves the clock by `seconds` per training batch, and by `end` at each epoch's end (the
    validation, before the budget's callback reads the clock)."""

    def __init__(self, clock, seconds=EPOCH, end=0.0, first=None, first_end=None):
        super().__init__()
        self.clock, self.seconds, self.end = clock, seconds, end
        self.first, self.first_end = first, first_end  # the first batch's / epoch end's
        self.batches = self.ends = 0

    def on_train_batch_end(self, batch, logs=None):
        first = self.batches == 0 and self.first is not None
        self.clock.now += self.first if first else self.seconds
        self.batches += 1

    def on_epoch_end(self, epoch, logs=None):
        first = self.ends == 0 and self.first_end is not None
        self.clock.now += self.first_end if first else self.end
        self.ends += 1


@pytest.fixture
def clock(monkeypatch):
    clock = FakeClock()
    fake = types.SimpleNamespace(time=clock.time, process_time=time.process_time)
    monkeypatch.setattr(callbacks, "time", fake)
    monkeypatch.setattr(loop, "time", fake)
    return clock


def fit_epochs(clock, budget, spent=0.0, tail=0.0, epochs=20, batches=1, end=0.0, **first):
    """`(epochs, batches)` trained: epochs of `batches` batches of `EPOCH` seconds each, whose
    ends take `end` seconds (`first`: `Tick`'s first batch and first end)."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.zeros((batches, 2), "float32"), np.zeros((batches, 1), "float32")
    tick = Tick(clock, end=end, **first)
    history = model.fit(
        x,
        y,
        batch_size=1,
        epochs=epochs,
        verbose=0,
        callbacks=[tick, train.TimeBudget(budget, spent, tail)],
    )
    return len(history.history["loss"]), tick.batches


def test_stops_at_the_last_batch_that_fits(clock):
    # one batch an epoch: after 3 (30 s) a fourth would end at 40 s > 35 s
    assert fit_epochs(clock, budget=35.0) == (3, 3)
    assert fit_epochs(clock, budget=40.0) == (4, 4)  # the fourth ends exactly at the budget
    # epochs of 4 batches: the budget ends inside the second epoch, which stops there
    assert fit_epochs(clock, budget=65.0, batches=4) == (2, 6)


def test_the_time_an_epoch_end_takes_is_kept_for_the_last_one(clock):
    # epochs of 3 batches (30 s) ending in 5 s of validation: after epoch 1 (35 s) the budget
    # of 68 s leaves room for 2 batches and the end (55 + 5 = 60 s); a third would end at 65 s
    # and its epoch at 70 s
    assert fit_epochs(clock, budget=68.0, batches=3, end=5.0) == (2, 5)
    # epoch ends that take no time: a third batch fits (60 s)
    assert fit_epochs(clock, budget=68.0, batches=3, end=0.0) == (2, 6)


def test_the_first_batch_and_epoch_end_that_trace_are_not_the_estimate(clock):
    # epochs of 2 batches; the first batch takes 40 s and the first end 20 s (tracing), the
    # rest 10 s and 5 s: reckoned by the later ones, the third epoch stops after its batch 2
    # (115 s; one more and an end would reach 130 s), its end reaching the budget, 120 s
    assert fit_epochs(clock, budget=120.0, batches=2, end=5.0, first=40.0, first_end=20.0) == (
        3,
        6,
    )
    # while the first batch is the only one, it is the estimate: 40 + 40 > 70
    assert fit_epochs(clock, budget=70.0, batches=4, first=40.0) == (1, 1)


def test_a_resumed_run_counts_what_it_already_spent(clock):
    # 20 s spent before, batches of 10 s: one more (30 s), then 40 s would pass 35 s
    assert fit_epochs(clock, budget=35.0, spent=20.0) == (1, 1)
    # the earlier epochs' end counts too: a 25 s end leaves room for one batch in 60 s
    assert fit_epochs(clock, budget=60.0, spent=20.0, tail=25.0, batches=4) == (1, 1)
    assert fit_epochs(clock, budget=60.0, spent=20.0, tail=0.0, batches=4) == (1, 4)


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
    with open(out / "time_budget.json", "w", encoding="utf-8") as f:
        json.dump({"tail_seconds": 300.0}, f)  # their ends took up to 5 min
    assert train.budget_tail(str(out)) == 300.0
    assert train.budget_tail(str(tmp_path / "none")) == 0.0
    run = train.Run(run_args(out, budget=35))  # minutes: 30 spent and an end of 5 to come
    run.initial_epoch = 3
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    data = (np.zeros((4, 2), "float32"), np.zeros((4, 1), "float32"))
    assert run.fit(model, data, steps=1) is None
    assert "nothing to do" in capsys.readouterr().out
    assert run.train_seconds == 1800.0  # the run's training time: the epochs trained before
    # with room for a batch of 10 min and an end it trains that one
    run = train.Run(run_args(out, budget=45))
    run.initial_epoch = 3
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensors(data).repeat()
    history = run.fit(model, dataset, steps=1, extra_callbacks=[Tick(clock, 600.0)])
    assert history is not None and len(history.history["loss"]) == 1
    assert run.train_seconds == 1800.0 + 600.0


def test_metrics_record_the_batches_each_epoch_trained(clock, tmp_path):
    # epochs of 4 batches of 10 s: the budget of 65 s ends the second epoch after 2 batches,
    # and its record says so (what the recipe benchmark counts as steps trained)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.zeros((4, 2), "float32"), np.zeros((4, 1), "float32")
    model.fit(
        x,
        y,
        batch_size=1,
        epochs=5,
        verbose=0,
        callbacks=[Tick(clock), callbacks.Validation(None, str(tmp_path)), train.TimeBudget(65.0)],
    )
    with open(tmp_path / "metrics.jsonl", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    assert [r["epoch_steps"] for r in records] == [4, 2]
