"""`mua serve`'s weight and memory endpoints, as SGLang's scheduler answers them.

Weight-update sessions (>= 0.5.21), tensor pushes (rank 0's entry read), disk loads, memory
release/resume by tag (engine sleep and wake) and cache flushes. A push moves `weight_version`
only when it succeeded and carries one. `WeightRoutes` is a part of `MuaServer` and uses its
engine, release traits, call log and loop.
Not here: generation, chat, LoRA adapters (`lora_routes`), the HTTP listener.
"""

from __future__ import annotations

from typing import Any

from mua.engines.sglang.protocol import ProtocolError
from mua.serve.refusals import Refused


class WeightRoutes:
    """The weight-update and memory calls of `MuaServer`."""

    def begin_weight_update(self, body: Any) -> dict:
        self._log("begin_weight_update", body)
        if self.weight_session_open:
            raise Refused("a weight-update session is already open; call end_weight_update() first")
        self.weight_session_open = True
        return {"success": True, "message": "Success"}

    def end_weight_update(self, body: Any) -> dict:
        self._log("end_weight_update", body)
        if not self.weight_session_open:
            raise Refused("no weight-update session is open; call begin_weight_update() first")
        self.weight_session_open = False
        return {"success": True, "message": "Success"}

    def update_from_tensor(self, body: Any) -> dict:
        self._log("update_weights_from_tensor", body)
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("serialized_named_tensors"), list)
            or not body["serialized_named_tensors"]
        ):
            raise ProtocolError("serialized_named_tensors must be a non-empty list")
        if body.get("load_format") is not None:
            raise Refused(f"load_format {body['load_format']!r} is not served by mua serve")
        if self.traits.weight_sessions and not self.weight_session_open:
            raise Refused(
                "update_weights_from_tensor must run between begin_weight_update() and "
                "end_weight_update()"
            )
        from mua.engines.sglang.weight_sync import decode_tensors

        # Each tensor-parallel rank reads the entry at its rank; this server is rank 0.
        bucket = decode_tensors(body["serialized_named_tensors"][0])
        self._run(self.engine.update_weights(bucket))
        return self._pushed(f"loaded {len(bucket)} tensors", body)

    def update_from_disk(self, body: Any) -> dict:
        from mua.engines.sglang.weight_sync import read_shards

        self._log("update_weights_from_disk", body)
        if not isinstance(body, dict) or not body.get("model_path"):
            raise ProtocolError(
                "update_weights_from_disk needs model_path (a folder of .safetensors)"
            )
        count = 0
        try:
            for bucket in read_shards(body["model_path"]):
                self._run(self.engine.update_weights(bucket))
                count += len(bucket)
        except FileNotFoundError as err:
            raise ProtocolError(str(err)) from err
        return self._pushed(f"loaded {count} tensors from {body['model_path']}", body)

    def _version_field(self) -> dict:
        return {"weight_version": self.weight_version} if self.traits.weight_version else {}

    def _pushed(self, message: str, body: dict) -> dict:
        """As SGLang: the version moves only when a successful push carries one (a release
        without versions ignores the field)."""
        self.counts["weight_requests"] += 1
        version = body.get("weight_version")
        if version is not None and self.traits.weight_version:
            self.weight_version = str(version)
            message += f" Weight version updated to {version}."
        return {"success": True, "message": message, "num_paused_requests": 0}

    def _tags(self, body: Any) -> set[str]:
        tags = (body or {}).get("tags") if isinstance(body, dict) else None
        tags = set(tags) if tags else set(self.traits.memory_tags)
        unknown = tags - set(self.traits.memory_tags)
        if unknown:
            raise ProtocolError(
                f"unknown memory tags {sorted(unknown)}; SGLang {self.traits.version} knows "
                f"{list(self.traits.memory_tags)}"
            )
        return tags

    def release(self, body: Any) -> dict:
        self._log("release_memory_occupation", body)
        tags = self._tags(body)
        with self._running_lock:
            running = len(self._running)
        if running and self.traits.release_needs_idle:
            raise ProtocolError(
                f"release_memory_occupation should be called only when server is idle "
                f"({running} request(s) running)"
            )
        if "weights" in tags and "weights" not in self.released_tags:
            self._run(self.engine.sleep())
        self.released_tags |= tags
        return {"success": True, "message": f"released {sorted(tags)}"}

    def resume(self, body: Any) -> dict:
        self._log("resume_memory_occupation", body)
        tags = self._tags(body)
        never = tags - self.released_tags
        if never:
            raise ProtocolError(
                f"cannot resume {sorted(never)}: not released (SGLang's scheduler fails here)"
            )
        if "weights" in tags:
            self._run(self.engine.wake())
        self.released_tags -= tags
        return {"success": True, "message": f"resumed {sorted(tags)}"}

    def flush_cache(self) -> dict:
        self.counts["flushes"] += 1
        flush = getattr(self.engine, "flush_cache", None)
        if flush is not None:  # the hf engine's stored prefixes
            self._run(flush())
        return {"success": True, "message": "Cache flushed."}
