"""Shared pieces of the UserRL-style gyms (function, telepathy, turtle, persuade, intention, search).

`interact.InteractEnv` (the one-tool env), `actions` (expert messages and bracket text),
`judge` (LLM JSON requests and validators), `text` (scripted matching), `tasks` (prompts and
splits), `episode` (a minimal policy loop for tests and baselines). Nothing here is gym-specific.
"""
