"""A verifiers 0.4.0 environment for mua's tests: guess a hidden number from 1 to N.

The taskset yields one task per row; the env plays the player seat (the `null` chat harness)
turn by turn, answering each guess with "higher" or "lower" until it is right or the guesses run
out; the task's reward is 1 when the player's last reply names the number. Test hooks (the
player's reply is the trigger): "crash" exits the process, "hang" sleeps, "noise" writes junk to
stdout, "raise" raises in the env, "nan" makes the reward NaN, "fork" opens a second run of the
player seat; they let mua's tests check that a broken environment ends its trajectory.
"""

from vf_guess.env import GuessEnv, GuessEnvConfig, GuessTaskset

__all__ = ["GuessEnv", "GuessEnvConfig", "GuessTaskset"]
