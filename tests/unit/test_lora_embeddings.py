"""LoRA on the token embedding and the output head (`model.lora.embeddings`), on tiny models: the
peft forward equals the merged model's forward, the tied head reads the embedding's factors (one
Parameter each, both gradient paths summed), the untied head gets its own adapter (merged as
peft's `merge_and_unload` does), the disabled-adapter reference is the base, the adapter files
load in peft and the merged weights in plain transformers with the trainer's logits, and SGLang
adapter pushes of such an adapter are refused at validation."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from mua.config.model import LoraConfig

TIED = "tiny:qwen3-1m"  # tie_word_embeddings: the head's weight is the embedding's
UNTIED = "tiny:llama-1m"


def _policy(path: str, seed: int = 1, **extra):
    """A LoRA model with embedding adapters whose factors are all non-zero (peft starts the
    embedding's A and the linear layers' B at 0)."""
    from mua.models import load_model
    from mua.models.lora import add_adapters

    model = add_adapters(
        load_model(path, seed=0), LoraConfig(rank=4, alpha=8, embeddings=True, **extra)
    )
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name or ".lora_embedding_A." in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return model.eval()


def _ids():
    return torch.randint(3, 1999, (2, 12), generator=torch.Generator().manual_seed(3))


def _plain_with(path: str, state: dict):
    from mua.models import load_model

    plain = load_model(path, seed=0).eval()
    missing, unexpected = plain.load_state_dict(state, strict=False)
    assert not unexpected
    assert all(n == "lm_head.weight" for n in missing)  # a tied head takes the embedding's
    return plain


def _merged(model) -> dict:
    from mua.models.lora import lora_scalings, merged_params

    named = [(n, p.detach().clone()) for n, p in model.named_parameters()]
    return dict(merged_params(named, lora_scalings(model)))


def test_tied_head_reads_the_embedding_factors_one_parameter_each():
    from mua.models.lora_embeddings import TiedFactor, tied_heads

    model = _policy(TIED)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any(".embed_tokens.lora_embedding_A." in n for n in trainable)
    assert any(".embed_tokens.lora_embedding_B." in n for n in trainable)
    assert any(".q_proj.lora_A." in n for n in trainable)  # all-linear still covered
    assert not any("lm_head" in n for n in trainable)  # no second copy to drift apart
    head = model.base_model.model.lm_head
    embed = model.base_model.model.model.embed_tokens
    assert isinstance(head.lora_A["default"], TiedFactor)
    assert head.lora_A["default"].weight.data_ptr() == embed.lora_embedding_B["default"].data_ptr()
    assert tied_heads(model) == {"base_model.model.lm_head": "base_model.model.model.embed_tokens"}
    # the head path feeds the embedding's factors: gradients through the head alone reach them
    hidden = torch.randn(1, 3, 128)
    head(hidden).square().sum().backward()
    assert embed.lora_embedding_A["default"].grad.abs().sum() > 0
    assert embed.lora_embedding_B["default"].grad.abs().sum() > 0


@pytest.mark.parametrize("path", [TIED, UNTIED])
def test_peft_forward_equals_the_merged_models_forward(path):
    model = _policy(path)
    with torch.no_grad():
        want = model(input_ids=_ids()).logits
    merged = _merged(model)
    embed = model.base_model.model.model.embed_tokens
    # the embedding moved by peft's own delta, (B @ A).T * alpha / r
    base = embed.get_base_layer().weight.detach()
    torch.testing.assert_close(
        merged["model.embed_tokens.weight"],
        base + embed.get_delta_weight("default"),
        atol=1e-6,
        rtol=0,
    )
    assert float((merged["model.embed_tokens.weight"] - base).abs().max()) > 1e-3
    with torch.no_grad():
        got = _plain_with(path, merged)(input_ids=_ids()).logits
    torch.testing.assert_close(got, want, atol=2e-5, rtol=0)
    with torch.no_grad(), model.disable_adapter():  # the KL reference: the base alone
        from mua.models import load_model

        base_logits = load_model(path, seed=0).eval()(input_ids=_ids()).logits
        torch.testing.assert_close(model(input_ids=_ids()).logits, base_logits, atol=1e-6, rtol=0)
    assert float((want - base_logits).abs().max()) > 1e-3


def test_untied_head_gets_its_own_adapter_merged_as_peft_merges_it():
    model = _policy(UNTIED)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any(".lm_head.lora_A." in n for n in trainable)
    ours = _merged(model)
    theirs = {n: p.detach() for n, p in model.merge_and_unload().named_parameters()}
    assert set(ours) == set(theirs)
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=1e-6, msg=name)


def test_adapter_files_hold_the_tied_head_as_peft_writes_it():
    from mua.models.lora import adapter_file_names
    from mua.models.lora_embeddings import tied_heads

    model = _policy(TIED)
    files = dict(adapter_file_names(model.named_parameters(), tied_heads(model)))
    embed_a = files["base_model.model.model.embed_tokens.lora_embedding_A"]
    embed_b = files["base_model.model.model.embed_tokens.lora_embedding_B"]
    torch.testing.assert_close(files["base_model.model.lm_head.lora_A.weight"], embed_b.T)
    torch.testing.assert_close(files["base_model.model.lm_head.lora_B.weight"], embed_a.T)
    assert embed_a.shape == (4, 2000) and embed_b.shape == (128, 4)


def test_target_names_matching_nothing_are_refused_with_the_embedding_adapted():
    from mua.config.model import ModelConfig
    from mua.errors import UsageError
    from mua.models.lora import check_targets

    check_targets(ModelConfig(path=TIED, lora={"target_modules": ["q_proj"], "embeddings": True}))
    bad = ModelConfig(path=TIED, lora={"target_modules": ["nope_proj"], "embeddings": True})
    with pytest.raises(UsageError, match="matches no layer"):
        check_targets(bad)


def test_sglang_adapter_push_of_embedding_adapters_is_refused_at_validation():
    from mua.config.recipes import TrainRecipe

    lora = {"rank": 4, "embeddings": True}
    rollout = {"engine": "sglang", "lora_sync": "adapter"}
    with pytest.raises(ValidationError, match="set rollout.lora_sync=merged or model.lora"):
        TrainRecipe(model={"lora": lora}, rollout=rollout)
    TrainRecipe(model={"lora": lora}, rollout={**rollout, "lora_sync": "merged"})
    TrainRecipe(model={"lora": {"rank": 4}}, rollout=rollout)
    TrainRecipe(model={"lora": lora}, rollout={"engine": "hf", "lora_sync": "adapter"})


def test_adapter_push_to_the_hf_engine_gives_the_trainers_logits_and_a_merged_push_tokens():
    """`rollout.lora_sync: adapter`: the hf engine applies the pushed adapter (peft file names,
    the tied head's factors among them) in place; its forward is the trainer's, and greedy
    generation equals that after a merged push of the same weights."""
    import asyncio

    from mua.engines.adapter_versions import adapter_name
    from mua.engines.engine_contract import GenerationRequest, SamplingParams
    from mua.engines.hf.hf_engine import HFEngine
    from mua.models import load_model
    from mua.models.lora import adapter_config_dict, lora_scalings, merged_params
    from mua.train.engine_sync import adapter_tensors

    torch.set_num_threads(1)

    def greedy(engine):
        requests = [
            GenerationRequest(
                prompt_ids=p, sampling=SamplingParams(temperature=0.0, max_new_tokens=10)
            )
            for p in ([5, 6, 7, 8], [11, 12, 13], [40, 41, 42, 43, 44])
        ]

        async def run():
            return await asyncio.gather(*(engine.generate(r) for r in requests))

        return [r.token_ids for r in asyncio.run(run())]

    policy = _policy(TIED, seed=2)
    base_tokens = greedy(HFEngine(load_model(TIED, seed=0), copy_model=False))
    adapted = HFEngine(load_model(TIED, seed=0), copy_model=False)
    for version in (1, 2):  # the second push replaces the first (the tied head's too)
        policy = _policy(TIED, seed=version + 1)
        adapted.load_adapter(
            adapter_name(version), adapter_tensors(policy), adapter_config_dict(policy)
        )
    with torch.no_grad():
        want = policy(input_ids=_ids()).logits
        got = adapted.model(input_ids=_ids()).logits
    torch.testing.assert_close(got, want, atol=2e-5, rtol=0)
    merged = HFEngine(load_model(TIED, seed=0), copy_model=False)
    merged.load_weights(merged_params(policy.named_parameters(), lora_scalings(policy)))
    tokens = greedy(adapted)
    assert tokens == greedy(merged)
    assert tokens != base_tokens


def test_checkpoint_exports_load_in_transformers_and_peft_with_the_trainers_logits(tmp_path):
    """An adapter-only checkpoint (embedding factors, no head copy) through `mua merge`'s LoRA
    path: the merged folder loads in plain transformers, the adapter folder (no base weights
    in it, the tied head's factors as peft writes them) in `PeftModel.from_pretrained`, both
    with the trainer's logits; `verify` agrees."""
    import torch.distributed as dist
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from mua.config.model import ModelConfig
    from mua.distributed.dcp import save_dcp
    from mua.distributed.dcp_offline import checkpoint_tensor_shapes
    from mua.models import load_model
    from mua.models.lora import read_adapter_info, write_adapter_info
    from mua.models.merge_lora import merge_lora_checkpoint
    from mua.models.merge_steps import MergeOptions

    policy = _policy(TIED)
    step_dir = tmp_path / "checkpoints" / "global_step_1"
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
        save_dcp(step_dir, policy, opt, ignore_frozen=True)
    finally:
        dist.destroy_process_group()
    names = set(checkpoint_tensor_shapes(step_dir))
    assert any("lora_embedding_A" in n for n in names) and not any("lm_head" in n for n in names)
    cfg = ModelConfig(path=TIED, lora={"rank": 4, "alpha": 8, "embeddings": True})
    write_adapter_info(step_dir, cfg)
    policy.get_base_model().config.save_pretrained(step_dir)
    info = read_adapter_info(step_dir)
    assert info["embeddings"] is True

    ids = _ids()
    with torch.no_grad():
        want = policy(input_ids=ids).logits
    merged = merge_lora_checkpoint(
        1, step_dir, tmp_path / "merged", info, MergeOptions(verify=True)
    )
    assert merged.max_logit_diff < 1e-4
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32).eval()
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, want, atol=2e-5, rtol=0)

    options = MergeOptions(verify=True, adapter=True)
    adapter = merge_lora_checkpoint(1, step_dir, tmp_path / "adapter", info, options)
    assert adapter.max_logit_diff < 1e-4
    files = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    assert "base_model.model.lm_head.lora_A.weight" in files
    assert not any("base_layer" in n or n.endswith("embed_tokens.weight") for n in files)
    loaded = PeftModel.from_pretrained(load_model(TIED, seed=0), tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, want, atol=2e-5, rtol=0)
