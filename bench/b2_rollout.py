"""B2: multi-turn rollout with a slow LLM user - mua's async runner against the ideal engine.

Workload: 64 conversations of 4 user turns, each answered by one agent turn of exactly 32 sampled
tokens (tiny:qwen2-1m, 2 engine threads or 1 on a 2-core machine, fixed seeds). The engine runs
in its own process and speaks SGLang's protocol, as in production: `mua serve` (the hf engine
behind SGLang's native HTTP API), driven through the sglang client
(`mua.engines.sglang.sglang_engine.SGLangEngine`). Every user turn comes from an LLM user served over
HTTP on 127.0.0.1 by the fake OpenAI-compatible server (another process; log-normal latency,
mean 200 ms). As in tau-bench, the simulated user opens the conversation from its scenario, and
the conversation ends with the agent's answer to the 4th user turn.

(a) mua: `run_rollouts` with an env whose user is `LLMClient`; trajectories run independently,
    so one conversation's user wait overlaps others' generation.
(b) turn-sync: all 64 user calls of turn k, then every conversation's agent turn k generated as
    one batch, then turn k+1 (the Search-R1 / MuTIS loop shape).
(c) generation alone: the same prompts and token counts as (b), no user at all.
(d) the ideal engine on the same workload (`bench._b2_bound`): no runner overhead, its step cost
    fitted through this engine's measured seconds per step at 1 row (one conversation replayed
    alone) and at 64 rows (generation alone), both measured in the same round as (a) and (b).

The engine gets cores of its own, as it has its own device in production: `mua serve` runs on
the last THREADS cores and the runner and the user server on the others (when the machine has
more cores than THREADS; the cores are in the notes). Sharing every core, the runner and the
user server waking for each turn preempt the engine, which then runs slower in (a) than in the
generation-only runs the ideal is fitted to: a cost of the benchmark's single machine, not of
the runner.

(b) and (c) replay the prompts and per-turn token counts of one (a) run, so all sample the same
number of tokens from prompts of the same lengths; each replayed conversation extends its own
sampled tokens under its own route key, and every timed run starts from a flushed cache. The stop
token is disabled so each turn samples exactly 32 tokens. Timing: rounds of a b c and one
conversation alone, interleaved, after a warm-up round. A loaded machine slows the engine for
minutes at a time, so each ratio is taken within a round (its two sides measured seconds apart,
(d) fitted to that round's step costs), and the metric is the median over rounds; the worst
round's `wall_vs_ideal` and the 1-minute load average at the start and end are reported too.

Metrics: `wall_vs_ideal` = (a) / (d)'s asynchronous time; `speedup_fraction_of_ideal` = (b)/(a)
divided by the ideal engine's own speed-up over its turn-synchronous loop. Reported as a figure,
with no bar: `runner_cpu_ms_per_turn`, the CPU the runner's process spends per agent turn (chat
templates, tokenization, the drift check, aiohttp to the engine and the user; the engine and the
user are other processes) at the scale of a real step, 32 tasks x 8 samples = 256 conversations,
median of 3 runs after a warm-up. Also reported: `ratio_vs_generation_only` ((a)/(c)) and `speedup_vs_turn_sync` ((b)/(a)).

Where a gap to the ideal comes from: (e) "arrivals alone" replays, right after each (a), that
run's requests with its recorded waits (each conversation's next request sent as long after the
previous answer as in (a)) from a client that does nothing else. The engine then sees (a)'s
arrivals without the runner: `wall_vs_arrivals_alone` = (a)/(e) is the runner's share, and
`arrivals_alone_vs_ideal` = (e)/(d) the engine's own cost of requests that arrive one by one
(each admission is a forward of its own group) that the ideal's step costs do not contain.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import statistics
import subprocess
import sys
import time

from bench.common import cpu_cores, interleaved_rounds, require_same_work, require_work

ID = "B2"
BAR = {
    "wall_vs_ideal": "<= 1.15",
    "speedup_fraction_of_ideal": ">= 0.9",
}

NUM_CONVERSATIONS = 64
SCALE_TASKS, SCALE_SAMPLES = 32, 8  # a real step: 256 conversations
NUM_TURNS = 4
NEW_TOKENS_PER_TURN = 32
USER_LATENCY_MS = 200
ROUNDS = 5  # timed rounds of (a) (b) (c) and one conversation alone, after a warm-up round
MODEL = "tiny:qwen2-1m"
# The engine's torch threads: 2, but 1 on a machine of 2 cores, where the runner and the user
# server need the other core: the engine's two OpenMP threads spin against whatever else runs
# (a linear layer measured 40x slower), so the engine ran at another speed whenever the runner
# was busy than in the generation-only runs its ideal is fitted to. MUA_BENCH_THREADS overrides.
THREADS = int(os.environ.get("MUA_BENCH_THREADS") or (2 if cpu_cores() > 2 else 1))
USER_PROMPT = [{"role": "system", "content": "You are a traveller talking to an agent."}]


class _NoStopEngine:
    """The engine with stop tokens ignored, so every turn samples the full token budget."""

    def __init__(self, engine) -> None:
        self.engine = engine

    async def generate(self, request):
        request.sampling.stop_token_ids = []  # the policy builds a fresh request each turn
        return await self.engine.generate(request)


class _Recording:
    """The engine, remembering each request with the moments it left and its answer came back,
    so that the conversations' arrivals can be replayed without the runner (`_replay_arrivals`)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.start_s = 0.0
        self.calls: list[tuple] = []  # (request, sent, answered), in answer order

    def restart(self) -> None:
        self.start_s, self.calls = time.perf_counter(), []

    async def generate(self, request):
        sent = time.perf_counter()
        result = await self.engine.generate(request)
        self.calls.append((request, sent, time.perf_counter()))
        return result


async def _replay_arrivals(engine, recording: _Recording) -> None:
    """The recorded run's requests, each conversation's next one sent as long after the previous
    answer as in the recording (the user's reply and the runner's work on it): the same
    arrivals at the engine, from a client that does nothing else."""
    conversations: dict[str, list] = {}
    for request, sent, answered in sorted(recording.calls, key=lambda c: c[1]):
        conversations.setdefault(request.route_key, []).append((request, sent, answered))

    async def one(calls) -> None:
        previous = recording.start_s
        for request, sent, answered in calls:
            await asyncio.sleep(sent - previous)
            await engine.generate(copy.deepcopy(request))
            previous = answered

    await asyncio.gather(*(one(calls) for calls in conversations.values()))


class _UserEnv:
    """The LLM user opens from the task's scenario and answers each agent turn; the episode ends
    with the agent's answer to the NUM_TURNS-th user turn."""

    def __init__(self, ctx) -> None:
        self.llm = ctx.llm
        self.turns = 0

    async def reset(self, task):
        from mua.gym.api import ResetResult

        system, scenario = task.prompt
        opening = await self.llm.complete([*USER_PROMPT, scenario])
        return ResetResult(messages=[system, {"role": "user", "content": opening}])

    async def step(self, action):
        from mua.gym.api import StepResult

        self.turns += 1
        if self.turns >= NUM_TURNS:
            return StepResult(done=True, reward=1.0)
        reply = await self.llm.complete(
            [*USER_PROMPT, {"role": "user", "content": action.text[:200]}]
        )
        return StepResult(messages=[{"role": "user", "content": reply}])

    async def close(self) -> None:
        pass


def _tasks(count: int = NUM_CONVERSATIONS):
    from mua.gym.api import Task

    return [
        Task(
            f"c{i}",
            "b2",
            "bench",
            [
                {"role": "system", "content": "You are a helpful travel agent."},
                {"role": "user", "content": f"Scenario {i}: you want help planning a short trip."},
            ],
            {},
        )
        for i in range(count)
    ]


def _start_user_server() -> tuple[subprocess.Popen, str]:
    from tests.fakes.fake_openai import start_server_process

    latency = ["--latency-ms", str(USER_LATENCY_MS), "--latency-dist", "lognormal", "--seed", "0"]
    return start_server_process(*latency, "--max-seconds", "900")


def _user_client(base_url: str, concurrency: int = NUM_CONVERSATIONS):
    from mua.config.users import LLMUserConfig
    from mua.llm.llm_client import LLMClient

    cfg = LLMUserConfig(
        kind="llm",
        base_url=base_url,
        model="sim-user",
        max_concurrency=concurrency,
        timeout_s=30,
        max_retries=2,
    )
    return LLMClient(cfg)


def _turn_workload(trajs) -> list[list[tuple[list[int], int]]]:
    """Per conversation, per turn: (prompt ids before the turn, number of sampled tokens)."""
    workload = []
    for traj in trajs:
        turns = []
        for turn in range(traj.num_turns):
            positions = [i for i, t in enumerate(traj.turn_index) if t == turn]
            start = positions[0]
            turns.append((traj.token_ids[:start], len(positions)))
        workload.append(turns)
    return workload


async def _mua_run(
    engine, tokenizer, base_url: str, num_tasks: int = NUM_CONVERSATIONS, n: int = 1
):
    from mua.config.rollout import RolloutConfig
    from mua.gym.api import GymContext, GymSpec
    from mua.rollout.collect import run_rollouts
    from mua.rollout.policies import EnginePolicy

    conversations = num_tasks * n
    llm = _user_client(base_url, conversations)
    spec = GymSpec(
        name="b2", description="bench", make_env=_UserEnv, build_tasks=lambda *a, **k: {}
    )
    cfg = RolloutConfig(
        n=n,
        max_new_tokens_per_turn=NEW_TOKENS_PER_TURN,
        max_total_tokens=4096,
        max_turns=NUM_TURNS,
        max_concurrency=conversations,
        call_timeout_s=120,
    )
    policy = EnginePolicy(_NoStopEngine(engine), temperature=1.0, seed=0)
    try:
        trajs = await run_rollouts(
            _tasks(num_tasks),
            n=n,
            policy=policy,
            gym_spec=spec,
            gym_ctx=GymContext(user_kind="llm", llm=llm),
            tokenizer=tokenizer,
            rollout_cfg=cfg,
        )
    finally:
        await llm.aclose()
    bad = [t.termination for t in trajs if t.termination != "done"]
    if bad:
        raise RuntimeError(f"{len(bad)} conversation(s) did not finish: {bad[:3]}")
    return trajs


def _next_prompt(conv, turn: int, prompt: list[int], sampled: list[int]) -> list[int]:
    """Turn `turn + 1`'s prompt: this run's prompt and sampled tokens, then the recorded reply tokens."""
    recorded_prompt, recorded_sampled = conv[turn]
    reply = conv[turn + 1][0][len(recorded_prompt) + recorded_sampled :]
    return prompt + sampled + reply


async def _replay(engine, workload, base_url: str | None) -> None:
    """Turn-synchronous replay of `workload`; with a base_url, all user calls precede each turn.

    Each conversation keeps its own sampled tokens (and its route key), so turn k+1 extends turn
    k's prompt exactly as in (a): the engine's prefix reuse helps (b) and (c) as much as (a).
    """
    from mua.engines.engine_contract import GenerationRequest, SamplingParams

    llm = _user_client(base_url) if base_url else None
    prompts = [conv[0][0] for conv in workload]
    try:
        for turn in range(NUM_TURNS):
            if llm is not None:
                asks = [
                    [*USER_PROMPT, {"role": "user", "content": f"turn {turn} of {i}"}]
                    for i in range(len(workload))
                ]
                await asyncio.gather(*(llm.complete(a) for a in asks))
            requests = [
                GenerationRequest(
                    prompt_ids=prompts[i],
                    route_key=f"replay/{i}",
                    sampling=SamplingParams(
                        temperature=1.0, max_new_tokens=conv[turn][1], seed=i * NUM_TURNS + turn
                    ),
                )
                for i, conv in enumerate(workload)
            ]
            results = await asyncio.gather(*(engine.generate(r) for r in requests))
            if turn + 1 < NUM_TURNS:
                prompts = [
                    _next_prompt(conv, turn, prompts[i], results[i].token_ids)
                    for i, conv in enumerate(workload)
                ]
    finally:
        if llm is not None:
            await llm.aclose()


def _split_cores() -> tuple[set[int], set[int]] | None:
    """(the engine's cores, the runner's and the user server's), or None when the machine has
    no more cores than the engine's threads (or no way to pin)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) <= THREADS:
        return None
    return set(cores[-THREADS:]), set(cores[:-THREADS])


def _start_engine_server() -> tuple[subprocess.Popen, str]:
    """`mua serve` for MODEL on a free port, with THREADS torch threads; (process, URL). It
    runs on this process's cores at the time of the call."""
    cmd = [sys.executable, "-m", "mua.cli.main", "serve", "--model", MODEL, "--port", "0"]
    cmd += ["--max-batch-size", str(SCALE_TASKS * SCALE_SAMPLES)]
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "COLUMNS": "200"}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    line = ""
    while "http://" not in line:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            raise RuntimeError("mua serve exited before printing its address")
    return proc, line.split(" at ", 1)[1].split()[0]


def _fresh(engine, fn):
    """Time `fn` from a flushed cache, as after a weight update."""

    def go():
        asyncio.run(engine.flush_cache())
        return fn()

    return go


def _runner_cpu_ms_per_turn(engine, tokenizer, base_url: str, runs: int = 3) -> dict[str, float]:
    """CPU milliseconds this process (the runner: event loop, templates, tokenization, HTTP
    threads) spends per agent turn on 256 conversations; median of `runs` after a warm-up."""
    import time

    per_turn, walls = [], []
    for i in range(runs + 1):
        asyncio.run(engine.flush_cache())
        cpu_s, wall_s = time.process_time(), time.perf_counter()
        trajs = asyncio.run(_mua_run(engine, tokenizer, base_url, SCALE_TASKS, SCALE_SAMPLES))
        cpu_s, wall_s = time.process_time() - cpu_s, time.perf_counter() - wall_s
        if i:
            per_turn.append(cpu_s * 1e3 / sum(t.num_turns for t in trajs))
            walls.append(wall_s)
    return {
        "runner_cpu_ms_per_turn": statistics.median(per_turn),
        "scale_conversations": float(SCALE_TASKS * SCALE_SAMPLES),
        "scale_mua_seconds": statistics.median(walls),
    }


def _ideal_engine(step_s_one_row: float, step_s_full: float) -> dict[str, float]:
    """The reference point: an ideal async engine (bench._b2_bound) whose step costs are this
    engine's, fitted through its measured seconds per step at 1 and 64 rows."""
    from bench._b2_bound import Workload, fit_step_cost, ideal_scores
    from tests.fakes.fake_openai import LATENCY_SIGMA

    fixed_s, per_row_s = fit_step_cost(step_s_one_row, step_s_full, NUM_CONVERSATIONS)
    work = Workload(
        NUM_CONVERSATIONS, NUM_TURNS, NEW_TOKENS_PER_TURN, USER_LATENCY_MS / 1000, LATENCY_SIGMA
    )
    scores = ideal_scores(work, fixed_s, per_row_s)
    return {
        "step_ms_1_row": step_s_one_row * 1e3,
        f"step_ms_{NUM_CONVERSATIONS}_rows": step_s_full * 1e3,
        "ideal_seconds": scores["async_seconds"],
        "ideal_turn_sync_seconds": scores["turn_sync_seconds"],
        "ideal_speedup_vs_turn_sync": scores["speedup_vs_turn_sync"],
        "ideal_ratio_vs_generation_only": scores["ratio_vs_generation_only"],
    }


def _cores_note(split: tuple[set[int], set[int]] | None) -> str:
    if split is None:
        return "sharing every core with the runner"
    engine, runner = (",".join(map(str, sorted(c))) for c in split)
    return f"on core(s) {engine}; runner and user server on {runner}"


def run() -> tuple[dict[str, float], str]:
    from mua.engines.sglang.sglang_engine import SGLangEngine
    from mua.models import load_tokenizer

    # random tiny-model text rarely re-encodes to the same tokens; the drift check still runs
    # (it is part of mua's cost) but its per-trajectory warnings would flood the bench output
    logging.getLogger("mua.rollout").setLevel(logging.ERROR)
    load_start = os.getloadavg()[0]
    tokenizer = load_tokenizer(MODEL)
    split = _split_cores()
    engine_cores, runner_cores = split or (None, None)
    own_cores = os.sched_getaffinity(0) if split else None
    if split:  # a child starts on its parent's cores
        os.sched_setaffinity(0, engine_cores)
    engine_server = server = None
    try:
        engine_server, engine_url = _start_engine_server()
        if split:  # this process (the runner) and the user server
            os.sched_setaffinity(0, runner_cores)
        engine = SGLangEngine(engine_url, max_concurrency=SCALE_TASKS * SCALE_SAMPLES)
        server, base_url = _start_user_server()
        workload = _turn_workload(asyncio.run(_mua_run(engine, tokenizer, base_url)))
        turns = sum(len(conv) for conv in workload)
        require_work(
            ID,
            "mua's first run",
            conversations=len(workload),
            sampled_tokens=sum(n for conv in workload for _, n in conv),
        )
        recording = _Recording(engine)

        def mua_recorded():
            recording.restart()
            trajs = asyncio.run(_mua_run(recording, tokenizer, base_url))
            # each round of (a) does the work the replays (b), (c) repeat
            require_same_work(ID, "turns", mua=sum(t.num_turns for t in trajs), replays=turns)
            return trajs

        rounds = interleaved_rounds(
            {
                "mua": _fresh(engine, mua_recorded),
                "arrivals_alone": _fresh(
                    engine, lambda: asyncio.run(_replay_arrivals(engine, recording))
                ),
                "turn_sync": _fresh(
                    engine, lambda: asyncio.run(_replay(engine, workload, base_url))
                ),
                "generation_only": _fresh(
                    engine, lambda: asyncio.run(_replay(engine, workload, None))
                ),
                "one_conversation": _fresh(
                    engine, lambda: asyncio.run(_replay(engine, workload[:1], None))
                ),
            },
            repeats=ROUNDS,
            warmup=1,
        )
        scale = _runner_cpu_ms_per_turn(engine, tokenizer, base_url)
    finally:
        if own_cores:
            os.sched_setaffinity(0, own_cores)
        for proc in (server, engine_server):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=10)
    load_end = os.getloadavg()[0]
    sampled = sum(n for conv in workload for _, n in conv)
    steps = sum(n for _, n in workload[0])
    # Each round's ratios against the ideal engine fitted to that round's own step costs: the
    # two sides of a ratio are measured seconds apart, under the same load.
    per_round = []
    for r in range(ROUNDS):
        mua, sync, alone = rounds["mua"][r], rounds["turn_sync"][r], rounds["arrivals_alone"][r]
        gen, one = rounds["generation_only"][r], rounds["one_conversation"][r]
        ideal = _ideal_engine(one / steps, gen / steps)
        per_round.append(
            {
                "wall_vs_ideal": mua / ideal["ideal_seconds"],
                "speedup_fraction_of_ideal": (sync / mua) / ideal["ideal_speedup_vs_turn_sync"],
                "ratio_vs_generation_only": mua / gen,
                "arrivals_alone_vs_ideal": alone / ideal["ideal_seconds"],
                "wall_vs_arrivals_alone": mua / alone,
                "speedup_vs_turn_sync": sync / mua,
                "mua_seconds": mua,
                "turn_sync_seconds": sync,
                "generation_only_seconds": gen,
                "arrivals_alone_seconds": alone,
                **ideal,
            }
        )
    median = {k: statistics.median(row[k] for row in per_round) for k in per_round[0]}
    metrics = {
        "wall_vs_ideal": median.pop("wall_vs_ideal"),
        "speedup_fraction_of_ideal": median.pop("speedup_fraction_of_ideal"),
        "runner_cpu_ms_per_turn": scale.pop("runner_cpu_ms_per_turn"),
        **median,
        "wall_vs_ideal_worst_round": max(row["wall_vs_ideal"] for row in per_round),
        "sampled_tokens": float(sampled),
        **scale,
        "load_1min_start": load_start,
        "load_1min_end": load_end,
    }
    notes = (
        f"{NUM_CONVERSATIONS} conversations x {NUM_TURNS} turns x {NEW_TOKENS_PER_TURN} tokens, "
        f"{MODEL}, hf engine behind mua serve (CPU, {THREADS} thread(s), "
        f"{_cores_note(split)}), user latency "
        f"log-normal mean {USER_LATENCY_MS} ms over HTTP; {ROUNDS} rounds of (a), (a)'s "
        f"arrivals replayed alone, (b), (c) and one conversation alone, interleaved after 1 "
        f"warm-up round, ratios taken round by round "
        f"then their median; runner CPU at {SCALE_TASKS} x {SCALE_SAMPLES} conversations; "
        f"1-minute load average {load_start:.1f} at the start, {load_end:.1f} at the end"
    )
    return metrics, notes


if __name__ == "__main__":
    result, note = run()
    print(note)
    for name, value in result.items():
        print(f"{name:28s} {value:.4g}")
