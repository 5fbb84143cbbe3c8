"""Periodic Hugging Face exports during `mua train` (`checkpoint.export_hf_every`).

A 3-step SFT run with save_freq=1 and export_hf_every=2 must leave `hf/global_step_2` and
`hf/final` (and no other export), each loadable by `AutoModelForCausalLM.from_pretrained` with
the logits of the checkpoint of the same step, in `mua merge`'s layout (so a later merge skips it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.integration.train_helpers import (
    hf_logits,
    run_train,
    sft_run,
    write_sft_data,
    write_sft_recipe,
)

pytestmark = pytest.mark.integration


def _checkpoint_logits(step_dir: Path, ids: torch.Tensor) -> torch.Tensor:
    from transformers import AutoConfig

    from mua.distributed.dcp_offline import read_model_state
    from mua.models.merge import model_from_state

    config = AutoConfig.from_pretrained(step_dir)
    model = model_from_state(read_model_state(step_dir), config, on_meta=False)
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.fixture(scope="module")
def exported_run(tmp_path_factory) -> Path:
    checkpoint = {"save_freq": 1, "keep_last": 3, "export_hf_every": 2}
    return sft_run(tmp_path_factory.mktemp("export"), total_steps=3, checkpoint=checkpoint)


def test_export_every_two_checkpoints_writes_step_2_and_final(exported_run):
    hf = exported_run / "hf"
    assert sorted(p.name for p in hf.iterdir()) == ["final", "global_step_2"]  # no temp leftovers
    ids = torch.randint(3, 2000, (2, 24), generator=torch.Generator().manual_seed(11))
    checkpoints = exported_run / "checkpoints"
    step2 = hf_logits(hf / "global_step_2", ids)
    assert torch.equal(step2, _checkpoint_logits(checkpoints / "global_step_2", ids))
    final = hf_logits(hf / "final", ids)
    assert torch.equal(final, _checkpoint_logits(checkpoints / "global_step_3", ids))
    assert not torch.equal(step2, final)  # a different step, not a copy of the last weights
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json"):
        assert (hf / "global_step_2" / name).is_file(), name
    info = json.loads((hf / "global_step_2" / "merge_info.json").read_text())
    assert info["step"] == 2 and info["dtype"] == "float32"
    assert info["checkpoint"] == str((checkpoints / "global_step_2").resolve())
    assert json.loads((hf / "final" / "merge_info.json").read_text())["step"] == 3


def test_merge_skips_the_step_training_already_exported(exported_run, mua_cli):
    code, out, err = mua_cli("merge", str(exported_run), "--step", "2")
    assert code == 0, err
    assert "step 2: skipped, already merged" in out and "merged in" not in out


def test_export_every_without_checkpoints_is_a_usage_error(tmp_path):
    recipe = write_sft_recipe(
        tmp_path, write_sft_data(tmp_path), checkpoint={"save_freq": 0, "export_hf_every": 2}
    )
    res = run_train(recipe)
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "export_hf_every" in lines[0] and "save_freq" in lines[0]
