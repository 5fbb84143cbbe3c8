"""`mua eval` with each family's template: the scripted expert's transcripts, written by a model
in the family's own format, run without parse errors.

First the expert is evaluated (message level; its calls rendered through the family's template),
then a token-level agent replays each expert turn as the text the family's template writes for
it, so every turn goes through the runner's stop tokens, the `auto` reader picked from the
template, schema typing of arguments and the drift check, as a model's sampled tokens would.
GLM's template has no end-of-turn token: its replayed turns end with the role token a GLM model
writes next (`<|observation|>` after calls, `<|user|>` otherwise)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from mua.engines.engine_contract import GenerationResult
from mua.rollout.chat_renderer import ChatRenderer
from tests.unit.family_templates import TEMPLATES, family_tokenizer

GYMS = ["tau", "guess"]  # tool calls with typed arguments; bracket actions under `auto`
TOKEN_LEVEL = sorted(TEMPLATES)


class ReplayTokens:
    """Replays recorded assistant messages (per task) as the template's text, turn by turn."""

    kind = "tokens"
    tool_parser = "auto"

    def __init__(self, tok, recorded: dict[str, list[dict]]):
        self.renderer = ChatRenderer(tok)
        self.recorded = recorded
        self.turns: Counter = Counter()

    async def generate(
        self, prompt_ids, max_new_tokens, stop_token_ids, route_key="", keep_prefix=True, **seed
    ):
        task_id = route_key.split(":", 1)[1].rsplit("/", 1)[0]
        turn = self.turns[route_key]
        self.turns[route_key] += 1
        message = self.recorded[task_id][turn]
        text = self.renderer.assistant_text(message)
        if self.renderer.role_stops:  # GLM: a turn ends with the role token the model writes
            text += "<|observation|>" if message.get("tool_calls") else "<|user|>"
        ids = self.renderer.encode(text)[:max_new_tokens]
        reason = "stop" if ids and ids[-1] in stop_token_ids else "length"
        return GenerationResult(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=reason)


def _recipe(tokenizer_dir, *overrides):
    from mua.config import load_recipe

    return load_recipe(
        None,
        [
            f"model.tokenizer={tokenizer_dir}",
            "eval.max_tasks=2",
            "rollout.max_turns=12",
            "rollout.max_new_tokens_per_turn=512",
            "rollout.max_total_tokens=16384",
            "rollout.max_concurrency=1",
            *overrides,
        ],
        verb="eval",
    )


def _rows(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("file", TOKEN_LEVEL)
def test_replayed_expert_runs_without_parse_errors(file, tmp_path, monkeypatch):
    from mua.eval import agents
    from mua.eval.session import run_evaluation

    tok = family_tokenizer(file)
    tok_dir = tmp_path / "tokenizer"
    tok.save_pretrained(tok_dir)
    recipe = _recipe(tok_dir)
    expert, _ = run_evaluation(
        recipe, model="expert", gyms=GYMS, out_dir=tmp_path / "expert", track=False
    )
    recorded = {
        str(r["task_id"]): [m for m in r["messages"] if m["role"] == "assistant"]
        for r in _rows(tmp_path / "expert")
    }
    assert sum(len(turns) for turns in recorded.values()) >= 4

    def replay_agent(model, recipe, source=None):
        return agents.Agent(
            label="replay",
            tokenizer=tok,
            make_policy=lambda spec, ctx: ReplayTokens(tok, recorded),
        )

    monkeypatch.setattr(agents, "load_agent", replay_agent)
    replay, _ = run_evaluation(
        recipe, model="expert", gyms=GYMS, out_dir=tmp_path / "replay", track=False, fresh=True
    )
    rows = _rows(tmp_path / "replay")
    assert [r["parse_errors"] for r in rows] == [0] * len(rows)
    assert [r["drift"] for r in rows] == [False] * len(rows)
    for gym in GYMS:
        assert replay[gym]["reward_mean"] == expert[gym]["reward_mean"]
