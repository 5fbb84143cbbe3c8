"""Start and stop SGLang's real HTTP server of a covered release on CPU, for the contract tests.

The server runs in its own process group with PYTHONPATH set to the release's side folder
(tests/.sglang/<version>), the server's dependencies (tests/.sglang/server-deps), the small
packages of tests/.sglang/deps, this folder (the stand-in scheduler) and real_server_site (its
start-up file; plus its `no_cuda_kernels` folder for releases that import CUDA kernels at import
time). Nothing here is on mua's path: the test process only speaks HTTP to it.
See real_sglang_server.py and standin_scheduler.py for what is real and what stands in.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.conftest import free_port

HERE = Path(__file__).resolve().parent
SIDE = HERE.parents[1] / "tests" / ".sglang"
SITE = HERE / "real_server_site"
# keep equal to the Makefile's SGLANG_SERVER_RELEASES
SERVER_RELEASES = ("0.5.5.post3", "0.5.23")
# releases whose server imports sgl_kernel at import time
NEEDS_KERNEL_STAND_IN = {"0.5.5.post3"}


def side_path(version: str) -> str:
    folders = [SIDE / version, SIDE / "server-deps", SIDE / "deps"]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise RuntimeError(
            f"SGLang side folders missing: {missing}; run `make sglang-releases` (make test does)"
        )
    extra = [SITE / "no_cuda_kernels"] if version in NEEDS_KERNEL_STAND_IN else []
    return os.pathsep.join(map(str, [*folders, HERE, SITE, *extra]))


class RealServer:
    """One real SGLang server process; `url` once started, `log` its output file."""

    def __init__(self, version: str, model_dir: Path, log: Path):
        self.version, self.log = version, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "PYTHONPATH": side_path(version),
            "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONWARNINGS": "ignore",
        }
        self.started = time.monotonic()
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "real_sglang_server.py"),
                    str(model_dir),
                    str(self.port),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def wait_ready(self, timeout_s: float = 300) -> float:
        """Poll /health until 200 (after the release's warm-up); seconds since the start."""
        deadline = self.started + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"SGLang {self.version} server exited:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        return time.monotonic() - self.started
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(
            f"SGLang {self.version} server not ready in {timeout_s} s:\n{self.tail()}"
        )

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=20)
