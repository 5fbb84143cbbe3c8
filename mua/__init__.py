"""mua: train LLM agents with RL on multi-turn conversations with simulated users and tools.

This top-level module only exposes the version; it imports nothing heavy so that `mua --help`
stays instant. Everything else lives in sub-packages (see docs/architecture.md).
"""

__version__ = "0.1.0"
