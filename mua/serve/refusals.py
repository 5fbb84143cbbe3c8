"""How `mua serve` turns a refused call into SGLang's answer: the status and body shapes.

`HTTPError` carries its own status; `Refused` is what SGLang's scheduler turns down (400 with
{"success": false, "message"}); `error_body` is the body of any other error, in the shape the
path's SGLang handler answers. Not here: deciding what to refuse (the route modules do).
"""

from __future__ import annotations


class HTTPError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Refused(Exception):
    """A weight call SGLang's scheduler turns down: HTTP 400 with {"success": false, message}."""


def error_body(message: str, path: str) -> dict:
    if path.startswith(
        (
            "/update_weights",
            "/release_memory",
            "/resume_memory",
            "/begin_weight",
            "/end_weight",
            "/load_lora",
            "/unload_lora",
        )
    ):
        return {"success": False, "message": message}
    return {"error": {"message": message}}
