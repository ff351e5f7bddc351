"""The `extra_signatures` setting, a served behaviour of its own (`EXTRA_SIGNATURES`): the
signatures other modules add beside the search signatures (`keras_attn.serving.specs.
ExtraSignatures` rows, such as the step signatures of `keras_attn.serving.steps`), each row
building its functions and warm-up requests from the export's `ServingSignatures`."""

from __future__ import annotations

from keras_attn.serving.behaviours import Behaviour


class ExtraSignatureRows(Behaviour):
    """The `extra_signatures` setting: each row's functions and warm-up requests, in the
    order the setting lists the rows."""

    name = "extra signatures"
    settings = ("extra_signatures",)

    def functions(self, signatures):
        functions = {}
        for row in signatures.settings.extra_signatures:
            functions.update(row.functions(signatures))
        return functions

    def warmup(self, signatures, inputs):
        return [
            request
            for row in signatures.settings.extra_signatures
            if row.warmup is not None
            for request in row.warmup(signatures, inputs)
        ]


EXTRA_SIGNATURES = ExtraSignatureRows()
