"""`mua doctor` on a CPU machine, the chat-template check, and the pre-flight memory estimate."""

from __future__ import annotations

import pytest

from mua.cli import doctor_cmd as doctor
from mua.errors import RunFailure
from mua.models import load_tokenizer
from mua.train.memory_estimate import (
    GIB,
    ModelShape,
    RunShape,
    check_fits,
    estimate_memory,
    format_table,
    run_shape_from_recipe,
)

# A Qwen3-8B-like shape.
QWEN_8B = ModelShape(
    num_params=8_190_000_000,
    num_layers=36,
    hidden_size=4096,
    vocab_size=151936,
    num_kv_heads=8,
    head_dim=128,
)


def test_checks_on_this_machine_never_fail_without_a_model():
    checks = doctor.run_checks(None)
    names = [c.name for c in checks]
    assert names[:2] == ["torch", "cuda"] and {"nccl", "sglang", "flash-attn"} <= set(names)
    assert all(c.status in ("ok", "warn") for c in checks)


def test_cli_doctor_exits_zero_with_warnings(mua_cli):
    code, out, err = mua_cli("doctor", "--model", "tiny:qwen3-1m")
    assert code == 0, err
    assert "chat template" in out and "prefix-stable" in out and "all checks passed" in out


def test_template_that_rewrites_history_fails(tmp_path):
    tok = load_tokenizer("tiny:qwen3-1m")
    # marks only the last message: adding a turn changes how the previous one renders
    tok.chat_template = (
        "{% for m in messages %}{% if loop.last %}[last]{% endif %}"
        "{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    )
    tok.save_pretrained(tmp_path)
    check = doctor.check_template(str(tmp_path))
    assert check.status == "fail" and "not prefix-stable" in check.detail
    assert doctor.check_template("tiny:qwen3-1m").status == "ok"
    assert doctor.check_template(str(tmp_path / "missing")).status == "fail"


def test_sglang_version_range_parsing():
    assert doctor._version_tuple("0.5.3rc1") == (0, 5, 3)


def test_sglang_coverage_is_reported(monkeypatch):
    import mua.engines.sglang.sglang_engine as sglang_engine

    monkeypatch.setattr(sglang_engine, "sglang_version", lambda: "0.5.5.post3")
    (check,) = doctor.check_engines(has_cuda=False)  # the one engine with a `doctor` hook
    assert check.name == "sglang"
    assert check.status == "ok" and "0.5.5.post3" in check.detail and "0.5.23" in check.detail
    monkeypatch.setattr(sglang_engine, "sglang_version", lambda: "0.5.22")
    (check,) = doctor.check_engines(has_cuda=False)
    assert check.status == "warn" and "not covered" in check.detail


def test_memory_estimate_fits_when_sharded_and_not_on_one_gpu():
    run = RunShape(
        world_size=8,
        micro_batch_tokens=8192,
        activation_checkpointing=True,
        engine_mem_fraction=0.5,
        max_total_tokens=8192,
    )
    est = estimate_memory(QWEN_8B, run, 80 * GIB)
    assert est.problems() == [] and est.kv_tokens > 8192
    check_fits(est)
    assert "fits" in format_table(est).splitlines()[-1]
    alone = estimate_memory(QWEN_8B, RunShape(world_size=1, micro_batch_tokens=8192), 80 * GIB)
    with pytest.raises(RunFailure, match="train phase needs .* GiB per GPU"):
        check_fits(alone)
    # optimizer state alone is 8 bytes/param on one GPU
    assert dict(alone.train_rows)["optimizer state (AdamW, sharded)"] == QWEN_8B.num_params * 8


def test_memory_estimate_flags_a_kv_cache_too_small_for_one_trajectory():
    run = RunShape(world_size=8, engine_mem_fraction=0.22, max_total_tokens=32768)
    est = estimate_memory(QWEN_8B, run, 80 * GIB)
    assert est.kv_tokens < 32768
    with pytest.raises(RunFailure, match="KV cache holds"):
        check_fits(est)


def test_memory_estimate_grows_with_tokens_and_shrinks_with_checkpointing():
    small = estimate_memory(QWEN_8B, RunShape(world_size=8, micro_batch_tokens=4096), 80 * GIB)
    big = estimate_memory(QWEN_8B, RunShape(world_size=8, micro_batch_tokens=16384), 80 * GIB)
    ckpt = estimate_memory(
        QWEN_8B,
        RunShape(world_size=8, micro_batch_tokens=16384, activation_checkpointing=True),
        80 * GIB,
    )
    assert small.train_bytes < big.train_bytes and ckpt.train_bytes < big.train_bytes
    act = "activations (16384 tokens/micro-batch)"
    assert dict(ckpt.train_rows)[act] * 10 < dict(big.train_rows)[act]
    assert small.rollout_bytes == big.rollout_bytes  # micro-batches only matter while training


def test_model_shape_from_a_tiny_config_counts_its_parameters():
    from mua.models import load_model

    model = load_model("tiny:qwen2-1m")
    shape = ModelShape.from_hf_config(model.config)
    actual = sum(p.numel() for p in model.parameters())
    assert abs(shape.num_params - actual) / actual < 0.02
    assert shape.num_layers == 4 and shape.hidden_size == 128


def test_run_shape_from_the_quickstart_recipe():
    from pathlib import Path

    from mua.config import load_recipe

    recipe = load_recipe(
        str(Path(__file__).resolve().parents[2] / "recipes" / "quickstart.yaml"),
        ["rollout.engine=sglang", "rollout.sglang.mem_fraction=0.4"],
        verb="train",
    )
    run = run_shape_from_recipe(recipe, world_size=2)
    assert run.world_size == 2 and run.engine_mem_fraction == 0.4
    assert run.micro_batch_tokens == recipe.parallel.micro_batch_tokens


def _fake_dist(root, dist_name, version, package_files):
    info = root / f"{dist_name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n"
    )
    for rel, text in package_files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_flash_attn_4_is_not_taken_for_flash_attention_2(tmp_path, monkeypatch):
    import importlib.util
    import sys

    import torch

    from mua.models import model_loading as loading

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    fa4 = tmp_path / "fa4"
    _fake_dist(fa4, "flash-attn-4", "4.0.0", {"flash_attn/cute/__init__.py": ""})
    monkeypatch.syspath_prepend(str(fa4))
    for name in [m for m in sys.modules if m.startswith("flash_attn")]:
        monkeypatch.delitem(sys.modules, name)
    assert importlib.util.find_spec("flash_attn") is not None  # what the old check looked at
    assert loading.flash_attention_2_version() is None
    assert loading._auto_attention("bfloat16") == "sdpa"
    assert doctor.check_flash_attn(has_cuda=True).status == "warn"


def test_flash_attention_2_is_detected_by_distribution_and_kernel(tmp_path, monkeypatch):
    import sys

    import torch

    from mua.models import model_loading as loading

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    fa2 = tmp_path / "fa2"
    _fake_dist(
        fa2,
        "flash-attn",
        "2.7.4",
        {"flash_attn/__init__.py": "def flash_attn_varlen_func(*a, **k):\n    return None\n"},
    )
    monkeypatch.syspath_prepend(str(fa2))
    for name in [m for m in sys.modules if m.startswith("flash_attn")]:
        monkeypatch.delitem(sys.modules, name)
    try:
        assert loading.flash_attention_2_version() == "2.7.4"
        assert loading._auto_attention("bfloat16") == "flash_attention_2"
        assert loading._auto_attention("float32") == "sdpa"
        check = doctor.check_flash_attn(has_cuda=True)
        assert check.status == "ok" and "2.7.4" in check.detail
    finally:
        sys.modules.pop("flash_attn", None)  # the fake must not outlive the test


def test_the_gpu_extra_pins_a_release_the_contract_tests_cover():
    import re
    from pathlib import Path

    import tomllib

    from mua.engines.sglang.releases import COVERED_RELEASES

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    gpu = pyproject["project"]["optional-dependencies"]["gpu"]
    pins = [re.fullmatch(r"sglang==(\S+)", d) for d in gpu if d.startswith("sglang")]
    assert len(pins) == 1 and pins[0] and pins[0].group(1) in COVERED_RELEASES, gpu
    makefile = (Path(__file__).parents[2] / "Makefile").read_text()
    line = next(x for x in makefile.splitlines() if x.startswith("SGLANG_RELEASES :="))
    assert tuple(line.split(":=")[1].split()) == COVERED_RELEASES


def test_memory_estimate_of_the_lm_head_does_not_grow_with_tokens_times_vocab():
    """Log-probs are computed in chunks: 4x the tokens adds hidden states, not [tokens, V]."""
    from mua.train.memory_estimate import head_scoring_bytes

    small = head_scoring_bytes(QWEN_8B, 4096, 2)
    big = head_scoring_bytes(QWEN_8B, 16384, 2)
    assert big - small == (16384 - 4096) * QWEN_8B.hidden_size * 2
    assert big < 16384 * QWEN_8B.vocab_size * 4  # less than one fp32 [tokens, V] tensor
