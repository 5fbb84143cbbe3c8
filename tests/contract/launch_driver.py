"""Run under torchrun by the contract tests: launch the stand-in server through mua's real
launcher and report whether it was ready (its /health answering 200) when the launcher returned.

Usage: torchrun --nproc_per_node 1 launch_driver.py HTTP_PORT STORE_PORT MODE
"""

from __future__ import annotations

import asyncio
import os
import sys
import urllib.request
from pathlib import Path

from mua.engines.sglang.sglang_launch import start_server_process


def main() -> None:
    http_port, store_port, mode = sys.argv[1:4]
    assert os.environ.get("TORCHELASTIC_RUN_ID"), "run this under torchrun"
    standin = Path(__file__).with_name("standin_server.py")
    engine = start_server_process(
        [sys.executable, str(standin), http_port, store_port, mode],
        port=int(http_port),
        launch_timeout_s=45,
        log_path=os.environ.get("STANDIN_LOG"),
    )
    try:
        path = "/health" if mode == "health" else "/get_model_info"
        with urllib.request.urlopen(engine.base_url + path, timeout=10) as resp:
            print(f"READY {path} {resp.status}", flush=True)
    finally:
        asyncio.run(engine.close())


if __name__ == "__main__":
    main()
