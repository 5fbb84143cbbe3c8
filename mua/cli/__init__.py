"""The `mua` command line: one module per verb, assembled in `mua.cli.main`.

Verb modules import only typer/rich at module level; torch, transformers, mlflow and sglang are
imported inside the verb functions so that `mua --help` stays instant.
"""
