"""LoRA pieces on a tiny model: the recipe section's checks, merged weights against peft's own
merge, the disabled-adapter reference against the plain base, names, and what a LoRA checkpoint
keeps (adapters only, no frozen tied head)."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from mua.config.model import LoraConfig, ModelConfig
from mua.errors import UsageError

MODEL = "tiny:qwen2-1m"  # q/k/v biases: the merged stream must pass base biases through


def _lora_model(rank: int = 4, **extra):
    from mua.models import load_model
    from mua.models.lora import add_adapters

    torch.manual_seed(0)
    model = add_adapters(load_model(MODEL, seed=0), LoraConfig(rank=rank, **extra))
    for name, p in model.named_parameters():
        if ".lora_B." in name:  # peft starts B at 0; a trained adapter is not 0
            torch.nn.init.normal_(p, std=0.05)
    return model


def _ids():
    return torch.randint(3, 1999, (2, 12), generator=torch.Generator().manual_seed(1))


def test_rank_and_target_modules_are_checked():
    with pytest.raises(ValidationError, match="must be > 0"):
        LoraConfig(rank=0)
    with pytest.raises(ValidationError):
        LoraConfig(rank=-2)
    with pytest.raises(ValidationError, match="non-empty"):
        LoraConfig(target_modules=[])
    assert ModelConfig().lora is None
    assert ModelConfig(lora={"rank": 8}).lora.target_modules == "all-linear"


def test_targets_matching_nothing_are_refused_before_loading_weights():
    from mua.models.lora import check_targets

    check_targets(ModelConfig(path=MODEL, lora={"target_modules": ["q_proj"]}))
    with pytest.raises(UsageError, match="matches no layer"):
        check_targets(ModelConfig(path=MODEL, lora={"target_modules": ["nope_proj"]}))


def test_only_adapters_train_and_all_linear_covers_attention_and_mlp():
    model = _lora_model()
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n for n in trainable)
    for layer in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        assert any(f".{layer}.lora_A." in n for n in trainable), layer
    assert not any("lm_head" in n or "embed" in n for n in trainable)


def test_merged_stream_equals_peft_merge_and_unload():
    from mua.models.lora import lora_scalings, merged_params

    model = _lora_model(alpha=12.0)
    named = [(n, p.detach().clone()) for n, p in model.named_parameters()]
    ours = dict(merged_params(named, lora_scalings(model)))
    with torch.no_grad():
        want_logits = model(input_ids=_ids()).logits
    plain = model.merge_and_unload()
    theirs = {n: p.detach() for n, p in plain.named_parameters()}
    assert set(ours) == set(theirs)
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=1e-6)
    moved = [n for n in theirs if "q_proj.weight" in n]
    base_q = dict(named)["base_model.model." + moved[0].replace(".weight", ".base_layer.weight")]
    assert float((ours[moved[0]] - base_q).abs().max()) > 1e-4  # the adapter really moved it
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=_ids()).logits, want_logits, atol=1e-5, rtol=0)


def test_reference_with_adapters_disabled_is_the_base_and_leaves_the_policy_alone():
    from mua.models import load_model
    from mua.train.trained_model import AdaptersDisabled

    policy = _lora_model()
    ref = AdaptersDisabled(policy, torch.device("cpu"))
    with torch.no_grad():
        base = load_model(MODEL, seed=0)(input_ids=_ids()).logits
        with_adapters = policy(input_ids=_ids()).logits
    got = ref(input_ids=_ids()).logits
    torch.testing.assert_close(got, base, rtol=0, atol=1e-6)
    assert float((with_adapters - base).abs().max()) > 1e-3
    with torch.no_grad():  # adapters are active again after the reference's forward
        torch.testing.assert_close(policy(input_ids=_ids()).logits, with_adapters)
    assert ref.config is policy.config


def test_names_map_back_to_the_base_model():
    from mua.models.lora import hf_name, is_adapter_name

    assert (
        hf_name("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight")
        == "model.layers.0.self_attn.q_proj.weight"
    )
    assert hf_name("base_model.model.lm_head.weight") == "lm_head.weight"
    assert is_adapter_name("x.q_proj.lora_A.default.weight")
    assert not is_adapter_name("x.q_proj.base_layer.weight")


def test_checkpoint_state_keeps_adapters_only(tmp_path):
    """One-process DCP round trip through the trainer's save/load: frozen weights (the tied head
    included) stay out, adapters and their optimizer state come back exactly."""
    import torch.distributed as dist

    from mua.distributed.dcp import load_dcp, save_dcp
    from mua.distributed.dcp_offline import checkpoint_tensor_shapes

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        model = _lora_model()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        model(input_ids=_ids()).logits.square().mean().backward()
        opt.step()
        save_dcp(tmp_path / "ck", model, opt, ignore_frozen=True)
        names = set(checkpoint_tensor_shapes(tmp_path / "ck"))
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        assert names == trainable
        fresh = _lora_model()
        fresh_opt = torch.optim.AdamW([p for p in fresh.parameters() if p.requires_grad], lr=1e-2)
        load_dcp(tmp_path / "ck", fresh, fresh_opt, ignore_frozen=True)
        for (n, a), (_, b) in zip(model.named_parameters(), fresh.named_parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=n)
        sa, sb = opt.state_dict()["state"], fresh_opt.state_dict()["state"]
        for k in sa:
            torch.testing.assert_close(sa[k]["exp_avg"], sb[k]["exp_avg"], rtol=0, atol=0)
    finally:
        dist.destroy_process_group()


def test_adapter_export_of_a_full_weight_checkpoint_is_refused(tmp_path):
    from mua.models.merge_checkpoint import merge_checkpoint

    step_dir = tmp_path / "checkpoints" / "global_step_1"
    step_dir.mkdir(parents=True)
    out = tmp_path / "out"
    with pytest.raises(UsageError, match="--adapter applies to LoRA checkpoints"):
        merge_checkpoint(1, step_dir, out, adapter=True)
    assert not out.exists()
