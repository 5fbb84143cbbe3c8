"""`mua serve`'s LoRA endpoints (releases >= 0.5.8, as SGLang): adapters pushed as tensors.

`/load_lora_adapter_from_tensors` adds an adapter with peft beside those loaded;
`/unload_lora_adapter` refuses (400) while a request names it; `/generate`'s `lora_path` picks one.
The engine runs one adapter at a time: `AdapterGate` switches once none of the active adapter's
requests runs, without starving either side. A request naming no adapter, or one not loaded, is
refused while adapters are loaded (docs/sglang.md, "`mua serve`"); chat runs on the base.
Not here: adapters from disk (`/load_lora_adapter`), several adapters in one forward.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from mua.engines.sglang import lora_endpoints
from mua.engines.sglang.protocol import ProtocolError
from mua.engines.sglang.weight_sync import decode_tensors
from mua.serve.refusals import Refused


class AdapterGate:
    """Which adapter the engine generates with, and the requests running or waiting per name.
    Used on the server's event loop only."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.active: str | None = None  # what the engine generates with (None: the base)
        self.running: Counter[str | None] = Counter()
        self.waiting: Counter[str | None] = Counter()
        self._changed = asyncio.Condition()

    def _may_enter(self, name: str | None) -> bool:
        if not sum(self.running.values()):
            return True
        others_wait = any(n != name and c for n, c in self.waiting.items())
        return name == self.active and not others_wait

    async def enter(self, name: str | None, count: int) -> None:
        """Wait until `count` requests naming `name` may run, switching the engine to it."""
        async with self._changed:
            self.waiting[name] += count
            try:
                await self._changed.wait_for(lambda: self._may_enter(name))
            finally:
                self.waiting[name] -= count
            if name != self.active:  # none runs: switch (the engine waits for its rows)
                await asyncio.to_thread(self.engine.use_adapter, name)
                self.active = name
            self.running[name] += count

    async def leave(self, name: str | None, count: int) -> None:
        async with self._changed:
            self.running[name] -= count
            self._changed.notify_all()

    def named(self, name: str) -> int:
        """Requests running or waiting that name `name`."""
        return self.running[name] + self.waiting[name]

    async def unload(self, name: str) -> None:
        """Delete adapter `name` (the caller checked no request names it)."""
        async with self._changed:
            await asyncio.to_thread(self.engine.delete_adapter, name)
            if self.active == name:
                self.active = None  # peft leaves the base active
            self._changed.notify_all()


class LoraRoutes:
    """The adapters one `mua serve` registered, and the gate its requests pass."""

    def __init__(self, server) -> None:
        self.server = server
        self.registered: list[str] = []
        self.gate = AdapterGate(server.engine)

    def posts(self) -> dict:
        if not self.server.traits.lora_tensors:
            return {}
        return {lora_endpoints.LOAD_PATH: self.load, lora_endpoints.UNLOAD_PATH: self.unload}

    def load(self, body: Any) -> dict:
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
        add = getattr(self.server.engine, "add_adapter", None)
        if add is None:
            raise Refused("this engine cannot apply LoRA adapters")
        try:
            self.server._run(asyncio.to_thread(add, name, tensors, body["config_dict"]))
        except ValueError as err:
            raise Refused(f"cannot load LoRA adapter {name!r}: {err}") from None
        self.registered.append(name)
        return {"success": True, "message": f"loaded LoRA adapter {name} ({len(tensors)} tensors)"}

    def unload(self, body: Any) -> dict:
        self.server._log("unload_lora_adapter", body)
        name = body.get("lora_name") if isinstance(body, dict) else None
        if name not in self.registered:
            raise Refused(f"LoRA adapter {name!r} is not loaded")
        named = self.server._run(self._count(name))
        if named:
            raise Refused(f"LoRA adapter {name!r} is named by {named} running request(s)")
        self.registered.remove(name)
        self.server._run(self.gate.unload(name))
        return {"success": True, "message": f"unloaded LoRA adapter {name}"}

    async def _count(self, name: str) -> int:
        return self.gate.named(name)

    async def begin(self, body: Any, count: int) -> str | None:
        """Check a /generate body's `lora_path` against the loaded adapters, then wait until the
        engine generates with the adapter it names; the caller calls `end` once answered."""
        name = body.get("lora_path") if isinstance(body, dict) else None
        if isinstance(name, list):
            names = set(name)
            if len(names) != 1:
                raise ProtocolError("mua serve generates one batch with one LoRA adapter")
            name = names.pop()
        if name is not None and name not in self.registered:
            raise ProtocolError(
                f"LoRA adapter {name!r} is not loaded ({self.registered}); load it first"
            )
        if name is None and self.registered:
            raise ProtocolError(
                f"LoRA adapters are loaded ({self.registered}): name one in lora_path"
            )
        await self.gate.enter(name, count)
        return name

    async def end(self, name: str | None, count: int) -> None:
        await self.gate.leave(name, count)
