"""Fixtures of the gym tests that read tau2-bench's public data (skipped when it is absent)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import shared_dir


@pytest.fixture(scope="module")
def telecom():
    """tau2's telecom domain built from the shared data, and its task list."""
    from gyms.tau2.domain import load_domain

    shared = shared_dir() / "data" / "tau2"
    tasks_file = shared / "tau2" / "domains" / "telecom" / "tasks.json"
    if not tasks_file.is_file():
        pytest.skip(f"tau2 telecom data not found under {shared}")
    return load_domain("telecom", shared), json.loads(tasks_file.read_text())
