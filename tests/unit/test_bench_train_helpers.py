"""The training benchmarks' own pieces: B1's reward, B3's workload and padding arithmetic, B4's byte
count, and B6's step loop on a tiny CPU model (so its code path is checked without a GPU)."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


def test_b1_reward_is_the_vowel_share_of_letters():
    from bench._b1_task import reward_of

    assert reward_of("aeiou") == 1.0
    assert reward_of("xyz 123") == 0.0
    assert reward_of("") == 0.0
    assert reward_of("Ab!") == pytest.approx(0.5)


def test_b1_one_turn_env_ends_after_one_scored_turn():
    import asyncio

    from bench._b1_task import gym_spec, tasks
    from mua.gym.api import AgentAction, GymContext

    env = gym_spec().make_env(GymContext())
    opening = asyncio.run(env.reset(tasks()[0]))
    step = asyncio.run(env.step(AgentAction(text="aa bb", raw="aa bb")))
    assert opening.messages == tasks()[0].prompt
    assert step.done and step.reward == pytest.approx(0.5)


def test_b3_pad_to_longest_fraction():
    from bench.b3_padding import pad_to_longest_fraction

    assert pad_to_longest_fraction([10, 100], rows=2) == pytest.approx(1 - 110 / 200)
    assert pad_to_longest_fraction([10, 100], rows=1) == 0.0


def test_b3_conversation_lengths_vary_at_least_tenfold():
    from bench.b3_padding import conversations
    from mua.models import load_tokenizer
    from mua.train.data import render_assistant_mask

    tokenizer = load_tokenizer("tiny:qwen2-1m")
    lengths = [len(render_assistant_mask(tokenizer, c).token_ids) for c in conversations()]
    assert max(lengths) / min(lengths) >= 10


def test_b4_counts_params_grads_and_adam_state_once_each():
    from bench._fsdp_memory_worker import local_bytes
    from mua.models import load_model

    model = load_model("tiny:qwen2-1m", dtype="float32", seed=0)  # tied embeddings: counted once
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.arange(1, 17)[None]
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    counts = local_bytes(model, optimizer)
    param_bytes = 4 * sum(p.numel() for p in model.parameters())
    assert counts == {
        "param_bytes": param_bytes,
        "grad_bytes": param_bytes,
        "optim_bytes": 2 * param_bytes,
    }


def test_b6_step_loop_runs_on_a_tiny_cpu_model():
    from bench.b6_gpu_throughput import measure

    shape = dict(
        vocab_size=2000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
        max_position_embeddings=512,
    )
    out = measure(
        shape,
        token_budget=128,
        num_sequences=6,
        min_len=16,
        max_len=48,
        warmup_steps=1,
        timed_steps=1,
    )
    assert out["train_tokens_per_s"] > 0
    assert 6 * 16 <= out["tokens_per_step"] <= 6 * 48
