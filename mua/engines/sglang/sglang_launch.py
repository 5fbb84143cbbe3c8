"""Launching a real SGLang server for the trainer, and waiting until it is ready.

`launch_sglang_server` builds SGLang's `launch_server` command (memory saver on; deterministic
inference when seeds must be honoured) and starts it with a fresh random key that travels in the
environment (`$MUA_SGLANG_API_KEY`, added inside the process by `KEYED_LAUNCH`), never on the
command line. `start_server_process` runs it without torchrun's variables (`server_env()`) and
polls `/health` (else `/get_model_info`) until 200 (docs/sglang.md).
Not here: the protocol client (`mua.engines.sglang.sglang_engine`).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from mua.engines.sglang.releases import ReleaseTraits
from mua.engines.sglang.sglang_engine import ServerHTTPError, SGLangEngine, sglang_version
from mua.errors import RunFailure

KEY_ENV = "MUA_SGLANG_API_KEY"
# `python -m sglang.launch_server ARGS --api-key $MUA_SGLANG_API_KEY`, the key kept off the
# command line (the server's own processes get it from ServerArgs, not from the environment)
KEYED_LAUNCH = (
    "import os, runpy, sys; "
    f"sys.argv += ['--api-key', os.environ.pop('{KEY_ENV}')]; "
    "runpy.run_module('sglang.launch_server', run_name='__main__', alter_sys=True)"
)


def launch_command(
    model_path: str,
    *,
    port: int,
    mem_fraction: float,
    tp_size: int,
    dtype: str = "bfloat16",
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of a co-located rollout server: SGLang's `launch_server` with these
    arguments and the key of $MUA_SGLANG_API_KEY (`KEYED_LAUNCH`)."""
    return [
        sys.executable,
        "-c",
        KEYED_LAUNCH,
        "--model-path",
        model_path,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--mem-fraction-static",
        str(mem_fraction),
        "--tp-size",
        str(tp_size),
        "--dtype",
        dtype,
        # release/resume_memory_occupation only work with the memory saver enabled
        "--enable-memory-saver",
        *extra_args,
    ]


# Variables torchrun and its elastic agent set for the trainer's workers. A server started from a
# worker must not see them: with TORCHELASTIC_USE_AGENT_STORE=True SGLang's own
# init_process_group("tcp://127.0.0.1:PORT") opens its store as a client of a master that never
# comes, and hangs.
_LAUNCHER_VARIABLES = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "OMP_NUM_THREADS",
}
_LAUNCHER_PREFIXES = ("TORCHELASTIC_", "GROUP_", "ROLE_", "MASTER_")


def server_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a launched server gets: the trainer's, less torchrun's variables (and
    SGLANG_RETURN_ORIGINAL_LOGPROB, which would change what the log-probs mean)."""
    environ = dict(os.environ if environ is None else environ)
    return {
        k: v
        for k, v in environ.items()
        if k not in _LAUNCHER_VARIABLES
        and not k.startswith(_LAUNCHER_PREFIXES)
        and k != "SGLANG_RETURN_ORIGINAL_LOGPROB"
    }


def wait_until_ready(
    engine: SGLangEngine,
    process: subprocess.Popen | None,
    deadline: float,
    log_file: Path | None = None,
) -> None:
    """Poll `/health` until it answers 200 (SGLang answers 503 while starting); a server without
    `/health` (404) is polled on `/get_model_info` instead. Runs its own event loop (call it
    where none runs); `TimeoutError` past `deadline`."""
    asyncio.run(_poll_until_ready(engine, process, deadline, log_file))


async def _poll_until_ready(
    engine: SGLangEngine,
    process: subprocess.Popen | None,
    deadline: float,
    log_file: Path | None,
) -> None:
    path = "/health"
    try:
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                tail = log_file.read_text(errors="replace").splitlines()[-5:] if log_file else []
                raise RunFailure(
                    f"SGLang exited with code {process.returncode} while starting "
                    f"(log {log_file}): {' | '.join(tail)}"
                )
            try:
                await engine._call("GET", path, timeout_s=5)
                return
            except ServerHTTPError as err:
                if err.status == 404 and path == "/health":
                    path = "/get_model_info"
                    continue
            except RunFailure:
                pass
            await asyncio.sleep(1)
        raise TimeoutError
    finally:
        await engine.close_connections()


def start_server_process(
    cmd: Sequence[str],
    *,
    port: int,
    launch_timeout_s: float = 900.0,
    log_path: str | None = None,
    api_key: str | None = None,
    **engine_kwargs,
) -> SGLangEngine:
    """Run `cmd` (a server speaking SGLang's protocol on `port`) with `server_env()` and, given
    `api_key`, the key in $MUA_SGLANG_API_KEY; wait until it is ready, and return an engine
    driving it (sending the key)."""
    log_file = Path(log_path or f"sglang-{port}.log")
    env = server_env()
    if api_key is not None:
        env[KEY_ENV] = api_key
    with open(log_file, "ab") as log:
        process = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=env)
    engine = SGLangEngine(
        f"http://127.0.0.1:{port}", process=process, api_key=api_key, **engine_kwargs
    )
    try:
        wait_until_ready(engine, process, time.monotonic() + launch_timeout_s, log_file)
    except TimeoutError:
        process.kill()
        raise RunFailure(
            f"SGLang was not ready on port {port} within {launch_timeout_s:.0f}s "
            f"(log {log_file}); raise rollout.sglang.launch_timeout_s or read the log"
        ) from None
    return engine


def launch_sglang_server(
    model_path: str,
    *,
    port: int = 30000,
    mem_fraction: float = 0.5,
    tp_size: int = 1,
    dtype: str = "bfloat16",
    deterministic: bool = False,
    extra_args: Sequence[str] = (),
    launch_timeout_s: float = 900.0,
    log_path: str | None = None,
    **engine_kwargs,
) -> SGLangEngine:
    """Start SGLang as a subprocess with a fresh random key, wait until it is ready, and return
    an engine driving it."""
    version = sglang_version()
    if version is None:
        raise RunFailure(
            "rollout.engine=sglang needs SGLang, which is not installed; on a CUDA "
            "machine run `pip install 'mua[gpu]'`, or use rollout.engine=hf"
        )
    if deterministic and not ReleaseTraits.of(version).sampling_seed:
        raise RunFailure(
            f"rollout.sglang.deterministic needs SGLang >= 0.5.3 (installed: {version}); "
            "upgrade SGLang or set rollout.sglang.deterministic=false (seeds are then best-effort)"
        )
    cmd = launch_command(
        model_path,
        port=port,
        mem_fraction=mem_fraction,
        tp_size=tp_size,
        dtype=dtype,
        extra_args=[*(["--enable-deterministic-inference"] if deterministic else []), *extra_args],
    )
    return start_server_process(
        cmd,
        port=port,
        launch_timeout_s=launch_timeout_s,
        log_path=log_path,
        api_key=secrets.token_urlsafe(32),
        tp_size=tp_size,
        **engine_kwargs,
    )
