"""A stand-in for SGLang's launcher, run by the contract tests: it starts the way SGLang does and
then speaks just enough of the protocol to be waited for.

Usage: python standin_server.py HTTP_PORT STORE_PORT MODE   (MODE: health | no-health)

Like SGLang's server it first calls init_process_group("tcp://127.0.0.1:STORE_PORT",
world_size=1, rank=0): under an inherited TORCHELASTIC_USE_AGENT_STORE=True that call opens the
store as a client only and never returns. Then it serves /get_model_info at once, while /health
answers 503 for its first three polls (SGLang warming up) and 200 after; MODE no-health serves
no /health at all (404), like a release without it.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import torch.distributed as dist


def main() -> None:
    http_port, store_port, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{store_port}",
        world_size=1,
        rank=0,
        timeout=timedelta(seconds=60),
    )
    polls = {"health": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path == "/get_model_info":
                self._answer(200, b'{"model_path": "stand-in"}')
            elif self.path == "/health" and mode == "health":
                polls["health"] += 1
                self._answer(200 if polls["health"] > 3 else 503, b"")
            else:
                self._answer(404, b'{"detail": "Not Found"}')

        def _answer(self, status, data):
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    HTTPServer(("127.0.0.1", http_port), Handler).serve_forever()


if __name__ == "__main__":
    main()
