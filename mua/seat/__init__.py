"""The user seat: the trained policy plays a gym's simulated user, a fixed agent plays the agent.

A `gyms:` entry with `seat: user` runs its conversations through `SeatEnv` (`mua.seat.env`):
the gym's own env plays the episode with the fixed agent (`mua.seat.agents`) acting, and every
request the env makes to its user becomes a turn of the policy. `mua.seat.fidelity` scores the
user's turns; `mua.seat.spec` turns a gym's spec into the seat's and checks an entry can sit
there. A gym opts in with `GymSpec.user_seat` (a `UserSeat`, `mua.seat.api`). Alternating the
trained party between the seats is not here.
"""

from mua.seat.api import UserSeat

__all__ = ["UserSeat"]
