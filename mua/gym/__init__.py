"""The gym API: what an environment is, how tools are declared, how gyms are found by name.

Public names: `Task`, `StepResult`, `ResetResult`, `AgentAction`, `ToolCall`, `Env`, `ToolEnv`,
`GymSpec`, `GymContext`, `JudgeClient`, `UserFailure`, `tool`, `tool_schema`, `get_gym`,
`list_gyms`. A gym never touches torch, processes or the network except through the
`JudgeClient` it is given.
"""

from mua.gym.api import (
    AgentAction,
    Env,
    GymContext,
    GymSpec,
    JudgeClient,
    ResetResult,
    StepResult,
    Task,
    ToolCall,
    UserFailure,
)
from mua.gym.registry import get_gym, list_gyms
from mua.gym.tools import ToolEnv, tool, tool_schema

__all__ = [
    "AgentAction",
    "Env",
    "GymContext",
    "GymSpec",
    "JudgeClient",
    "ResetResult",
    "StepResult",
    "Task",
    "ToolCall",
    "ToolEnv",
    "UserFailure",
    "get_gym",
    "list_gyms",
    "tool",
    "tool_schema",
]
