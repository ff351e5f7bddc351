"""What a beam has settled: per input, the tokens every hypothesis shares from the start, up to
the end token (what the stream may show, whatever the beam finds next)."""

import numpy as np

from keras_attn.serving.streaming import _settled

END = 2


def reference(history, step, width):
    """Position by position, as the definition reads."""
    out = []
    for b in range(history.shape[0] // width):
        hyps = history[b * width : (b + 1) * width, :step]
        n = 0
        while n < step and len(set(hyps[:, n].tolist())) == 1 and hyps[0, n] != END:
            n += 1
        out.append(hyps[0, :n])
    return out


def test_settled_is_the_shared_start_up_to_the_end_token():
    rng = np.random.RandomState(0)
    checked = 0
    for width in (1, 2, 4):
        for step in (0, 1, 5, 9):
            for _ in range(20):
                # few distinct ids: shared starts of every length, end tokens among them
                history = rng.randint(2, 5, size=[3 * width, 9]).astype(np.int32)
                common = rng.randint(0, step + 1)
                for b in range(3):
                    history[b * width : (b + 1) * width, :common] = history[b * width, :common]
                got = _settled(history, step, width, END)
                want = reference(history, step, width)
                assert len(got) == len(want) == 3
                for g, w in zip(got, want):
                    np.testing.assert_array_equal(g, w)
                    checked += len(w)
    assert checked > 100  # the cases hold settled tokens, not only empty ones


def test_examples():
    history = np.array([[5, 6, 7, 8], [5, 6, 9, 8], [3, 2, 4, 4], [3, 2, 4, 4]], np.int32)
    got = _settled(history, 4, 2, END)
    assert [g.tolist() for g in got] == [[5, 6], [3]]
    got = _settled(history, 4, 1, END)
    assert [g.tolist() for g in got] == [[5, 6, 7, 8], [5, 6, 9, 8], [3], [3]]
