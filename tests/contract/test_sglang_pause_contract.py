"""Pause, continue and abort against each covered SGLang release's own code.

What the client sends (`pause_request_body`, `continue_generation`, `abort_all`, `drain`) is
built into the release's own request classes by `sglang_probe.py` (a subprocess, never imported
here), and the release's HTTP server (its source, read as text) must route the three endpoints. `ReleaseTraits.pause_modes` must
say exactly whether the release has PauseGenerationReqInput (a body with a mode).
"""

from __future__ import annotations

import pytest

from mua.engines.sglang.sglang_engine import pause_request_body
from mua.errors import UsageError
from mua.serve.releases import COVERED_RELEASES, ReleaseTraits
from tests.contract.test_sglang_contract import _run_probe, _side_folder


@pytest.mark.slow  # three probe subprocesses, about 30 s each on 2 cores
@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_pause_continue_abort_bodies_fit_the_release(version, tmp_path):
    folder = _side_folder(version)
    traits = ReleaseTraits.of(version)
    requests = [
        ("AbortReq", {"abort_all": True}),
        ("AbortReq", {"rid": "traj-1-abc-0"}),
        ("PauseGenerationReqInput", pause_request_body(traits, "abort")),
        ("ContinueGenerationReqInput", {}),
    ]
    if traits.pause_modes:
        requests.append(("PauseGenerationReqInput", pause_request_body(traits, "in_place")))
    else:
        with pytest.raises(UsageError):
            pause_request_body(traits, "in_place")
    checks = [{"kind": "request", "cls": cls, "body": body} for cls, body in requests]
    out = _run_probe(folder, {"checks": checks}, tmp_path)
    assert out["version"] == version
    results = iter(out["results"])
    http = (folder / "sglang/srt/entrypoints/http_server.py").read_text()  # read, not imported
    for route in ("/pause_generation", "/continue_generation", "/abort_request"):
        assert f'@app.post("{route}")' in http, route
    built = {i: next(results) for i in range(len(requests))}
    assert built[0]["ok"] and built[1]["ok"], built
    # A release without the request classes takes no body on these routes: mua sends none.
    assert built[2]["ok"] == traits.pause_modes, built[2]
    assert built[3]["ok"] == traits.pause_modes, built[3]
    if traits.pause_modes:
        assert built[4]["ok"], built[4]
    else:
        assert pause_request_body(traits) == {}
        assert "no class" in built[2]["error"]
