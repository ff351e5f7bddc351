"""Documents whose label is fixed by one sentence you can point to, for hierarchical attention.

Task: "which language is the formatted message in?". A document is `sentences_per_language`
UI messages in each of `languages` (so every language is equally present); exactly one of them is
a message with a printf placeholder (it holds a "%", e.g. "Datei %s nicht gefunden"); the label is
that message's language, and its index is the evidence that sentence attention is scored against.

Text: real translated UI strings, the `msgstr`s of the gettext catalogues (`.mo`) that Debian
packages install under `/usr/share/locale/<lang>/LC_MESSAGES/` (binutils, glib, apt, grep, ...;
read with `babel.messages.mofile`). Why this text and this marker: it is real, offline and in many
languages, and the evidence is a property of one sentence, not of the document's word counts: a
bag of words sees every language equally often and a "%s" in every document, so only the words
*of the same sentence as* the placeholder tie the label to it. (Questions, the first choice of
marker, are too few in these catalogues, 90-300 per language, for a model to learn language from
unseen ones; messages with placeholders number thousands per language.) Kept: one-line strings
of 3-20 words with letters and no "?"; a message is "formatted" when it holds "%".

Split: the formatted messages are split by text into train / val / test (no test evidence
sentence is ever seen in training); the plain messages (the distractors) are shared.

    from keras_attn.data import han_splits
    splits = han_splits(n_train=8000, n_val=500, n_test=2000)
    doc = splits["train"][0]    # HanDocument(sentences=[...], label=2, evidence=5)
"""

from __future__ import annotations

import dataclasses
import glob
import os

import numpy as np

LANGUAGES = ("de", "fr", "es", "it")
LOCALE_DIR = "/usr/share/locale"


@dataclasses.dataclass
class HanDocument:
    sentences: list  # str, one per sentence
    label: int  # index into the languages
    evidence: int  # index of the sentence that decides the label (the formatted message)

    @property
    def text(self):
        """The raw text of the exported signature: one sentence per line."""
        return "\n".join(self.sentences)


def _words(text):
    return text.split()


def catalogue_sentences(language, locale_dir=LOCALE_DIR):
    """`(formatted, plain)`: sorted distinct msgstr strings of one language's catalogues, those
    with a "%" and those without."""
    from babel.messages import mofile

    paths = sorted(glob.glob(os.path.join(locale_dir, language, "LC_MESSAGES", "*.mo")))
    formatted, plain = set(), set()
    for path in paths:
        if os.path.basename(path).startswith("iso_"):
            continue  # country / language name lists, not sentences
        try:
            with open(path, "rb") as f:
                catalog = mofile.read_mo(f)
        except Exception:  # a catalogue babel cannot read is skipped, never fatal
            continue
        for message in catalog:
            text = message.string
            if not message.id or not isinstance(text, str):
                continue
            text = " ".join(text.split())
            if "\n" in message.string or not any(c.isalpha() for c in text):
                continue
            if not 3 <= len(_words(text)) <= 20:
                continue
            if "?" in text:
                continue
            (formatted if "%" in text else plain).add(text)
    return sorted(formatted), sorted(plain)


def _split(items, rng, val_fraction, test_fraction):
    items = list(items)
    order = rng.permutation(len(items))
    n_test = max(int(round(len(items) * test_fraction)), 1)
    n_val = max(int(round(len(items) * val_fraction)), 1)
    test = [items[i] for i in order[:n_test]]
    val = [items[i] for i in order[n_test : n_test + n_val]]
    train = [items[i] for i in order[n_test + n_val :]]
    return {"train": train, "val": val, "test": test}


def make_documents(n, formatted, plain, rng, sentences_per_language=2):
    """`n` documents from per-language pools (`formatted[l]`, `plain[l]`)."""
    n_lang = len(formatted)
    docs = []
    for _ in range(n):
        label = int(rng.integers(n_lang))
        sentences = []
        for lang in range(n_lang):
            count = sentences_per_language - (1 if lang == label else 0)
            picks = rng.choice(len(plain[lang]), size=count, replace=False)
            sentences += [plain[lang][i] for i in picks]
        evidence = formatted[label][int(rng.integers(len(formatted[label])))]
        order = rng.permutation(len(sentences) + 1)
        sentences = sentences + [evidence]
        sentences = [sentences[i] for i in order]
        docs.append(HanDocument(sentences, label, int(np.argmax(order == len(order) - 1))))
    return docs


def han_splits(
    n_train=8000,
    n_val=500,
    n_test=2000,
    languages=LANGUAGES,
    sentences_per_language=2,
    seed=0,
    locale_dir=LOCALE_DIR,
):
    """`{"train", "val", "test", "languages"}`: lists of `HanDocument` (see the module docstring)."""
    if len(languages) < 2:
        raise ValueError(
            f"`languages` must name at least 2 languages. Received: languages={languages!r}"
        )
    rng = np.random.default_rng(seed)
    pools = {}
    for lang in languages:
        formatted, plain = catalogue_sentences(lang, locale_dir)
        if len(formatted) < 10 or len(plain) < 10 * sentences_per_language:
            raise ValueError(
                f"Too few catalogue sentences for language {lang!r} under {locale_dir} "
                f"({len(formatted)} formatted, {len(plain)} plain); install its translations "
                f"or choose other `languages`. Received: languages={languages!r}"
            )
        pools[lang] = (_split(formatted, rng, 0.1, 0.2), plain)
    out = {"languages": list(languages)}
    for name, n in (("train", n_train), ("val", n_val), ("test", n_test)):
        qs = [pools[lang][0][name] for lang in languages]
        ss = [pools[lang][1] for lang in languages]
        out[name] = make_documents(
            n, qs, ss, np.random.default_rng([seed, len(name), n]), sentences_per_language
        )
    return out
