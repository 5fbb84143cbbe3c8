"""Evaluation shared by `mua eval` and in-training validation.

`mua.eval.eval_runner.evaluate` rolls out a policy on held-out tasks and returns one result row per
trajectory plus a per-gym summary (`mua.eval.summary`); `mua.eval.store` makes it resumable;
`mua.eval.agents` turns `--model` into a policy; `mua.eval.report` renders and records results.
Importing this package is cheap (no torch).
"""
