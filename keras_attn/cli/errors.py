"""What runs around every command: the modules it needs, TensorFlow's log lines kept off the
terminal, and a failure turned into one line."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

from keras_attn import _pins

# The top-level modules each command needs (checked before it runs, so one message names all
# that are missing). `export` adds TF Text and sentencepiece for a SentencePiece tokenizer.
NEEDS = {
    "inspect": ("tensorflow", "tensorflow_serving"),
    "translate": ("tensorflow", "tensorflow_text", "tensorflow_serving"),
    "check": ("tensorflow", "tensorflow_text", "tensorflow_serving"),
    "export": ("keras", "tensorflow", "tensorflow_serving"),
}
SENTENCEPIECE_NEEDS = ("tensorflow_text", "sentencepiece")


def needed_modules(args):
    """The top-level modules the parsed command needs (`NEEDS`)."""
    needs = list(NEEDS.get(args.command, ()))
    tokenizers = [getattr(args, n, None) for n in ("tokenizer", "target_tokenizer")]
    run_dir = getattr(args, "run_dir", None)
    if run_dir is not None:
        tokenizers.append(os.path.join(run_dir, "tokenizer.model"))
        tokenizers = [t for t in tokenizers if t is None or os.path.exists(t)]
    if any(t and t.endswith(".model") for t in tokenizers):
        needs += SENTENCEPIECE_NEEDS
    return needs


def check_ready(args):
    """Before a command runs: its EXPORT_DIR exists, and every module it needs is installed
    (one message, one pip command, for all that are missing), TF Text matching TensorFlow."""
    export_dir = getattr(args, "export_dir", None)
    if export_dir is not None and args.command != "export" and not os.path.exists(export_dir):
        raise ValueError(f"`export_dir` does not exist. Received: export_dir={export_dir!r}")
    needs = needed_modules(args)
    message = _pins.missing_message("this command", needs)
    if message:
        raise ValueError(message)
    if "tensorflow_text" in needs:
        mismatch = _pins.tensorflow_text_mismatch()
        if mismatch is not None:
            raise ValueError(mismatch)


def missing_extra(err):
    """The one-line message for a module a command needs and the environment lacks, or None."""
    module = (err.name or "").split(".")[0]
    if module not in _pins.EXTRA_OF and module not in _pins.FOLLOWERS:
        return None
    return f"this command needs `{module}`, not installed here: {_pins.install_command([module])}"


@contextlib.contextmanager
def quiet_tensorflow(verbose=False):
    """Run a command without TensorFlow's log lines, unless `verbose`: its C++ library writes
    them to file descriptor 2 (some before any setting can silence them, others when a request
    fails: "Local rendezvous is aborting"), so fd 2 goes to a temporary file while Python's
    `sys.stderr` keeps the terminal (our one-line errors, Python warnings). The Python loggers
    (tensorflow, absl) are set to errors only. When the command fails unexpectedly, the hidden
    lines are shown before the traceback."""
    if verbose:
        yield
        return
    import logging

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    loggers = [logging.getLogger(n) for n in ("tensorflow", "absl")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        saved = None
    python_stderr = sys.stderr
    log = tempfile.TemporaryFile() if saved is not None else None
    if saved is not None:
        try:
            on_fd2 = python_stderr.fileno() == 2
        except (OSError, ValueError, AttributeError):
            on_fd2 = False
        if on_fd2:
            encoding = getattr(python_stderr, "encoding", None) or "utf-8"
            sys.stderr = open(
                saved, "w", 1, encoding=encoding, errors="backslashreplace", closefd=False
            )
        os.dup2(log.fileno(), 2)
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 2)
            if sys.stderr is not python_stderr:
                sys.stderr.close()
                sys.stderr = python_stderr
            os.close(saved)
            if failed:
                log.seek(0)
                hidden = log.read().decode("utf-8", errors="replace")
                if hidden.strip():
                    print(hidden, end="", file=sys.stderr)
            log.close()


def graph_error_message(message):
    """The words of a failed graph assertion (`tf.debugging.Assert`: "assertion failed: [text]
    [value] ..."), without TensorFlow's node names and stack notes, e.g. "`beam_size` must be an
    integer in [1, 64]. Received: beam_size=1000"; other messages as they are."""
    marker = "assertion failed: ["
    if marker not in message:
        return message
    text = message[message.index(marker) + len(marker) :].split("\n", 1)[0].rstrip()
    text = text[:-1] if text.endswith("]") else text
    return re.sub(r"\] \[", " ", re.sub(r"=\] \[", "=", text)).strip()
