"""The training gateway: an OpenAI-compatible chat endpoint in front of a `RolloutEngine` that
records what it samples, so an unmodified agent program (anything that calls `base_url`) can be
trained.

- `mua.gateway.session`: one session's record (token ids, log-probs, loss masks, turn by turn)
  and its prefix rule (a request that extends the record appends; one that does not starts a new
  sample, a split).
- `mua.gateway.openai_wire`: the request checks and the OpenAI response shapes (plain and SSE).
- `mua.gateway.server`: the aiohttp app (`Gateway`): sessions by key, `POST
  /v1/chat/completions`, `GET /v1/models`.
- `mua.gateway.reply_reader`: a sampled turn as returned (the `stop` cut, tool calls read).
- `mua.gateway.program`: program gyms: one agent program per task sample, run against the
  gateway, its record turned into a `Trajectory`.

Not here: the turn loop of built-in gyms (`mua.rollout.runner`), training (`mua.train`).
"""
