"""Simulated users in one home, above the turn loop: the user matrix of `mua eval` (`matrix`:
`eval.users` cells, personas in `personas/`), the rules that find a user's leaks and slips
(`rules`), and the user seat, where the trained policy plays a gym's user against a fixed agent
(`seat_spec.seated` builds it, `seat_env.SeatEnv` runs it, `seat_agents` the fixed agent,
`fidelity` and `seat_judge` score the user's turns).

Not here, by layer: the users' settings (`mua.config.users`), the LLM user's client
(`mua.llm.llm_client`, which gyms import), a gym's own scripted user and its `UserSeat`
declaration (`mua.gym.user_seat`, the gym author's API), alternating training
(`mua.train.alternate`).
"""
