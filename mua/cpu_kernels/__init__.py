"""CPU-only kernels for the trainer: attention over packed rows without a [T, T] mask
(`packed_attention`, used wherever flash-attn is not) and RMSNorm with a hand-written backward
(`rms_norm`, installed on CPU only; the module also holds the switch to Liger's GPU kernel).
On a GPU with flash-attn and Liger neither kernel is on the training path."""
