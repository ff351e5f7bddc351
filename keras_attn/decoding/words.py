"""Word rules for translation: no loops the source does not have, source words never cut.

Two bans on a step's candidates, read off the hypothesis's own tokens and its source's (the
source and target share one vocabulary, as the SentencePiece translators do), in `keras.ops`
so they run on TensorFlow and JAX, eagerly, in a `tf.function` or under XLA:

- `loop_ban`: a token that would make the last `repeats * p` tokens `repeats` copies of one
  `p`-gram (`p = 1 .. max_period`), "de la pista de la pista de la pista", unless the source
  holds those very tokens (so "%s %s %s", "1000" or "!!!" copied from the source stay
  possible). Repeated placeholders such as "%s of %s" are no loop.
- `word_loop_ban` (with the vocabulary's `word_text_tables`): the same for a word's text,
  case aside, however its copies are spelled ("▁real ▁real ▁re" + "al" is a third copy the
  ban on tokens lets through), unless the source writes that text three times in a row. The
  texts are compared by two hashes of their characters (`HASH_MODULI`).
- `end_inside_word`: the end token while the answer's last word (the tokens since its last
  word-start piece, `word_start`) is a strict prefix of a word of the source and no whole word
  of it: a name the model is copying ("Lo" of "Loti") is finished before the answer ends;
  and, once that word holds `copy_tokens` (2) or more of the source word's tokens, every
  piece but those that go on with the word (the `glue` pieces: letters, digits, `_`, `$`)
  and the source word's own next piece: a word copied piece by piece ("Th" "un" of "Th"
  "un" "ar") is finished before the next word or a punctuation mark (`Thun como`, `Thun.`
  cannot be written; a word that only shares its first piece with a source word, `control`
  of `controlling`, is free). Without `glue`, only the word-start pieces wait.
- `copied_next`: given the source's `fixed` words (the words the model never saw in training,
  `keras_attn.text.words.unknown_word_pieces`), once the answer's last word holds the first
  token(s) of one, only its next token may follow until it is whole: `Misurio` for `Missouri`
  cannot be written, nor `Wying` for `Wyoming`. A word the answer does not begin with the
  source word's first piece is free (it may be translated). Once whole, no `glue` piece may
  follow it (`Daloaa` for `Daloa`).
- `glue_ban`: right after a required phrase that is an open-ended placeholder (`$name`,
  `%1`: `keras_attn.text.placeholders.open_ended`), the pieces that would glue to it and
  change how it reads (`$namex`, `%1u`; `keras_attn.text.placeholders.glue_pieces`).
- the marker's letter: right after a required phrase that is a keyboard accelerator's marker
  (`_` of `_File`, `&` of `&Open`: a marker is one only before a letter), only the pieces
  that glue to it, the end token and the rest banned.

Given the source's placeholders (the required phrases, `phrase_tails`), the rules for words
stand in no placeholder's way: the piece that goes on with one the answer has begun, and right
after a whole one the first piece of each, are banned by neither `end_inside_word` nor
`glue_ban` (`loop_ban` holds for them). A source that glues a placeholder to a word
(`<i>Tools`, `<br /><b>`) would otherwise make the placeholder's own pieces read as that word
being copied, and ban the next placeholder, or a placeholder's own next piece (`>` of
`<br />` after "▁ /" of the source's "▁ / ><").

`WordRules` holds the tables and applies both to a step's logits (`process`); `word_rules_step`
wraps any step function so that its state carries what the rules read (the tokens so far, the
source), and works with every search of `keras_attn.decoding` as it is:

    step, state = word_rules_step(model.decode_step, state, source_ids, word_start, end_id,
                                  max_length)
    beam_search(step, state, start_tokens, end_id, max_length=max_length, ...)

Conventions: `sequences [N, T]` holds the generated tokens in columns `0 .. step - 1`
(the start token is not one of them); `source_ids [N, S]` padded with ids for which
`word_start` is False and that match no generated token (`pad` 0 and -1 both work: neither
is ever generated).
"""

from __future__ import annotations

import re

import numpy as np
from keras import ops

from keras_attn._checks import check_int
from keras_attn.decoding import backend as kb
from keras_attn.decoding import shapes
from keras_attn.decoding.processors import token_mask

NEG = -1e9
# The longest source word (in tokens) the rules for words read: hyphenated names and
# identifiers (`Escaldes-Engordany`, `canon_usb_dialogue`) run past 8 pieces.
MAX_WORD = 16


def sentencepiece_word_starts(vocabulary, reserved=4):
    """`[V]` bool (NumPy): the pieces that start a word (SentencePiece's `▁` first), the
    first `reserved` ids (pad, start, end, unk) False."""
    starts = np.array([piece.startswith("\u2581") for piece in vocabulary], bool)
    starts[:reserved] = False
    return starts


def _back(sequences, step, k):
    """`[N, k]`: `out[:, i] = sequences[:, step - 1 - i]` (the tokens before `step`, latest
    first) and `[1, k]` bool: whether that column exists (`step - 1 - i >= 0`)."""
    length = sequences.shape[1]
    index = ops.cast(step, "int32") - 1 - ops.arange(k, dtype="int32")
    valid = index >= 0
    taken = ops.take(sequences, ops.clip(index, 0, length - 1), axis=1)
    return taken, valid[None, :]


def _windows(source_ids, width):
    """`[N, S, width]`: `out[:, s, i] = source_ids[:, s + i]`, -2 past the end (no token)."""
    padded = ops.pad(source_ids, [[0, 0], [0, width]], constant_values=-2)
    size = source_ids.shape[1]
    if size is None:  # a source length known when the graph runs
        size = ops.shape(source_ids)[1]
    index = ops.arange(size, dtype="int32")[:, None] + ops.arange(width, dtype="int32")[None, :]
    return ops.take(padded, index, axis=1)  # one gather of the [S, width] positions


def loop_ban(sequences, step, source_ids=None, max_period=8, repeats=3, exempt_ids=None):
    """`(tokens [N, P] int32, banned [N, P] bool)`, `P = max_period`: for each period `p` the
    token that would complete `repeats` copies of the last `p`-gram and whether it is banned
    (the copies are there and the source does not hold those tokens, nor is the token one of
    `exempt_ids`). `repeats >= 2`. Every period at once: each test is one gather and one
    comparison over `[N, P, repeats * P]`, masked to the period's own tokens."""
    repeats = check_int("repeats", repeats, 2)
    max_period = check_int("max_period", max_period)
    sequences = ops.cast(sequences, "int32")
    width = repeats * max_period
    back, valid = _back(sequences, step, width)  # back[:, k - 1] = y[step - k]
    period = np.arange(1, max_period + 1)[:, None]  # [P, 1]
    i = np.arange(width)[None, :]  # [1, W]
    # the copies: y[step - 1 - i] == y[step - 1 - i - p] for i < (repeats - 1) * p - 1, and
    # the repeats * p - 1 tokens they cover exist
    later = ops.take(back, np.minimum(i + period, width - 1).astype("int32"), axis=1)  # [N, P, W]
    compared = i < (repeats - 1) * period - 1
    ok = ops.all(ops.equal(back[:, None, :], later) | ~compared, axis=-1)
    ok = ok & ops.take(valid[0], (repeats * period[:, 0] - 2).astype("int32"))[None, :]
    tokens = back[:, :max_period]  # the candidate that completes the copies: y[step - p]
    if source_ids is not None:  # the same tokens (candidate included) in the source
        source = ops.cast(source_ids, "int32")
        # window[:, p - 1, i]: y[step - repeats * p + 1 + i] for i < repeats * p - 1 (oldest
        # first), then the candidate y[step - p]; columns past repeats * p - 1 are no part of it
        span = repeats * period - 1
        where = np.where(i < span, span - 1 - i, np.where(i == span, period - 1, 0))
        window = ops.take(back, where.astype("int32"), axis=1)  # [N, P, W]
        inside = i <= span  # [P, W]
        same = ops.equal(_windows(source, width)[:, :, None, :], window[:, None, :, :])
        held = ops.any(ops.all(same | ~inside, axis=-1), axis=1)  # [N, P]
        ok = ok & ~held
    if exempt_ids is not None:
        exempt = ops.convert_to_tensor(np.asarray(exempt_ids, np.int32).reshape(-1))
        ok = ok & ~ops.any(ops.equal(tokens[:, :, None], exempt[None, None, :]), axis=-1)
    return tokens, ok


# The two moduli of the words' text hashes (`word_text_tables`): each below 2**15, so that a
# product of two residues fits int32, and their key `h1 * M2 + h2` below 2**31.
HASH_MODULI = (32749, 32719)
HASH_BASE = 257
# The most characters of a word the hashes read (its text past them hashed as that many).
MAX_WORD_CHARS = 1024


def word_text_tables(vocabulary, reserved=4):
    """The tables `word_loop_ban` reads off a vocabulary: `(hashes [2, V], lengths [V],
    powers [2, MAX_WORD_CHARS + 1])` int32 (NumPy): each piece's text (SentencePiece's `▁`
    dropped, a byte piece `<0x41>` its byte, lower case) hashed modulo each of `HASH_MODULI`,
    its length in characters, and the powers of `HASH_BASE`. The first `reserved` ids (pad,
    start, end, unk) have no text."""
    hashes = np.zeros([2, len(vocabulary)], np.int64)
    lengths = np.zeros([len(vocabulary)], np.int32)
    for i, piece in enumerate(vocabulary):
        if i < reserved:
            continue
        match = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", piece)
        text = chr(int(match.group(1), 16)) if match else piece.lstrip("\u2581")
        text = text.lower()
        lengths[i] = len(text)
        for m, modulus in enumerate(HASH_MODULI):
            value = 0
            for c in text:
                value = (value * HASH_BASE + ord(c)) % modulus
            hashes[m, i] = value
    powers = np.ones([2, MAX_WORD_CHARS + 1], np.int64)
    for m, modulus in enumerate(HASH_MODULI):
        for e in range(1, MAX_WORD_CHARS + 1):
            powers[m, e] = powers[m, e - 1] * HASH_BASE % modulus
    return hashes.astype(np.int32), lengths, powers.astype(np.int32)


def _word_keys(ids, word_start, tables):
    """`(word [N, L], keys [N, L + 1], lengths [N, L + 1])` of token rows `ids [N, L]` (oldest
    first): the index of the word each token is in (a word: a word-start piece and the
    pieces after it; a token that is no piece of a word, ids below 4, -1, starts a word of
    its own; 0: the tokens before the row's first word start), and per word index its text's
    key (`h1 * M2 + h2`; negative for a word that is no text: index 0, or one begun by a token
    that is no piece) and its length in characters."""
    hashes, lengths, powers = (ops.convert_to_tensor(t) for t in tables)
    table = ops.convert_to_tensor(np.asarray(word_start, bool))
    vocab = int(np.asarray(word_start).shape[0])
    ids = ops.cast(ids, "int32")
    content = (ids >= 4) & (ids < vocab)
    safe = ops.clip(ids, 0, vocab - 1)
    starts = (ops.take(table, safe, axis=0) & content) | ~content
    word = ops.cumsum(ops.cast(starts, "int32"), axis=1)  # [N, L]
    size = ids.shape[1]
    if size is None:  # a source length known when the graph runs
        size = ops.shape(ids)[1]
    same = ops.equal(word[:, :, None], word[:, None, :])  # [N, L (i), L (k)]
    later = ops.arange(size)[None, :] > ops.arange(size)[:, None]  # k after i
    length = ops.where(content, ops.take(lengths, safe, axis=0), 0)  # [N, L]
    after = ops.sum(ops.where(same & later[None], length[:, None, :], 0), axis=-1)
    after = ops.clip(after, 0, MAX_WORD_CHARS)
    one_hot = ops.equal(word[:, None, :], ops.arange(size + 1, dtype="int32")[None, :, None])
    parts = []
    for m, modulus in enumerate(HASH_MODULI):
        term = ops.take(hashes[m], safe, axis=0) * ops.take(powers[m], after, axis=0) % modulus
        term = ops.where(content, term, 0)
        parts.append(ops.sum(ops.where(one_hot, term[:, None, :], 0), axis=-1) % modulus)
    keys = parts[0] * HASH_MODULI[1] + parts[1]  # [N, L + 1]
    chars = ops.sum(ops.where(one_hot, length[:, None, :], 0), axis=-1)
    # a word begun by a token that is no piece of a word (and index 0) is no text
    begun = ops.any(one_hot & (starts & content)[:, None, :], axis=-1)
    other = ops.any(one_hot & ~content[:, None, :], axis=-1)
    text = begun & ~other & (ops.arange(size + 1)[None, :] > 0)
    return word, ops.where(text, keys, -1), chars


def looped_words(source_ids, word_start, tables):
    """`[N, S + 1]` int32: the keys (`_word_keys`) of the words the source writes three times
    in a row (the same text, however spelled), -1 elsewhere: the loops `word_loop_ban` leaves
    possible."""
    _, keys, chars = _word_keys(source_ids, word_start, tables)
    shifted = [
        ops.pad(x[:, k:], [[0, 0], [0, k]], constant_values=-1)
        for x in (keys, chars)
        for k in (1, 2)
    ]
    triple = (keys >= 0) & ops.equal(keys, shifted[0]) & ops.equal(keys, shifted[1])
    triple = triple & ops.equal(chars, shifted[2]) & ops.equal(chars, shifted[3])
    return ops.where(triple, keys, -1)


def word_loop_ban(sequences, step, word_start, tables, looped=None, max_word=MAX_WORD):
    """`[N, V]` bool: the tokens that would make the answer's last three words one text three
    times in a row (case aside, however the copies are spelled: `▁real ▁real ▁re` + `al`),
    unless that text is one of `looped` (`[N, S + 1]`, `looped_words` of the source). A
    continuing piece is banned where the last word with it would be the third copy, a word-start
    piece where it would be a third copy alone. Words of up to `max_word` pieces."""
    hashes, lengths, powers = (ops.convert_to_tensor(t) for t in tables)
    width = 3 * max_word
    back, valid = _back(ops.cast(sequences, "int32"), step, width)
    history = ops.flip(ops.where(valid, back, -1), axis=1)  # [N, W], oldest first
    word, keys, chars = _word_keys(history, word_start, tables)
    last = ops.max(word, axis=1)  # the current word
    k0, k1, k2 = (
        ops.take_along_axis(keys, ops.maximum(last - j, 0)[:, None], axis=1) for j in range(3)
    )
    c0, c1, c2 = (
        ops.take_along_axis(chars, ops.maximum(last - j, 0)[:, None], axis=1) for j in range(3)
    )
    vocab = int(np.asarray(word_start).shape[0])
    ids = ops.arange(vocab, dtype="int32")
    content = (ids >= 4)[None, :]
    start = ops.convert_to_tensor(np.asarray(word_start, bool))[None, :]
    # a word-start piece: the current word and the one before it, then this one alone
    key_alone = (hashes[0] * HASH_MODULI[1] + hashes[1])[None, :]
    alone = content & start & ops.equal(key_alone, k0) & ops.equal(k0, k1) & (k0 >= 0)
    alone = alone & ops.equal(lengths[None, :], c0) & ops.equal(c0, c1)
    # a continuing piece: the two words before the current one, then the current one with
    # it. Its length is theirs less the current word's (d), its hash the one that makes
    # `hash(current) * B**d + hash(piece)` theirs: one per row, compared with each piece's.
    d = c1 - c0
    power = [ops.take(powers[m], ops.clip(d, 0, MAX_WORD_CHARS), axis=0) for m in range(2)]
    parts = [
        ops.mod(
            ops.mod(k, modulus) - ops.mod(ops.maximum(h, 0) * power[m], modulus) + modulus,
            modulus,
        )
        for m, (k, h, modulus) in enumerate(
            zip(
                (ops.floor_divide(k1, HASH_MODULI[1]), ops.mod(k1, HASH_MODULI[1])),
                (ops.floor_divide(k0, HASH_MODULI[1]), ops.mod(k0, HASH_MODULI[1])),
                HASH_MODULI,
            )
        )
    ]
    wanted = parts[0] * HASH_MODULI[1] + parts[1]  # [N, 1]
    row = (k0 >= 0) & (k1 >= 0) & ops.equal(k1, k2) & ops.equal(c1, c2) & (d > 0)
    goes_on = content & ~start & row & ops.equal(key_alone, wanted)
    goes_on = goes_on & ops.equal(lengths[None, :], d)
    banned = alone | goes_on
    if looped is not None:  # every banned piece makes the text of the word before: k1
        held = ops.any(ops.equal(ops.cast(looped, "int32"), k1) & (k1 >= 0), axis=1)
        banned = banned & ~held[:, None]
    return banned


def end_inside_word(sequences, step, source_ids, word_start, max_word=MAX_WORD):
    """`[N]` bool: the answer's last word (its tokens since the last word-start piece, at most
    `max_word` of them) is a strict prefix of a word of the source, token for token, and is
    no whole word of it. `word_start`: `[V]` bool (NumPy). Ids below 4 (pad, start, end,
    unk) and negative ones are in no word."""
    return cut_word(sequences, step, source_ids, word_start, max_word)[0]


def cut_word(sequences, step, source_ids, word_start, max_word=MAX_WORD):
    """`(cut [N] bool, tokens [N] int32, next [N] int32)`: `end_inside_word`, how many tokens
    the answer's last word has (`max_word + 1`: more, or no word start in the last
    `max_word`), and the token that follows the answer's last word in the first source word
    it is a strict prefix of (-1: none)."""
    return _cut(_word_prefixes(sequences, step, source_ids, word_start, max_word))


def _cut(prefixes):
    """`cut_word` from `_word_prefixes`."""
    match, goes_on, after, w = prefixes
    strict = ops.any(match & goes_on, axis=1)
    whole = ops.any(match & ~goes_on, axis=1)
    first = ops.argmax(ops.cast(match & goes_on, "int32"), axis=1)
    following = ops.take_along_axis(after, ops.cast(first, "int32")[:, None], axis=1)[:, 0]
    return strict & ~whole, w, ops.where(strict, following, -1)


def copied_next(sequences, step, source_ids, word_start, fixed, max_word=MAX_WORD):
    """`(next [N, S] int32, done [N] bool)`. `next`: where the answer's last word is a strict
    prefix, token for token, of a source word all of whose tokens are `fixed` (`[N, S]` bool:
    the words to copy whole) and no whole word of the source, that word's next token, at the
    position of the answer's last token in the source; -1 elsewhere. A row with any id there
    may only go on with one of them (`WordRules`' `fixed`). `done`: the answer's last word is
    a whole `fixed` word of the source and a prefix of none (no letter may be glued to it)."""
    return _copied(_word_prefixes(sequences, step, source_ids, word_start, max_word), fixed)


def _copied(prefixes, fixed):
    """`copied_next` from `_word_prefixes`."""
    match, goes_on, after, _ = prefixes
    fixed = ops.cast(fixed, "bool")
    whole = ops.any(match & ~goes_on, axis=1)
    strict = match & goes_on
    held = strict & fixed & ~whole[:, None]
    done = ops.any(match & ~goes_on & fixed, axis=1) & ~ops.any(strict, axis=1)
    return ops.where(held, after, -1), done


def _word_prefixes(sequences, step, source_ids, word_start, max_word):
    """`(match [N, S], goes_on [N, S], after [N, S], w [N])`: whether the answer's last word
    (its last `w` tokens, since its last word-start piece; `max_word + 1`: none within
    `max_word`) is the source's tokens up to `j`, from the start of the source word `j` is in;
    whether that source word goes on after `j`; the source token after `j` (-2 past the end)."""
    sequences = ops.cast(sequences, "int32")
    source = ops.cast(source_ids, "int32")
    table = ops.convert_to_tensor(np.asarray(word_start, bool))
    vocab = int(np.asarray(word_start).shape[0])

    def starts(ids):
        inside = (ids >= 0) & (ids < vocab)
        return ops.take(table, ops.clip(ids, 0, vocab - 1), axis=0) & inside

    def content(ids):
        return (ids >= 4) & (ids < vocab)

    back, valid = _back(sequences, step, max_word)  # back[:, i] = y[step - 1 - i]
    k = ops.arange(1, max_word + 1, dtype="int32")[None, :]
    # the answer's last word has w tokens: the smallest k with a word start at step - k
    w = ops.min(ops.where(starts(back) & valid, k, max_word + 1), axis=1)  # [N]
    # ends[:, j, i] = source[:, j - i] (-2 before the start): the source read back from j
    ends = ops.flip(_windows(ops.flip(source, axis=1), max_word), axis=1)
    end_start, end_word = starts(ends), content(ends)
    # the length of the source word that j is in, counted up to j (max_word + 1: none): the
    # smallest length whose first token back starts a word, with word tokens all the way
    length = np.arange(1, max_word + 1)[:, None]  # [M (length), 1]
    i = np.arange(max_word)[None, :]  # [1, M (back from j)]
    words = ops.all(end_word[:, :, None, :] | (i >= length), axis=-1)  # [N, S, M]
    found = ops.concatenate([end_start & words, ops.ones_like(words[:, :, :1])], axis=-1)
    word_len = ops.cast(ops.argmax(ops.cast(found, "int32"), axis=-1), "int32") + 1
    # the source word goes on after j
    after = ops.pad(source[:, 1:], [[0, 0], [0, 1]], constant_values=-2)
    goes_on = content(after) & ~starts(after)
    # the answer's last w tokens are source tokens j - w + 1 .. j
    same = ops.equal(back[:, None, :], ends) | (k[:, None, :] > w[:, None, None])
    match = ops.all(same, axis=-1) & ops.equal(word_len, w[:, None]) & (w[:, None] <= max_word)
    return match, goes_on, after, w


def phrase_tails(sequences, step, phrase_ids, alt_ids=None):
    """`(whole [N, C] bool, next [N, C, L] int32)` for the required phrases `phrase_ids
    [N, C, L]` (padded with -1; `alt_ids [N, C]`: a second id each phrase's first piece may be,
    -1: none): whether the answer ends with the whole phrase, and `next[:, c, j - 1]`, the
    phrase's piece `j` where the answer ends with its first `j` pieces and the phrase goes on
    (-1 elsewhere): the pieces that go on with the phrases the answer has begun."""
    sequences = ops.cast(sequences, "int32")
    phrases = ops.cast(phrase_ids, "int32")
    width = phrases.shape[-1]
    lengths = ops.sum(ops.cast(phrases >= 0, "int32"), axis=-1)[:, :, None]  # [N, C, 1]
    # every tail at once: tails[:, j - 1, k] = y[step - j + k], the answer's last j tokens
    j = ops.arange(1, width + 1, dtype="int32")  # [L]
    k = ops.arange(width, dtype="int32")
    index = ops.cast(step, "int32") - j[:, None] + k[None, :]  # [L, L]
    tails = ops.take(sequences, ops.clip(index, 0, sequences.shape[1] - 1), axis=1)  # [N, L, L]
    same = ops.equal(tails[:, None], phrases[:, :, None, :])  # [N, C, L (j), L (k)]
    first = same[..., 0]
    if alt_ids is not None:
        alt = ops.cast(alt_ids, "int32")[:, :, None]
        first = first | (ops.equal(tails[:, None, :, 0], alt) & (alt >= 0))
    inside = (k[None, :] < j[:, None])[None, None, :, 1:]  # the tail's positions past its first
    rest = ops.all(same[..., 1:] | ~inside, axis=-1)
    ok = first & rest & (ops.cast(step, "int32") - j >= 0)[None, None, :]  # [N, C, L]
    whole = ops.any(ok & ops.equal(lengths, j), axis=-1)
    # the piece that goes on: phrase[j] where the answer ends with phrase[:j] and it goes on
    following = ops.concatenate([phrases[:, :, 1:], ops.full_like(phrases[:, :, :1], -1)], axis=-1)
    return whole, ops.where(ok & (lengths > j), following, -1)


def glue_ban(sequences, step, phrase_ids, open_end, alt_ids=None):
    """`[N]` bool: the answer ends with one of its open-ended phrases (`open_end [N, C]` bool:
    placeholders such as `$name` or `%1` that text glued after them changes), so the pieces
    that would glue must wait. `phrase_ids [N, C, L]` padded with -1 (the required phrases,
    `constraint_ids`); `alt_ids [N, C]`: a second id each phrase's first piece may be (-1:
    none; the exports' `constraint_alt_ids` first column)."""
    whole, _ = phrase_tails(sequences, step, phrase_ids, alt_ids)
    return ops.any(whole & ops.cast(open_end, "bool"), axis=1)


class WordRules:
    """The rules with their tables, applied to a step's logits.

    Args:
        word_start: `[V]` bool, the pieces that start a word (`sentencepiece_word_starts`);
            None: no `end_inside_word`.
        end_id: the end token.
        max_period: the longest `p`-gram (in tokens) `loop_ban` looks at; 0: no loop ban.
        repeats: how many copies in a row make a loop (3: a third copy is banned).
        exempt_ids: tokens never banned by `loop_ban`.
        max_word: the longest source word (in tokens) `end_inside_word` and `fixed` protect.
        copy_tokens: from how many of a source word's tokens copied into the answer's last
            word on, only the pieces that go on with the word (`glue`, and the source word's
            next piece) are allowed until its end (without `glue`: the word-start pieces
            wait); 0: only the end token waits.
        glue: `[V]` bool, the pieces that glue to an open-ended placeholder
            (`keras_attn.text.placeholders.glue_pieces`); None: no `glue_ban`.
        word_text: the vocabulary's `word_text_tables` (needs `word_start`): no word's text
            three times in a row however its copies are spelled (`word_loop_ban`), unless
            the source writes it so; None: the loop ban on tokens alone.

    `allowed` and `process` take the source's `fixed` words (`[N, S]` bool, or None): the
    words copied whole once begun (`copied_next`; needs `word_start`).
    """

    def __init__(
        self,
        word_start=None,
        end_id=2,
        max_period=8,
        repeats=3,
        exempt_ids=None,
        max_word=MAX_WORD,
        glue=None,
        copy_tokens=2,
        word_text=None,
    ):
        self.word_start = None if word_start is None else np.asarray(word_start, bool)
        self.end_id = int(end_id)
        self.max_period = check_int("max_period", max_period, 0)
        self.repeats = int(repeats)
        self.exempt_ids = exempt_ids
        self.max_word = check_int("max_word", max_word)
        self.glue = None if glue is None else np.asarray(glue, bool)
        self.copy_tokens = check_int("copy_tokens", copy_tokens, 0)
        if word_text is not None and word_start is None:
            raise ValueError(
                "`word_text` (the loop ban on words' texts) needs `word_start`, the pieces that "
                "start a word. Received: word_text with word_start=None"
            )
        self.word_text = word_text

    def allowed(
        self, sequences, step, source_ids, vocab, phrases=None, fixed=None, source_loops=None
    ):
        """`[N, V]` bool: the tokens no rule bans. `phrases`: `(phrase_ids, open_end, alt_ids)`
        or `(phrase_ids, open_end, alt_ids, marker)` (`marker [N, C]` bool: the phrases that
        are an accelerator's marker, which only a glued piece may follow), the source's
        placeholders that the answer must hold (see `glue_ban`), or None. Where
        they are given, the rules for words stand in no placeholder's way: the next piece of
        one the answer has begun, and right after a whole one the first piece of each, are
        banned by neither `end_inside_word` nor `glue_ban` (a placeholder's pieces are no name
        being copied, though the source glues them to a word: `<i>Tools`, `/>Please`); the
        loop ban holds for them as for any token."""
        ids = ops.arange(vocab, dtype="int32")[None, :]
        looped = ops.zeros((1, vocab), "bool")  # broadcast to [N, V] by the rules
        banned = ops.zeros((1, vocab), "bool")  # the bans for words
        if self.max_period:
            tokens, loops = loop_ban(
                sequences, step, source_ids, self.max_period, self.repeats, self.exempt_ids
            )
            looped = token_mask(tokens, loops, vocab)
        if self.word_text is not None:  # the same word however spelled
            held = source_loops if source_loops is not None else self.looped(source_ids)
            looped = looped | word_loop_ban(
                sequences, step, self.word_start, self.word_text, held, self.max_word
            )
        if self.word_start is not None:
            # the answer's last word against the source's words: once for both rules
            prefixes = _word_prefixes(sequences, step, source_ids, self.word_start, self.max_word)
            inside, w, following = _cut(prefixes)
            banned = banned | (ops.equal(ids, self.end_id) & inside[:, None])
            if self.copy_tokens:
                copying = inside & (w >= self.copy_tokens)
                if self.glue is None:
                    waits = ops.convert_to_tensor(self.word_start)[None, :]
                else:  # all but the pieces that go on with the word, and its own next one
                    goes_on = ops.convert_to_tensor(self.glue)[None, :]
                    waits = ~(goes_on | ops.equal(ids, following[:, None]))
                banned = banned | (waits & copying[:, None])
            if fixed is not None:  # a begun word the model never saw: its next token only
                nexts, done = _copied(prefixes, fixed)
                held = ops.any(nexts >= 0, axis=1)
                banned = banned | (held[:, None] & ~token_mask(nexts, nexts >= 0, vocab))
                if self.glue is not None:  # and once whole, nothing glued to it
                    banned = banned | (ops.convert_to_tensor(self.glue)[None, :] & done[:, None])
        if phrases is not None:
            phrase_ids = ops.cast(phrases[0], "int32")
            ends, going_on = phrase_tails(sequences, step, phrase_ids, phrases[2])
            if self.glue is not None:
                glued = ops.any(ends & ops.cast(phrases[1], "bool"), axis=1)
                banned = banned | (ops.convert_to_tensor(self.glue)[None, :] & glued[:, None])
            # right after a whole placeholder: the first piece of each (and its alternative)
            firsts = [phrase_ids[:, :, 0]]
            if phrases[2] is not None:  # none for a phrase without pieces
                firsts.append(ops.where(firsts[0] >= 0, ops.cast(phrases[2], "int32"), -1))
            after = ops.any(ends, axis=1)[:, None]
            going_on = kb.reshape(going_on, kb.shape_of(shapes.dim(going_on, 0), -1))
            pieces = [ops.where(after, f, -1) for f in firsts] + [going_on]
            pieces = ops.concatenate(pieces, axis=1)  # [N, C * (L + 2)]
            banned = banned & ~token_mask(pieces, pieces >= 0, vocab)
            marker = phrases[3] if len(phrases) > 3 else None
            if marker is not None and self.glue is not None:  # a marker's letter follows it
                marked = ops.any(ends & ops.cast(marker, "bool"), axis=1)
                banned = banned | (~ops.convert_to_tensor(self.glue)[None, :] & marked[:, None])
        return ~(looped | banned)

    def looped(self, source_ids):
        """`looped_words` of the source (what `allowed` reads with `word_text`), or None."""
        if self.word_text is None:
            return None
        return looped_words(source_ids, self.word_start, self.word_text)

    def process(
        self, logits, sequences, step, source_ids, phrases=None, fixed=None, source_loops=None
    ):
        """`logits [N, V]` with the banned tokens at `NEG`. `source_loops`:
        `looped(source_ids)`, computed once per source (None: here)."""
        allowed = self.allowed(
            sequences, step, source_ids, logits.shape[-1], phrases, fixed, source_loops
        )
        return ops.where(allowed, logits, ops.cast(NEG, logits.dtype))


def _word_rules_state(rules, initial_state, source, max_length, placeholders, fixed):
    """`word_rules_step`'s initial state: `initial_state` under `"inner"`, the tokens so far
    (none: -1), the source, its `placeholders` (`(phrase_ids, open_end, phrase_alt_ids,
    marker)`), the words copied whole and the source's loops."""
    phrase_ids, open_end, phrase_alt_ids, marker = placeholders
    # [B, max_length] of -1 (B may be known only when the graph runs)
    tokens = ops.zeros_like(source[:, :1]) + ops.full((1, int(max_length)), -1, "int32")
    state = {
        "inner": initial_state,
        "word_rules_tokens": tokens,
        "word_rules_source": source,
    }
    if phrase_ids is not None:
        phrases = ops.cast(ops.convert_to_tensor(phrase_ids), "int32")
        state["word_rules_phrases"] = phrases
        state["word_rules_open_end"] = ops.cast(ops.convert_to_tensor(open_end), "bool")
        alt = (
            ops.zeros_like(phrases[:, :, 0]) - 1
            if phrase_alt_ids is None
            else ops.cast(ops.convert_to_tensor(phrase_alt_ids), "int32")
        )
        state["word_rules_alt"] = alt
        if marker is not None:
            state["word_rules_marker"] = ops.cast(ops.convert_to_tensor(marker), "bool")
    if fixed is not None:
        if rules.word_start is None:
            raise ValueError(
                "`fixed` (the source words copied whole) needs `word_start`, the pieces that "
                "start a word. Received: fixed with word_start=None"
            )
        state["word_rules_fixed"] = ops.cast(ops.convert_to_tensor(fixed), "bool")
    if rules.word_text is not None:  # the source's loops, read once
        state["word_rules_looped"] = rules.looped(source)
    return state


def word_rules_step(
    step_fn,
    initial_state,
    source_ids,
    word_start,
    end_id,
    max_length,
    phrase_ids=None,
    open_end=None,
    phrase_alt_ids=None,
    fixed=None,
    marker=None,
    **rules,
):
    """`(step_fn', initial_state')`: `step_fn` whose logits `WordRules(word_start, end_id,
    **rules)` has processed, its state carrying the tokens so far (`"word_rules_tokens"
    [B, max_length]`), `source_ids` (`"word_rules_source" [B, S]`) and the source's
    placeholders (`phrase_ids [B, C, L]`, `open_end [B, C]`, `phrase_alt_ids [B, C]`: what
    `glue_ban`, with `glue=` among `rules`, and `phrase_tails` read; `marker [B, C]` bool, the
    phrases that are an accelerator's marker, or None) and the source's words
    to copy whole (`fixed [B, S]` bool, `"word_rules_fixed"`; None: none), which the searches
    reorder along the beams like the rest of the state. `step_fn` returns `(logits, state)`
    or `(logits, state, attention)`. With `word_text=` among `rules`, the source's loops
    (`WordRules.looped`) are read once into `"word_rules_looped"`."""
    rules = WordRules(word_start, end_id, **rules)
    source = ops.cast(ops.convert_to_tensor(source_ids), "int32")
    placeholders = (phrase_ids, open_end, phrase_alt_ids, marker)
    state = _word_rules_state(rules, initial_state, source, max_length, placeholders, fixed)

    def step(tokens, state, index):
        history = state["word_rules_tokens"]
        index = ops.cast(index, "int32")
        column = ops.arange(history.shape[1], dtype="int32")[None, :]
        write = ops.equal(column, index - 1) & (index >= 1)  # the token chosen last step
        history = ops.where(write, ops.cast(tokens, "int32")[:, None], history)
        out = step_fn(tokens, state["inner"], index)
        logits, inner = out[0], out[1]
        phrases = None
        if "word_rules_phrases" in state:
            phrases = tuple(
                state[k] for k in ("word_rules_phrases", "word_rules_open_end", "word_rules_alt")
            ) + (state.get("word_rules_marker"),)
        logits = rules.process(
            logits,
            history,
            index,
            state["word_rules_source"],
            phrases,
            state.get("word_rules_fixed"),
            state.get("word_rules_looped"),
        )
        new_state = dict(state, inner=inner, word_rules_tokens=history)
        if len(out) == 3:
            return logits, new_state, out[2]
        return logits, new_state

    return step, state
