"""Shared pieces of the UserRL-style gyms (function, telepathy, turtle, persuade, intention, search).

`interact.InteractEnv` (the one-tool env), `actions` (expert messages and bracket text),
`judge` (LLM JSON requests and validators), `text` (scripted matching), `tasks` (prompts and
splits), `episode` (a minimal policy loop for tests and baselines), `spec` (a gym's `GymSpec` from
its own parts; also the lazy `data_prep` task builders of math and travel). Nothing here is
gym-specific.
"""
