"""Fixtures shared by unit-test modules: a `mua serve` server for the module's model."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def server(request):
    """`mua serve` on 127.0.0.1 for the test module's `MODEL`, shared by that module's tests."""
    import torch

    from mua.serve import serve_model

    torch.set_num_threads(1)
    srv = serve_model(request.module.MODEL)
    yield srv
    srv.stop()
