"""Cloze questions from real sentences, for the attention-over-attention reader.

Text: the docstrings of Python's standard library (modules, classes, functions, methods of the
modules in `MODULES`, read with `inspect.getdoc` from the running interpreter): real English
prose, installed everywhere the package runs, offline. Interactive examples (`>>>` lines) and
indented code are dropped; a docstring's prose is cut into sentences after ". ", "? ", "! ".

A question: a document (3 to 12 consecutive sentences of one docstring, at most 160 words), a
query (one of the document's sentences, chosen at random) with one word replaced by
`BLANK`, and 10 candidate words from the document: the answer plus 9 other distinct words of
the document (alphabetic, at least 3 letters, not in `STOPWORDS`). The answer is a candidate-
type word of the query. The reader has to find where the query's context occurs in the document
and read the word there; the baseline picks the candidate most frequent in the document.

Split: by docstring (a test document's text never appears in training), seeded.

    from keras_attn.data import cloze_splits
    splits = cloze_splits(seed=0)
    q = splits["train"][0]   # ClozeQuestion(document=..., query=..., candidates=[...], answer=...)
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import inspect
import re

import numpy as np

from keras_attn.data.words import split_words

BLANK = "@blank"
MODULES = (
    "argparse",
    "asyncio",
    "base64",
    "bisect",
    "calendar",
    "collections",
    "concurrent.futures",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email.message",
    "enum",
    "fractions",
    "ftplib",
    "functools",
    "gettext",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html.parser",
    "http.client",
    "http.server",
    "imaplib",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "locale",
    "logging",
    "mailbox",
    "mimetypes",
    "multiprocessing",
    "numbers",
    "operator",
    "os",
    "pathlib",
    "pickle",
    "pprint",
    "queue",
    "random",
    "re",
    "sched",
    "secrets",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "smtplib",
    "socket",
    "socketserver",
    "sqlite3",
    "ssl",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "traceback",
    "turtle",
    "typing",
    "unittest",
    "urllib.parse",
    "urllib.request",
    "uuid",
    "warnings",
    "wave",
    "weakref",
    "xml.dom.minidom",
    "xml.etree.ElementTree",
    "zipfile",
    "zoneinfo",
)
STOPWORDS = frozenset(
    "the and for are but not you all any can had her was one our out has have been were which their "
    "there this that with from they will would what when where who whom why how its into than then "
    "them these those such only also may must should could does did doing done each more most other "
    "some very just over under same both few own too being because while about against between "
    "through during before after above below off again further once here".split()
)
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=[A-Z`'\"(])")
N_CANDIDATES = 10


@dataclasses.dataclass
class ClozeQuestion:
    document: str  # sentences, one per line
    query: str  # a sentence with one word replaced by BLANK
    candidates: list  # N_CANDIDATES distinct words
    answer: str  # one of the candidates


def _prose(doc):
    """A docstring without doctest and indented code lines, as one line of text."""
    lines = []
    for line in doc.split("\n"):
        if line.startswith((" ", "\t", ">>>", "...")) or set(line.strip()) <= set("-=~*"):
            lines.append("\n")
            continue
        lines.append(line.strip())
    paragraphs = " ".join(lines).split("\n")
    return [" ".join(p.split()) for p in paragraphs if p.strip()]


def stdlib_docstrings(modules=MODULES):
    """Distinct docstrings (sorted) of the given modules and their public members."""
    seen = set()
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception:  # a module this interpreter lacks is skipped
            continue
        objects = [module]
        for attr, obj in sorted(vars(module).items()):
            if attr.startswith("_"):
                continue
            objects.append(obj)
            if inspect.isclass(obj):
                objects += [m for a, m in sorted(vars(obj).items()) if not a.startswith("_")]
        for obj in objects:
            try:
                doc = (
                    inspect.getdoc(obj)
                    if (inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj))
                    else None
                )
            except Exception:
                doc = None
            if doc:
                seen.add(doc)
    return sorted(seen)


def _is_candidate(word):
    return len(word) >= 3 and word.isalpha() and word.isascii() and word not in STOPWORDS


def documents_from_docstrings(docstrings, max_sentences=12, min_sentences=3, max_words=160):
    """Lists of sentences (each a document), cut from the docstrings' paragraphs."""
    docs = []
    for doc in docstrings:
        sentences = []
        for paragraph in _prose(doc):
            sentences += [s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip()]
        sentences = [s for s in sentences if 3 <= len(split_words(s)) <= 60]
        chunk, words = [], 0
        for s in sentences + [None]:
            n = 0 if s is None else len(split_words(s))
            if s is None or len(chunk) == max_sentences or words + n > max_words:
                if len(chunk) >= min_sentences:
                    docs.append(chunk)
                chunk, words = [], 0
            if s is not None:
                chunk.append(s)
                words += n
    return docs


def make_questions(documents, rng, per_document=8):
    """Up to `per_document` questions per document (fewer when it has too few candidate words)."""
    out = []
    for sentences in documents:
        words = [w for s in sentences for w in split_words(s)]
        types = sorted({w for w in words if _is_candidate(w)})
        if len(types) < N_CANDIDATES:
            continue
        for _ in range(per_document):
            k = int(rng.integers(len(sentences)))
            query_words = split_words(sentences[k])
            positions = [i for i, w in enumerate(query_words) if _is_candidate(w)]
            if not positions:
                continue
            pos = positions[int(rng.integers(len(positions)))]
            answer = query_words[pos]
            others = [w for w in types if w != answer]
            picks = rng.choice(len(others), size=N_CANDIDATES - 1, replace=False)
            candidates = [answer] + [others[i] for i in picks]
            candidates = [candidates[i] for i in rng.permutation(N_CANDIDATES)]
            query = " ".join(query_words[:pos] + [BLANK] + query_words[pos + 1 :])
            out.append(ClozeQuestion("\n".join(sentences), query, candidates, answer))
    return out


def most_frequent_candidate(question):
    """The baseline's answer: the candidate most frequent in the document (first in the
    candidate list on ties)."""
    counts = collections.Counter(split_words(question.document))
    return max(question.candidates, key=lambda c: (counts[c], -question.candidates.index(c)))


def cloze_splits(
    seed=0, val_fraction=0.05, test_fraction=0.15, per_document=8, modules=MODULES, max_train=None
):
    """`{"train", "val", "test"}`: lists of `ClozeQuestion`, split by document."""
    rng = np.random.default_rng(seed)
    documents = documents_from_docstrings(stdlib_docstrings(modules))
    order = rng.permutation(len(documents))
    n_test = int(round(len(documents) * test_fraction))
    n_val = int(round(len(documents) * val_fraction))
    parts = {
        "test": order[:n_test],
        "val": order[n_test : n_test + n_val],
        "train": order[n_test + n_val :],
    }
    out = {}
    for name, idx in parts.items():
        out[name] = make_questions(
            [documents[i] for i in idx], np.random.default_rng([seed, len(name)]), per_document
        )
    if max_train is not None:
        out["train"] = out["train"][:max_train]
    return out
