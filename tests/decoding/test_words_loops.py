"""The loop ban of the word rules (keras_attn.decoding.words) in every search: no answer writes
a word three times in a row unless its source does, whether the copies are spelled with the
same pieces (`loop_ban`) or not (`word_loop_ban`, `▁real ▁real ▁re al`), against rules written
out in plain Python. Runs on TensorFlow and on JAX (`KERAS_BACKEND=jax`)."""

import re

import numpy as np
import pytest
from keras import ops

from keras_attn.decoding import beam_search, greedy_search, sample_search
from keras_attn.decoding.words import (
    WordRules,
    looped_words,
    sentencepiece_word_starts,
    word_loop_ban,
    word_rules_step,
    word_text_tables,
)

PIECES = ["<pad>", "<s>", "</s>", "<unk>", "\u2581real", "\u2581re", "al", "\u2581de"]
PIECES += ["s", ",", "\u2581Real", "\u2581x", "\u2581rea", "l"]
REAL, RE, AL, DE, S, COMMA, REAL_UP, X, REA, L = range(4, 14)
V = len(PIECES)
WORD_START = sentencepiece_word_starts(PIECES)
TABLES = word_text_tables(PIECES)


def words(ids):
    """The words (lower case) of token ids, as a reader sees them; a reserved id ends one."""
    out, current = [], None
    for t in ids:
        if t < 4:
            current = None
            continue
        text = PIECES[t].lstrip("\u2581").lower()
        if WORD_START[t] or current is None:
            out.append([text, WORD_START[t]])
        else:
            out[-1][0] += text
        current = True
    return out


def tripled(ids):
    """The texts of `ids` written three times in a row, the first copy begun by a word start."""
    w = words(ids)
    return {
        a[0] for a, b, c in zip(w, w[1:], w[2:]) if a[0] == b[0] == c[0] and a[1] and b[1] and c[1]
    }


def ref_banned(history, source):
    """The candidates after which the answer's last three words are one text (a third copy in
    a row, or more) that the source does not write three times in a row."""
    banned = set()
    for t in range(4, V):
        w = words(history + [t])[-3:]
        if len(w) == 3 and all(f for _, f in w) and len({x for x, _ in w}) == 1:
            if w[0][0] not in tripled(source):
                banned.add(t)
    return banned


def test_word_loop_ban_is_the_written_out_rule():
    rng = np.random.default_rng(0)
    n, length = 48, 12
    alphabet = [REAL, RE, AL, REA, L, S, COMMA, REAL_UP, 0]
    sequences = rng.choice(alphabet[:-1], size=(n, length)).astype("int32")
    sequences[:8] = [REAL, RE, AL, REAL, REA, L, RE, AL, REAL_UP, RE, AL, REA]  # many loops
    sources = rng.choice(alphabet, size=(n, 9)).astype("int32")
    sources[:4] = [RE, AL, REAL, REAL_UP, X, 0, 0, 0, 0]  # "re al real Real": held
    held = looped_words(sources, WORD_START, TABLES)
    total = 0
    for step in range(length + 1):
        banned = ops.convert_to_numpy(word_loop_ban(sequences, step, WORD_START, TABLES, held))
        for row in range(n):
            history = sequences[row, :step].tolist()
            want = ref_banned(history, sources[row].tolist())
            assert set(np.flatnonzero(banned[row]).tolist()) == want, (history, sources[row])
            total += len(want)
    assert total > 100  # the histories do make loops


def looping_step():
    """A step that writes "real" again and again: `▁real` first, then `▁re`, `▁rea`, `al`,
    `l` (another spelling of it), the end last."""
    table = np.full([V, V], -8.0, "float32")
    table[:, REAL], table[:, RE], table[:, REA] = 6.0, 4.0, 3.9
    table[RE, AL], table[REA, L] = 7.0, 7.0
    table[:, DE] = 1.0  # something else to say
    table[:, 2] = 0.0
    values = ops.convert_to_tensor(table)

    def step(tokens, state, index):
        return ops.take(values, ops.cast(tokens, "int32"), axis=0), state, None

    return step


def run(search, step, state):
    start = np.array([1], "int32")
    if search == "greedy":
        out = greedy_search(step, state, start, 2, max_length=10)["sequences"][0]
    elif search == "beam":
        out = beam_search(step, state, start, 2, beam_size=3, max_length=10)["sequences"][0, 0]
    else:
        out = sample_search(step, state, start, 2, max_length=10, seed=3, temperature=0.7)
        out = out["sequences"][0]
    out = ops.convert_to_numpy(out).tolist()
    return out[: out.index(2)] if 2 in out else out


def text(ids):
    return "".join(PIECES[t] for t in ids).replace("\u2581", " ").strip()


def loops(ids):
    found = re.findall(r"\w+", text(ids).lower())
    return {w for a, b, w in zip(found, found[1:], found[2:]) if a == b == w}


@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_no_search_writes_a_word_three_times(search):
    step, state = looping_step(), {"h": ops.zeros((1, 2))}
    source = np.array([[X, DE, 0]], "int32")
    assert loops(run(search, step, state))  # the step loops
    # the loop ban on tokens: `▁real ▁real`, then the third copy spelled otherwise
    ruled, ruled_state = word_rules_step(step, state, source, WORD_START, 2, 10)
    out = run(search, ruled, ruled_state)
    assert loops(out) == {"real"}
    assert not [t for t in range(len(out)) if out[max(t - 2, 0) : t + 1] == [out[t]] * 3]
    ruled, ruled_state = word_rules_step(step, state, source, WORD_START, 2, 10, word_text=TABLES)
    out = run(search, ruled, ruled_state)
    assert not loops(out), text(out)
    assert text(out).startswith("real real")  # the model's own words up to the loop


def test_a_source_that_writes_the_loop_keeps_it():
    step, state = looping_step(), {"h": ops.zeros((1, 2))}
    source = np.array([[REAL, RE, AL, REAL_UP, 0]], "int32")  # "real real Real"
    ruled, ruled_state = word_rules_step(step, state, source, WORD_START, 2, 10, word_text=TABLES)
    assert loops(run("greedy", ruled, ruled_state)) == {"real"}


def test_word_text_needs_word_start():
    with pytest.raises(ValueError, match="word_start"):
        WordRules(None, word_text=TABLES)
