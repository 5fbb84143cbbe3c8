"""The ASGI middleware that makes a vLLM server mua launched answer only requests with its key.

vLLM's own `--api-key` (`VLLM_API_KEY`) guards only the routes under /v1 (and /v2, /inference,
/cohere): the development routes mua drives (/collective_rpc, /reset_prefix_cache, /sleep,
/wake_up, the weight-transfer routes) and /health stay open to anyone who can reach the port.
`RequireKey`, passed as `--middleware mua_vllm_key_guard.RequireKey` and copied beside the worker
extension onto the server's path (so it imports nothing of mua), refuses every HTTP request whose
`Authorization` is not `Bearer $VLLM_API_KEY` (401) and every such websocket (closed, 1008).
The key travels in the server's environment, never on its command line. Not here: the key's
choice or the client that sends it (`vllm_launch`, `vllm_engine`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os

KEY_ENV = "VLLM_API_KEY"


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


class RequireKey:
    """Pure ASGI (client disconnects still reach vLLM, which aborts those requests)."""

    def __init__(self, app, key: str | None = None):
        key = key if key is not None else os.environ.get(KEY_ENV, "")
        if not key:
            raise RuntimeError(f"${KEY_ENV} is not set: the server would answer anyone")
        self.app = app
        self._expected = _digest(f"Bearer {key}")

    def _allowed(self, scope) -> bool:
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        return hmac.compare_digest(_digest(given.decode("latin-1")), self._expected)

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind not in ("http", "websocket") or self._allowed(scope):
            await self.app(scope, receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            body = json.dumps({"error": "Unauthorized"}).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
