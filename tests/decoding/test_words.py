"""The word rules (keras_attn.decoding.words) against rules written out in plain Python on
random token histories, and in the searches through `word_rules_step`: a step that loops
stops looping, a step that ends inside a source word finishes the word."""

import numpy as np
import pytest
from keras import ops

from keras_attn.decoding import beam_search, greedy_search
from keras_attn.decoding.words import (
    WordRules,
    end_inside_word,
    loop_ban,
    sentencepiece_word_starts,
    word_rules_step,
)

VOCAB = 12
# ids 4, 5, 6 start words; 7 .. 11 continue them; 0 .. 3 are reserved
WORD_START = np.array([False] * 4 + [True] * 3 + [False] * 5)


def contains(seq, part):
    return any(seq[i : i + len(part)] == part for i in range(len(seq) - len(part) + 1))


def ref_loop(history, source, max_period, repeats, exempt=()):
    """The tokens whose choice would make `repeats` copies of one p-gram at the end."""
    banned = set()
    for p in range(1, max_period + 1):
        if len(history) < repeats * p - 1:
            continue
        x = history[-p]
        tail = history[len(history) - (repeats * p - 1) :] + [x]
        if tail == tail[:p] * repeats and not contains(source, tail) and x not in exempt:
            banned.add(x)
    return banned


def source_words(source):
    words, current = [], None
    for t in source:
        if 4 <= t < VOCAB and WORD_START[t]:
            if current:
                words.append(current)
            current = [t]
        elif 4 <= t < VOCAB and current is not None:
            current.append(t)
        else:
            if current:
                words.append(current)
            current = None
    if current:
        words.append(current)
    return words


def ref_inside(history, source, max_word):
    starts = [i for i, t in enumerate(history) if WORD_START[t]]
    if not starts or len(history) - starts[-1] > max_word:
        return False
    word = history[starts[-1] :]
    words = source_words(source)
    strict = any(len(w) > len(word) and w[: len(word)] == word for w in words)
    return strict and not any(w == word for w in words)


def random_rows(rng, n, length, alphabet):
    return rng.choice(alphabet, size=(n, length)).astype("int32")


def test_loop_ban_is_the_written_out_rule():
    rng = np.random.default_rng(0)
    n, length = 64, 14
    sequences = random_rows(rng, n, length, [4, 5, 7])  # few tokens: many repeats
    source = random_rows(rng, n, 10, [0, 4, 5, 7, 8])
    total = 0
    for step in range(length + 1):
        for max_period, repeats, exempt in [(3, 3, ()), (2, 2, (5,))]:
            tokens, banned = loop_ban(
                sequences, step, source, max_period, repeats, exempt_ids=exempt or None
            )
            tokens, banned = ops.convert_to_numpy(tokens), ops.convert_to_numpy(banned)
            for row in range(n):
                history = sequences[row, :step].tolist()
                got = {int(t) for t, b in zip(tokens[row], banned[row]) if b}
                assert got == ref_loop(history, source[row].tolist(), max_period, repeats, exempt)
                total += len(got)
    assert total > 200  # the histories do hold loops


def test_loop_ban_spares_what_the_source_holds():
    sequences = np.array([[4, 7, 4, 7, 4, 0]], "int32")  # "a b a b a", then b would loop
    tokens, banned = loop_ban(sequences, 5, None, max_period=2)
    assert ops.convert_to_numpy(banned)[0].tolist() == [False, True]
    assert ops.convert_to_numpy(tokens)[0, 1] == 7
    source = np.array([[5, 4, 7, 4, 7, 4, 7]], "int32")  # the source repeats it: allowed
    _, banned = loop_ban(sequences, 5, source, max_period=2)
    assert not ops.convert_to_numpy(banned).any()
    with pytest.raises(ValueError, match="repeats"):
        loop_ban(sequences, 5, repeats=1)
    with pytest.raises(ValueError, match=r"`max_period` must be an integer >= 1\. Received: max"):
        loop_ban(sequences, 5, max_period=0)


def test_the_default_rules_ban_a_loop_of_a_long_word():
    """A word of several pieces ("▁G" "id" ":" "8" ")" in a Chinese answer: "Gid:8) Gid:8)
    Gid:8)") twice, then its third copy: the default rules ban the piece that would complete
    it, for words of up to 8 pieces, and leave a word of 9 alone (as the rule says)."""
    rules = WordRules(WORD_START, end_id=2)
    for period, banned_expected in ((5, True), (6, True), (8, True), (9, False)):
        word = [4] + [7, 8, 9, 10, 11, 7, 8, 9][: period - 1]
        history = word * 2 + word[:-1]  # the third copy lacks its last piece
        n = len(history)
        sequences = np.array([history + [0] * 3], "int32")
        source = np.array([[5, 6, 0]], "int32")
        logits = np.zeros((1, VOCAB), "float32")
        out = ops.convert_to_numpy(rules.process(logits, sequences, n, source))
        assert (out[0, word[-1]] < -1e8) == banned_expected, period
        assert (out[0, [5, 6]] == 0).all()  # other pieces stay free


def test_the_default_rules_keep_a_long_word_whole():
    """A source word of 12 pieces (a hyphenated name, `Escaldes-Engordany`) copied up to its
    11th piece: the default rules ban the end there; with source words of up to 8 pieces, they
    do not see it."""
    word = [4] + [7, 8, 9, 10, 11] * 2 + [7]  # 12 pieces
    sequences = np.array([word[:11] + [0]], "int32")
    source = np.array([word + [2]], "int32")
    assert ops.convert_to_numpy(end_inside_word(sequences, 11, source, WORD_START))[0]
    assert not ops.convert_to_numpy(end_inside_word(sequences, 11, source, WORD_START, 8))[0]
    logits = np.zeros((1, VOCAB), "float32")
    out = ops.convert_to_numpy(WordRules(WORD_START).process(logits, sequences, 11, source))
    assert out[0, 2] < -1e8 and out[0, 7] == 0  # no end: the word goes on


def test_end_inside_word_is_the_written_out_rule():
    rng = np.random.default_rng(1)
    n, length = 96, 9
    sequences = random_rows(rng, n, length, [4, 5, 7, 8, 9])
    source = random_rows(rng, n, 8, [0, 2, 4, 5, 7, 8, 9])
    counts = [0, 0]
    for step in range(length + 1):
        for max_word in (3, 8):
            got = ops.convert_to_numpy(
                end_inside_word(sequences, step, source, WORD_START, max_word)
            )
            for row in range(n):
                want = ref_inside(sequences[row, :step].tolist(), source[row].tolist(), max_word)
                assert bool(got[row]) == want, (sequences[row, :step], source[row], max_word)
                counts[want] += 1
    assert min(counts) > 100  # both answers are common


def ref_last_word(history):
    starts = [i for i, t in enumerate(history) if WORD_START[t]]
    return history[starts[-1] :] if starts else []


@pytest.mark.parametrize("copy_tokens", [0, 2, 3])
def test_word_rules_bans_are_the_written_out_rules(copy_tokens):
    """The end token is banned where `end_inside_word` holds; the word-start pieces too once
    the cut word holds `copy_tokens` or more tokens of the source word."""
    rng = np.random.default_rng(2)
    n, length = 128, 9
    sequences = random_rows(rng, n, length, [4, 7, 8])  # few tokens: long shared prefixes
    source = random_rows(rng, n, 10, [0, 4, 7, 8])
    rules = WordRules(WORD_START, end_id=2, max_period=0, max_word=8, copy_tokens=copy_tokens)
    seen = set()
    for step in range(length + 1):
        allowed = ops.convert_to_numpy(rules.allowed(sequences, step, source, VOCAB))
        allowed = np.broadcast_to(allowed, (n, VOCAB))
        for row in range(n):
            history, src = sequences[row, :step].tolist(), source[row].tolist()
            inside = ref_inside(history, src, 8)
            starts_banned = (
                inside and copy_tokens > 0 and len(ref_last_word(history)) >= copy_tokens
            )
            assert allowed[row, 2] == (not inside)
            assert allowed[row, 4:7].tolist() == [not starts_banned] * 3, (history, src)
            assert allowed[row, 7:].all() and allowed[row, :2].all()
            seen.add((inside, starts_banned))
    assert seen == (
        {(False, False), (True, False), (True, True)}
        if copy_tokens
        else {(False, False), (True, False)}
    )


# with a glue table: 7, 8 go on with a word (letters), 9, 10, 11 do not (punctuation)
GLUE = np.array([False] * 7 + [True] * 2 + [False] * 3)


def ref_next(history, source):
    """The piece after the answer's last word in the first source word it strictly begins."""
    word = ref_last_word(history)
    for w in source_words(source):
        if len(w) > len(word) and w[: len(word)] == word:
            return w[len(word)]
    return None


def test_word_rules_with_glue_are_the_written_out_rules():
    """Once the cut word holds `copy_tokens` tokens of the source word, only the pieces that go
    on with a word (`glue`) and the source word's own next piece are allowed."""
    rng = np.random.default_rng(3)
    n, length = 128, 9
    sequences = random_rows(rng, n, length, [4, 7, 8, 9])
    source = random_rows(rng, n, 10, [0, 4, 7, 8, 9, 10])
    rules = WordRules(WORD_START, end_id=2, max_period=0, glue=GLUE, max_word=8)
    seen = set()
    for step in range(length + 1):
        allowed = np.broadcast_to(
            ops.convert_to_numpy(rules.allowed(sequences, step, source, VOCAB)), (n, VOCAB)
        )
        for row in range(n):
            history, src = sequences[row, :step].tolist(), source[row].tolist()
            inside = ref_inside(history, src, 8)
            copying = inside and len(ref_last_word(history)) >= 2
            if copying:
                want = GLUE.copy()
                want[ref_next(history, src)] = True
            else:
                want = np.ones(VOCAB, bool)
                want[2] = not inside
            assert allowed[row].tolist() == want.tolist(), (history, src)
            seen.add((inside, copying, copying and not GLUE[ref_next(history, src)]))
    # every case, among them a source word going on with a piece that is no glue
    assert seen == {
        (False, False, False),
        (True, False, False),
        (True, True, False),
        (True, True, True),
    }


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_name_copied_piece_by_piece_is_finished_before_a_punctuation_mark(search):
    """With the glue table: after "Th un" of the source's "Th un ar" the step prefers "." (a
    piece that does not go on with the word): the rules make it write "ar" first; where the
    source word itself goes on with "." ("Th un ." is one word), "." stays allowed."""
    th, un, ar, dot = 5, 7, 8, 9
    table = np.full([VOCAB, VOCAB], -6.0, "float32")
    table[1, th], table[th, un] = 5.0, 5.0
    table[un, dot], table[un, ar] = 4.0, 3.0
    table[ar, dot], table[dot, 2] = 5.0, 5.0
    step, state = bigram_step(table), {"h": ops.zeros((1, 2))}

    def run(source):
        ruled, ruled_state = word_rules_step(
            step, state, np.array([source], "int32"), WORD_START, 2, 7, max_period=0, glue=GLUE
        )
        return first_answer(search, ruled, ruled_state, 7)

    assert run([th, un, ar, 4, 2])[:5] == [th, un, ar, dot, 2]
    assert run([th, un, dot, 4, 2])[:4] == [th, un, dot, 2]


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_name_copied_piece_by_piece_is_finished_before_the_next_word(search):
    """The step copies "Th un" of the source's "Th un ar" and then prefers a new word: with
    the rules the next word waits until "ar" is there; a word of one shared piece is free."""
    th, un, ar, como = 5, 8, 9, 6
    table = np.full([VOCAB, VOCAB], -6.0, "float32")
    table[1, th], table[th, un] = 5.0, 5.0
    table[un, como], table[un, ar] = 4.0, 3.0  # after "Th un": a new word first, "ar" second
    table[ar, como], table[como, 2] = 5.0, 5.0
    source = np.array([[th, un, ar, 4, 2]], "int32")  # "▁Th un ar ▁x </s>"
    step, state = bigram_step(table), {"h": ops.zeros((1, 2))}

    def run(step_fn, state):
        return first_answer(search, step_fn, state, 7)

    assert run(step, state)[:4] == [th, un, como, 2]
    ruled, ruled_state = word_rules_step(step, state, source, WORD_START, 2, 7, max_period=0)
    assert run(ruled, ruled_state)[:5] == [th, un, ar, como, 2]
    # copy_tokens=3: two copied pieces are not yet a copy
    ruled, ruled_state = word_rules_step(
        step, state, source, WORD_START, 2, 7, max_period=0, copy_tokens=3
    )
    assert run(ruled, ruled_state)[:4] == [th, un, como, 2]


def source_word_spans(source):
    """`[(start, end)]` of the source's words (`source_words`, with their positions)."""
    spans, start = [], None
    for i, t in enumerate(source + [0]):
        if 4 <= t < VOCAB and WORD_START[t]:
            if start is not None:
                spans.append((start, i))
            start = i
        elif not (4 <= t < VOCAB):
            if start is not None:
                spans.append((start, i))
            start = None
    return spans


def test_fixed_words_are_the_written_out_rules():
    """With the source's `fixed` words (copied whole once begun): where the answer's last word
    strictly begins a fixed source word and is no whole source word, only the next pieces of
    the fixed words it begins are allowed; where it is a whole fixed word and begins no
    longer one, no glue piece; elsewhere the rules without `fixed`."""
    rng = np.random.default_rng(4)
    n, length = 160, 9
    sequences = random_rows(rng, n, length, [4, 7, 8, 9])
    source = random_rows(rng, n, 10, [0, 4, 7, 8, 9, 10])
    fixed = np.zeros(source.shape, bool)
    for row in range(n):  # whole words, at random
        for start, end in source_word_spans(source[row].tolist()):
            fixed[row, start:end] = rng.random() < 0.6
    rules = WordRules(WORD_START, end_id=2, max_period=0, glue=GLUE, copy_tokens=0, max_word=8)
    seen = set()
    for step in range(length + 1):
        plain = np.broadcast_to(
            ops.convert_to_numpy(rules.allowed(sequences, step, source, VOCAB)), (n, VOCAB)
        )
        got = np.broadcast_to(
            ops.convert_to_numpy(rules.allowed(sequences, step, source, VOCAB, fixed=fixed)),
            (n, VOCAB),
        )
        for row in range(n):
            history, src = sequences[row, :step].tolist(), source[row].tolist()
            word = ref_last_word(history) if len(ref_last_word(history)) <= 8 else []
            spans = source_word_spans(src)
            words = [src[a:b] for a, b in spans]
            is_whole = bool(word) and word in words
            nexts = {
                src[a + len(word)]
                for a, b in spans
                if word and fixed[row, a] and b - a > len(word) and src[a : a + len(word)] == word
            }
            held = bool(nexts) and not is_whole
            strict = any(w[: len(word)] == word and len(w) > len(word) for w in words)
            # a whole word of the source, fixed at one of the places it is, and begins no other
            done = (
                is_whole
                and not strict
                and any(fixed[row, a] for (a, _), w in zip(spans, words) if w == word)
            )
            want = plain[row].copy()
            if held:
                want &= np.isin(np.arange(VOCAB), list(nexts))
            if done:
                want &= ~GLUE
            assert got[row].tolist() == want.tolist(), (history, src, fixed[row].tolist())
            seen.add((held, done))
    assert seen == {(False, False), (True, False), (False, True)}


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_word_the_model_never_saw_is_copied_whole(search):
    """The step begins the source's "Mi ss ou" ("▁Mi" first) and then prefers its own "ur":
    with the word fixed the answer copies it; not fixed, the answer rewrites it; once whole,
    the step's next letter piece waits. A fixed word the answer does not begin is free."""
    mi, ss, ou, ur, other = 5, 8, 9, 7, 6
    table = np.full([VOCAB, VOCAB], -6.0, "float32")
    table[1, mi], table[mi, ss] = 5.0, 5.0
    table[ss, ur], table[ss, ou] = 4.0, 3.0  # after "Mi ss": "ur" first, "ou" second
    table[ur, 2] = 5.0
    table[ou, ur], table[ou, 2] = 4.0, 3.0  # after "Mi ss ou": a letter first, the end second
    source = np.array([[other, mi, ss, ou, 2]], "int32")  # "▁x ▁Mi ss ou </s>"
    step, state = bigram_step(table), {"h": ops.zeros((1, 2))}

    def run(fixed):
        ruled, ruled_state = word_rules_step(
            step, state, source, WORD_START, 2, 7, max_period=0, glue=GLUE, fixed=fixed
        )
        return first_answer(search, ruled, ruled_state, 7)

    assert run(None)[:4] == [mi, ss, ur, 2]  # rewritten
    assert run(np.array([[False, True, True, True, False]]))[:4] == [mi, ss, ou, 2]
    # only "▁x" fixed: the name is the model's to write
    assert run(np.array([[True, False, False, False, False]]))[:4] == [mi, ss, ur, 2]
    with pytest.raises(ValueError, match="word_start"):
        word_rules_step(step, state, source, None, 2, 7, fixed=np.ones((1, 5), bool))


def test_sentencepiece_word_starts():
    starts = sentencepiece_word_starts(["<pad>", "<s>", "</s>", "\u2581x", "\u2581Lo", "ti", "."])
    assert starts.tolist() == [False, False, False, False, True, False, False]


def bigram_step(table):
    table = ops.convert_to_tensor(np.asarray(table, "float32"))

    def step(tokens, state, index):
        return ops.take(table, ops.cast(tokens, "int32"), axis=0), state, None

    return step


def first_answer(search, step_fn, state, max_length):
    """The best answer (token ids) of `search` ("greedy" or "beam", 2 wide) from the start id 1."""
    start = np.array([1], "int32")
    if search == "greedy":
        out = greedy_search(step_fn, state, start, 2, max_length=max_length)["sequences"][0]
    else:
        out = beam_search(step_fn, state, start, 2, beam_size=2, max_length=max_length)
        out = out["sequences"][0, 0]
    return ops.convert_to_numpy(out).tolist()


def test_a_looping_step_stops_looping():
    """A step that answers "a b a b a b ..." (then ends): with the rules, no third copy."""
    table = np.full([VOCAB, VOCAB], -5.0, "float32")
    table[1, 4], table[4, 7], table[7, 4] = 5.0, 5.0, 4.0  # start -> a, a -> b, b -> a
    table[7, 2] = 3.0  # b -> end, the second choice
    table[:, 5] = 0.0  # something else to say
    step, state = bigram_step(table), {"h": ops.zeros((1, 2))}
    start = np.array([1], "int32")
    plain = greedy_search(step, state, start, 2, max_length=8)["sequences"]
    assert ops.convert_to_numpy(plain)[0, :6].tolist() == [4, 7, 4, 7, 4, 7]
    ruled, ruled_state = word_rules_step(
        step, state, np.array([[6, 8, 0]], "int32"), WORD_START, 2, 8, max_period=2
    )
    out = ops.convert_to_numpy(
        greedy_search(ruled, ruled_state, start, 2, max_length=8)["sequences"]
    )
    assert out[0, :6].tolist() == [4, 7, 4, 7, 4, 5]  # no third "a b": the next best
    for t in range(1, out.shape[1]):  # no token of the answer completed a third copy
        assert out[0, t] not in ref_loop(out[0, :t].tolist(), [], 2, 3)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_name_is_copied_whole(search):
    """The step copies "Lo" of the source's "Loti" and then prefers to end: with the rules the
    end waits until "ti" is there."""
    lo, ti, other = 5, 9, 6
    table = np.full([VOCAB, VOCAB], -6.0, "float32")
    table[1, lo] = 5.0
    table[lo, 2], table[lo, ti] = 4.0, 3.0  # after "Lo": the end first, "ti" second
    table[ti, 2] = 5.0
    source = np.array([[other, 7, lo, ti, 2]], "int32")  # "▁x y ▁Lo ti </s>"
    step, state = bigram_step(table), {"h": ops.zeros((1, 2))}

    def run(step_fn, state):
        return first_answer(search, step_fn, state, 6)

    assert run(step, state)[:2] == [lo, 2]  # cut short
    ruled, ruled_state = word_rules_step(step, state, source, WORD_START, 2, 6, max_period=0)
    assert run(ruled, ruled_state)[:3] == [lo, ti, 2]
    # the same source word whole elsewhere ("▁Lo" alone) lets the answer end after it
    whole = np.array([[lo, other, lo, ti, 2]], "int32")
    ruled, ruled_state = word_rules_step(step, state, whole, WORD_START, 2, 6, max_period=0)
    assert run(ruled, ruled_state)[:2] == [lo, 2]


def test_word_rules_checks_its_arguments():
    with pytest.raises(ValueError, match="max_period"):
        WordRules(WORD_START, max_period=-1)
    with pytest.raises(ValueError, match="copy_tokens"):
        WordRules(WORD_START, copy_tokens=-1)
    with pytest.raises(
        ValueError, match=r"`max_word` must be an integer >= 1\. Received: max_word=0"
    ):
        WordRules(WORD_START, max_word=0)
    with pytest.raises(
        ValueError, match=r"`max_period` must be an integer >= 0\. Received: max_pe"
    ):
        WordRules(WORD_START, max_period=True)


def test_compiled_with_sizes_known_only_when_it_runs():
    """In a `tf.function` with unknown batch and source length (as the exports trace it), or
    under `jax.jit`: the same answers as eagerly."""
    import keras

    lo, ti = 5, 9
    table = np.full([VOCAB, VOCAB], -6.0, "float32")
    table[1, lo], table[lo, 2], table[lo, ti], table[ti, 2] = 5.0, 4.0, 3.0, 5.0
    step = bigram_step(table)
    source = np.array([[6, 7, lo, ti, 2], [lo, 6, 7, 0, 0]], "int32")

    def run(source):
        state = {"h": ops.zeros_like(ops.cast(source[:, :2], "float32"))}
        ruled, ruled_state = word_rules_step(step, state, source, WORD_START, 2, 6)
        start = ops.ones_like(source[:, 0])
        return greedy_search(ruled, ruled_state, start, 2, max_length=6)["sequences"]

    eager = ops.convert_to_numpy(run(source))
    assert eager[0, :3].tolist() == [lo, ti, 2] and eager[1, :2].tolist() == [lo, 2]
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(run, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    else:
        import jax

        compiled = jax.jit(run)
    np.testing.assert_array_equal(ops.convert_to_numpy(compiled(source)), eager)


def ref_glued(history, phrases, open_end, alts):
    for phrase, flag, alt in zip(phrases, open_end, alts):
        phrase = [t for t in phrase if t >= 0]
        if not flag or not phrase or len(history) < len(phrase):
            continue
        tail = history[len(history) - len(phrase) :]
        if tail[1:] == phrase[1:] and (tail[0] == phrase[0] or (alt >= 0 and tail[0] == alt)):
            return True
    return False


def test_glue_ban_is_the_written_out_rule():
    from keras_attn.decoding.words import glue_ban

    rng = np.random.default_rng(3)
    n, length, c, width = 64, 8, 3, 3
    sequences = random_rows(rng, n, length, [4, 7, 8])
    phrases = rng.choice([4, 7, 8], size=(n, c, width)).astype("int32")
    cut = rng.integers(0, width + 1, size=(n, c))  # phrase lengths 0 .. width
    phrases = np.where(np.arange(width)[None, None, :] < cut[:, :, None], phrases, -1)
    open_end = rng.random((n, c)) < 0.7
    alts = np.where(rng.random((n, c)) < 0.5, rng.choice([4, 7, 8], size=(n, c)), -1)
    alts = alts.astype("int32")
    counts = [0, 0]
    for step in range(length + 1):
        got = ops.convert_to_numpy(glue_ban(sequences, step, phrases, open_end, alts))
        for row in range(n):
            want = ref_glued(
                sequences[row, :step].tolist(), phrases[row].tolist(), open_end[row], alts[row]
            )
            assert bool(got[row]) == want
            counts[want] += 1
    assert min(counts) > 50


def ruled_bigram(table, phrases, open_end, glue, **rules):
    """Two rows' greedy answers from token 1 under the bigram `table`, with the word rules'
    phrases (`[2, C, L]`), `open_end`, `glue` and other `word_rules_step` keywords."""
    step, state = bigram_step(table), {"h": ops.zeros((2, 2))}
    ruled, ruled_state = word_rules_step(
        step,
        state,
        np.zeros([2, 3], "int32"),
        None,
        2,
        6,
        phrases,
        open_end,
        max_period=0,
        glue=glue,
        **rules,
    )
    start = np.array([1, 1], "int32")
    return ops.convert_to_numpy(
        greedy_search(ruled, ruled_state, start, 2, max_length=6)["sequences"]
    )


def bigram_table(scores):
    """`[VOCAB, VOCAB]` of -6 but the `{(previous, next): score}` given."""
    table = np.full([VOCAB, VOCAB], -6.0, "float32")
    for (previous, token), score in scores.items():
        table[previous, token] = score
    return table


def test_an_open_ended_placeholder_is_not_glued_to():
    """The step writes the phrase `$p` (ids 10, 11) and then prefers a glued letter (8): with
    the rules the next piece starts a word (6) instead; a closed phrase may be glued to."""
    table = bigram_table(
        {(1, 10): 5.0, (10, 11): 5.0, (11, 8): 5.0, (11, 6): 4.0, (8, 2): 5.0, (6, 2): 5.0}
    )
    glue = np.zeros([VOCAB], bool)
    glue[7:12] = True
    phrases = np.array([[[10, 11]], [[10, 11]]], "int32")
    out = ruled_bigram(table, phrases, np.array([[True], [False]]), glue)
    assert out[0, :4].tolist() == [10, 11, 6, 2]
    assert out[1, :4].tolist() == [10, 11, 8, 2]


def test_an_accelerator_marker_is_followed_by_a_glued_piece():
    """The step writes the marker phrase `_` (id 10) and then prefers to end (2), else a word
    start (6): with the marker flag only a glued piece (8) may follow it, so the label keeps
    its accelerator; without the flag the answer ends after the marker."""
    table = bigram_table(
        {(1, 10): 5.0, (10, 2): 5.0, (10, 6): 4.0, (10, 8): 1.0, (8, 2): 5.0, (6, 2): 5.0}
    )
    glue = np.zeros([VOCAB], bool)
    glue[7:10] = True
    phrases = np.array([[[10]], [[10]]], "int32")
    closed = np.array([[False], [False]])
    out = ruled_bigram(table, phrases, closed, glue, marker=np.array([[True], [False]]))
    assert out[0, :3].tolist() == [10, 8, 2]
    assert out[1, :2].tolist() == [10, 2]


def ref_tails(history, phrases, alts):
    """Whether the history ends with a whole phrase, and the pieces that go on with the phrases
    it has begun (it ends with a phrase's first j pieces, 0 < j < the phrase's length)."""
    whole, going_on = False, set()
    for phrase, alt in zip(phrases, alts):
        phrase = [t for t in phrase if t >= 0]
        for j in range(1, len(phrase) + 1):
            if len(history) < j:
                break
            tail = history[len(history) - j :]
            first = tail[0] == phrase[0] or (alt >= 0 and tail[0] == alt)
            if first and tail[1:] == phrase[1:j]:
                if j == len(phrase):
                    whole = True
                else:
                    going_on.add(phrase[j])
    return whole, going_on


def random_phrases(rng, n, c, width, alphabet):
    phrases = rng.choice(alphabet, size=(n, c, width)).astype("int32")
    cut = rng.integers(0, width + 1, size=(n, c))  # phrase lengths 0 .. width
    phrases = np.where(np.arange(width)[None, None, :] < cut[:, :, None], phrases, -1)
    alts = np.where(rng.random((n, c)) < 0.5, rng.choice(alphabet, size=(n, c)), -1)
    return phrases, alts.astype("int32")


def test_phrase_tails_is_the_written_out_rule():
    from keras_attn.decoding.words import phrase_tails

    rng = np.random.default_rng(4)
    n, length, c, width = 64, 8, 3, 3
    sequences = random_rows(rng, n, length, [4, 7, 8])
    phrases, alts = random_phrases(rng, n, c, width, [4, 7, 8])
    seen = set()
    for step in range(length + 1):
        whole, going_on = (
            ops.convert_to_numpy(x) for x in phrase_tails(sequences, step, phrases, alts)
        )
        assert going_on.shape == (n, c, width)
        for row in range(n):
            want = ref_tails(sequences[row, :step].tolist(), phrases[row].tolist(), alts[row])
            got = {int(t) for t in going_on[row].ravel() if t >= 0}
            assert (bool(whole[row].any()), got) == want
            seen.add((want[0], bool(want[1])))
    assert seen == {(False, False), (False, True), (True, False), (True, True)}


def test_word_rules_spare_the_placeholders_written_out():
    """With the source's placeholders given: the bans of the rules without them (loops, cut
    words, glue), but no cut-word or glue ban of a piece that goes on with a placeholder the
    answer has begun, nor, right after a whole one, of the first piece of each; loops stay
    banned."""
    rng = np.random.default_rng(5)
    n, length, c, width = 128, 9, 2, 3
    alphabet = [4, 7, 8, 9, 10]
    sequences = random_rows(rng, n, length, alphabet)
    source = random_rows(rng, n, 10, [0] + alphabet)
    phrases, alts = random_phrases(rng, n, c, width, alphabet)
    open_end = rng.random((n, c)) < 0.5
    rules = WordRules(WORD_START, end_id=2, max_period=2, glue=GLUE)
    counts = {"going on": 0, "after a whole one": 0, "a loop spared none": 0}
    for step in range(length + 1):
        allowed = np.broadcast_to(
            ops.convert_to_numpy(
                rules.allowed(sequences, step, source, VOCAB, (phrases, open_end, alts))
            ),
            (n, VOCAB),
        )
        for row in range(n):
            history, src = sequences[row, :step].tolist(), source[row].tolist()
            whole, going_on = ref_tails(history, phrases[row].tolist(), alts[row])
            firsts = set()
            if whole:
                firsts = {int(p[0]) for p in phrases[row] if p[0] >= 0}
                firsts |= {int(a) for p, a in zip(phrases[row], alts[row]) if p[0] >= 0 <= a}
            looped, banned = ref_loop(history, src, 2, 3), set()
            if ref_inside(history, src, 8):
                banned.add(2)
                if len(ref_last_word(history)) >= 2:
                    banned |= {t for t in range(VOCAB) if not GLUE[t]} - {ref_next(history, src)}
            if ref_glued(history, phrases[row].tolist(), open_end[row], alts[row]):
                banned |= {t for t in range(VOCAB) if GLUE[t]}
            want = [t not in (banned - going_on - firsts) | looped for t in range(VOCAB)]
            assert allowed[row].tolist() == want, (history, src)  # loops stay banned
            counts["going on"] += bool((banned & going_on) - looped)
            counts["after a whole one"] += bool((banned & firsts) - going_on - looped)
            counts["a loop spared none"] += bool(looped & (going_on | firsts))
    assert min(counts.values()) > 2, counts  # every case happens


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_placeholder_the_source_glues_to_a_word_is_kept(search):
    """The source glues a placeholder to a word (`<i>Tools`, `/>Please`), so the placeholder's
    own pieces read as a source word being copied: the rules let the answer write the next
    placeholder right after a whole one, and the next piece of a begun one, where the
    source word goes on otherwise."""
    lt, pct, space, i, tool, gt, slash, gt_lt = 4, 5, 6, 7, 8, 9, 10, 11
    table = np.full([VOCAB, VOCAB], -6.0, "float32")
    table[1, lt], table[lt, i] = 5.0, 5.0
    # "▁< i >" then "▁%1" (the source's "Tools" second); "▁< i ▁ /" then ">" ("><" second)
    table[i, gt], table[i, space], table[space, slash] = 5.0, 4.0, 5.0
    table[gt, pct], table[gt, tool] = 5.0, 4.0
    table[slash, gt], table[slash, gt_lt] = 5.0, 4.0
    table[pct, 2], table[tool, 2], table[gt_lt, 2] = 5.0, 5.0, 5.0
    step, state = bigram_step(table), {"h": ops.zeros((1, 2))}

    def run(source, phrases):
        phrases = np.array([phrases], "int32")
        ruled, ruled_state = word_rules_step(
            step,
            state,
            np.array([source], "int32"),
            WORD_START,
            2,
            7,
            phrases,
            np.zeros(phrases.shape[:2], bool),
            max_period=0,
            glue=GLUE,
        )
        return first_answer(search, ruled, ruled_state, 7)

    # "▁<i>Tools ▁%1": after the whole `<i>` the answer writes `%1` (not "Tools")
    assert run([lt, i, gt, tool, pct, 2], [[lt, i, gt], [pct, -1, -1]])[:5] == [lt, i, gt, pct, 2]
    # "▁<i ▁/><": the placeholder `<i />` ends with ">" where the source word "▁/><" goes on
    # with "><"
    table[i, gt] = 0.0  # "▁< i" goes on with "▁" here
    step = bigram_step(table)
    want = [lt, i, space, slash, gt, pct, 2]
    assert run([lt, i, space, slash, gt_lt, 2], [[lt, i, space, slash, gt]])[:7] == want
