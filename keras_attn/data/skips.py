"""The mechanics of the readers' reports (`TsvReport`, `CatalogueReport`): what a reader kept,
and a count per reason for what it skipped."""

from __future__ import annotations

from typing import ClassVar


class SkipReport:
    """Base of a reader's report: a dataclass with an int field per skip reason.

    A reader counts a skipped item with `_skip(reason)`. `REASONS` are the reasons the summary
    names (those with a count), in its order; a subclass's `__str__` puts `_skip_parts()` among
    its own parts, and `_reason_part` says how one reason reads.
    """

    REASONS: ClassVar[tuple[str, ...]] = ()

    def _skip(self, reason):
        setattr(self, reason, getattr(self, reason) + 1)

    def _reason_part(self, reason, count):
        return f"{count} {reason.replace('_', ' ')}"

    def _skip_parts(self):
        """`"<count> <reason>"` for each of `REASONS` that has a count."""
        counts = ((reason, getattr(self, reason)) for reason in self.REASONS)
        return [self._reason_part(reason, count) for reason, count in counts if count]
