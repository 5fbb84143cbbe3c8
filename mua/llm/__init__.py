"""The LLM client: one aiohttp session stack for every HTTP call mua makes (simulated users,
judges, OpenAI-compatible agents, SGLang's endpoints), chat-completions requests with retries and
deadlines, and the on-disk reply cache. Knows nothing about gyms or transcripts."""
