"""tau2 as its leaderboard runs it: tau2-bench's own texts, read from a checkout.

`checkout.py` recognises a checkout (version, commit); `pysource.py` and `docstrings.py` read
Python source without importing it; `source.py` gets tau2's prompts, tool descriptions and
defaults from it; `profile.py` builds what the agent and user models are first sent;
`episode.py`, `native_user.py` and `judge.py` run a conversation that way; `comparable.py`
says whether an evaluation is comparable with tau2's leaderboard; `prep.py` adds the checkout
to prepared rows. Nothing here holds tau2's texts: they stay in the user's checkout.
"""
