"""The trainer's own kernels: attention over packed rows without a [T, T] mask
(`packed_attention`: used wherever flash-attn is not, on CPUs and on GPUs without it) and RMSNorm
with a hand-written backward (`rms_norm`, installed on CPU only; the module also holds the switch
to Liger's GPU kernel). With flash-attn and Liger on a GPU, neither kernel is on the training path.
Not here: model code (transformers') or anything the rollout engines run."""
