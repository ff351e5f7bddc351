import pytest

from tests.serving.toy_model import make_toy


@pytest.fixture(scope="session")
def toy():
    """`(model, tokenizer)`: the toy attention translator with fixed random weights."""
    return make_toy()


@pytest.fixture(scope="session")
def toy_export(toy, tmp_path_factory):
    """The toy model exported once per test session (worker) with the default test settings."""
    from keras_attn.serving.export import export_text_model

    model, tokenizer = toy
    base = tmp_path_factory.mktemp("toy_export") / "toy"
    return export_text_model(
        model, tokenizer, str(base), version=1, beam_size=3, max_length=6, max_input_length=16
    )
