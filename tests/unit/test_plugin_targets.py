"""A program gym's `entry_point` module is found in the folder mua runs in, before the installed
packages (as `python -m` finds it), with no PYTHONPATH, and `sys.path` is left as it was."""

from __future__ import annotations

import sys

import pytest

from mua.gym.mix import check_gyms
from mua.plugin_targets import load_entry_point


@pytest.fixture
def agents(tmp_path, monkeypatch):
    """Two folders each holding a module `shadowed_agent` (answering its folder's name) and the
    first holding `cwd_only_agent`; the second is on sys.path, the first is the working folder."""
    for name in ("here", "installed"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "shadowed_agent.py").write_text(f"def play(*a):\n    return {name!r}\n")
    (tmp_path / "here" / "cwd_only_agent.py").write_text("def play(*a):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path / "installed"))
    monkeypatch.chdir(tmp_path / "here")
    for module in ("shadowed_agent", "cwd_only_agent"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    return tmp_path


def test_a_module_in_the_working_folder_is_loaded_and_the_path_restored(agents):
    before = list(sys.path)
    assert load_entry_point("cwd_only_agent:play")() == 1.0
    assert sys.path == before


def test_the_working_folder_comes_before_the_path(agents):
    assert load_entry_point("shadowed_agent:play")() == "here"


def _program_recipe(folder, entry_point: str):
    import yaml

    from mua.config import load_recipe

    path = folder / "eval.yaml"
    program = {"entry_point": entry_point}
    path.write_text(
        yaml.safe_dump({"verb": "eval", "gyms": [{"name": "guess", "program": program}]})
    )
    return load_recipe(str(path))


def test_the_recipe_check_finds_a_module_of_the_working_folder(agents):
    check_gyms(_program_recipe(agents, "cwd_only_agent:play"), "eval")


def test_the_recipe_check_names_the_folder_a_missing_module_was_looked_up_in(agents):
    from mua.errors import UsageError

    with pytest.raises(UsageError) as e:
        check_gyms(_program_recipe(agents, "no_such_agent_anywhere:play"), "eval")
    assert str(e.value) == (
        "gyms[0] (guess): program.entry_point module 'no_such_agent_anywhere' cannot be imported "
        f"from {agents / 'here'} (the folder mua runs in) or the installed packages; run mua from "
        "the folder that holds it"
    )
