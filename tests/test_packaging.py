"""The package as a user installs it: dependency ranges, extras, the wheel's contents, metadata.

The wheel is built the way `pip install keras-attn` builds it (an isolated build environment
from `[build-system]`), from a copy of the checkout, so the test leaves nothing in the tree.
"""

import email
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import keras_attn

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]

# Packages whose versions the two lock files decide and whose lower bounds are the oldest
# versions `make test-oldest` runs.
FLOORED = ("keras", "numpy", "tensorflow", "jax", "sentencepiece")
# Installed beside the extras, pinned to TensorFlow's minor version (never an extra's requirement:
# pip would replace the installed TensorFlow to satisfy their newest release).
FOLLOW_TENSORFLOW = ("tensorflow-text", "tensorflow-serving-api")
# An upper bound only where an incompatibility is known: ruff's formatter changes its style
# between minor versions, and `make lint` runs `ruff format --check`.
KNOWN_UPPER_BOUNDS = {"ruff"}
EXTRAS = ("tensorflow", "jax", "serving", "examples", "corpora")
# Directories of the checkout that are not the package.
NOT_PACKAGED = ("tests", "docs", "benchmarks", "examples", "export")


def name(req):
    return re.sub(r"[-_.]+", "-", req.name).lower()


def requirements():
    """(where, Requirement) for every dependency and every extra's requirement."""
    out = [("dependencies", Requirement(r)) for r in PROJECT["dependencies"]]
    for extra, reqs in PROJECT["optional-dependencies"].items():
        out += [(f"[{extra}]", Requirement(r)) for r in reqs]
    return out


def read_lock(path):
    pins = {}
    for line in (ROOT / path).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{path}: {line} is not an exact pin"
            pins[name(req)] = Version(spec.version)
    return pins


# ---- pyproject.toml ------------------------------------------------------------------------


def test_dependencies_are_ranges_not_pins():
    for where, req in requirements():
        if name(req) == "keras-attn":  # an extra that includes other extras
            assert not req.specifier, f"{where}: {req}"
            continue
        ops = {spec.operator for spec in req.specifier}
        assert not ops & {"==", "==="}, f"{where}: {req} pins one version"
        assert ops & {">=", "~=", ">"}, f"{where}: {req} has no lower bound"
        if name(req) not in KNOWN_UPPER_BOUNDS:
            assert not ops & {"<", "<=", "~="}, f"{where}: {req} has an upper bound"


def test_core_needs_keras_and_no_backend():
    core = {name(Requirement(r)) for r in PROJECT["dependencies"]}
    assert core == {"keras", "numpy"}


def test_extras_match_their_use():
    extras = PROJECT["optional-dependencies"]
    assert set(EXTRAS) <= set(extras)
    names = {extra: {name(Requirement(r)) for r in reqs} for extra, reqs in extras.items()}
    assert {"tensorflow", "sentencepiece"} <= names["tensorflow"]
    assert "jax" in names["jax"] and "tensorflow" not in names["jax"]
    assert "grpcio" in names["serving"]
    # [serving] exports text models: it brings [tensorflow] along.
    assert "keras-attn[tensorflow]" in extras["serving"]
    assert {"babel", "django", "wtforms", "humanize", "pycountry"} <= names["corpora"]


def test_no_extra_requires_what_follows_the_tensorflow_minor():
    for where, req in requirements():
        assert name(req) not in FOLLOW_TENSORFLOW, f"{where}: {req}"


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-oldest.lock"])
def test_lock_files_pair_tf_text_and_serving_api_with_tensorflow(lock):
    pins = read_lock(lock)
    for package in FOLLOW_TENSORFLOW:
        assert pins[package].release[:2] == pins["tensorflow"].release[:2], (lock, package)


def test_install_command_pins_the_installed_tensorflow_minor():
    from keras_attn import _pins

    needs = ["tensorflow", "tensorflow_text", "tensorflow_serving"]
    assert _pins.install_command(needs, tf_version="2.18.1") == (
        'pip install "keras-attn[serving]" "tensorflow-text==2.18.*" '
        '"tensorflow-serving-api==2.18.*"'
    )
    assert _pins.install_command(["tensorflow_text"], tf_version="2.21.0") == (
        'pip install "tensorflow-text==2.21.*"'
    )
    assert _pins.install_command(["tensorflow"], tf_version="") == (
        'pip install "keras-attn[tensorflow]"'
    )
    # No TensorFlow: the names alone, pip picks the set.
    assert _pins.install_command(needs, tf_version="") == (
        'pip install "keras-attn[serving]" "tensorflow-text" "tensorflow-serving-api"'
    )


def test_a_tf_text_of_another_tensorflow_minor_is_refused_with_the_command(monkeypatch):
    from keras_attn import _pins

    versions = {"tensorflow": "2.18.1", "tensorflow-text": "2.21.1"}
    monkeypatch.setattr(_pins, "installed_version", versions.get)
    message = _pins.tensorflow_text_mismatch()
    assert message == (
        "TensorFlow Text 2.21.1 is built for TensorFlow 2.21, not the installed TensorFlow "
        '2.18.1; install the matching one: pip install "tensorflow-text==2.18.*"'
    )
    with pytest.raises(ImportError) as err:
        _pins.check_tensorflow_text()
    assert str(err.value) == message
    versions["tensorflow-text"] = "2.18.1"
    assert _pins.tensorflow_text_mismatch() is None


def test_lower_bounds_are_the_oldest_tested_versions():
    oldest = read_lock("requirements-oldest.lock")
    floors = {}
    for _, req in requirements():
        for spec in req.specifier:
            if spec.operator == ">=":
                floors[name(req)] = Version(spec.version)
    for package in FLOORED:
        assert floors[package] == oldest[package], (package, floors[package], oldest[package])


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-oldest.lock"])
def test_lock_files_satisfy_the_ranges(lock):
    pins = read_lock(lock)
    checked = 0
    for where, req in requirements():
        if name(req) in pins and req.specifier:
            assert req.specifier.contains(pins[name(req)], prereleases=True), (lock, where, req)
            checked += 1
    assert checked >= len(FLOORED)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert SpecifierSet(PROJECT["requires-python"]).contains(python)


def test_layers_and_losses_import_with_keras_and_jax_only():
    """The core's promise: on JAX, importing the layers and losses loads no TensorFlow."""
    code = (
        "import sys, keras_attn.layers, keras_attn.losses\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'tensorflow_text'}))"
    )
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_build_requirement_matches_the_metadata():
    # A license given as an SPDX expression (a string) needs setuptools 77 or newer.
    assert isinstance(PROJECT["license"], str)
    (setuptools,) = [
        Requirement(r)
        for r in PYPROJECT["build-system"]["requires"]
        if name(Requirement(r)) == "setuptools"
    ]
    assert not setuptools.specifier.contains("76.1.0")
    assert setuptools.specifier.contains("77.0.3")
    assert PROJECT["version"] == keras_attn.__version__


def test_license_is_the_apache_text():
    text = (ROOT / "LICENSE").read_text()
    assert PROJECT["license"] == "Apache-2.0"
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_changelog_starts_at_the_current_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "Keep a Changelog" in text
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, re.M)
    assert releases and releases[0] == keras_attn.__version__
    assert releases[-1] == "0.1.0"


# ---- the wheel ---------------------------------------------------------------------------


def _ignored(directory, names):
    """What git ignores (environments, build outputs, exported models, runs)."""
    skip = {".git", "build", "dist", "runs", "__pycache__", ".ruff_cache", ".hypothesis"}
    exported = pathlib.Path(directory) == ROOT / "export"
    return [
        n
        for n in names
        if n in skip
        or n.startswith(".venv")
        or n.endswith(".egg-info")
        or (exported and n == "models")
    ]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The built wheel (a ZipFile): `pip wheel --no-deps` with build isolation, as pip installs."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=_ignored)
    out = tmp / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = out.glob("keras_attn-*.whl")
    with zipfile.ZipFile(path) as zf:
        zf.source = source  # where it was built: no file of the wheel may name it
        yield zf


def test_wheel_holds_only_the_package(wheel):
    dist_info = f"keras_attn-{keras_attn.__version__}.dist-info/"
    names = wheel.namelist()
    assert "keras_attn/__init__.py" in names
    for n in names:
        assert n.startswith(("keras_attn/", dist_info)), n
        assert n.split("/")[0] not in NOT_PACKAGED, n
    # Every module of the checkout's package, and nothing that is not in it.
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "keras_attn").rglob("*.py")}
    assert modules == {n for n in names if n.endswith(".py")}
    assert not [n for n in names if n.endswith((".pyc", ".md", ".toml"))]


def test_wheel_has_license_and_py_typed(wheel):
    names = wheel.namelist()
    assert "keras_attn/py.typed" in names
    dist_info = f"keras_attn-{keras_attn.__version__}.dist-info/"
    (license_file,) = [n for n in names if n.startswith(dist_info) and n.endswith("LICENSE")]
    assert wheel.read(license_file) == (ROOT / "LICENSE").read_bytes()


def test_wheel_metadata(wheel):
    dist_info = f"keras_attn-{keras_attn.__version__}.dist-info/"
    meta = email.message_from_bytes(wheel.read(dist_info + "METADATA"))
    assert meta["Name"] == "keras-attn"
    assert meta["Version"] == keras_attn.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert set(EXTRAS) <= set(meta.get_all("Provides-Extra"))
    assert meta.get_all("Project-URL")
    assert "Typing :: Typed" in meta.get_all("Classifier")
    for line in meta.get_all("Requires-Dist"):
        req = Requirement(line)
        assert not {s.operator for s in req.specifier} & {"==", "==="}, line
    entry_points = wheel.read(dist_info + "entry_points.txt").decode()
    assert "keras-attn = keras_attn.cli:main" in entry_points


def test_wheel_names_no_machine_path(wheel):
    paths = [str(ROOT), str(wheel.source), "/work/", "/root/", "/home/", "/opt/", "/Users/"]
    for n in wheel.namelist():
        data = wheel.read(n).decode("utf-8", errors="replace")
        for path in paths:
            assert path not in data, (n, path)


def test_long_description_links_are_absolute_and_resolve(wheel):
    """The package index shows the long description without the repository around it: every
    link is absolute, and each one into this repository names a file of the checkout."""
    dist_info = f"keras_attn-{keras_attn.__version__}.dist-info/"
    meta = email.message_from_bytes(wheel.read(dist_info + "METADATA"))
    assert meta["Description-Content-Type"].startswith("text/markdown")
    text = meta.get_payload(decode=True).decode("utf-8")
    assert text.strip() == (ROOT / PROJECT["readme"]["file"]).read_text().strip()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links, text
    home = PROJECT["urls"]["Repository"] + "/blob/main/"
    for link in links:
        assert link.startswith("https://"), link
        if link.startswith(home):
            assert (ROOT / link[len(home) :].split("#")[0]).is_file(), link


def test_importing_the_tokenizers_without_tf_text_names_the_pinned_command():
    """`import keras_attn.text` where TensorFlow Text is missing (a finder refusing it, as a
    missing package is refused): a warning naming the command for the installed TensorFlow."""
    from keras_attn import _pins

    code = (
        "import importlib.abc, sys, warnings\n"
        "class MissingPackages(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, fullname, path=None, target=None):\n"
        "        if fullname.split('.')[0] == 'tensorflow_text':\n"
        "            raise ModuleNotFoundError(fullname, name=fullname)\n"
        "sys.meta_path.insert(0, MissingPackages())\n"
        "warnings.simplefilter('always')\n"
        "import keras_attn.text\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    tf_minor = ".".join(_pins.tensorflow_version().split(".")[:2])
    assert (
        "TensorFlow Text is not installed; keras_attn.text.SentencePieceTokenizer needs it: "
        f'pip install "tensorflow-text=={tf_minor}.*"'
    ) in proc.stderr
