"""Decoding and scoring a translator during and after training: greedy decoding compiled once
per backend, texts from ids, chrF / BLEU / exact match, loop rate."""

import re

import keras
import numpy as np


def greedy_decoder(model, end_id, start_id, max_length):
    """`fn(source_ids [B, S]) -> dict` (greedy search's outputs, `keras_attn.decoding.generate`)
    compiled once with tf.function (TensorFlow) or by `generate` itself on JAX (one program
    per bucket of batch and source width, `keras_attn.decoding.compiled`)."""
    from keras_attn.decoding import generate

    if keras.backend.backend() == "jax":
        return _jax_greedy_decoder(model, end_id, start_id, max_length)
    import tensorflow as tf

    @tf.function(reduce_retracing=True, autograph=False)
    def decode(source_ids):
        return generate(model, source_ids, start_id, end_id, "greedy", max_length)

    return decode


def _jax_greedy_decoder(model, end_id, start_id, max_length):
    """The JAX twin of `greedy_decoder`. In one process: `generate` called eagerly, which runs
    one compiled program per bucket of batch rows and source width (the model's variables
    among its arguments, so a call sees the weights of that moment), so the validation,
    test and heat-map batches of a run share their programs. Across processes the variables
    are replicated over all of them and the chief decodes alone, from this process's copies
    of their values (read in a `StatelessScope`), one `jax.jit` program per batch shape.
    Outputs are NumPy arrays."""
    import jax

    from keras_attn.decoding import generate

    def search(values, source_ids):
        with keras.StatelessScope(list(zip(model.variables, values))):
            return generate(model, source_ids, start_id, end_id, "greedy", max_length)

    compiled = jax.jit(search)

    def decode(source_ids):
        source_ids = np.asarray(source_ids, np.int32)
        if jax.process_count() > 1:
            values = [np.asarray(v.value) for v in model.variables]
            out = compiled(values, source_ids)
        else:
            out = generate(model, source_ids, start_id, end_id, "greedy", max_length)
        return {k: np.asarray(v) for k, v in out.items()}

    return decode


def decode_texts(decode, source_ids, tokenizer, batch_size=256):
    """Greedy-decode `source_ids` in batches -> (texts, [alignments per example `[T, S]`])."""
    texts, aligns = [], []
    for i in range(0, len(source_ids), batch_size):
        chunk = source_ids[i : i + batch_size]
        out = decode(chunk)
        seqs = np.asarray(out["sequences"])
        lengths = np.asarray(out["lengths"])
        decoded = np.asarray(tokenizer.detokenize(seqs))
        texts += [t.decode("utf-8") for t in decoded]
        if "alignments" in out:
            a = np.asarray(out["alignments"])
            aligns += [a[j, : lengths[j]] for j in range(len(chunk))]
    return texts, aligns


def token_strings(tokenizer, ids):
    """Ids -> the display string of each id (for heat-map labels)."""
    vocab = tokenizer.vocabulary
    return [vocab[i] if 0 <= i < len(vocab) else "?" for i in ids]


def loop_rate(texts, repeats=3):
    """The fraction of `texts` in which one token occurs `repeats` or more times in a row
    (tokens: whitespace-separated words, and each Han / kana character on its own)."""

    texts = list(texts)
    if not texts:
        return float("nan")
    pattern = re.compile(
        r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\s\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+"
    )
    looping = 0
    for text in texts:
        tokens, run = pattern.findall(text), 1
        for a, b in zip(tokens, tokens[1:]):
            run = run + 1 if a == b else 1
            if run >= repeats:
                looping += 1
                break
    return looping / len(texts)


def score(metric, hypotheses, references):
    """`{"exact_match"}` (dates) or `{"chrf", "bleu"}` (sacrebleu, text corpora; BLEU with the
    tokenizer for Chinese or Japanese when the references are written without spaces)."""
    if metric == "exact_match":
        matches = [h == r for h, r in zip(hypotheses, references)]
        return {"exact_match": float(np.mean(matches)) if references else 0.0}
    import sacrebleu

    cjk = (
        sum(any(ord(c) >= 0x3000 for c in r) and " " not in r for r in references)
        > len(references) / 2
    )
    tokenize = "zh" if cjk else "13a"
    return {
        "chrf": float(sacrebleu.corpus_chrf(hypotheses, [references]).score),
        "bleu": float(sacrebleu.corpus_bleu(hypotheses, [references], tokenize=tokenize).score),
    }


_WORD = re.compile(r"\w+")


def cut_words(sources, references, hypotheses, shortest=4):
    """The answers that cut a word the answer should have copied whole: `[(i, word, cut)]`
    for each answer `i` that lacks a source word of at least `shortest` characters which its
    reference holds as it is (a name, a code, a product term), but holds a strict prefix of
    that word (two characters or more, case kept: `Loti` -> `Lo`) as a word of its own."""
    found = []
    for i, (source, reference, hypothesis) in enumerate(zip(sources, references, hypotheses)):
        answer, kept = set(_WORD.findall(hypothesis)), set(_WORD.findall(reference))
        for word in dict.fromkeys(_WORD.findall(source)):
            if len(word) < shortest or word not in kept or word in answer:
                continue
            cut = [a for a in answer if 2 <= len(a) < len(word) and word.startswith(a)]
            if cut:
                found.append((i, word, max(cut, key=len)))
                break
    return found


def copied_words_pairs(pairs, shortest=4):
    """The pairs whose reference keeps a source word of at least `shortest` characters as it
    is that is a name or a code (it starts with a capital letter or holds a digit, and is not
    the reference's first word, where a capital says nothing): where copying is the answer."""
    chosen = []
    for source, reference in pairs:
        ref_words = _WORD.findall(reference)
        kept = set(ref_words[1:])
        for word in _WORD.findall(source):
            if len(word) >= shortest and word in kept:
                if word[0].isupper() or any(c.isdigit() for c in word):
                    chosen.append((source, reference))
                    break
    return chosen


def replacement_answers(sources, hypotheses):
    """The indices of the answers holding U+FFFD (a byte sequence that is no character) where
    their source does not."""
    return [
        i
        for i, (s, h) in enumerate(zip(sources, hypotheses))
        if "\ufffd" in h and "\ufffd" not in s
    ]


def text_scores(hypotheses, pairs):
    """chrF, BLEU, placeholders kept and loop rate of `hypotheses` against `pairs`' targets."""
    from keras_attn.text.placeholders import placeholders_kept_rate

    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    scores = score("chrf", hypotheses, references)
    scores["placeholders_kept"] = placeholders_kept_rate(sources, hypotheses)
    scores["loop_rate"] = loop_rate(hypotheses)
    return scores
