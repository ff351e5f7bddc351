"""Token-count batches streamed from a file (`train.token_batches`): no batch holds more
than `max_tokens` positions, padding included, and one pass yields every pair exactly once."""

import collections

import numpy as np

from keras_attn import train
from keras_attn.text import CharTokenizer


def _corpus(tmp_path, n=300):
    rng = np.random.RandomState(0)
    letters = list("abcdefghij")
    pairs = []
    for i in range(n):
        src = "".join(rng.choice(letters, size=rng.randint(1, 30))) + str(i)
        pairs.append((src, src[::-1].upper()))
    path = tmp_path / "train.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path, pairs


def test_batches_hold_at_most_max_tokens_and_one_pass_yields_every_pair_once(tmp_path):
    path, pairs = _corpus(tmp_path)
    tokenizer = CharTokenizer.build(t for pair in pairs for t in pair)
    max_tokens, max_length = 96, 40
    stream = train.token_batches(
        path, tokenizer, max_tokens=max_tokens, max_length=max_length, repeat=False, chunk=32
    )
    seen = collections.Counter()
    batches = 0
    for x, y in stream:
        src, tgt_in = x["source"].numpy(), x["target_in"].numpy()
        assert src.shape[0] == tgt_in.shape[0] == y.shape[0]
        assert src.size <= max_tokens and tgt_in.size <= max_tokens and y.numpy().size <= max_tokens
        for row in src:
            seen[tuple(int(t) for t in row if t != tokenizer.pad_id)] += 1
        batches += 1
    want = collections.Counter(
        tuple(int(t) for t in ids) for ids in tokenizer.tokenize([s for s, _ in pairs]).to_list()
    )
    assert seen == want
    assert batches > len(pairs) * 4 / max_tokens  # batched by tokens, not one batch of all


def test_longer_sequences_get_smaller_batches(tmp_path):
    path, pairs = _corpus(tmp_path)
    tokenizer = CharTokenizer.build(t for pair in pairs for t in pair)
    stream = train.token_batches(path, tokenizer, max_tokens=128, max_length=40, repeat=False)
    sizes = {}
    for x, _ in stream:
        width = x["source"].shape[1]
        sizes.setdefault(width, set()).add(x["source"].shape[0])
    widths = sorted(sizes)
    assert max(sizes[widths[0]]) > max(sizes[widths[-1]])
