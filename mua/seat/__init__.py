"""The user seat: the trained policy plays a gym's simulated user, a fixed agent plays the agent.

A `gyms:` entry with `seat: user` runs its conversations through `SeatEnv` (`mua.seat.env`):
the gym's own env plays the episode with the fixed agent (`mua.seat.agents`) acting, and every
request the env makes to its user becomes a turn of the policy. `mua.seat.fidelity` scores the
user's turns, `mua.seat.judge` rates them by an LLM judge's rubric where the entry names one;
`mua.seat.spec` turns a gym's spec into the seat's. A gym opts in with `GymSpec.user_seat` (a
`mua.gym.user_seat.UserSeat`, which also holds the entry's checks). Training the agent and the
user in turns is `mua.train.alternate`.
"""
