"""The multi-turn rollout runner: transcripts (token ids + masks), tool-call parsing, rendering,
agent policies and the async runner that drives conversations between an engine, a gym and its
simulated user. Engines live in `mua.engines`, the HTTP/LLM client in `mua.llm`."""
