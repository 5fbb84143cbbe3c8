"""Start an MCP server that dies with the process that started it.

`python -m gyms.mcp.guard CMD ARGS...` arms the parent-death signal (SIGKILL, Linux) and then
becomes CMD, so a server started by a rank goes with it even when the rank is killed with -9.
"""

from __future__ import annotations

import os
import sys

from mua.processes import die_with_parent

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m gyms.mcp.guard CMD [ARGS...]")
    die_with_parent()
    try:
        os.execvp(sys.argv[1], sys.argv[1:])
    except OSError as e:
        sys.exit(f"cannot start MCP server {sys.argv[1]!r}: {e}")
