"""Streaming decoding over the step signatures (`encode`, `decode_step`; docs/serving.md,
"Streaming"): the search loop runs here, in the client, and the text comes out as it is found.

    from keras_attn.serving import GrpcClient
    from keras_attn.serving.streaming import StepClient, stream

    steps = StepClient(GrpcClient("localhost:8500", "dates"))
    for event in stream(steps, ["3 May 1999"], "greedy", max_length=20):
        print(event.pieces[0], end="", flush=True)   # the text found since the last event
    event.result                                      # on the last event: the whole answer

A step client is anything with `encode(inputs, max_length)`, `decode_step(request)` and
`detokenize(ids)` (and `tokenize(texts)` for text constraints): `StepClient` over a client
with `predict(signature_name, inputs)` (the gRPC
and REST clients of `keras_attn.serving.client`, `SavedModelClient`, or `ServeSessionClient`,
which runs the SavedModel's `serve` MetaGraph in a `tf.compat.v1.Session` the way TensorFlow
Serving does), or `keras_attn.serving.litert.LiteRTModel` (a `.tflite` file on the device).

The loop is the library's own engine (`keras_attn.decoding.beam_search`, `greedy_search`,
`sample_search`, run eagerly on TensorFlow): its step function sends the hypotheses' last
tokens and the state to `decode_step` and hands back the model's scores, so the strategies,
the controls (`min_length`, `no_repeat_ngram_size`, `repetition_penalty`, `bad_token_ids`),
the penalties, sampling (`temperature`, `top_k`, `top_p`, `seed`) and the constraints given
as ids (`prefix_ids`, `constraint_ids`, `suppress_ids`) are those of the in-graph searches,
and the answers equal the `beam_search`, `greedy` and `sample` signatures' for the same inputs.

Text constraints (`prefix=`, `constraints=`) mean what they mean to `beam_search_constrained`,
whose answers the client's beam gives for the same inputs: the prefix and each phrase are
tokenized alone, as a word start, by the export's own tokenizer, through the export's
`tokenize` signature (the target tokenizer in the graph, with the search signatures'
settings), so a gRPC or REST client needs no tokenizer file; `LiteRTModel` tokenizes with the
SentencePiece model (the `sentencepiece` package) or the vocabulary that ships beside the
`.tflite` file. A phrase the vocabulary cannot spell is left out and its input's
`constraints_met` is False, as in the graph; an empty phrase, or a prefix or phrase longer than
`max_length` tokens, is refused here (`ValueError` naming `prefix` or `constraints`) before any
step is sent.

The export's other settings travel in `encode`'s answer: with `keep_placeholders` it also
answers the source's placeholders as phrases and their character budget (`constraint_ids`,
`constraint_alt_ids`, `budget_ids`, `budget_costs`, `budgets`), which a beam adds to the text
constraints as `beam_search` and `beam_search_constrained` do (greedy and sampling go without,
as the in-graph `greedy` and `sample`; a beam with controls keeps them too, where the in-graph
`beam_search_controls` does not); with `word_rules` it answers what the rules read
(`word_rules_*`: the source ids, the source's placeholders, the vocabulary's tables) and the
beam and sampling searches here wrap their step with `keras_attn.decoding.words.word_rules_step`,
as in the graph (the greedy search stays plain there and here).
On an export that keeps placeholders, an input that is an ICU `plural` / `select` message
keeps its structure as `serving_default` keeps it: the message is split at its skeleton
(`keras_attn.text.placeholders.icu_split`), its texts are searched one after another (each
input split on its own; the inputs side by side), each as `serving_default` asks it
(`icu_query`) and put back (`icu_answer`), and the answer is the skeleton with the texts'
answers between its pieces; the text streamed is the message so far, each skeleton piece
when its turn comes. A request with a prefix or phrases of its own searches each input whole,
and an input that is no ICU message streams as any other, with no call more.
A greedy search reads ahead where the client has `decode_steps` (`StepClient` does; an export
made before it answers no such signature and is asked a step at a time): one request runs a
chunk of steps, each fed the most likely token of the one before, and the search takes the
chunk's scores step by step while it chooses what the chunk fed (`step_client._Lookahead`);
where a control made it choose otherwise, the state at that step is asked for again and a
chunk read from there, so the answers are a step-at-a-time search's.
The engine tiles the per-hypothesis state leaves and reorders them along the beam's parents; the
per-input leaves (`state_per_example*`) and the leaves the step does not change stay as
`encode` gave them. A packed client (`StepClient(packed=...)`, the packed step signatures)
keeps the state as the bytes the server last answered and gives the engine one leaf in its
place, each hypothesis' row (`parents`): the engine tiles and reorders it as any leaf, so at
each step it names the row of the server's state each hypothesis comes from.

Across a network a beam or greedy search streams through the export's search run to a step
limit (`beam_search_steps`, `greedy_steps`; `keras_attn.serving.search_steps`) where the
export has it and the request is one it takes (`StepClient.search_steps`): the client asks
for 2 steps, then 4, 8, ... until the answer is done, each answer holding the hypotheses so
far and the text they share; no state crosses the network and the loop above does not run.

What is streamed: for greedy and sampling each new token; for beam search the prefix that every
live hypothesis of an input shares (it is the start of the final best answer whatever comes),
so a beam streams in bursts. Each event's `pieces` hold, per input, the text added since the
previous event (the prefix detokenized, minus what was already sent). The text is read out
(a `detokenize` request) at most every `READ_OUT_INTERVAL` seconds: the steps of a burst that
come sooner are read out together when the interval ends.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
import weakref

import numpy as np

from keras_attn.decoding.modes import MODES
from keras_attn.decoding.modes import mode as check_mode
from keras_attn.serving.client import _text
from keras_attn.serving.request import SearchRequest
from keras_attn.serving.specs import RULED_SEARCHES
from keras_attn.serving.step_client import (
    ServeSessionClient,
    StepClient,
    _Answers,
    _flat_leaves,
    _initial_state,
    _nest_like,
    _Run,
)
from keras_attn.serving.steps import (
    IDS,
    PARENTS,
    PLACEHOLDER_OUTPUTS,
    REQUIRED_STEP_SIGNATURES,
    SEARCH_STEPS_PARAMS,
    SPELLED,
    STATE_BYTES,
    WORD_RULES_PREFIX,
    WORD_TEXT_TABLES,
)
from keras_attn.text.placeholders import (
    ICU_NUMBER_STAND_IN,
    ICU_SPACES,
    character_counts,
    icu_answer,
    icu_query,
    icu_split,
)

HISTORY = "_history"  # client-side leaf: each hypothesis' tokens so far (reordered with it)
DEFAULT_MAX_LENGTH = 50


@dataclasses.dataclass
class StreamEvent:
    """One event of a stream: `pieces[b]` is the text of input b found since the previous
    event ('' for none); `step` the decoding step; on the last event `done` is True and
    `result` holds the whole answer (the in-graph signature's outputs: for `beam`, `outputs`
    `[B][K]` strings, `scores`, `log_probs`, `lengths`; for `greedy` / `sample`, `outputs`
    `[B]` strings and `scores`). `best[b]` is input b's best hypothesis so far, whole: a
    beam may change its mind, so a later event's `best` need not extend an earlier one's (on
    the last event, the answer). Steps that end while the reader is still busy with an
    earlier event come as one event."""

    pieces: list
    step: int
    done: bool = False
    result: dict | None = None
    best: list = dataclasses.field(default_factory=list)


class _Compiled:
    """A step client's searches, each traced once into a TensorFlow graph per (mode, the
    knobs' scalar values, the names of the state, knob and rule arrays) and called again
    with the next request's arrays: the engine's per-step work runs as graph ops, and
    `decode_step` and the text streamed are the only host calls a step makes
    (`tf.numpy_function`)."""

    def __init__(self, answers):
        self.answers = answers
        self.functions = {}
        self.run = None
        self.lock = threading.Lock()

    def host(self, *args):
        return self.run(*args)

    def function(self, key, mode, max_length, scalars, end_token, names, tables):
        if key not in self.functions:
            self.functions[key] = self._trace(mode, max_length, scalars, end_token, names, tables)
        return self.functions[key]

    def _trace(self, mode, max_length, scalars, end_token, names, tables):
        import tensorflow as tf

        search_fn = MODES[mode].function()
        answers = self.answers

        def step_fn(tokens, state, step):
            history = state[HISTORY]
            column = tf.range(max_length, dtype=tf.int32)[None, :] == step - 1
            history = tf.where(column, tokens[:, None], history)  # nothing at step 0
            given = dict(_flat_leaves({k: v for k, v in state.items() if k != HISTORY}))
            leaves = [given[n] for n in names]
            tout = [tf.float32] * (1 + answers.attention)
            tout += [given[n].dtype for n in answers.changed]
            out = tf.numpy_function(self.host, [tokens, step, history, *leaves], tout)
            logits, out = out[0], out[1:]
            logits.set_shape([tokens.shape[0], answers.vocab])
            attention = None
            if answers.attention:
                attention, out = out[0], out[1:]
                attention.set_shape([tokens.shape[0], None])
            for name, value in zip(answers.changed, out):
                value.set_shape(given[name].shape)
                given[name] = value
            new_state = _nest_like({k: v for k, v in state.items() if k != HISTORY}, given)
            new_state[HISTORY] = history
            return logits, new_state, attention

        @tf.function(reduce_retracing=True, autograph=False)
        def run(state, start_tokens, source_mask, arrays, rules):
            state = dict(state)
            state[HISTORY] = tf.zeros([tf.shape(start_tokens)[0], max_length], tf.int32)
            rules = {**rules, **tables}
            step, state = _word_rules(step_fn, state, rules, end_token, max_length, mode)
            return search_fn(
                step,
                state,
                start_tokens,
                end_token,
                max_length=max_length,
                source_mask=source_mask,
                **scalars,
                **arrays,
            )

        return run


# the word rules' vocabulary tables (the same for every request): read when tracing
VOCABULARY_RULES = ("word_start", "glue", *WORD_TEXT_TABLES)
_COMPILED = weakref.WeakKeyDictionary()  # step client -> its _Compiled


def _settled(history, step, width, end_token):
    """Per input: the tokens every one of its `width` hypotheses shares, up to the end token."""
    rows = history[:, :step].reshape(len(history) // width, width, step)
    shared = np.all(rows == rows[:, :1], axis=1) & (rows[:, 0] != end_token)  # [B, step]
    # the first position that is not shared (step where every one is)
    shared = np.concatenate([shared, np.zeros([len(shared), 1], bool)], axis=1)
    ends = np.argmin(shared, axis=1)
    return [hyps[0, :n] for hyps, n in zip(rows, ends)]


def _best(history, step, width, end_token):
    """Per input: its best live hypothesis' tokens (the first of its `width` rows), up to the
    end token."""
    rows = history[::width, :step]
    best = []
    for row in rows:
        ends = np.flatnonzero(row == end_token)
        best.append(row[: ends[0]] if ends.size else row)
    return best


class _Texts:
    """What has been sent per input; `update(history, step)` gives what to add and each
    input's best hypothesis so far, with one `detokenize` call."""

    def __init__(self, steps, batch, width, end_token):
        self.steps, self.width, self.end_token = steps, width, end_token
        self.sent = [""] * batch
        self.lengths = [0] * batch
        self.best = [""] * batch

    def update(self, history, step):
        settled = _settled(history, step, self.width, self.end_token)
        best = _best(history, step, self.width, self.end_token) if self.width > 1 else settled
        changed = [i for i, ids in enumerate(settled) if len(ids) > self.lengths[i]]
        rows = [settled[i] for i in changed] + (best if self.width > 1 else [])
        pieces = [""] * len(self.sent)
        if not rows:
            return pieces, list(self.best)
        ids = np.zeros([len(rows), max(1, max(len(r) for r in rows))], np.int32)
        for j, row in enumerate(rows):  # pad id 0 ends the reading
            ids[j, : len(row)] = row
        texts = self.steps.detokenize(ids)
        for i, text in zip(changed, texts):
            self.lengths[i] = len(settled[i])
            if text.startswith(self.sent[i]):
                pieces[i] = text[len(self.sent[i]) :]
                self.sent[i] = text
        self.best = texts[len(changed) :] if self.width > 1 else list(self.sent)
        return pieces, list(self.best)


def _beyond(final, sent):
    """Per input, what its final answer adds to the text sent (past the prefix they share: a
    beam's settled text is the final answer's start)."""
    return [text[len(_common_prefix(text, old)) :] for text, old in zip(final, sent)]


def _common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _check_backend():
    """The engine runs eagerly on TensorFlow here (on JAX its loop is always traced, so a step
    could not call a server)."""
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "The streaming client runs the search eagerly on TensorFlow: set "
            f"KERAS_BACKEND=tensorflow. Received: backend={keras.backend.backend()!r}"
        )


def _id_keywords():
    """The search keywords given as ids (`keras_attn.decoding.Constraints`' fields)."""
    from keras_attn.decoding.call import Constraints

    return tuple(field.name for field in dataclasses.fields(Constraints))


def stream_request(
    mode="beam", max_length=None, prefix=None, constraints=None, **knobs
) -> tuple[SearchRequest, dict]:
    """The keyword form of a streamed search, checked once: `(request, ids)`, a
    `keras_attn.serving.request.SearchRequest` (the mode, the knobs as a checked
    `DecodingConfig` and the names given, the text prefix and phrases) and `{name: int32
    array}` of the constraints given as ids (`prefix_ids`, `constraint_ids`, ...).

    `mode` may be a `SearchRequest` already (then `max_length`, `prefix`, `constraints` and
    the knobs other than ids stay unset: the request holds them). `max_length` None:
    `DEFAULT_MAX_LENGTH`. Each knob is a search keyword (`keras_attn.decoding.call.KEYWORDS`)
    that `mode`'s search reads, checked against its range here (`ValueError` naming it)."""
    from keras_attn.decoding.call import KEYWORDS
    from keras_attn.decoding.config import DecodingConfig

    id_names = _id_keywords()
    ids = {name: knobs.pop(name) for name in id_names if name in knobs}
    ids = {name: value for name, value in ids.items() if value is not None}
    if isinstance(mode, SearchRequest):
        given = sorted(
            name
            for name, value in (
                ("max_length", max_length),
                ("prefix", prefix),
                ("constraints", constraints),
                *knobs.items(),
            )
            if value is not None
        )
        if given:
            raise ValueError(
                "Give the search as a SearchRequest or as keywords, not both (a request "
                f"holds its knobs, prefix and phrases). Received: a request with {given}"
            )
        return mode, ids
    name = check_mode(mode).name
    for key in knobs:
        keyword = KEYWORDS.get(key)
        if keyword is None or name not in keyword.searches or key == "max_length":
            reads = [k for k, kw in KEYWORDS.items() if name in kw.searches]
            raise ValueError(
                f"A streamed {name} search takes the keywords {reads}. Received: {key}="
                f"{knobs[key]!r}"
            )
    params = {k: v for k, v in knobs.items() if v is not None}
    if max_length is not None:
        params["max_length"] = max_length
    config = DecodingConfig(**{"max_length": DEFAULT_MAX_LENGTH, **params})
    fields = [f.name for f in dataclasses.fields(DecodingConfig)]
    given = tuple(f for f in fields if f in params)
    return SearchRequest(name, config, given, prefix, constraints), ids


def search(steps, inputs, mode="beam", max_length=None, prefix=None, constraints=None, **knobs):
    """The whole answer of a client-side search over the step signatures (no streaming):
    the last `StreamEvent`'s `result`. Arguments as `stream`'s."""
    request, ids = stream_request(mode, max_length, prefix, constraints, **knobs)
    last = None
    for event in _stream(steps, inputs, request, ids):
        last = event
    return last.result


def stream(steps, inputs, mode="beam", max_length=None, prefix=None, constraints=None, **knobs):
    """Runs a search over `steps` (a `StepClient` or `LiteRTModel`) and yields `StreamEvent`s
    as the text is found (module docstring). The keywords are checked when it is called
    (`stream_request`), the steps run as the events are read.

    Args:
        steps: the step signatures' client.
        inputs: the texts (or images) to decode, `[B]`.
        mode: `"beam"`, `"greedy"` or `"sample"` (`keras_attn.decoding.modes`), or a
            `keras_attn.serving.request.SearchRequest` holding the mode, its knobs, prefix
            and phrases (then only constraints as ids go beside it).
        max_length: most tokens generated (the state's self-attention slots); None:
            `DEFAULT_MAX_LENGTH`.
        prefix: the text every answer starts with: one string for every input, or a list of
            one per input (`''`: none); None: none.
        constraints: phrases every answer must hold: a list of strings for every input, or a
            list of one such list per input; None: none. The prefix and the phrases are
            tokenized as `beam_search_constrained` tokenizes them (each alone, with the target
            tokenizer; `steps.tokenize`), and a phrase the vocabulary cannot spell is left out
            with `constraints_met` False, as there.
        **knobs: the search's keywords (`keras_attn.decoding.beam_search`, `greedy_search`,
            `sample_search`): `beam_size`, the penalties, the controls, the sampling knobs and
            constraints as ids. `eos_penalty` is the export's unless given.
    """
    request, ids = stream_request(mode, max_length, prefix, constraints, **knobs)
    return _stream(steps, inputs, request, ids)


def _stream(steps, inputs, request, ids):
    """`stream` of a checked `SearchRequest` and its id constraints: one search over the
    inputs, or, where the export keeps placeholders (`encode` answers the source's) and an
    input is an ICU message, a search per translated text of the messages (`_IcuStream`)."""
    _check_backend()
    if isinstance(inputs, (str, bytes)):
        raise ValueError(
            f"`inputs` must be a list of strings, not a single string. Received: inputs={inputs!r}"
        )
    messages = _icu_messages(inputs, request, ids)
    if messages is None and _takes_search_steps(steps, inputs, request, ids):
        events = _stepped_events(steps, inputs, request)
        first = next(events, None)
        if first is not None:  # None: the export has no `beam_search_steps`
            yield first
            yield from events
            return
    split = None if messages is None else _IcuStream(inputs, messages)
    # A split stream's first texts are encoded first: the answer tells whether the export
    # keeps placeholders (so splits), with no encode of the whole inputs where it does.
    first = split.queries(0) if split is not None else []
    encoded = steps.encode(first or inputs, request.config.max_length)
    if split is not None and PLACEHOLDER_OUTPUTS[0] in encoded:
        yield from split.events(steps, request, ids, encoded if first else None)
        return
    if first:
        encoded = steps.encode(inputs, request.config.max_length)
    yield from _search_events(steps, encoded, request, ids)


def _takes_search_steps(steps, inputs, request, ids):
    """Whether `request` streams through the export's search run to a step limit
    (`beam_search_steps`, `greedy_steps`): a step client that asks for it
    (`StepClient.search_steps`), a beam or greedy search over some inputs with no prefix,
    phrases or ids and only the knobs that signature takes."""
    return (
        getattr(steps, "search_steps", False)
        and request.mode in SEARCH_STEPS_PARAMS
        and request.prefix is None
        and request.constraints is None
        and not ids
        and set(request.given) <= set(SEARCH_STEPS_PARAMS[request.mode])
        and len(inputs) > 0
    )


def _stepped_events(steps, inputs, request):
    """The events of a search the server runs to a step limit, asked again with twice the
    steps (from `FIRST_STEPS`) until it is done; nothing where the export has no such
    signature."""
    config, beam = request.config, request.mode == "beam"
    values = {name: getattr(config, name) for name in SEARCH_STEPS_PARAMS[request.mode]}
    limit, shown, last = FIRST_STEPS, None, int(config.max_length)
    sent = [""] * len(inputs)
    while True:
        answer = steps.search_to(request.mode, inputs, values, min(limit, last))
        if answer is None:
            return
        outputs = [
            [_text(t) for t in row] if beam else _text(row) for row in answer["outputs"].tolist()
        ]
        best = [row[0] for row in outputs] if beam else outputs
        step = int(answer["steps"])
        if bool(answer["done"]) or limit >= last:  # run to max_length: the whole search
            keys = ("scores", "log_probs", "lengths") if beam else ("scores", "lengths")
            result = {
                "outputs": outputs,
                **{k: np.asarray(answer[k]) for k in keys},
                "sequences": np.asarray(answer["sequences"], np.int32),
            }
            pieces = _beyond(best, sent)
            yield StreamEvent(pieces, step, True, result, best=best)
            return
        pieces = [""] * len(sent)
        for i, text in enumerate(_text(t) for t in answer["settled"].tolist()):
            if len(text) > len(sent[i]) and text.startswith(sent[i]):
                pieces[i], sent[i] = text[len(sent[i]) :], text
        if any(pieces) or best != shown:
            shown = best
            yield StreamEvent(pieces, step, best=best)
        limit *= 2


# The steps of the first request to a search run to a step limit (each next one asks twice as
# many).
FIRST_STEPS = 2


def _search_events(steps, encoded, request, ids):
    """The events of one search over the inputs `encoded` (`encode`'s answer)."""
    n_best = MODES[request.mode].n_best
    batch = len(encoded["start_tokens"])
    width = int(request.config.beam_size) if n_best else 1
    end_token = int(np.asarray(encoded["end_token"]))
    ids, spelled = _constraints(steps, encoded, request, batch, ids)
    if batch == 0:
        yield StreamEvent([], 0, True, _empty_result(n_best))
        return
    events = queue.Queue()
    texts = _Texts(steps, batch, width, end_token)
    texts_shown = [""] * batch

    def on_step(step, history):  # in the search: the tokens only (read out by the caller)
        events.put(("step", step, np.array(history)))

    def run():
        try:
            result = _run_search(steps, encoded, request, ids, on_step)
            events.put(("done", None, result))
        except BaseException as err:  # handed to the caller's thread
            events.put(("error", None, err))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    last = 0
    for kind, step, value in _latest(events):
        if kind == "error":
            worker.join()
            raise value
        if kind == "step":
            last = step
            pieces, best = texts.update(value, step)
            if any(pieces) or best != texts_shown:
                texts_shown = best
                yield StreamEvent(pieces, step, best=best)
            continue
        worker.join()
        if spelled is not None and "constraints_met" in value:  # an unspelled phrase: not met
            met = value["constraints_met"]
            value["constraints_met"] = met & spelled.reshape([-1] + [1] * (met.ndim - 1))
        result = _result(steps, n_best, value)
        final = [row[0] for row in result["outputs"]] if n_best else result["outputs"]
        pieces = _beyond(final, texts.sent)
        yield StreamEvent(pieces, last + 1, True, result, best=list(final))
        return


# The text found is read out (a `detokenize` request) at most this often, in seconds: a greedy
# search that reads ahead runs many steps in a burst, and reading each out would cost as much
# as the steps; a step held back goes out when the interval ends, so no text lags behind.
READ_OUT_INTERVAL = 0.01


def _latest(events, interval=READ_OUT_INTERVAL):
    """The search's events as the caller reads them: of the steps that queued up while the
    caller was busy, only the last (its tokens hold the earlier ones'); a step that comes less
    than `interval` seconds after the last one handed out is held back until the interval ends
    (a later step takes its place); then the end."""
    shown, held = float("-inf"), None
    while True:
        wait = None if held is None else shown + interval - time.monotonic()
        try:
            item = events.get() if wait is None else events.get(timeout=max(wait, 1e-4))
        except queue.Empty:  # the interval is over: the step held back goes out
            item, held = held, None
            shown = time.monotonic()
            yield item
            continue
        if item[0] != "step":
            yield item  # the end: its text holds a held step's
            return
        while True:  # the last of the steps queued up
            try:
                following = events.get_nowait()
            except queue.Empty:
                break
            if following[0] != "step":
                yield item
                yield following
                return
            item = following
        if time.monotonic() - shown < interval:
            held = item
            continue
        held = None
        shown = time.monotonic()
        yield item


# ---- ICU messages ----------------------------------------------------------------------------


def _icu_messages(inputs, request, ids):
    """Per input, `icu_split`'s `(skeleton, texts)` (the input read as UTF-8), or None where no
    input is an ICU message or the request has a prefix or phrases of its own (they speak of
    the whole answer, as in `beam_search_constrained`, which does not split)."""
    if ids or request.prefix is not None or request.constraints is not None:
        return None
    messages = []
    for value in inputs:
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        messages.append(icu_split(value) if isinstance(value, str) else ([], [value]))
    return messages if any(skeleton for skeleton, _ in messages) else None


@dataclasses.dataclass
class _Ask:
    """A text a split stream translates: `text` as the message holds it (None: a whole input
    that is no ICU message, answered as it is) and the `query` the model is given."""

    text: str | None
    query: object

    def answer(self, output):
        """The search's `output` as the message's text (`icu_answer`)."""
        return output if self.text is None else icu_answer(self.text, output)

    def sure(self, output):
        """What of `answer(output + more)` is known whatever comes next: the spaces before the
        text and the output read back, less an end that may start a stand-in."""
        if self.text is None:
            return output
        for n in range(len(ICU_NUMBER_STAND_IN) - 1, 0, -1):
            if output.endswith(ICU_NUMBER_STAND_IN[:n]):
                output = output[:-n]
                break
        return icu_answer(self.text.rstrip(ICU_SPACES), output)

    def so_far(self, output):
        """`answer` of an unfinished `output`, without the spaces after the text."""
        return output if self.text is None else icu_answer(self.text.rstrip(ICU_SPACES), output)


class _IcuStream:
    """A stream whose inputs hold ICU `plural` / `select` messages, on an export that keeps
    placeholders: each message is split at its skeleton (`icu_split`), and its texts are
    translated one by one as `serving_default` translates them (`icu_query`: the spaces around
    kept aside, `#` read as the stand-in; a text without a letter copied) and put back
    (`icu_answer`); an input that is no ICU message is one text, answered as it is. Search r
    translates each input's r-th text (the inputs that have one, side by side), so each
    input's answer streams in order: the message so far, its skeleton pieces as their turn
    comes. The answer joins the texts' answers with the skeleton: with a beam, hypothesis k
    joins each text's k-th; the scores, log-probabilities and lengths are the texts' sums, the
    sequences their tokens one after another, and `constraints_met` holds where every text's
    does."""

    def __init__(self, inputs, messages):
        self.asks, self.copied = [], []
        for value, (skeleton, texts) in zip(inputs, messages):
            if not skeleton:
                self.asks.append([_Ask(None, value)])
                self.copied.append(["", ""])
                continue
            asks, copied = [], [""]
            for j, text in enumerate(texts):
                query = icu_query(text)
                if query is None:
                    copied[-1] += text
                else:
                    asks.append(_Ask(text, query))
                    copied.append("")
                if j < len(skeleton):
                    copied[-1] += skeleton[j]
            self.asks.append(asks)
            self.copied.append(copied)  # the text before each asked one, and after the last

    def queries(self, r):
        """What search r asks: each input's r-th text that has one, as the model is given it."""
        return [asks[r].query for asks in self.asks if len(asks) > r]

    def events(self, steps, request, ids, first):
        """The stream's events; `first`: `encode`'s answer for `queries(0)`."""
        n_best = MODES[request.mode].n_best
        batch = len(self.asks)
        done = [copied[0] for copied in self.copied]  # each input's message up to its search
        shown, shown_best = [""] * batch, None
        answers = [[] for _ in range(batch)]  # per input, each text's rows of the results
        offset = 0
        for r in range(max(len(asks) for asks in self.asks)):
            rows = [b for b in range(batch) if len(self.asks[b]) > r]
            asks = [self.asks[b][r] for b in rows]
            encoded = first if r == 0 else steps.encode(self.queries(r), request.config.max_length)
            sent = [""] * len(rows)
            for event in _search_events(steps, encoded, request, ids):
                sent = [t + p for t, p in zip(sent, event.pieces)]
                now, best = list(done), list(done)
                for i, (b, ask) in enumerate(zip(rows, asks)):
                    now[b] += ask.sure(sent[i])
                    best[b] += ask.so_far(event.best[i])
                if event.done:
                    result = event.result
                    for i, (b, ask) in enumerate(zip(rows, asks)):
                        answers[b].append({k: v[i] for k, v in result.items()})
                        first = result["outputs"][i][0] if n_best else result["outputs"][i]
                        done[b] += ask.answer(first) + self.copied[b][r + 1]
                    now, best = list(done), list(done)
                step = offset + event.step
                pieces = [t[len(s) :] if t.startswith(s) else "" for t, s in zip(now, shown)]
                shown = [t if t.startswith(s) else s for t, s in zip(now, shown)]
                if any(pieces) or event.done or best != shown_best:
                    shown_best = best
                    yield StreamEvent(pieces, step, best=best)
            offset = step
        result = self._joined(n_best, request, answers)
        final = [row[0] for row in result["outputs"]] if n_best else result["outputs"]
        pieces = _beyond(final, shown)
        yield StreamEvent(pieces, offset + 1, True, result, best=list(final))

    def _joined(self, n_best, request, answers):
        """The answer of each input: its texts' answers joined with its skeleton."""
        width = int(request.config.beam_size) if n_best else 1
        outputs, scores, log_probs, lengths, sequences, met = [], [], [], [], [], []
        for asks, copied, parts in zip(self.asks, self.copied, answers):
            texts = [copied[0]] * width
            score, log_prob = np.zeros(width, np.float32), np.zeros(width, np.float32)
            length, tokens = np.zeros(width, np.int32), [[] for _ in range(width)]
            kept = np.ones(width, bool)
            for ask, part, after in zip(asks, parts, copied[1:]):
                said = part["outputs"] if n_best else [part["outputs"]]
                texts = [t + ask.answer(o) + after for t, o in zip(texts, said)]
                score += np.reshape(part["scores"], [width])
                length += np.reshape(part["lengths"], [width])
                if n_best:
                    log_prob += part["log_probs"]
                ids = np.reshape(part["sequences"], [width, -1])
                ends = np.reshape(part["lengths"], [width])
                tokens = [t + list(row[:n]) for t, row, n in zip(tokens, ids, ends)]
                if "constraints_met" in part:
                    kept &= np.reshape(part["constraints_met"], [width])
            outputs.append(texts if n_best else texts[0])
            scores.append(score)
            log_probs.append(log_prob)
            lengths.append(length)
            sequences.append(tokens)
            met.append(kept)
        t = max([1] + [len(t) for row in sequences for t in row])
        ids = np.zeros([len(sequences), width, t], np.int32)
        for b, row in enumerate(sequences):
            for k, tokens in enumerate(row):
                ids[b, k, : len(tokens)] = tokens
        shape = (lambda x: x) if n_best else (lambda x: x[:, 0])
        result = {
            "outputs": outputs,
            "scores": shape(np.asarray(scores, np.float32).reshape(-1, width)),
            "lengths": shape(np.asarray(lengths, np.int32).reshape(-1, width)),
            "sequences": shape(ids),
        }
        if n_best:
            result["log_probs"] = np.asarray(log_probs, np.float32).reshape(-1, width)
            if any("constraints_met" in part for parts in answers for part in parts):
                result["constraints_met"] = np.asarray(met, bool).reshape(-1, width)
        return result


# ---- the constraints -------------------------------------------------------------------------


def _is_text(value):
    return isinstance(value, (str, bytes))


def _prefix_rows(prefix, batch):
    """`prefix` -> one string per input (None: none)."""
    if prefix is None:
        return None
    if _is_text(prefix):
        return [_text(prefix)] * batch
    if isinstance(prefix, (list, tuple)) and len(prefix) == batch and all(map(_is_text, prefix)):
        return [_text(p) for p in prefix]
    raise ValueError(
        "`prefix` must be a string (every input's) or a list of one string per input "
        f"('' = none), {batch} here. Received: prefix={prefix!r}"
    )


def _phrase_rows(constraints, batch):
    """`constraints` -> one list of phrases per input (None: none)."""
    if constraints is None:
        return None
    rows = None
    if isinstance(constraints, (list, tuple)) and not _is_text(constraints):
        if all(map(_is_text, constraints)):
            rows = [[_text(c) for c in constraints]] * batch
        elif len(constraints) == batch and all(
            isinstance(row, (list, tuple)) and all(map(_is_text, row)) for row in constraints
        ):
            rows = [[_text(c) for c in row] for row in constraints]
    if rows is None:
        raise ValueError(
            "`constraints` must be a list of phrases (every input's) or a list of one list of "
            f"phrases per input, {batch} here. Received: constraints={constraints!r}"
        )
    for row in rows:
        for phrase in row:
            if not phrase:
                raise ValueError(
                    "`constraints` must hold non-empty phrases (leave a phrase out instead). "
                    f"Received: constraints={constraints!r}"
                )
    return rows


def _text_constraints(steps, batch, max_length, prefix, constraints):
    """The prefix and phrases as the constrained signature builds them: `(prefix_ids [B, P],
    constraint_ids [B, C, L], spelled [B], texts per input)` (ids right-padded with -1; a
    phrase with the unknown id left out, its row's `spelled` False), or None without any."""
    prefixes = _prefix_rows(prefix, batch)
    phrases = _phrase_rows(constraints, batch)
    if prefixes is None and phrases is None:
        return None
    prefixes = prefixes or [""] * batch
    phrases = phrases or [[] for _ in range(batch)]
    count = max([len(row) for row in phrases] + [0])
    table = [[p] + row + [""] * (count - len(row)) for p, row in zip(prefixes, phrases)]
    if not hasattr(steps, "tokenize"):
        raise ValueError(
            "`prefix` and `constraints` need a step client with `tokenize` (a StepClient or a "
            f"LiteRTModel). Received: steps={steps!r}"
        )
    if batch:
        out = steps.tokenize(table)
        ids, spelled = np.asarray(out[IDS], np.int32), np.asarray(out[SPELLED], bool)
    else:
        ids, spelled = np.zeros([0, 1 + count, 0], np.int32), np.zeros([0, 1 + count], bool)
    lengths = (ids >= 0).sum(-1)  # [B, 1 + C]
    for b, row in enumerate(table):
        for c, text in enumerate(row):
            if lengths[b, c] > max_length:
                name, what = ("prefix", "fit in") if c == 0 else ("constraints", "hold phrases of")
                raise ValueError(
                    f"`{name}` must {what} at most max_length={max_length} tokens. "
                    f"Received: {text!r} of {int(lengths[b, c])} tokens"
                )
    width = int(lengths[:, :1].max(initial=0))
    prefix_ids = ids[:, 0, :width]
    width = int(lengths[:, 1:].max(initial=0))
    phrase_ids = ids[:, 1:, :width]
    phrase_spelled = spelled[:, 1:]
    phrase_ids = np.where(phrase_spelled[..., None], phrase_ids, -1).astype(np.int32)
    texts = [[t for t in row if t] for row in table]
    return prefix_ids, phrase_ids, phrase_spelled.all(axis=1), texts


def _pad_last(ids, width):
    return np.pad(ids, [(0, 0), (0, 0), (0, width - ids.shape[2])], constant_values=-1)


def _concat_phrases(a, b):
    width = max(a.shape[2], b.shape[2])
    return np.concatenate([_pad_last(a, width), _pad_last(b, width)], axis=1)


def _constraints(steps, encoded, request, batch, ids):
    """`(ids, spelled)`: the search's constraints as ids, `ids` (the request's own) with the
    request's text prefix and phrases (tokenized by `steps`), then, for a beam on an export
    that keeps placeholders, the source's placeholders and their budget from `encode` (as
    `beam_search` and `beam_search_constrained` add them); and the per-input `spelled` of the
    text phrases (None without text constraints)."""
    knobs = dict(ids)
    max_length = request.config.max_length
    text = _text_constraints(steps, batch, max_length, request.prefix, request.constraints)
    spelled = None
    if text is not None:
        given = sorted({"prefix_ids", "constraint_ids", "constraint_alt_ids"} & set(knobs))
        if given:
            raise ValueError(
                "Give the prefix and phrases as text (`prefix`, `constraints`) or as ids, not "
                f"both. Received: prefix/constraints with {given}"
            )
        prefix_ids, phrase_ids, spelled, texts = text
        knobs["prefix_ids"], knobs["constraint_ids"] = prefix_ids, phrase_ids
    placeholders = MODES[request.mode].n_best and PLACEHOLDER_OUTPUTS[0] in encoded
    if not placeholders:
        return knobs, spelled
    given = sorted({"constraint_alt_ids", "budget_ids", "budget_costs", "budgets"} & set(knobs))
    if given:
        raise ValueError(
            "The export keeps the source's placeholders (their phrases and budget come from "
            f"`encode`): a beam takes no {given} of its own. Received: {given}"
        )
    found = {name: np.asarray(encoded[name]) for name in PLACEHOLDER_OUTPUTS}
    requested = knobs.get("constraint_ids")
    if requested is None:
        knobs.update(found)
        return knobs, spelled
    requested = np.asarray(requested, np.int32)
    knobs["constraint_ids"] = _concat_phrases(requested, found["constraint_ids"])
    knobs["constraint_alt_ids"] = _concat_phrases(
        np.full(requested.shape, -1, np.int32), found["constraint_alt_ids"]
    )
    budgets = found["budgets"].copy()
    if text is not None:  # the characters of the request's own prefix and phrases are allowed
        for b, row in enumerate(texts):
            budgets[b] += character_counts(row).sum(axis=0).astype(budgets.dtype)
    knobs.update(budget_ids=found["budget_ids"], budget_costs=found["budget_costs"])
    knobs["budgets"] = budgets
    return knobs, spelled


def print_stream(
    steps,
    texts,
    mode="beam",
    file=None,
    max_length=None,
    view=None,
    prefix=None,
    constraints=None,
    **knobs,
):
    """`keras-attn translate --stream`: each text's answer written to `file` (stdout) as it
    is found, one line per text; returns the last event's `result` of each text. `mode`,
    `max_length`, `prefix`, `constraints` and the knobs as `stream`'s (`mode` may be a
    `SearchRequest`). `view`: what shows the events (`keras_attn.cli.stream_view`: a
    terminal's live line, rewritten when the search changes its mind, or plain lines; None:
    the one `file` calls for)."""
    request, ids = stream_request(mode, max_length, prefix, constraints, **knobs)
    import sys

    from keras_attn.cli.stream_view import view_for

    file = sys.stdout if file is None else file
    view = view_for(file) if view is None else view
    results = []
    for text in texts:
        event = None
        for event in _stream(steps, [text], request, ids):
            view.event(event)
        view.end(event.best[0])
        results.append(event.result)
    return results


def translate_stream(export_dir, texts, mode, file=None, exported=None, constraints=None, **params):
    """`keras-attn translate --stream`: `print_stream` over an export's step signatures, run
    in this process as TensorFlow Serving runs them (`ServeSessionClient`). `mode`: a
    `SearchRequest`, or a mode's name with the request's keywords in `params`; `exported`:
    the export's search settings (its `max_length` unless the request gives one);
    `constraints`: `{"prefix": text, "constraints": [phrase, ...]}` (either may be missing),
    every text's (with a mode's name). Returns the exit status."""
    phrases = {k: v for k, v in (constraints or {}).items() if v is not None}
    request, ids = stream_request(mode, **phrases, **params)
    if "max_length" not in request.given and exported and "max_length" in exported:
        config = request.config.replace(max_length=exported["max_length"])
        request = dataclasses.replace(request, config=config, given=("max_length",) + request.given)
    elif "max_length" not in request.given:
        config = request.config.replace(max_length=DEFAULT_MAX_LENGTH)
        request = dataclasses.replace(request, config=config)
    needed = REQUIRED_STEP_SIGNATURES + (("tokenize",) if request.strings else ())
    with ServeSessionClient(export_dir) as client:
        missing = [n for n in needed if n not in client.meta_graph.signature_def]
        if missing:
            raise ValueError(
                f"`--stream` needs the export's step signatures {list(needed)}: export with "
                "extra_signatures=[keras_attn.serving.steps.STEP_SIGNATURES]. "
                f"Received: export_dir={export_dir!r} without {missing}"
            )
        # the export's search run to growing step limits where the request allows: the first
        # text sooner than the client's own search gives it (benchmarks/streaming.py --pace)
        print_stream(StepClient(client, search_steps=True), texts, request, file=file, **ids)
    return 0


def _rules(encoded):
    """The word rules' arrays `encode` answered (`word_rules_*`, by their names after it)."""
    n = len(WORD_RULES_PREFIX)
    return {k[n:]: np.asarray(v) for k, v in encoded.items() if k.startswith(WORD_RULES_PREFIX)}


def _word_rules(step, state, rules, end_token, max_length, mode):
    """`(step, state)` wrapped with the export's word rules (`word_rules_step`, with the
    tables and the source's phrases `encode` gave) where they bind `mode`'s search, or as they
    are without them (the greedy search stays plain, as the in-graph `greedy`)."""
    from keras_attn.decoding.words import word_rules_step

    if not rules or mode not in RULED_SEARCHES:
        return step, state
    return word_rules_step(
        step,
        state,
        rules["source_ids"],
        rules.get("word_start"),
        end_token,
        max_length,
        phrase_ids=rules["phrase_ids"],
        open_end=rules["open_end"],
        phrase_alt_ids=rules["phrase_alt_ids"],
        fixed=rules.get("fixed"),
        marker=rules.get("marker"),
        glue=rules["glue"],
        word_text=_word_text(rules),
    )


def _word_text(rules):
    """The loop ban's tables `encode` answered (`word_text_tables`), or None without them."""
    if WORD_TEXT_TABLES[0] not in rules:
        return None
    return tuple(rules[name] for name in WORD_TEXT_TABLES)


def _is_array(value):
    return np.ndim(value) > 0


def _search_keywords(request, ids, encoded):
    """The engine's keywords of a request: the knobs it gives (`eos_penalty` the export's
    unless given) and its constraints as ids."""
    config = request.config
    knobs = {name: getattr(config, name) for name in request.given if name != "max_length"}
    knobs.setdefault("eos_penalty", float(np.asarray(encoded["eos_penalty"])))
    knobs.update(ids)
    return knobs


def _run_search(steps, encoded, request, ids, on_step):
    """The search of `request` over `steps`, compiled once per step client and settings
    (`_Compiled`); `on_step(step, history)` hears each step's tokens so far."""
    import tensorflow as tf

    mode, max_length = request.mode, request.config.max_length
    knobs = _search_keywords(request, ids, encoded)

    compiled = _COMPILED.get(steps)
    if compiled is None:
        compiled = _COMPILED[steps] = _Compiled(_Answers.probe(steps, encoded))
    answers = compiled.answers
    if answers.packed:  # the engine holds each hypothesis' row; the server the state
        state = {PARENTS: np.arange(len(encoded["start_tokens"]), dtype=np.int32)}
    else:
        state = _initial_state(encoded)
    names = tuple(name for name, _ in _flat_leaves(state))
    arrays = {k: np.asarray(v) for k, v in knobs.items() if _is_array(v)}
    scalars = {k: v for k, v in knobs.items() if k not in arrays}
    rules = _rules(encoded) if mode in RULED_SEARCHES else {}
    tables = {k: rules.pop(k) for k in VOCABULARY_RULES if k in rules}  # traced as constants
    end_token = int(np.asarray(encoded["end_token"]))
    key = (
        mode,
        max_length,
        end_token,
        tuple(sorted((k, repr(v)) for k, v in scalars.items())),
        tuple(sorted(arrays)),
        tuple(sorted(rules)),
        tuple(sorted(tables)),  # an export's own: the same for each of its requests
        names,
    )
    run = compiled.function(key, mode, max_length, scalars, end_token, names, tables)
    with compiled.lock:
        packed_state = np.asarray(encoded[STATE_BYTES], object) if answers.packed else None
        compiled.run = _Run(steps, on_step, names, answers, mode == "greedy", packed_state)
        try:
            result = run(
                state,
                np.asarray(encoded["start_tokens"], np.int32),
                np.asarray(encoded["source_mask"], bool),
                arrays,
                rules,
            )
        except (tf.errors.OpError, ValueError):
            if compiled.run.error is not None:
                raise compiled.run.error from None
            raise
        finally:
            compiled.run = None
    return {k: np.asarray(v) for k, v in result.items()}


def _empty_result(n_best):
    if n_best:
        return {"outputs": [], "scores": np.zeros([0, 0], np.float32)}
    return {"outputs": [], "scores": np.zeros([0], np.float32)}


def _result(steps, n_best, result):
    """The engine's result -> the in-graph signature's outputs (texts detokenized; `n_best`:
    K per input)."""
    sequences, lengths = result["sequences"], result["lengths"]
    t = max(1, int(lengths.max()) if lengths.size else 1)
    flat = sequences[..., :t].reshape(-1, t)
    texts = steps.detokenize(flat) if len(flat) else []
    if n_best:
        k = sequences.shape[1]
        outputs = [texts[i * k : (i + 1) * k] for i in range(sequences.shape[0])]
        return {
            "outputs": outputs,
            "scores": result["scores"].astype(np.float32),
            "log_probs": result["log_probs"].astype(np.float32),
            "lengths": lengths.astype(np.int32),
            "sequences": sequences[..., :t],
            **(
                {"constraints_met": result["constraints_met"]}
                if "constraints_met" in result
                else {}
            ),
        }
    return {
        "outputs": texts,
        "scores": result["scores"].astype(np.float32),
        "lengths": lengths.astype(np.int32),
        "sequences": sequences[..., :t],
    }
