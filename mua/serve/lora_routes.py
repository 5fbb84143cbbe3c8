"""`mua serve`'s LoRA endpoints (releases >= 0.5.8, as SGLang): adapters pushed as tensors.

  POST /load_lora_adapter_from_tensors  {"lora_name", "config_dict", tensors {name: tensor} in
                                         the release's field}: applied with peft by the engine
                                         (`HFEngine.load_adapter`), live from then on
  POST /unload_lora_adapter             {"lora_name"}: refused (400) while a running request
                                         names it, or when no adapter of that name is loaded
  /generate's `lora_path`               must name the live adapter

The engine holds one adapter at a time (the newest); an older name stays registered until it
is unloaded, but a request naming it is refused (400), as is a request naming no adapter while
one is live: `mua serve` never silently generates with other weights than the request asked for.
Not here: adapters from disk (`/load_lora_adapter`), several adapters in one batch.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

from mua.engines.sglang import lora_endpoints
from mua.engines.sglang.weight_sync import decode_tensors
from mua.serve.protocol import ProtocolError


class LoraRoutes:
    """The adapters one `mua serve` registered, and the running requests naming each."""

    def __init__(self, server) -> None:
        self.server = server
        self.registered: list[str] = []
        self.live: str | None = None
        self._running: Counter[str] = Counter()
        self._lock = threading.Lock()

    def posts(self) -> dict:
        if not self.server.traits.lora_tensors:
            return {}
        return {lora_endpoints.LOAD_PATH: self.load, lora_endpoints.UNLOAD_PATH: self.unload}

    def load(self, body: Any) -> dict:
        from mua.serve.server import Refused

        self.server._log("load_lora_adapter_from_tensors", body)
        if not isinstance(body, dict) or not isinstance(body.get("lora_name"), str):
            raise ProtocolError("load_lora_adapter_from_tensors needs lora_name")
        if not isinstance(body.get("config_dict"), dict):
            raise ProtocolError("load_lora_adapter_from_tensors needs config_dict")
        field = (
            "serialized_named_tensors"
            if self.server.traits.lora_per_rank_payloads
            else "serialized_tensors"
        )
        if field not in body:
            raise ProtocolError(f"load_lora_adapter_from_tensors needs {field}")
        name = body["lora_name"]
        if name in self.registered:
            raise Refused(f"The LoRA adapter {name!r} is already loaded")
        tensors = decode_tensors(lora_endpoints.payload_of(body), as_dict=True)
        load = getattr(self.server.engine, "load_adapter", None)
        if load is None:
            raise Refused("this engine cannot apply LoRA adapters")
        try:
            self.server._run(asyncio.to_thread(load, name, tensors, body["config_dict"]))
        except ValueError as err:
            raise Refused(f"cannot load LoRA adapter {name!r}: {err}") from None
        with self._lock:
            self.registered.append(name)
            self.live = name
        return {"success": True, "message": f"loaded LoRA adapter {name} ({len(tensors)} tensors)"}

    def unload(self, body: Any) -> dict:
        from mua.serve.server import Refused

        self.server._log("unload_lora_adapter", body)
        name = body.get("lora_name") if isinstance(body, dict) else None
        with self._lock:
            if name not in self.registered:
                raise Refused(f"LoRA adapter {name!r} is not loaded")
            if self._running.get(name):
                raise Refused(
                    f"LoRA adapter {name!r} is named by {self._running[name]} running request(s)"
                )
            self.registered.remove(name)
            if self.live == name:
                self.live = None
        return {"success": True, "message": f"unloaded LoRA adapter {name}"}

    def begin(self, body: Any, count: int) -> str | None:
        """Check a /generate body's `lora_path` against the live adapter; count it running."""
        name = body.get("lora_path") if isinstance(body, dict) else None
        if isinstance(name, list):
            names = set(name)
            if len(names) != 1:
                raise ProtocolError("mua serve generates one batch with one LoRA adapter")
            name = names.pop()
        with self._lock:
            if name is not None and name != self.live:
                raise ProtocolError(
                    f"LoRA adapter {name!r} is not the live one ({self.live!r}); load it first"
                )
            if name is None and self.live is not None:
                raise ProtocolError(f"a LoRA adapter is live ({self.live!r}): name it in lora_path")
            if name is not None:
                self._running[name] += count
        return name

    def end(self, name: str | None, count: int) -> None:
        if name is None:
            return
        with self._lock:
            self._running[name] -= count
            if self._running[name] <= 0:
                del self._running[name]
