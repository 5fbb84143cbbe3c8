"""`mua merge`: DCP checkpoints -> Hugging Face folders with the trainer's logits, tied and untied.

The 2-rank test trains a tied-embedding model under torchrun and compares the merged folder with
the trainer's own end-of-run export (gathered from the live FSDP model, a different code path).
The single-process tests write DCP checkpoints directly (no torchrun) to cover an untied model,
bf16 export, skipping, --force, --step and bad inputs quickly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.integration.train_helpers import hf_logits, sft_run, write_dcp_checkpoint

pytestmark = pytest.mark.integration


def _probe() -> torch.Tensor:
    return torch.randint(3, 2000, (2, 24), generator=torch.Generator().manual_seed(7))


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory) -> Path:
    checkpoint = {"save_freq": 1, "keep_last": 2, "export_hf_at_end": True}
    folder = tmp_path_factory.mktemp("merge2")
    return sft_run(folder, "--nproc-per-node", "2", total_steps=2, checkpoint=checkpoint)


def test_merge_two_rank_tied_checkpoint_matches_trainer_logits(two_rank_run, mua_cli):
    code, out, err = mua_cli("merge", str(two_rank_run), "--verify")
    assert code == 0, err
    merged = two_rank_run / "hf" / "global_step_2"
    for name in (
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer_config.json",
        "merge_info.json",
    ):
        assert (merged / name).is_file(), name
    assert (two_rank_run / "hf" / "global_step_1" / "merge_info.json").is_file()
    config = json.loads((merged / "config.json").read_text())
    assert config["tie_word_embeddings"] is True
    from safetensors.torch import load_file

    assert "lm_head.weight" not in load_file(
        str(merged / "model.safetensors")
    )  # one copy when tied
    ids = _probe()
    trainer = hf_logits(two_rank_run / "hf" / "final", ids)
    assert torch.equal(hf_logits(merged, ids), trainer)
    assert not torch.equal(
        hf_logits(two_rank_run / "hf" / "global_step_1", ids), trainer
    )  # steps differ
    info = json.loads((merged / "merge_info.json").read_text())
    assert info["step"] == 2 and info["verify_max_logit_diff"] <= 1e-5

    code, out, err = mua_cli("merge", str(two_rank_run / "checkpoints"))
    assert code == 0, err
    assert out.count("skipped, already merged") == 2 and "merged in" not in out
    code, out, err = mua_cli("merge", str(two_rank_run), "--force", "--step", "1")
    assert code == 0, err
    assert "step 1: merged in" in out and "step 2" not in out


@pytest.fixture(scope="module")
def untied_run(tmp_path_factory):
    from mua.models import load_model, load_tokenizer

    run = tmp_path_factory.mktemp("untied") / "run"
    model = load_model("tiny:llama-1m", seed=3).eval()
    with torch.no_grad():  # make the head clearly different from the embedding
        model.lm_head.weight.add_(0.5)
    write_dcp_checkpoint(
        model, run / "checkpoints" / "global_step_5", load_tokenizer("tiny:llama-1m")
    )
    return run, model


def test_untied_model_keeps_its_head_and_matches_logits(untied_run):
    from safetensors.torch import load_file

    from mua.models.merge import find_checkpoints
    from mua.models.merge_checkpoint import merge_checkpoint

    run, model = untied_run
    ((step, path),) = find_checkpoints(run)
    out = run / "hf" / "untied"
    result = merge_checkpoint(step, path, out, verify=True)
    assert result.max_logit_diff is not None and result.max_logit_diff <= 1e-5
    assert "lm_head.weight" in load_file(str(out / "model.safetensors"))
    ids = _probe()
    with torch.no_grad():
        want = model(input_ids=ids).logits
    assert torch.allclose(hf_logits(out, ids), want, atol=1e-5, rtol=0)


def test_bfloat16_export_is_rounded_weights_and_verifies(untied_run, tmp_path):
    from safetensors.torch import load_file

    from mua.models.merge import find_checkpoints
    from mua.models.merge_checkpoint import merge_checkpoint

    run, model = untied_run
    ((step, path),) = find_checkpoints(run)
    result = merge_checkpoint(step, path, tmp_path / "bf16", dtype="bfloat16", verify=True)
    weights = load_file(str(tmp_path / "bf16" / "model.safetensors"))
    assert all(t.dtype == torch.bfloat16 for t in weights.values())
    assert torch.equal(weights["lm_head.weight"], model.lm_head.weight.detach().to(torch.bfloat16))
    assert result.max_logit_diff <= 1e-5
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"
    # a float32 merge into the same folder is a different merge: not skipped
    again = merge_checkpoint(step, path, tmp_path / "bf16", dtype="float32")
    assert not again.skipped


def test_tied_checkpoint_with_diverging_head_is_refused(tmp_path):
    from mua.errors import RunFailure
    from mua.models import load_model, load_tokenizer
    from mua.models.merge_checkpoint import merge_checkpoint

    model = load_model("tiny:qwen3-1m")
    step_dir = tmp_path / "checkpoints" / "global_step_1"
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["lm_head.weight"] = state["lm_head.weight"] + 1.0  # untied tensors under a tied config
    write_dcp_checkpoint(model, step_dir, load_tokenizer("tiny:qwen3-1m"), state)
    with pytest.raises(RunFailure, match="lm_head.weight differs"):
        merge_checkpoint(1, step_dir, tmp_path / "out")


def test_bad_paths_are_one_line_usage_errors(tmp_path, mua_cli):
    code, _, err = mua_cli("merge", str(tmp_path / "nope"))
    assert code == 2 and "no such folder" in err and "Traceback" not in err
    (tmp_path / "empty").mkdir()
    code, _, err = mua_cli("merge", str(tmp_path / "empty"))
    assert code == 2 and "no global_step_* checkpoints" in err
    partial = tmp_path / "run" / "checkpoints" / "global_step_3"
    partial.mkdir(parents=True)
    code, _, err = mua_cli("merge", str(partial))
    assert code == 2 and "not a complete checkpoint" in err
