"""Benchmarks (`make bench`, `make bench B=B2`): ratios against peers measured in the same run.

Never part of the test run. Each benchmark module `bench/bN_*.py` defines `ID`, `BAR` and
`run() -> dict[str, float]`; the harness writes `bench/results/<ID>.json`.
"""
