"""What a run would refuse later is refused when the recipe is validated, in one line: weights
whose sum overflows, labels MLflow cannot name a metric with, and numbers that become infinite
only once pydantic reads them (`1e309` is a YAML string)."""

from __future__ import annotations

import pytest

from mua.config import load_recipe
from mua.errors import UsageError


def _refused(tmp_path, text: str, verb: str = "train") -> str:
    path = tmp_path / f"{verb}_r.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        load_recipe(path, verb=verb)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_weights_whose_sum_overflows_are_refused(tmp_path):
    message = _refused(
        tmp_path,
        "gyms:\n  - {name: guess, weight: 1.0e+308}\n  - {name: intention, weight: 1.0e+308}\n",
    )
    assert "weight" in message and "finite" in message


@pytest.mark.parametrize("label", ["guess (1..8)", "a/b", "x.y", "é"])
def test_a_label_mlflow_or_overrides_cannot_use_is_refused(tmp_path, label):
    message = _refused(tmp_path, f"gyms:\n  - {{name: guess, label: '{label}'}}\n")
    assert "label" in message and "letters, digits" in message


@pytest.mark.parametrize(
    "text,where",
    [
        ("optim:\n  lr: 1e309\n", "optim.lr"),
        ("gyms:\n  - {name: guess, weight: 1e999}\n", "weight"),
        ("gyms:\n  - {name: guess, curriculum: {easy_above: 1e400}}\n", "easy_above"),
    ],
)
def test_a_number_that_reads_as_infinite_is_refused(tmp_path, text, where):
    message = _refused(tmp_path, text)
    assert where in message and "finite" in message


def test_an_infinite_string_override_is_refused():
    with pytest.raises(UsageError, match="optim.lr.*finite"):
        load_recipe(None, ["optim.lr='1e309'"], verb="train")


def test_ordinary_labels_and_weights_still_load(tmp_path):
    path = tmp_path / "train_ok.yaml"
    path.write_text(
        "gyms:\n  - {name: guess, label: guess-easy_1, weight: 2}\n"
        "  - {name: intention, weight: 1.0e+300}\n"
    )
    recipe = load_recipe(path, verb="train")
    assert recipe.gyms[0].key == "guess-easy_1"
