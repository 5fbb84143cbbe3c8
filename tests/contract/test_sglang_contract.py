"""mua's SGLang client checked by SGLang's own code, for every release the project covers.

Each covered release is installed with --no-deps into tests/.sglang/<version>/ by `make test`
(rule `sglang-releases`), next to the few small packages its request, sampling and serializer
modules import (tests/.sglang/deps). This test process never imports sglang: `sglang_probe.py`
runs in a subprocess with those folders on PYTHONPATH (see its docstring for how it loads SGLang's
GPU-server modules on CPU). A missing folder fails the test: it is not skipped.

Per release, one probe run checks:
- every /generate body the client builds (greedy, sampled with a stop token, seeded, the weight
  probe) against GenerateReqInput.normalize_batch_and_arguments() and SamplingParams.verify();
- the weight-update, abort and memory bodies against their request classes;
- a tensor push payload (two TP ranks) deserialized by SGLang's MultiprocessingSerializer in a
  process that is not a child of the sender, giving back the pushed names and values;
- the memory calls of two whole training steps and the close (a leader and a follower rank sharing
  one server, driven through the trainer's EngineSync against `mua serve --sglang-release
  <version>`) run through the scheduler's own release/resume methods, which must not fail; every
  release frees all the release's tags;
- that mua's table of release facts (mua.engines.sglang.releases) matches the release's code, and that the
  /generate keys mua reads are written by the release's tokenizer manager (a source check);
- the finish_reason objects built by the release's own classes, parsed by mua's response parser;
- mua's launch command (`sglang_launch.launch_command`) parsed by the release's own ServerArgs
  CLI parser; with --enable-deterministic-inference it parses exactly where the release has
  seeds (mua refuses the flag itself elsewhere); an unknown flag is refused (control).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mua.engines import weight_probe
from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.sglang import protocol, weight_sync
from mua.engines.sglang.releases import COVERED_RELEASES, ReleaseTraits

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SIDE = REPO / "tests" / ".sglang"
MODEL = "tiny:qwen2-1m"

SENDER = """
import sys, time, torch
from pathlib import Path
from mua.engines.sglang import weight_sync
out = Path(sys.argv[1])
bucket = [("model.embed_tokens.weight", torch.arange(12.0).reshape(3, 4)),
          ("lm_head.bias", torch.full((5,), 0.5, dtype=torch.bfloat16))]
body = weight_sync.tensor_push_body(bucket, tp_size=2, flush_cache=True)
for rank, payload in enumerate(body["serialized_named_tensors"]):
    (out / f"payload{rank}").write_text(payload)
(out / "ready").write_text("1")
while not (out / "done").exists():  # keep the tensors alive until the receiver answered
    time.sleep(0.05)
"""


ARG_KEYS = [
    "model_path",
    "host",
    "port",
    "mem_fraction_static",
    "tp_size",
    "tensor_parallel_size",
    "dtype",
    "enable_memory_saver",
    "enable_deterministic_inference",
    "api_key",
]


def _launch_argvs() -> list[list[str]]:
    """mua's launch command's arguments as `launch_server` reads them (with the `--api-key` that
    KEYED_LAUNCH adds): as launched for this release, with an unknown flag, and with the
    deterministic flag."""
    from mua.engines.sglang.sglang_launch import KEYED_LAUNCH, launch_command

    def argv(*extra: str) -> list[str]:
        cmd = launch_command(
            "/models/policy", port=31234, mem_fraction=0.45, tp_size=2, extra_args=extra
        )
        assert cmd[1:3] == ["-c", KEYED_LAUNCH]
        return [*cmd[3:], "--api-key", "k3y"]

    flag = "--enable-deterministic-inference"
    return [argv(), argv("--no-such-flag"), argv(flag)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _side_folder(version: str) -> Path:
    folder = SIDE / version
    if not (folder / ".installed").is_file() or not (SIDE / "deps" / ".installed").is_file():
        pytest.fail(
            f"SGLang {version} is not installed in {folder}; run `make sglang-releases` "
            "(`make test` does it first)"
        )
    return folder


def _generate_bodies(traits: ReleaseTraits) -> tuple[list[dict], list[dict]]:
    """(bodies the client sends to this release, bodies it must refuse) built by mua's code."""
    greedy = GenerationRequest(
        prompt_ids=[5, 6, 7], sampling=SamplingParams(temperature=0.0, max_new_tokens=8)
    )
    sampled = GenerationRequest(
        prompt_ids=[5, 6, 7, 8],
        request_id="traj-3",
        sampling=SamplingParams(
            temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=16, stop_token_ids=[2], seed=11
        ),
    )
    sent = [
        protocol.generate_body(greedy, rid="mua-weight-probe-a-0"),
        protocol.generate_body(sampled, rid="traj-3-abc-1"),  # a server that ignores seeds
        # a server running with --enable-deterministic-inference, as the client decides it
        protocol.generate_body(sampled, rid="traj-3-abc-2", send_seed=traits.sampling_seed),
    ]
    refused = [] if traits.sampling_seed else [protocol.generate_body(sampled, send_seed=True)]
    return sent, refused


def _training_step_calls(version: str) -> tuple[list[dict], list[str]]:
    """The memory calls of two RL steps (leader and follower sharing one server), as the
    trainer's EngineSync makes them against `mua serve` emulating `version`."""
    from mua.engines.sglang.colocated import SGLangColocated
    from mua.engines.sglang.sglang_engine import SGLangEngine
    from mua.models import load_model
    from mua.serve import serve_model
    from mua.train.engine_sync import EngineSync

    torch.set_num_threads(1)
    model = load_model(MODEL, dtype="float32", seed=0)
    probe = weight_probe.default_probe_ids(model.config.vocab_size)
    server = serve_model(MODEL, sglang_release=version)
    try:
        syncs = [
            EngineSync(
                SGLangColocated(
                    SGLangEngine(server.url, bucket_mb=64), is_leader=leader, probe_ids=probe
                ),
                model,
            )
            for leader in (True, False)
        ]

        async def step() -> None:
            leader, follower = syncs
            await leader.begin()
            await follower.begin()  # its probe runs while the leader's could, rids differ
            await follower.end()
            await leader.end()

        for _ in range(2):
            asyncio.run(step())
        for sync in syncs:
            asyncio.run(sync.close())
        names = [c["call"] for c in server.call_log]
    finally:
        server.stop()
    memory = [
        {"op": c["call"].split("_")[0], "tags": c.get("tags")}
        for c in server.call_log
        if c["call"] in ("release_memory_occupation", "resume_memory_occupation")
    ]
    return memory, names


def _run_probe(folder: Path, job: dict, tmp_path: Path) -> dict:
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(folder), str(SIDE / "deps")]),
        "PYTHONWARNINGS": "ignore",
    }
    proc = subprocess.run(
        [sys.executable, str(HERE / "sglang_probe.py"), str(folder), str(job_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_sglang_release_accepts_what_mua_sends(version, tmp_path):
    folder = _side_folder(version)
    traits = ReleaseTraits.of(version)
    sent, refused = _generate_bodies(traits)
    memory_calls, call_names = _training_step_calls(version)
    version_field = {"weight_version": "3"} if traits.weight_version else {}
    push = weight_sync.tensor_push_body(
        [("w", torch.zeros(2))], tp_size=2, flush_cache=False, **version_field
    )
    requests = [
        ("UpdateWeightsFromTensorReqInput", push),
        (
            "UpdateWeightFromDiskReqInput",
            {"model_path": "/dev/shm/mua-weights-x", "load_format": None, **version_field},
        ),
        ("ReleaseMemoryOccupationReqInput", {"tags": list(traits.memory_tags)}),
        ("ResumeMemoryOccupationReqInput", {"tags": ["weights"]}),
        ("AbortReq", {"rid": "traj-3-abc-1"}),
    ]
    if traits.weight_sessions:
        requests.append(("BeginWeightUpdateReqInput", {}))

    sender = subprocess.Popen(
        [sys.executable, "-c", SENDER, str(tmp_path)], env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "ready").exists():
            assert sender.poll() is None and time.monotonic() < deadline, "the sender failed"
            time.sleep(0.05)
        checks = [
            {"kind": "facts", "side": str(folder)},
            *({"kind": "server_args", "argv": argv, "keys": ARG_KEYS} for argv in _launch_argvs()),
            {"kind": "finish"},
            {"kind": "generate", "bodies": sent + refused, "vocab_size": 1000},
            *({"kind": "request", "cls": cls, "body": body} for cls, body in requests),
            {"kind": "deserialize", "payload_file": str(tmp_path / "payload0")},
            {"kind": "deserialize", "payload_file": str(tmp_path / "payload1")},
            {"kind": "memory", "port": _free_port(), "calls": memory_calls},
            # control: the old first wake (resume weights on a fresh server) kills the scheduler
            {"kind": "memory", "port": 0, "calls": [{"op": "resume", "tags": ["weights"]}]},
            # control: releasing while a request runs (0.5.x asserts idle)
            {
                "kind": "memory",
                "port": 0,
                "calls": [{"op": "busy", "running": 1}, {"op": "release", "tags": None}],
            },
        ]
        out = _run_probe(folder, {"checks": checks}, tmp_path)
    finally:
        (tmp_path / "done").write_text("1")
        sender.wait(timeout=60)
    assert out["version"] == version
    results = iter(out["results"])

    facts = next(results)
    assert sorted(traits.memory_tags) == facts["memory_tags"]
    assert traits.weight_sessions == ("/begin_weight_update" in facts["routes"])
    assert traits.rejects_duplicate_rid == facts["rejects_duplicate_rid"]
    assert traits.sampling_seed == facts["sampling_seed"] == facts["deterministic_flag"]
    assert {"/health", "/abort_request", "/get_server_info"} <= set(facts["routes"])
    assert traits.weight_version == facts["weight_version"]
    read_keys = {"output_ids", "finish_reason", "output_token_logprobs"}  # what the client reads
    assert read_keys <= set(facts["response_keys"]), facts["response_keys"]
    assert traits.weight_version == ("weight_version" in facts["response_keys"])

    launch, unknown_flag, deterministic = (next(results) for _ in range(3))
    assert launch["ok"], launch
    parsed = launch["args"]
    assert parsed["model_path"] == "/models/policy" and parsed["port"] == 31234
    assert parsed["enable_memory_saver"] is True and parsed["mem_fraction_static"] == 0.45
    assert parsed.get("tp_size", parsed.get("tensor_parallel_size")) == 2
    assert parsed["dtype"] == "bfloat16" and parsed["host"] == "127.0.0.1"
    assert parsed["api_key"] == "k3y"  # every release guards its routes with this key
    assert not unknown_flag["ok"] and "--no-such-flag" in unknown_flag["error"], unknown_flag
    # mua refuses deterministic=true itself on a release without the flag (sglang_launch)
    assert deterministic["ok"] == traits.sampling_seed, deterministic

    finish = next(results)
    assert finish["ok"], finish
    parsed_finish = [
        protocol.parse_generate_response(
            {
                "output_ids": [4],
                "meta_info": {"output_token_logprobs": [[-0.5, 4, None]], "finish_reason": reason},
            }
        ).finish_reason
        for reason in finish["reasons"]
    ]
    assert parsed_finish == ["length", "stop", "abort"], finish

    generated = next(results)["results"]
    assert generated[: len(sent)] == [{"ok": True}] * len(sent), generated
    assert all(not r["ok"] and "sampling_seed" in r["error"] for r in generated[len(sent) :])

    for cls, _ in requests:
        built = next(results)
        assert built["ok"], (cls, built)

    for _ in range(2):  # one payload per TP rank, each opened by SGLang's serializer
        got = next(results)
        assert got["ok"], got
        assert [(t["name"], t["shape"], t["sum"]) for t in got["tensors"]] == [
            ("model.embed_tokens.weight", [3, 4], 66.0),
            ("lm_head.bias", [5], 2.5),
        ]

    step = next(results)
    assert step["ok"], (step, memory_calls)
    assert memory_calls and memory_calls[0]["op"] == "release"  # a fresh server: no resume first
    # the run's close resumed everything, leaving the server as a fresh one for the next trainer
    assert step["released"] == [] and memory_calls[-1]["op"] == "resume"
    releases = [c for c in memory_calls if c["op"] == "release"]
    assert all(sorted(c["tags"]) == sorted(traits.memory_tags) for c in releases)
    if traits.weight_sessions:
        assert call_names.count("begin_weight_update") == call_names.count("end_weight_update") > 0

    old_first_wake = next(results)
    assert not old_first_wake["ok"], old_first_wake
    busy_release = next(results)
    assert busy_release["ok"] != traits.release_needs_idle, busy_release
