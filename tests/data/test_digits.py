import numpy as np
import pytest
from sklearn.datasets import load_digits

from keras_attn.data.digits import (
    CANVAS_HEIGHT,
    CANVAS_WIDTH,
    digit_strips_splits,
    make_digit_strips,
    split_digit_pools,
)


@pytest.fixture(scope="module")
def digits():
    return load_digits()


def test_shapes_dtypes_and_determinism():
    a = make_digit_strips(40, seed=3)
    b = make_digit_strips(40, seed=3)
    c = make_digit_strips(40, seed=4)
    assert a.images.shape == (40, CANVAS_HEIGHT, CANVAS_WIDTH, 1) == (40, 16, 64, 1)
    assert a.images.dtype == np.float32 and a.images.min() >= 0.0 and a.images.max() <= 1.0
    assert a.labels.shape == (40, 5) and a.boxes.shape == (40, 5, 2) and a.lengths.shape == (40,)
    np.testing.assert_array_equal(a.images, b.images)
    assert a.captions == b.captions
    assert not np.array_equal(a.images, c.images)
    assert set(a.lengths.tolist()) == {3, 4, 5}


def test_captions_boxes_and_pixels_match_the_pasted_digits(digits):
    strips = make_digit_strips(60, seed=0)
    for i in range(len(strips)):
        k = int(strips.lengths[i])
        src = strips.source_index[i, :k]
        assert strips.captions[i] == " ".join(str(int(digits.target[s])) for s in src)
        np.testing.assert_array_equal(strips.labels[i, :k], digits.target[src])
        assert (strips.labels[i, k:] == -1).all() and (strips.boxes[i, k:] == -1).all()
        canvas = strips.images[i, :, :, 0]
        covered = np.zeros(CANVAS_WIDTH, bool)
        previous_end = 0
        for j in range(k):
            x0, x1 = strips.boxes[i, j]
            assert 0 <= x0 and x1 <= CANVAS_WIDTH and x1 - x0 == 8 and x0 >= previous_end
            previous_end = x1
            covered[x0:x1] = True
            column = canvas[:, x0:x1]
            expected = digits.images[src[j]] / 16.0
            rows = [y for y in range(CANVAS_HEIGHT - 7) if np.allclose(column[y : y + 8], expected)]
            assert rows, f"digit {j} of strip {i} not found in its box"
            y = rows[0]
            assert np.all(np.delete(column, np.s_[y : y + 8], axis=0) == 0)
        assert np.all(canvas[:, ~covered] == 0)


def test_pool_restricts_the_source_images():
    pool = np.arange(100, 200)
    strips = make_digit_strips(30, seed=1, pool=pool)
    used = strips.source_index[strips.source_index >= 0]
    assert set(used.tolist()) <= set(pool.tolist())
    with pytest.raises(ValueError, match="pool"):
        make_digit_strips(3, pool=[5000])
    with pytest.raises(ValueError, match="max_digits"):
        make_digit_strips(3, min_digits=4, max_digits=9)


def test_splits_use_disjoint_source_images(digits):
    train, val, test = split_digit_pools(seed=2)
    assert not set(train) & set(val) and not set(train) & set(test) and not set(val) & set(test)
    assert len(train) + len(val) + len(test) == len(digits.target)
    for digit in range(10):  # stratified: every digit in every pool
        assert (digits.target[test] == digit).any() and (digits.target[val] == digit).any()
    splits = digit_strips_splits(50, 20, 20, seed=2)
    used = {name: set(s.source_index[s.source_index >= 0].tolist()) for name, s in splits.items()}
    assert used["train"] <= set(train) and used["val"] <= set(val) and used["test"] <= set(test)
    again = digit_strips_splits(50, 20, 20, seed=2)
    np.testing.assert_array_equal(again["test"].images, splits["test"].images)


@pytest.mark.parametrize("n", [-1, 2.5, True])
def test_the_count_is_an_integer_at_least_0(n):
    with pytest.raises(ValueError, match=r"`n` must be an integer >= 0\. Received: n="):
        make_digit_strips(n)
