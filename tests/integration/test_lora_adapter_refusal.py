"""`mua train` with `rollout.lora_sync: adapter` against a server whose SGLang release has no
`/load_lora_adapter_from_tensors` (`mua serve` emulating 0.5.5.post3): one line naming the
release and the fix, exit 2, before any rank starts (no run folder)."""

from __future__ import annotations

import pytest
import yaml

from tests.integration.grpo_helpers import shared_guess_setup, write_rl_recipe
from tests.integration.train_helpers import run_train

pytestmark = pytest.mark.integration


def test_adapter_sync_on_a_release_without_the_endpoint_stops_before_the_run(
    tmp_path_factory, tmp_path
):
    from mua.serve import serve_model

    model, train, _ = shared_guess_setup(tmp_path_factory)
    recipe = write_rl_recipe(tmp_path, model, train)
    data = yaml.safe_load(recipe.read_text())
    data["model"]["lora"] = {"rank": 4}
    data["rollout"].update(engine="sglang", lora_sync="adapter")
    server = serve_model(str(model), sglang_release="0.5.5.post3")
    try:
        data["rollout"]["sglang"] = {"base_urls": [server.url]}
        recipe.write_text(yaml.safe_dump(data))
        res = run_train(recipe)
    finally:
        server.stop()
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs SGLang >= 0.5.8" in lines[0] and "0.5.5.post3" in lines[0]
    assert "lora_sync=merged" in lines[0]
    assert not (tmp_path / "run").exists()
