"""Served behaviours: what an export's settings add around the model's search.

Each behaviour is one `Behaviour` object in its own module, with the `ServingSettings` fields
it reads (`settings`; no two behaviours share one):

- the source's placeholders and unknown words kept (`keras_attn.serving.kept_answers.KEEP`);
- the word rules (`keras_attn.serving.word_rules.WORD_RULES`);
- the source words the model never saw, copied whole (`keras_attn.serving.known_words.
  UNKNOWN_WORDS`);
- the source as one more candidate answer (`keras_attn.serving.copy_source.COPY_SOURCE`);
- the XLA twins (`keras_attn.serving.buckets.XLA_TWINS`);
- the signatures other modules add, such as the step signatures
  (`keras_attn.serving.extra.EXTRA_SIGNATURES`).

`keras_attn.serving.signatures.BEHAVIOURS` lists them once, in the order their hooks run.
`ServingSignatures` keeps those the settings enable (`Behaviour.enabled`) and runs each hook
over them in that order: a behaviour the settings leave off contributes nothing.

To add a behaviour: write a module with a `Behaviour` subclass that names its settings and
overrides the hooks it changes (every hook here changes nothing), make its one instance, and
put that instance in `BEHAVIOURS` where its hooks should run (after the behaviours whose
tables or answers it reads). The hooks take the export's `keras_attn.serving.signatures.
ServingSignatures` (`signatures`: its model, settings, tokenizers and shared pieces) and, per
request, the signature's row of the served table (`spec`, a `keras_attn.serving.specs.
SignatureSpec`).
"""

from __future__ import annotations


class Behaviour:
    """One served behaviour; every hook changes nothing.

    Attributes:
        name: the behaviour in words.
        settings: the `ServingSettings` fields it reads.
    """

    name = ""
    settings: tuple = ()

    def enabled(self, settings):
        """Whether the export's `settings` turn it on: any of its fields set."""
        return any(bool(getattr(settings, name)) for name in self.settings)

    # ---- once per export ----------------------------------------------------------------
    def prepare(self, signatures):
        """Compute what the export reads once (vocabulary tables) as attributes of
        `signatures`; a setting the model or its tokenizers cannot honour: `ValueError`."""

    def tracked(self, signatures):
        """The objects the SavedModel keeps for it beside the model and tokenizers."""
        return []

    def signatures(self, signatures):
        """`{name: (spec, xla)}`: rows of the served table it adds (`xla`: compiled core)."""
        return {}

    def functions(self, signatures):
        """`{name: concrete function}`: the signatures it builds itself."""
        return {}

    def warmup(self, signatures, inputs):
        """`[(name, {input: array}), ...]`: warm-up requests of its own `functions`, given
        the export's warm-up texts."""
        return []

    # ---- per request ---------------------------------------------------------------------
    def request(self, signatures, spec, inputs, texts, rows):
        """The search's per-row constraint tensors `rows` (`{name: [B, ...]}`, the fields of
        its `Constraints`) for text `inputs` `[B]` and the request's string inputs `texts`."""
        return rows

    def step_rows(self, signatures, spec, inputs):
        """`{name: [B, ...]}` its step reads per row, made from text `inputs`, or None: it
        leaves this signature's step as it is."""
        return None

    def source_rows(self, signatures, rows, source_ids):
        """The step's per-row tensors `rows` with what it reads of the source ids `[B, S]`
        (those the search runs over: padded to the buckets under XLA)."""
        return rows

    def step(self, signatures, step, state, rows):
        """`(step, state)`: the search's step function and initial state; `rows`: the step's
        per-row tensors, None where no behaviour made any."""
        return step, state

    def answer(self, signatures, spec, search, answer, xla):
        """The signature's answer function `answer(inputs, texts, config) -> outputs` (the
        body's, as the behaviours before this one left it); `search`: the row's search
        function; `xla`: whether its numeric core is compiled."""
        return answer
