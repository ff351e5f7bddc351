"""The packages that follow TensorFlow's minor version, and the pip command that installs them.

TensorFlow Text's ops are built for one TensorFlow minor version (tensorflow-text 2.18.1
requires `tensorflow>=2.18.0,<2.19`), and tensorflow-serving-api 2.N requires
`tensorflow>=2.N`. Neither can be a requirement of an extra: without an upper bound pip takes
the newest release and replaces the TensorFlow already installed to satisfy it, and a bound
cannot follow the installed TensorFlow (environment markers do not see installed packages).
So the extras bring TensorFlow's range only, and these two are installed beside them, pinned to
the installed TensorFlow's minor version: `install_command` writes that command
(docs/install.md, "Beside the TensorFlow you have"), and `missing_message` / `require` the one
line that says what a part of the package needs and how to install it (in a JAX-only install:
the graph tokenizers and export).

Only the standard library is imported (no TensorFlow): versions are read from the installed
packages' metadata.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

# The module a command imports -> the distribution that installs it, for the two packages
# that must match TensorFlow's minor version.
FOLLOWERS = {
    "tensorflow_text": "tensorflow-text",
    "tensorflow_serving": "tensorflow-serving-api",
}
# The module -> the extra of keras-attn that installs it.
EXTRA_OF = {
    "tensorflow": "tensorflow",
    "keras": "tensorflow",
    "sentencepiece": "tensorflow",
    "grpc": "serving",
    "polib": "serving",
}
# The distributions a TensorFlow install may come from (the metadata read for its version).
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-macos")


def installed_version(distribution):
    """The installed version of `distribution` as a string, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def tensorflow_version():
    """The installed TensorFlow's version (`"2.18.1"`), or None."""
    for distribution in TENSORFLOW_DISTRIBUTIONS:
        version = installed_version(distribution)
        if version is not None:
            return version
    return None


def minor(version):
    """`"2.18.1"` -> `"2.18"`."""
    return ".".join(version.split(".")[:2])


def follower_requirement(distribution, tf_version=None):
    """`tensorflow-text==2.18.*` for the installed TensorFlow 2.18.x; the bare name when no
    TensorFlow is installed (pip then picks the pair itself, with the TensorFlow it installs)."""
    if tf_version is None:  # the installed one, if it imports (a broken install: no pin)
        tf_version = None if is_missing("tensorflow") else tensorflow_version()
    if not tf_version:
        return distribution
    return f"{distribution}=={minor(tf_version)}.*"


def is_missing(module):
    """Whether the top-level `module` cannot be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def install_command(modules, tf_version=None):
    """The one pip command installing every module of `modules`: the extras that bring them
    (`[serving]` covers `[tensorflow]`), then TensorFlow Text and tensorflow-serving-api pinned
    to the installed TensorFlow's minor version, e.g.
    `pip install "keras-attn[serving]" "tensorflow-text==2.18.*"`."""
    modules = [m.split(".")[0] for m in modules]
    extras = {EXTRA_OF[m] for m in modules if m in EXTRA_OF}
    followers = [FOLLOWERS[m] for m in FOLLOWERS if m in modules]
    if "tensorflow_serving" in modules:
        extras.add("serving")  # its grpc clients come with [serving]
    if "serving" in extras:
        extras.discard("tensorflow")
    parts = [f'"keras-attn[{",".join(sorted(extras))}]"'] if extras else []
    parts += [f'"{follower_requirement(d, tf_version)}"' for d in followers]
    return "pip install " + " ".join(parts)


def missing_message(what, modules):
    """The one line saying that `what` needs the modules of `modules` this environment lacks,
    with the one pip command installing them, e.g. "keras_attn.serving.export_text_model needs
    `tensorflow`, `tensorflow_serving`, not installed here: pip install "keras-attn[serving]"
    "tensorflow-serving-api"", or None when every one is installed."""
    missing = [m for m in modules if is_missing(m)]
    if not missing:
        return None
    names = ", ".join(f"`{m}`" for m in missing)
    return f"{what} needs {names}, not installed here: {install_command(missing)}"


def require(what, modules):
    """An ImportError with `missing_message` when a module of `modules` is not installed."""
    message = missing_message(what, modules)
    if message is not None:
        raise ImportError(message)


def tensorflow_text_mismatch():
    """The message for an installed TensorFlow Text built for another TensorFlow minor version
    than the installed one (its ops would not load), or None when they match or one is absent."""
    tf_version = tensorflow_version()
    text_version = installed_version("tensorflow-text")
    if tf_version is None or text_version is None or minor(tf_version) == minor(text_version):
        return None
    return (
        f"TensorFlow Text {text_version} is built for TensorFlow {minor(text_version)}, not the "
        f"installed TensorFlow {tf_version}; install the matching one: "
        f'pip install "{follower_requirement("tensorflow-text", tf_version)}"'
    )


def check_tensorflow_text():
    """At `import keras_attn.text`: an ImportError naming the matching pip command when the
    installed TensorFlow Text is built for another TensorFlow minor version (its ops would not
    load); a warning naming it when TensorFlow Text is missing (`CharTokenizer` works without
    it, `SentencePieceTokenizer` needs it)."""
    message = tensorflow_text_mismatch()
    if message is not None:
        raise ImportError(message)
    if is_missing("tensorflow_text"):
        import warnings

        warnings.warn(
            "TensorFlow Text is not installed; keras_attn.text.SentencePieceTokenizer needs it: "
            + install_command(["tensorflow_text"]),
            stacklevel=3,
        )
