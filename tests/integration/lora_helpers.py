"""Helpers of the LoRA training tests: a GRPO run with adapters (on one or two ranks), and the
checks those tests share: two runs trained alike, an exact resume from the last checkpoint, and
both export forms (merged model, PEFT adapter) serving the trained model's logits.

Nothing here starts a run by itself; the tests choose the recipes and which checks to make.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tests.integration.grpo_helpers import write_rl_recipe
from tests.integration.train_helpers import (
    final_params,
    hf_logits,
    metric_history,
    run_merge,
    run_train,
)

# GRPO with a KL term against the reference (for LoRA: the policy with its adapters disabled)
LORA_GRPO_ALGO = {
    "kind": "grpo",
    "score": "sum",
    "gamma": 1.0,
    "kl": {"coef": 0.5, "estimator": "k3", "placement": "loss"},
}


def lora_rl_run(
    folder: Path, model, train, lora: dict, *args, algo: dict = LORA_GRPO_ALGO, **extra
) -> Path:
    """`mua train` of a GRPO recipe with `model.lora: LORA` written in FOLDER (which it creates);
    the recipe's path. Asserts the run succeeded."""
    folder.mkdir()
    recipe = write_rl_recipe(folder, model, train, algo=algo, optim={"lr": 1e-2}, **extra)
    data = yaml.safe_load(recipe.read_text())
    data["model"]["lora"] = lora
    recipe.write_text(yaml.safe_dump(data))
    res = run_train(recipe, *args)
    assert res.returncode == 0, res.stderr[-3000:]
    return recipe


def two_rank_lora_run(folder: Path, model, train, lora: dict, **extra) -> Path:
    """`lora_rl_run` of 2 steps on 2 FSDP ranks (micro-batches of 100 tokens, no checkpoints),
    to set beside a 1-rank run of the same recipe; the run's folder."""
    lora_rl_run(
        folder,
        model,
        train,
        lora,
        "--nproc-per-node",
        "2",
        parallel={"micro_batch_tokens": 100},
        total_steps=2,
        checkpoint={"save_freq": 0},
        **extra,
    )
    return folder / "run"


def assert_trained_alike(one: Path, two: Path, tol: float = 1e-5) -> None:
    """Runs `one` and `two` logged the same losses, KL and gradient norms and ended on the same
    weights, within `tol`."""
    for key in ("loss", "actor/kl", "grad_norm"):
        a, b = metric_history(one, key), metric_history(two, key)
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < tol, key
    final_one, final_two = final_params(one), final_params(two)
    assert max(float((final_one[k] - final_two[k]).abs().max()) for k in final_one) < tol


def assert_exact_resume(run: Path, recipe: Path, last: Path) -> None:
    """Without its last checkpoint `last` and its final export, `recipe` run again resumes and
    ends on `run`'s weights bit for bit."""
    straight = final_params(run)
    shutil.rmtree(last)
    shutil.rmtree(run / "hf" / "final")
    res = run_train(recipe)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resumed from" in res.stdout + res.stderr
    again = final_params(run)
    assert max(float((again[k] - straight[k]).abs().max()) for k in straight) == 0.0


def assert_exports_serve_it(last: Path, model, trained: Path, out: Path):
    """`mua merge --verify` of checkpoint `last` into `out`, merged and as a PEFT adapter on the
    base `model`: both give the logits of the trained HF folder `trained` (within 1e-4). Returns
    (the PEFT model, the token ids, the trained logits) for further checks."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    merged = run_merge(last, "--verify", "--out", out / "merged")
    assert merged.returncode == 0, merged.stderr
    adapter = run_merge(last, "--verify", "--adapter", "--out", out / "adapter")
    assert adapter.returncode == 0, adapter.stderr
    ids = torch.randint(3, 1999, (2, 16), generator=torch.Generator().manual_seed(5))
    trained_logits = hf_logits(trained, ids)
    plain = hf_logits(out / "merged" / last.name, ids)
    assert float((plain - trained_logits).abs().max()) < 1e-4
    base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, out / "adapter" / last.name).eval()
    with torch.no_grad():
        assert float((peft_model(input_ids=ids).logits - trained_logits).abs().max()) < 1e-4
    return peft_model, ids, trained_logits
