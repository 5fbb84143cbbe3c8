"""Multi-turn rollouts: transcripts (token ids + masks), engines, the async runner, tool-call
parsing and user simulators. Heavy modules (engines) are imported lazily by their users."""
