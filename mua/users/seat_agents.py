"""The fixed agent of the user seat, as a message-level policy (`MessagePolicy`).

`{kind: expert}` is the gym's scripted expert (with the entry's options, e.g. guess's
`expert_noise`); `{kind: llm}` is a model behind an OpenAI-compatible endpoint (`mua serve <hf
folder>` serves a frozen checkpoint as one). When the endpoint's retries are spent the agent
raises `AgentFailure`, which the seat turns into a masked `user_failure` trajectory (the party
the policy talks to failed); a refused key or an unknown model (`RunFailure`) stops the run.
"""

from __future__ import annotations

from mua.gym.api import UserFailure


class AgentFailure(UserFailure):
    """The fixed agent could not answer (its endpoint's retries are spent)."""


def llm_agent(cfg):
    """A `MessagePolicy` asking the endpoint `cfg` (an `LLMAgentConfig`) for each agent turn."""
    from mua.llm.chat_endpoint import ChatEndpoint
    from mua.llm.llm_client import OPENAI_API_URL
    from mua.rollout.openai_policy import OpenAIPolicy

    endpoint = ChatEndpoint.for_config(
        cfg,
        base_url=cfg.resolved_base_url() or OPENAI_API_URL,
        model=cfg.resolved_model(),
        label="user seat's agent endpoint",
        base_url_setting="agent.base_url",
    )
    agent = OpenAIPolicy(
        endpoint,
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
        tool_parser=cfg.tool_parser,
        when_spent=lambda err: AgentFailure(f"the fixed agent could not answer: {err}"),
    )
    return agent.as_message_policy(name="user seat's agent")


def fixed_agent(agent_cfg, spec, ctx):
    """The entry's fixed agent (`GymConfig.seat_agent()`) as a `MessagePolicy`."""
    from mua.rollout.policies import expert_policy

    if agent_cfg.kind == "expert":
        return expert_policy(spec, ctx)
    return llm_agent(agent_cfg)
