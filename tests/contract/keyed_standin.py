"""A stand-in server that answers only requests carrying its key, as a launched vLLM or SGLang
server does: 200 with `Authorization: Bearer KEY`, 401 without. Records what it was sent.

In a test: `with KeyedServer(key) as server: ...` (`server.url`, `server.seen`). As a process (what
`start_server_process` launches): `python keyed_standin.py PORT`, the key read from
$MUA_SGLANG_API_KEY."""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _handler(key: str, seen: list):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            given = self.headers.get("Authorization")
            seen.append((self.path, given))
            ok = given == f"Bearer {key}"
            data = json.dumps({"model_path": "stand-in"} if ok else {"error": "Unauthorized"})
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())

        do_GET = do_POST = _answer

    return Handler


class KeyedServer:
    def __init__(self, key: str, port: int = 0):
        self.seen: list[tuple[str, str | None]] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(key, self.seen))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def status_without_key(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as reply:
                return reply.status
        except urllib.error.HTTPError as err:
            return err.code

    def __enter__(self) -> KeyedServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":
    KeyedServer(os.environ["MUA_SGLANG_API_KEY"], int(sys.argv[1])).httpd.serve_forever()
