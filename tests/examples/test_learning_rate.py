"""The translator's rsqrt schedule: the formula written out, and a run on a time budget at its
peak after `BUDGET_WARMUP` steps, then decaying as a run without a budget does."""

import types

import numpy as np
import pytest

from keras_attn.train import translator


def lr(schedule, steps):
    return np.array([float(schedule(s)) for s in steps])


def args(time_budget):
    return types.SimpleNamespace(schedule="rsqrt", learning_rate=2e-3, time_budget=time_budget)


def test_rsqrt_is_linear_warm_up_then_inverse_square_root():
    steps = np.array([0, 10, 99, 499, 999, 1999, 3999])
    s = steps + 1.0
    want = 2e-3 * np.minimum(s / 500, np.sqrt(500 / s))
    np.testing.assert_allclose(lr(translator.InverseSqrt(2e-3, warmup=500), steps), want, rtol=1e-6)


def test_a_budget_reaches_the_peak_early_and_then_decays_as_without_one():
    per_epoch = 300  # the usual warm-up: 1,000 steps
    budget = translator.learning_rate(args(15.0), 0, per_epoch)
    plain = translator.learning_rate(args(0.0), 0, per_epoch)
    early = translator.BUDGET_WARMUP
    assert early < translator.warmup_steps(per_epoch)
    np.testing.assert_allclose(lr(budget, [early - 1, 500, 998]), 2e-3, rtol=1e-6)
    assert float(plain(early - 1)) < 0.2 * 2e-3  # without a budget: still warming up
    later = [999, 1500, 4000]
    np.testing.assert_allclose(lr(budget, later), lr(plain, later), rtol=1e-6)
    half = lr(budget, [early // 2 - 1])[0]
    np.testing.assert_allclose(half, 2e-3 * (early // 2) / early, rtol=1e-6)


def test_decay_from_before_the_peak_is_refused():
    with pytest.raises(ValueError, match="decay_from"):
        translator.InverseSqrt(1e-3, warmup=100, decay_from=50)
