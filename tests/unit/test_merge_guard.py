"""`mua merge` replaces only folders mua wrote, and never skips a checkpoint that was rewritten."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.integration.train_helpers import write_dcp_checkpoint


def _run_with_checkpoint(root: Path):
    from mua.models import load_model, load_tokenizer

    model = load_model("tiny:qwen3-1m")
    tokenizer = load_tokenizer("tiny:qwen3-1m")
    run = root / "run"
    write_dcp_checkpoint(model, run / "checkpoints" / "global_step_2", tokenizer)
    return run, model, tokenizer


def test_merge_refuses_to_replace_a_folder_it_did_not_write(tmp_path, mua_cli):
    run, _, _ = _run_with_checkpoint(tmp_path)
    theirs = run / "hf" / "global_step_2"
    theirs.mkdir(parents=True)
    (theirs / "my_model.bin").write_bytes(b"precious weights")
    for extra in ((), ("--force",)):
        code, _, err = mua_cli("merge", str(run), *extra)
        assert code == 2, err
        assert str(theirs) in err and "mua did not write" in err and "Traceback" not in err
    assert sorted(p.name for p in theirs.iterdir()) == ["my_model.bin"]
    assert (theirs / "my_model.bin").read_bytes() == b"precious weights"
    code, out, err = mua_cli("merge", str(run), "--out", str(tmp_path / "elsewhere"))
    assert code == 0, err
    assert (tmp_path / "elsewhere" / "global_step_2" / "merge_info.json").is_file()


def test_a_merged_folder_is_marked_and_can_be_merged_again(tmp_path):
    from mua.models.merge import find_checkpoints
    from mua.models.merge_checkpoint import merge_checkpoint
    from mua.output_folders import is_claimed

    run, _, _ = _run_with_checkpoint(tmp_path)
    ((step, path),) = find_checkpoints(run)
    out = run / "hf" / "global_step_2"
    merge_checkpoint(step, path, out)
    assert is_claimed(out)
    assert merge_checkpoint(step, path, out).skipped
    assert not merge_checkpoint(step, path, out, force=True).skipped


def test_a_rewritten_checkpoint_is_merged_again_not_skipped(tmp_path):
    from safetensors.torch import load_file

    from mua.models.merge import find_checkpoints
    from mua.models.merge_checkpoint import merge_checkpoint

    run, model, tokenizer = _run_with_checkpoint(tmp_path)
    ((step, path),) = find_checkpoints(run)
    out = run / "hf" / "global_step_2"
    merge_checkpoint(step, path, out)
    with torch.no_grad():  # a new training run over the same run dir writes the same step again
        model.model.embed_tokens.weight.add_(1.0)
    write_dcp_checkpoint(model, path, tokenizer)
    again = merge_checkpoint(step, path, out)
    assert not again.skipped
    merged = load_file(str(out / "model.safetensors"))["model.embed_tokens.weight"]
    assert torch.equal(merged, model.model.embed_tokens.weight.detach())
