"""The model families mua reads tool calls for, by name, and `auto` detection from a template.

Each `Family` names its reader (`parse(text, tools) -> AgentAction`), the markers in a chat
template that identify it, and what its template does to reasoning and parallel calls (the
known reasons a re-rendered conversation differs from the tokens a rollout built).
`detect_family` picks a family from a chat template's text; `auto_family` is what
`model.tool_parser: auto` reads for a template (warning once when it knows none).
Not here: rendering (the model's own template through transformers does that).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from mua.families import (
    deepseek,
    deepseek_v32,
    glm,
    gpt_oss,
    hermes,
    kimi_k2,
    llama3,
    mistral,
    qwen3_coder,
)
from mua.gym.api import AgentAction

log = logging.getLogger("mua.families")


@dataclass(frozen=True)
class Family:
    name: str
    models: str
    parse: Callable[[str, list[dict] | None], AgentAction]
    markers: tuple[str, ...]  # all of them in a chat template identify the family
    parallel_calls: str
    reasoning: str
    drift: str  # what makes a template's full render differ from the turn-by-turn tokens
    # messages as the template needs them (call ids, argument encoding); rendering only
    template_messages: Callable[[list[dict]], list[dict]] = list
    stop_texts: tuple[str, ...] = ()  # turn ends besides the one the template's probe finds
    # role tokens that end an assistant turn by starting the next one (templates with no
    # end-of-turn token: the sampled role token is kept as the start of the next turn)
    role_stops: tuple[str, ...] = ()


def _untyped(reader: Callable[[str], AgentAction]):
    def parse(text: str, tools: list[dict] | None = None) -> AgentAction:
        return reader(text)

    return parse


# Most specific markers first: detection takes the first family whose markers all appear.
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "gpt_oss",
            "gpt-oss-20b/120b",
            gpt_oss.parse,
            ("<|channel|>", "<|call|>"),
            "no: the template renders only a message's first call",
            "analysis channel; kept only on call turns with no later final answer",
            "analysis of earlier turns is dropped once a final answer follows; the last "
            "turn ends in <|return|> in a full render but <|end|> in history",
            stop_texts=("<|call|>", "<|return|>"),
        ),
        Family(
            "kimi_k2",
            "Kimi-K2-Instruct",
            kimi_k2.parse,
            ("<|tool_calls_section_begin|>",),
            "yes",
            "none in this template",
            "call ids are rebuilt by the template from name and position",
        ),
        Family(
            "deepseek_v3_2",
            "DeepSeek-V3.2 (from its published encoding script; no template checked)",
            deepseek_v32.parse,
            ("｜DSML｜",),
            "yes",
            "<think> (thinking mode); earlier turns keep only their answer",
            "V3.2 ships an encoding script, not a chat template; mua has not rendered its "
            "conversations",
        ),
        Family(
            "deepseek_v3_1",
            "DeepSeek-V3.1",
            deepseek.parse,
            ("<｜tool▁calls▁begin｜>",),
            "yes",
            "<think> (thinking mode); earlier turns keep only their answer",
            "reasoning of earlier turns is dropped; the template does not render `tools`",
            deepseek.template_messages,
        ),
        Family(
            "mistral",
            "Mistral-Nemo, Mistral 7B v0.3",
            mistral.parse,
            ("[TOOL_CALLS]",),
            "yes",
            "none",
            "[AVAILABLE_TOOLS] moves to the last user message, so the prompt changes when a "
            "user speaks again; call ids must be 9 characters",
            mistral.template_messages,
        ),
        Family(
            "glm4_5",
            "GLM-4.5, GLM-4.6",
            glm.parse,
            ("<arg_key>", "<arg_value>"),
            "yes",
            "<think>; dropped from turns before the last user message",
            "no end-of-turn token: a turn ends at the next role token (<|user|>, "
            "<|observation|>), which starts the next turn; reasoning of earlier turns is dropped",
            role_stops=("<|user|>", "<|observation|>"),
        ),
        Family(
            "qwen3_coder",
            "Qwen3.5, Qwen3.6, Qwen3-Coder",
            qwen3_coder.parse,
            ("<function=", "<parameter="),
            "yes",
            "<think> (Qwen3.5); dropped from turns before the last user message",
            "reasoning of earlier turns is dropped; an empty <think></think> is rendered only on "
            "the last turn",
        ),
        Family(
            "hermes",
            "Qwen3, Qwen2.5, Hermes, mua's tiny models",
            _untyped(hermes.parse_hermes),
            ("<tool_call>",),
            "yes",
            "<think>; dropped from turns before the last user message",
            "reasoning of earlier turns is dropped; an empty <think></think> is rendered only on "
            "the last turn",
        ),
        Family(
            "llama3_json",
            "Llama 3.1, 3.2, 3.3",
            llama3.parse,
            ("<|start_header_id|>", "ipython"),
            "no: the template refuses two calls in one message",
            "none",
            "tool results are written through tojson (strings come out quoted)",
        ),
    )
}
ALIASES = {
    "qwen3": "hermes",
    "qwen3_5": "qwen3_coder",
    "qwen3_xml": "qwen3_coder",
    "llama3": "llama3_json",
    "harmony": "gpt_oss",
    "glm4_6": "glm4_5",
    "glm": "glm4_5",
    "kimi": "kimi_k2",
    "deepseek": "deepseek_v3_1",
    "deepseek_v32": "deepseek_v3_2",
    "dsml": "deepseek_v3_2",
    "qwen3_6": "qwen3_coder",
}


def get_family(name: str) -> Family:
    """The family called `name` (or one of its aliases); ValueError naming the choices."""
    family = FAMILIES.get(ALIASES.get(name, name))
    if family is None:
        raise ValueError(f"unknown model family {name!r}; use one of {', '.join(FAMILIES)}")
    return family


def for_template(chat_template: str | None, messages: list[dict]) -> list[dict]:
    """`messages` as the family of `chat_template` needs them rendered (unchanged for an
    unknown template)."""
    family = detect_family(chat_template)
    return family.template_messages(messages) if family is not None else messages


def detect_family(chat_template: object) -> Family | None:
    """The family whose markers all appear in `chat_template`, or None (also for a template
    that is not one string)."""
    return _detect(chat_template) if isinstance(chat_template, str) else None


@lru_cache(maxsize=64)
def _detect(text: str) -> Family | None:
    for family in FAMILIES.values():
        if all(marker in text for marker in family.markers):
            return family
    return None


@lru_cache(maxsize=64)
def auto_family(chat_template: str | None) -> Family | None:
    """The family `model.tool_parser: auto` reads for a model with `chat_template`.

    None (with one warning per template) when the template matches no family: `auto` then
    reads Hermes `<tool_call>` blocks, else bracket actions.
    """
    family = detect_family(chat_template)
    if family is None and chat_template:
        log.warning(
            "model.tool_parser auto: the chat template matches no known model family; reading "
            "Hermes <tool_call> blocks or bracket actions (set model.tool_parser to one of "
            "%s to choose)",
            ", ".join(FAMILIES),
        )
    return family
