# Two commands on a fresh machine: `make test` and `make demo`.
# Both create .venv and install the pinned packages (requirements.lock) first.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# The second environment, without TensorFlow (test-notf below; test-processes trains there too).
VENV_NOTF := .venv-notf
PY_NOTF := $(VENV_NOTF)/bin/python
STAMP_NOTF := $(VENV_NOTF)/.installed-stamp
export TF_CPP_MIN_LOG_LEVEL := 2
PYTEST := $(PY) -m pytest -q -n 2 --dist loadfile

.PHONY: install lint test test-tf test-jax test-jax-core test-jax-rest test-portable test-processes test-oldest demo bench clean

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# Lint and format check (ruff, configured in pyproject.toml), the whole suite on
# TensorFlow but the multi-process jobs, then the backend-branching layers, the losses and the
# numerics again on JAX, then
# the numerics tests on TensorFlow's portable kernels (oneDNN off), so no result
# depends on the processor's kernels.
test: install lint test-tf test-jax-core test-portable test-notf

# `ruff format .` and `ruff check --fix .` repair most of what this reports.
lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test-tf: install
	KERAS_BACKEND=tensorflow $(PYTEST) tests --ignore=tests/notf -m "not processes"

# Jobs in other processes: tf.distribute multi-worker training over loopback, JAX
# multi-process data parallelism, a killed worker and its restarted job, a killed script resumed, every model family
# trained on JAX in a subprocess, a JAX run resumed and exported, the decoding engine on JAX
# beside TensorFlow, the models, a translator run and `benchmarks/gpu.py --small` where TensorFlow cannot be
# imported, a run trained without TensorFlow exported and translated by `keras-attn`, and the
# served behaviours' exports answered the way TensorFlow Serving runs them (placeholders,
# constraints, word rules, unknown words, copy_source, controls, errors, bad inputs and edge
# requests, the streaming clients; the date grammar's and the per-example search's exports;
# tests marked `processes`). Several minutes of both cores: CI (.ci/run) runs it after `make test`.
# Files go to the two workers in collection order, the docs commands' runner first
# (tests/conftest.py), so that it runs beside the other files, not alone after them.
test-processes: install $(STAMP_NOTF)
	KERAS_BACKEND=tensorflow $(PYTEST) --no-loadscope-reorder tests --ignore=tests/notf -m processes

test-jax: test-jax-core test-jax-rest

# The rest of test-jax: what JAX_CORE (below, run by `make test`) leaves out. CI runs this
# after `make test`, so no file runs twice on JAX.
JAX_ALL := $(wildcard tests/layers/test_*.py) tests/test_losses.py tests/test_numerics.py \
	tests/decoding/test_compile_once.py
test-jax-rest: install
	KERAS_BACKEND=jax $(PYTEST) $(filter-out $(JAX_CORE),$(JAX_ALL))

# The part of test-jax in `make test`: the layers whose code branches by backend (the fused
# kernel, multi-head and grouped-query attention) and the losses. CI runs the whole of
# test-jax (the numerics on JAX too) after `make test`.
JAX_CORE := tests/layers/test_fused_kernel.py tests/layers/test_multi_head.py \
	tests/layers/test_multi_head_masking.py tests/layers/test_grouped_query.py \
	tests/test_losses.py
test-jax-core: install
	KERAS_BACKEND=jax $(PYTEST) $(JAX_CORE)

test-portable: install
	KERAS_BACKEND=tensorflow TF_ENABLE_ONEDNN_OPTS=0 $(PY) -m pytest -q tests/test_numerics.py

# The library where TensorFlow is not installed: a second environment, .venv-notf, from
# requirements-jax.lock (Keras on JAX, SentencePiece, sacrebleu; no TensorFlow), running
# tests/notf on JAX. tests/notf fails if TensorFlow can be imported there.

$(STAMP_NOTF): pyproject.toml requirements-jax.lock
	test -x $(PY_NOTF) || $(PYTHON) -m venv $(VENV_NOTF)
	$(PY_NOTF) -m pip install -q --upgrade pip
	$(PY_NOTF) -m pip install -q -r requirements-jax.lock
	$(PY_NOTF) -m pip install -q --no-deps -e .
	touch $(STAMP_NOTF)

.PHONY: test-notf
test-notf: $(STAMP_NOTF)
	KERAS_BACKEND=jax $(PY_NOTF) -m pytest -q -n 2 tests/notf

# The oldest supported versions (requirements-oldest.lock: the lower bounds of pyproject.toml's
# ranges) in a second environment, .venv-oldest, on a fast subset: the layers and decoding on
# TensorFlow, the layers whose code branches by backend and the losses on JAX (JAX_CORE), and
# one export answered the way TensorFlow Serving runs it
# (docs/install.md), after the wheel-beside-frameworks check below. The superset test compares
# with the newest Keras' own layer, whose arguments older Keras lacks. Not part of `make test` (it installs a second TensorFlow);
# continuous integration (.ci/run) runs it after `make test`.
VENV_OLDEST := .venv-oldest
PY_OLDEST := $(VENV_OLDEST)/bin/python
STAMP_OLDEST := $(VENV_OLDEST)/.installed-stamp
PYTEST_OLDEST := $(PY_OLDEST) -m pytest -q -n 2 --dist loadfile \
	--ignore=tests/layers/test_multi_head_superset.py

$(STAMP_OLDEST): pyproject.toml requirements-oldest.lock
	test -x $(PY_OLDEST) || $(PYTHON) -m venv $(VENV_OLDEST)
	$(PY_OLDEST) -m pip install -q --upgrade pip
	$(PY_OLDEST) -m pip install -q -r requirements-oldest.lock
	$(PY_OLDEST) -m pip install -q --no-deps -e .
	touch $(STAMP_OLDEST)

test-oldest: $(STAMP_OLDEST) wheel-beside-frameworks
	KERAS_BACKEND=tensorflow $(PYTEST_OLDEST) tests/layers tests/decoding tests/serving/test_export.py
	KERAS_BACKEND=tensorflow DOCS_PAGES=README.md $(PYTEST_OLDEST) tests/test_docs_blocks.py tests/test_readme.py
	KERAS_BACKEND=jax $(PYTEST_OLDEST) $(JAX_CORE)

# The built wheel installed with its extras, dependencies resolved by pip as a user's pip does,
# into the oldest (.venv-oldest) and the newest (.venv) supported environments: pip's plan
# (--dry-run --report) must replace no package already there but keras-attn, then the install
# runs and every package listed before must still be there at the same version
# (tools/check_install.py prints the plan). The editable install is put back after each.
WHEEL_DIR := build/wheel
WHEEL_EXTRAS := tensorflow,jax,serving
.PHONY: wheel-beside-frameworks
wheel-beside-frameworks: $(STAMP) $(STAMP_OLDEST)
	rm -rf $(WHEEL_DIR)
	$(PY) -m pip wheel -q --no-deps -w $(WHEEL_DIR) .
	$(PY) tools/check_install.py $(PY_OLDEST) $(WHEEL_DIR)/keras_attn-*.whl $(WHEEL_EXTRAS)
	$(PY_OLDEST) -m pip install -q --no-deps -e .
	$(PY) tools/check_install.py $(PY) $(WHEEL_DIR)/keras_attn-*.whl $(WHEEL_EXTRAS)
	$(PY) -m pip install -q --no-deps -e .

# Train the dates translator (Bahdanau, < 5 min on 2 CPU cores), export it to
# export/models/dates/1, translate a few dates through its beam_search signature
# (n-best with scores) and write one attention heat map (its path is printed).
demo: install
	KERAS_BACKEND=tensorflow $(PY) examples/demo.py

# The real-text corpora (docs/real_data.md): the gettext catalogues of the wheels pinned in
# requirements-corpora.txt and of the Debian packages pinned in corpora-debian.txt and
# corpora-names.txt (the held-out names set, never trained on), downloaded
# once into the corpora cache ($$KERAS_ATTN_CORPORA, default ~/.cache/keras-attn/corpora; only
# their .mo/.po files are read, nothing is installed), then filtered, deduplicated and split by
# package into CACHE/built/{es,zh}/ with a manifest of every drop by cause, and es once more
# into CACHE/built-identical/es with the identical entries that are translations kept for
# training (docs/real_data.md). Not needed by
# `make test` (its catalogue tests write their own catalogues).
CORPORA_STAMP := $(VENV)/.corpora-stamp
$(CORPORA_STAMP): $(STAMP) requirements-corpora.txt corpora-debian.txt corpora-names.txt
	$(PY) -m keras_attn.data.corpora --fetch --language es zh
	$(PY) -m keras_attn.data.corpora --language es --keep-identical
	touch $(CORPORA_STAMP)

.PHONY: corpora
corpora: $(CORPORA_STAMP)

# Catalogues of other formats from real packages the corpus does not hold (i18next JSON,
# Qt .ts, MediaWiki JSON, Fluent, Rails YAML, gettext), fetched once into the corpora cache and
# counted per placeholder syntax (tools/catalogue_samples.py; docs/real_data.md, "Translating a
# catalogue"). Not needed by `make test` (its catalogue tests write their own catalogues).
.PHONY: catalogue-samples
catalogue-samples: $(STAMP)
	$(PY) tools/catalogue_samples.py fetch
	$(PY) tools/catalogue_samples.py count

# The "Quality to reach" table -> benchmarks/RESULTS.md (long: not a test).
.PHONY: quality
quality: install corpora
	KERAS_BACKEND=tensorflow $(PY) benchmarks/quality.py

# The speed benchmarks -> the speed section of benchmarks/RESULTS.md
# (ratios within one run; ~12 min on 2 idle CPU cores; the training row reads the corpus
# `make corpora` builds; see benchmarks/README.md).
bench: install corpora
	$(PY) -m pip install -q --no-deps keras-hub==0.32.0 tokenizers==0.23.3  # bench-only: the KerasHub comparison
	KERAS_BACKEND=tensorflow $(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(VENV_OLDEST) $(VENV_NOTF) build *.egg-info
