"""A launched SGLang server answers only mua: the key reaches it in its environment (never on its
command line), `--api-key` is added inside the process before SGLang's `launch_server` runs, and
the client sends the key with every request, from the first health probe on. The stand-in server
(keyed_standin.py) refuses a request without the key, as SGLang's `--api-key` does (every covered
release's parser takes the flag: test_sglang_contract.py). vLLM's side: test_vllm_config.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from mua.engines.sglang import sglang_launch
from tests.conftest import free_port

HERE = Path(__file__).resolve().parent


def test_the_keyed_launch_hands_sglang_the_key_from_the_environment(tmp_path):
    fake = tmp_path / "sglang"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "launch_server.py").write_text(
        "import json, os, sys\n"
        "if __name__ == '__main__':\n"
        "    print(json.dumps([sys.argv[1:], os.environ.get('MUA_SGLANG_API_KEY')]))\n"
    )
    cmd = sglang_launch.launch_command("/models/p", port=31234, mem_fraction=0.4, tp_size=1)
    assert cmd[1:3] == ["-c", sglang_launch.KEYED_LAUNCH] and "--api-key" not in cmd
    env = {"PYTHONPATH": str(tmp_path), sglang_launch.KEY_ENV: "s3cret"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=True)
    argv, left_in_env = json.loads(out.stdout)
    assert argv == [*cmd[3:], "--api-key", "s3cret"] and left_in_env is None


def _status_without_key(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as err:
        return err.code


def test_a_started_server_gets_a_key_and_the_client_sends_it(tmp_path):
    port = free_port()
    engine = sglang_launch.start_server_process(
        [sys.executable, str(HERE / "keyed_standin.py"), str(port)],
        port=port,
        launch_timeout_s=60,
        log_path=str(tmp_path / "standin.log"),
        api_key="s3cret",
    )
    try:
        assert _status_without_key(engine.base_url + "/get_model_info") == 401
        info = asyncio.run(engine._call("GET", "/get_model_info"))
        assert info == {"model_path": "stand-in"}
    finally:
        asyncio.run(engine.close())
