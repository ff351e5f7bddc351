"""How `keras-attn translate --stream` shows answers as they are found.

A terminal sees each answer live: its best hypothesis so far on one line, rewritten in place
when the search changes its mind (a beam may), cut to the terminal's width from the end while
it grows, then the whole answer. A pipe or a file gets plain lines: the text every hypothesis
shares as it is settled (never taken back), one line per input.
"""

from __future__ import annotations

import shutil

CLEAR_LINE = "\r\x1b[K"  # back to the line's start, erase to its end


def is_terminal(file):
    isatty = getattr(file, "isatty", None)
    return bool(isatty and isatty())


class PlainLines:
    """A pipe's view: the settled pieces as they come, a newline after each answer."""

    def __init__(self, file):
        self.file = file

    def event(self, event):
        if event.pieces[0]:
            self.file.write(event.pieces[0])
            self.file.flush()

    def end(self, answer):
        self.file.write("\n")
        self.file.flush()


class LiveLine:
    """A terminal's view: the best hypothesis so far, rewritten in place; `width` columns
    (None: the terminal's)."""

    def __init__(self, file, width=None):
        self.file = file
        self.width = width or shutil.get_terminal_size().columns
        self.shown = None

    def event(self, event):
        best = event.best[0] if event.best else None
        if best is None or best == self.shown:
            return
        self.shown = best
        line = best.replace("\n", " ")
        if len(line) >= self.width:  # one terminal row: the end of the text, where it grows
            line = "…" + line[len(line) - self.width + 2 :]
        self.file.write(CLEAR_LINE + line)
        self.file.flush()

    def end(self, answer):
        self.file.write(CLEAR_LINE + answer + "\n")
        self.file.flush()
        self.shown = None


def view_for(file):
    """The view `file` gets: `LiveLine` for a terminal, `PlainLines` otherwise."""
    return LiveLine(file) if is_terminal(file) else PlainLines(file)
