import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Every test starts from float32, a cleared session and fixed seeds. The session is
    cleared without Keras' full garbage collection (`free_memory=False`): with TensorFlow's
    objects in the heap a `gc.collect()` per test was a quarter of the suite's time, and
    Python's own collector still runs."""
    keras.config.set_dtype_policy("float32")
    keras.utils.clear_session(free_memory=False)
    keras.utils.set_random_seed(1234)
    np.random.seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


def pytest_report_header(config):
    return f"keras backend: {keras.backend.backend()}"


# The longest test, first: `make test-processes` hands files out in collection order
# (`--no-loadscope-reorder`), so the docs commands' runner (about half an hour of its own, much
# of it one command at a time) runs beside the other files instead of alone after them.
FIRST = "tests/test_doc_commands_run.py::test_the_docs_commands_run"


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.nodeid != FIRST)
