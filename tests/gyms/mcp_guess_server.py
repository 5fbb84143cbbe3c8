"""The example guess MCP server (examples/mcp/guess_server.py) plus tools that fail, for tests.

`python tests/gyms/mcp_guess_server.py` serves over stdio; `--http PORT` over streamable HTTP
at http://127.0.0.1:PORT/mcp. `--bad-schema` gives `interact_with_env` an input schema that is
not valid JSON Schema. `MCP_PID_FILE` names a file the server writes its pid to; with
`MCP_LINGER=1` it does not exit when its stdin closes (a server slow to stop). The fault
tools: `crash` (writes to stderr, then exits), `hang` (never answers), `flood(size)` (a result
of `size` characters).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

from examples.mcp.guess_server import app, main  # noqa: E402


@app.tool()
def crash() -> str:
    """Exit at once."""
    print("crashing on purpose", file=sys.stderr, flush=True)
    os._exit(3)


@app.tool()
def hang() -> str:
    """Never answer."""
    print("hanging on purpose", file=sys.stderr, flush=True)
    time.sleep(3600)
    return "late"


@app.tool()
def flood(size: int) -> str:
    """A result of `size` characters."""
    return "x" * size


if __name__ == "__main__":
    if os.environ.get("MCP_PID_FILE"):
        with open(os.environ["MCP_PID_FILE"], "a") as f:
            f.write(f"{os.getpid()}\n")
    if "--bad-schema" in sys.argv:
        app._tool_manager._tools["interact_with_env"].parameters = {
            "type": "object",
            "properties": {"choice": {"type": "no-such-type"}},
        }
    main(sys.argv[1:])
    if os.environ.get("MCP_LINGER") == "1":
        time.sleep(3600)
