"""The release check before an adapter-push run asks each server's `/get_server_info` through the
SGLang client's aiohttp stack (never a hand-opened urllib call), and takes a silent server as
unknown."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from mua.engines.sglang.colocated import server_version

MODEL = "tiny:qwen2-1m"


def testserver_version_is_read_over_the_client_stack(monkeypatch):
    from mua.serve import serve_model

    def refuse(*_args, **_kwargs):
        raise AssertionError("urllib.request.urlopen must not be used")

    from mua.http_session import LoopSessions

    sessions = []
    real_get = LoopSessions.get

    async def counted(self):
        sessions.append(self)
        return await real_get(self)

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(LoopSessions, "get", counted)
    server = serve_model(MODEL, sglang_release="0.5.5.post3")
    try:
        assert server_version(server.url) == "0.5.5.post3"
        assert sessions  # the aiohttp sessions of `mua.http_session`
    finally:
        server.stop()


def test_a_server_that_does_not_answer_has_no_version():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert server_version(f"http://127.0.0.1:{port}") is None


@pytest.mark.parametrize("answer", [b"not json", b"[1, 2]"])
def test_an_answer_without_a_version_object_has_no_version(answer):
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Plain(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_args):
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Plain)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        assert server_version(f"http://127.0.0.1:{httpd.server_address[1]}") is None
    finally:
        httpd.shutdown()
        httpd.server_close()
