"""The option names `mua.algo` implements, without importing torch.

`mua.algo` checks its arguments against these tuples and `mua.config.train` builds the recipe's
`Literal` types from them, so a name added here is accepted by both, and a recipe is validated
before torch is imported. Nothing else belongs here.
"""

SCORE_KINDS = ("sum", "mean", "r2g", "outcome")
ADVANTAGE_KINDS = ("grpo", "drgrpo", "rloo", "reinforce++")
CREDIT_KINDS = ("equalized", "r2g", "em")
GRPO_CREDIT_KINDS = (*CREDIT_KINDS, "turn-group", "r2g-loo")
AGGREGATIONS = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
KL_ESTIMATORS = ("k1", "k2", "k3")
CORRECTION_KINDS = ("none", "tis", "decoupled", "icepop", "seq-mis")
# corrections whose weight is one number per sequence (the others weigh each token)
SEQUENCE_CORRECTIONS = ("none", "seq-mis")
POLICY_LOSS_KINDS = ("ppo-clip", "gspo", "gspo-token", "cispo")
