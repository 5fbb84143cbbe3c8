"""The training gateway: OpenAI chat completions, OpenAI Responses and Anthropic Messages endpoints
in front of a `RolloutEngine` that record what they sample, so an unmodified agent program
(anything that calls `base_url`) can be trained.

- `mua.gateway.session`: one session's record (token ids, log-probs, loss masks, turn by turn)
  and its prefix rule (a request that extends the record appends; one that does not starts a new
  sample, a split).
- `mua.gateway.openai_wire`: the request checks and the OpenAI response shapes (plain and SSE).
- `mua.gateway.responses_wire`, `mua.gateway.messages_wire`: the Responses and Messages APIs,
  read into the chat request and written back in their own shapes.
- `mua.gateway.structured`: replies checked against `response_format` and `tool_choice`.
- `mua.gateway.server`: the aiohttp app (`Gateway`): sessions by key, `POST
  /v1/chat/completions`, `/v1/responses`, `/v1/messages`, `GET /v1/models`.
- `mua.gateway.reply_reader`: a sampled turn as returned (the `stop` cut, tool calls read).
- `mua.gateway.program`: program gyms: one agent program per task sample, run against the
  gateway, its record turned into a `Trajectory`.

Not here: the turn loop of built-in gyms (`mua.rollout.runner`), training (`mua.train`).
"""
