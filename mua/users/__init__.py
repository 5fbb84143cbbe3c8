"""Simulated users above the turn loop: the user matrix of `mua eval` (`matrix`, personas in
`personas/`), the rules that find a user's slips (`rules`), and the user seat, where the policy
plays a gym's user against a fixed agent (`seat_spec.seated` builds it, `seat_env.SeatEnv` runs
it, `seat_agents` the fixed agent, `fidelity` and `seat_judge` score it).

Not here, by layer: the users' settings (`mua.config.users`), the LLM user's client
(`mua.llm.llm_client`), a gym's `UserSeat` (`mua.gym.user_seat`), alternating training.
"""
