"""Training: the torchrun entry point, the trainer (RL and SFT), data, packing, checkpoints.

`mua.train.launcher` runs in the `mua train` process (validation, then torchrun);
`mua.train.loop` (the step loop) runs in every rank. Nothing here is imported by `mua --help`.
"""
