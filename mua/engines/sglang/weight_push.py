"""Weight pushes of the SGLang client: full weights by tensor or disk, and LoRA adapters.

Full weights go bucket by bucket to `/update_weights_from_tensor` (in a session where the release
has them) or as shared-memory shards to `/update_weights_from_disk`; adapters go alone under a
versioned name. `weight_version` rides with the completing request and is read back (docs/
sglang_releases.md). `WeightPushes` is a part of `SGLangEngine` and uses its calls, release
traits, adapter bookkeeping and stats. Not here: HTTP sessions, generation, memory calls.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mua.engines import weight_buckets
from mua.engines.sglang import lora_endpoints, weight_sync
from mua.engines.sglang.http_bodies import check_success
from mua.errors import RunFailure


class WeightPushes:
    """The weight and adapter pushes of `SGLangEngine`."""

    async def update_weights(
        self, named_tensors: Iterable[tuple[str, Any]], weight_version: str | None = None
    ) -> None:
        """Push full weights, bucket by bucket, by the configured path (tensor or disk).

        `weight_version` goes with the request that completes the push (the last bucket, or the
        disk load), so the server never reports it for half-loaded weights; then the server's
        version is read back into `self.weight_version`."""
        if self.weight_path == "disk":
            await self.update_weights_from_disk(named_tensors, weight_version)
            return
        await self.begin_weight_update()
        try:
            buckets = weight_buckets.iter_buckets(named_tensors, self.bucket_mb)
            current = next(buckets, None)
            while current is not None:
                following = next(buckets, None)
                last = following is None
                await self.push_tensor_bucket(
                    current, flush_cache=last, weight_version=weight_version if last else None
                )
                current = following
        finally:
            await self.end_weight_update()
        await self.read_weight_version(weight_version)

    async def load_adapter(
        self,
        name: str,
        named_tensors: Iterable[tuple[str, Any]],
        config: dict,
        weight_version: str | None = None,
    ):
        """Push a LoRA adapter (peft file names, `adapter_config.json` content) under `name`
        and make it live; older versions this client loaded are unloaded once no request of
        this client names them (SGLang itself waits for its running requests).

        `weight_version` is the trainer's version of the adapter. No covered release takes it
        with the load (the server's version stays the base's), so this client keeps it: it
        becomes `self.weight_version`, and each result sampled with the adapter reports it in
        `meta["weight_version"]` (with the adapter's name in `meta["lora_path"]`)."""
        traits = await self.server_traits()
        lora_endpoints.refuse_release(traits.version, f"the SGLang server at {self.base_url}")
        named = [(n, weight_buckets.full_tensor(t)) for n, t in named_tensors]
        body = await asyncio.to_thread(
            lora_endpoints.load_body, name, named, config, traits, self.tp_size
        )
        check_success(await self._call("POST", lora_endpoints.LOAD_PATH, body), self.base_url)
        self.stats["weight_buckets"] += 1
        self.stats["weight_bytes"] += weight_buckets.bucket_bytes(named)
        await self._unload_adapters(self.adapters.adopt(name, weight_version=weight_version))
        if weight_version is not None:
            self.weight_version = str(weight_version)

    def use_adapter(self, name: str, weight_version: str | None = None) -> None:
        """Name `name` (loaded by another client of this server, carrying `weight_version`) in
        this client's requests."""
        self.adapters.adopt(name, loaded=False, weight_version=weight_version)
        if weight_version is not None:
            self.weight_version = str(weight_version)

    async def _unload_adapters(self, names: list[str]) -> None:
        for name in names:
            body = lora_endpoints.unload_body(name)
            check_success(await self._call("POST", lora_endpoints.UNLOAD_PATH, body), self.base_url)

    async def read_weight_version(self, expected: str | None = None) -> str | None:
        """The server's weight version (`/get_model_info`), kept in `self.weight_version`;
        RunFailure when a release that takes versions did not adopt `expected`."""
        traits = await self.server_traits()
        if not traits.weight_version:
            self.weight_version = None
            return None
        info = await self._call("GET", "/get_model_info")
        got = info.get("weight_version") if isinstance(info, dict) else None
        self.weight_version = None if got is None else str(got)
        if expected is not None and self.weight_version != str(expected):
            raise RunFailure(
                f"SGLang server {self.base_url} reports weight_version {got!r} after a push "
                f"that carried {expected!r}; the push did not take effect"
            )
        return self.weight_version

    async def begin_weight_update(self) -> None:
        """Open a weight-update session where the release has them (>= 0.5.21)."""
        if (await self.server_traits()).weight_sessions:
            check_success(await self._call("POST", "/begin_weight_update", {}), self.base_url)

    async def end_weight_update(self) -> None:
        if (await self.server_traits()).weight_sessions:
            check_success(await self._call("POST", "/end_weight_update", {}), self.base_url)

    async def push_tensor_bucket(
        self, bucket: weight_buckets.Bucket, flush_cache: bool, weight_version: str | None = None
    ) -> None:
        """Send one bucket to `/update_weights_from_tensor`; flush the cache after the last one.

        CUDA tensors go only to a server of the trainer's own sglang release: their payload names
        the trainer's rebuild functions, which another release may not have."""
        traits = await self.server_traits()
        if weight_sync.is_cuda_bucket(bucket):
            check_same_release(sglang_version(), traits.version, self.base_url)
        body = await asyncio.to_thread(
            weight_sync.tensor_push_body,
            bucket,
            tp_size=self.tp_size,
            flush_cache=flush_cache,
            weight_version=weight_version if traits.weight_version else None,
        )
        check_success(await self._call("POST", "/update_weights_from_tensor", body), self.base_url)
        self.stats["weight_buckets"] += 1
        self.stats["weight_bytes"] += weight_buckets.bucket_bytes(bucket)

    async def update_weights_from_disk(
        self, named_tensors: Iterable[tuple[str, Any]], weight_version: str | None = None
    ) -> Path:
        """Write shards into a fresh shared-memory folder, have the server load it, remove it."""
        folder = weight_sync.new_weights_dir(self.weights_dir)
        try:
            await asyncio.to_thread(
                weight_sync.write_shards, named_tensors, folder, self.bucket_mb, self.hf_config
            )
            await self.load_weights_from_folder(folder, weight_version)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return folder

    async def load_weights_from_folder(
        self, folder: str | Path, weight_version: str | None = None
    ) -> None:
        body = {"model_path": str(folder), "load_format": None}
        if weight_version is not None and (await self.server_traits()).weight_version:
            body["weight_version"] = str(weight_version)
        check_success(await self._call("POST", "/update_weights_from_disk", body), self.base_url)
        self.stats["weight_buckets"] += 1
        await self.read_weight_version(weight_version)


def sglang_version() -> str | None:
    """The installed SGLang version, or None; never imports sglang itself."""
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def check_same_release(trainer: str | None, server: str, base_url: str) -> None:
    """RunFailure (one line) unless the trainer's sglang release is the server's: a CUDA tensor
    push pickles the trainer's rebuild functions, which the server must have under those names."""
    if trainer != server:
        raise RunFailure(
            f"cannot push CUDA tensors to the SGLang server at {base_url}: it runs sglang {server} "
            f"and this trainer has {trainer or 'no sglang'} installed; install sglang=={server} "
            "in the trainer's environment or use rollout.sglang.weight_path=disk"
        )
