"""The step signatures from the client's side: `StepClient` (any client with `predict` as a
step client), `ServeSessionClient` (the `serve` MetaGraph in a `tf.compat.v1.Session`, as
TensorFlow Serving runs it), and the host side of one step of a streamed search (`_Run`): the request it sends,
the answers it reads back, the greedy search's read-ahead (`_Lookahead`) and a packed client's
state bytes. `keras_attn.serving.streaming` runs the search over them (its docstring says how).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from keras_attn.serving.client import Closing, MissingSignatureError, _as_bytes_array, _text
from keras_attn.serving.steps import (
    ATTENTION,
    CHOSEN,
    COUNT,
    IDS,
    LOGITS,
    PARENTS,
    SEARCH_STEPS,
    SPELLED,
    STATE_BYTES,
    STATE_PREFIX,
    STEP,
    STEPS,
    TEXTS,
    TOKENS,
    is_per_example,
)


class StepClient:
    """The step signatures through any client with `predict(signature_name, inputs)`.

    Args:
        predictor: a `GrpcClient`, `RestClient`, `SavedModelClient` or `ServeSessionClient`.
        input_name: the export's input (`"inputs"` for text, `"images"` for captioners).
        packed: ask the packed step signatures (`decode_step_packed`, `decode_steps_packed`:
            the state crosses as one binary tensor the client hands back unread) where the
            export has them; None: for a client over the network (`GrpcClient`, `RestClient`),
            not for one in the same process (there the leaves cost nothing to pass).
        search_steps: stream a beam or greedy search through `beam_search_steps` /
            `greedy_steps` (the server runs the search to a growing step limit: a few requests
            per answer, no state sent) where the export has them and the request is one they
            take (no prefix, phrases or controls); False: the client's own search over the
            step signatures; None: for a client over the network, as `packed`.
    """

    def __init__(self, predictor, input_name="inputs", packed=None, search_steps=None):
        from keras_attn.serving.client import GrpcClient, RestClient

        if not hasattr(predictor, "predict"):
            raise ValueError(
                "`predictor` must have `predict(signature_name, inputs)` (a keras_attn.serving "
                f"client). Received: predictor={predictor!r}"
            )
        for name, value in (("packed", packed), ("search_steps", search_steps)):
            if value not in (None, True, False):
                raise ValueError(
                    f"`{name}` must be None, True or False. Received: {name}={value!r}"
                )
        self.predictor = predictor
        self.input_name = input_name
        remote = isinstance(predictor, (GrpcClient, RestClient))
        self.packed = remote if packed is None else packed
        # False once the export answered that it has no search run to a step limit
        self.search_steps = remote if search_steps is None else search_steps

    def encode(self, inputs, max_length):
        if self.input_name == "inputs":
            inputs = _as_bytes_array(inputs)
        return self.predictor.predict(
            "encode", {self.input_name: inputs, "max_length": np.int32(max_length)}
        )

    def decode_step(self, request):
        return self.predictor.predict("decode_step", request)

    def decode_steps(self, request):
        return self.predictor.predict("decode_steps", request)

    def decode_step_packed(self, request):
        return self.predictor.predict("decode_step_packed", request)

    def decode_steps_packed(self, request):
        return self.predictor.predict("decode_steps_packed", request)

    def search_to(self, mode, inputs, values, steps):
        """The search of `mode` (`"beam"`, `"greedy"`) over `inputs` with the request
        parameters `values` (`{name: value}`) run to at most `steps` steps by the export's
        `beam_search_steps` / `greedy_steps`; None where the export has no such signature
        (then `search_steps` turns False)."""
        from keras_attn.serving.specs import as_arrays

        if self.input_name == "inputs":
            inputs = _as_bytes_array(inputs)
        request = {self.input_name: inputs, **as_arrays(values), STEPS: np.int32(steps)}
        try:
            return self.predictor.predict(SEARCH_STEPS[mode], request)
        except MissingSignatureError:  # an export made before them: a request per step
            self.search_steps = False
            return None

    def detokenize(self, ids):
        out = self.predictor.predict("detokenize", {"ids": np.asarray(ids, np.int32)})
        return [_text(t) for t in out["outputs"].tolist()]

    def tokenize(self, texts):
        """Strings `[B][C]` -> `{"ids": int32 [B, C, L] (-1 padded), "spelled": bool [B, C]}`
        through the export's `tokenize` signature (the target tokenizer, in the graph)."""
        table = np.array(
            [[t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in row] for row in texts],
            dtype=object,
        ).reshape(len(texts), -1)
        out = self.predictor.predict("tokenize", {TEXTS: table})
        return {IDS: np.asarray(out[IDS], np.int32), SPELLED: np.asarray(out[SPELLED], bool)}


class ServeSessionClient(Closing):
    """An exported SavedModel's `serve` MetaGraph loaded once into a `tf.compat.v1.Session`,
    run the way TensorFlow Serving runs it (the SignatureDef's tensor names); `predict` answers
    `{output alias: numpy array}`.

    Args:
        export_dir: a version directory, or a base directory (its highest version is used).
    """

    def __init__(self, export_dir):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the TF Text ops)

        from keras_attn.serving.client import resolve_version_dir

        self.path = resolve_version_dir(export_dir)
        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph)
        self._callables = {}
        logger = tf.get_logger()
        level = logger.level
        logger.setLevel("ERROR")
        try:
            self.meta_graph = tf.compat.v1.saved_model.loader.load(
                self.session, ["serve"], self.path
            )
        finally:
            logger.setLevel(level)

    def predict(self, signature_name, inputs, output_filter=None, timeout=None):
        signatures = self.meta_graph.signature_def
        if signature_name not in signatures:
            raise MissingSignatureError(
                f"The export has no `{signature_name}` signature: re-export the model. "
                f"Received: signature_name={signature_name!r} (signatures: {sorted(signatures)})"
            )
        sig = signatures[signature_name]
        missing = sorted(set(sig.inputs) - set(inputs))
        if missing:
            raise ValueError(
                f"`{signature_name}` needs the inputs {missing}. Received: inputs with "
                f"{sorted(inputs)}"
            )
        aliases = tuple(sorted(inputs))
        wanted = tuple(output_filter or sorted(sig.outputs))
        key = (signature_name, aliases, wanted)
        if key not in self._callables:  # the fetches and feeds resolved once, not per call
            self._callables[key] = self.session.make_callable(
                [sig.outputs[a].name for a in wanted],
                feed_list=[sig.inputs[a].name for a in aliases],
            )
        values = self._callables[key](*(np.asarray(inputs[a]) for a in aliases))
        return dict(zip(wanted, values))

    def close(self):
        self.session.close()


def _initial_state(encoded):
    """`encode`'s answer -> the engine's state nest: per-input leaves under `"per_example"`
    (kept with B rows), the others at the top."""
    state = {"per_example": {}}
    for name, value in encoded.items():
        if not name.startswith(STATE_PREFIX):
            continue
        (state["per_example"] if is_per_example(name) else state)[name] = np.asarray(value)
    if not state["per_example"]:
        del state["per_example"]
    return state


def _flat_leaves(state):
    """`[(name, leaf)]` of a state nest (the per-input leaves' names as `encode` gives them)."""
    leaves = [(k, v) for k, v in state.items() if k != "per_example"]
    return leaves + list(state.get("per_example", {}).items())


def _nest_like(state, values):
    """`values` (`{name: leaf}`) in `state`'s nest."""
    out = {k: values[k] for k in state if k != "per_example"}
    if "per_example" in state:
        out["per_example"] = {k: values[k] for k in state["per_example"]}
    return out


@dataclasses.dataclass
class _Answers:
    """What a step client's `decode_step` answers, learned once from one call: the state
    leaves it returns (the others it passes through), the vocabulary's size (the logits'
    width) and whether it returns attention. A packed client's search holds one leaf, each
    hypothesis' row in the state the server holds packed (`PARENTS`: the engine reorders it
    with the hypotheses), and the packed bytes beside the search (`_Run`)."""

    changed: tuple
    vocab: int
    attention: bool
    lookahead: bool  # the client answers `decode_steps`
    packed: bool  # the client asks the packed twins

    @classmethod
    def probe(cls, steps, encoded):
        tokens = np.asarray(encoded["start_tokens"], np.int32)
        request = {TOKENS: tokens, STEP: np.int32(0)}
        packed = bool(getattr(steps, "packed", False)) and STATE_BYTES in encoded
        if packed:  # `encode` answers the packed state only where the twins are exported
            request.update({PARENTS: np.arange(len(tokens), dtype=np.int32)})
            request[STATE_BYTES] = encoded[STATE_BYTES]
            answer = steps.decode_step_packed(request)
            changed = (PARENTS,)
        else:
            request.update(_flat_leaves(_initial_state(encoded)))
            answer = steps.decode_step(request)
            changed = tuple(sorted(n for n in answer if n.startswith(STATE_PREFIX)))
        attention = answer.get(ATTENTION)
        lookahead = hasattr(steps, "decode_steps")
        if lookahead and not packed:
            try:  # an export made before `decode_steps` lacks it: one step a request there
                steps.decode_steps({**request, COUNT: np.int32(1)})
            except MissingSignatureError:  # any other error is the export's or the server's
                lookahead = False
        return cls(
            changed,
            int(np.shape(answer[LOGITS])[-1]),
            attention is not None and np.asarray(attention).shape[-1] > 0,
            lookahead,
            packed,
        )


@dataclasses.dataclass
class _Chunk:
    """One `decode_steps` answer: the steps `start` to `start + count - 1` run from `first`
    (the tokens) and `given` (the state) at `start`, each fed the token in `inputs` (`[N,
    count]`: `first`, then what the step before chose), and the state after them."""

    start: int
    given: dict
    inputs: np.ndarray
    logits: np.ndarray
    attention: np.ndarray
    state: dict

    @property
    def count(self):
        return self.inputs.shape[1]


class _Lookahead:
    """A greedy search's `decode_step` answered from `decode_steps` chunks: a step whose
    tokens are those the chunk fed is answered from it with no request; a search that chose
    otherwise (a control, a ban) gets the state at its step from the chunk's start again and
    a chunk from there. The chunks grow (`SIZES`) so the first text comes after a short one."""

    SIZES = (4, 16, 64)

    def __init__(self, steps, changed, packed=False):
        self.steps, self.changed = steps, changed
        self.decode_steps = steps.decode_steps_packed if packed else steps.decode_steps
        self.chunk = None
        self.requests = 0

    def _run(self, tokens, step, given, count):
        answer = self.decode_steps(
            {TOKENS: tokens, STEP: np.int32(step), COUNT: np.int32(count), **given}
        )
        self.requests += 1
        chosen = np.asarray(answer[CHOSEN], np.int32)
        inputs = np.concatenate([np.asarray(tokens, np.int32)[:, None], chosen[:, :-1]], axis=1)
        return _Chunk(
            step,
            given,
            inputs,
            np.asarray(answer[LOGITS], np.float32),
            np.asarray(answer[ATTENTION], np.float32),
            {n: np.asarray(answer[n], given[n].dtype) for n in self.changed},
        )

    def answer(self, tokens, step, given):
        """`{logits, attention, changed leaves}` of the step (`given`: the state the search
        holds, which is stale inside a chunk: the chunk keeps the true one)."""
        chunk = self.chunk
        if chunk is not None:
            j = step - chunk.start
            if 0 <= j < chunk.count and np.array_equal(tokens, chunk.inputs[:, j]):
                return {
                    LOGITS: chunk.logits[:, j],
                    ATTENTION: chunk.attention[:, j],
                    **{n: given[n] for n in self.changed},
                }
            # the state at `step` depends on the tokens fed before it, which the chunk fed
            if j == chunk.count:
                given = {**given, **chunk.state}
            elif 0 < j < chunk.count:
                again = self._run(chunk.inputs[:, 0], chunk.start, chunk.given, j)
                given = {**given, **again.state}
        size = self.SIZES[min(self.requests, len(self.SIZES) - 1)]
        self.chunk = self._run(tokens, step, given, size)
        return self.answer(tokens, step, given)


class _Run:
    """The run in progress of a compiled search: the host calls it makes (`decode_step`, or
    for a greedy search `decode_steps` chunks where the client has them; the text found so
    far), and the error one of them raised (handed back as it was raised)."""

    def __init__(self, steps, on_step, names, answers, greedy=False, packed_state=None):
        self.steps, self.on_step, self.names, self.answers = steps, on_step, names, answers
        # a packed client's state: the bytes the server answered last (`_Answers`)
        self.packed_state = packed_state
        packed = packed_state is not None
        self.decode_step = steps.decode_step_packed if packed else steps.decode_step
        self.lookahead = None
        if greedy and answers.lookahead:
            changed = (STATE_BYTES,) if packed else answers.changed
            self.lookahead = _Lookahead(steps, changed, packed)
        self.error = None

    def __call__(self, tokens, step, history, *leaves):
        try:
            step = int(step)
            if step > 0:
                self.on_step(step, history)
            given = dict(zip(self.names, leaves))
            if self.packed_state is not None:  # the rows the engine reordered, and the bytes
                given = {PARENTS: given[PARENTS], STATE_BYTES: self.packed_state}
            if self.lookahead is not None:
                answer = self.lookahead.answer(tokens, step, given)
            else:
                answer = self.decode_step({TOKENS: tokens, STEP: np.int32(step), **given})
            out = [np.asarray(answer[LOGITS], np.float32)]
            if self.answers.attention:
                out.append(np.asarray(answer[ATTENTION], np.float32))
            if self.packed_state is not None:
                self.packed_state = answer[STATE_BYTES]
                return out + [np.arange(len(tokens), dtype=np.int32)]  # each row its own
            out += [np.asarray(answer[n], given[n].dtype) for n in self.answers.changed]
            return out
        except BaseException as err:  # the search stops; the caller gets this very error
            self.error = err
            raise
