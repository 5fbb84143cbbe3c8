"""The training gateway: OpenAI chat completions, OpenAI Responses and Anthropic Messages endpoints
in front of a `RolloutEngine` that record what they sample, so an unmodified agent program can be
trained (docs/gateway.md).

Modules: `session` (a session's record and its prefix rule), `openai_wire`, `responses_wire`,
`messages_wire` (the three APIs' requests and replies), `structured` (`response_format` and
`tool_choice` checks), `server` (the aiohttp app, `Gateway`), `reply_reader` (a sampled turn as
returned), `env_routes` (a gym's env over HTTP), `program` (program gyms).
Not here: the turn loop of built-in gyms (`mua.rollout.runner`), training (`mua.train`).
"""
