"""Training data: task sampling for RL (one file or a weighted mix) and conversation data for SFT.

`TaskSampler` deals tasks in seeded per-epoch shuffles, its position one integer (`consumed`) in
checkpoints; every rank builds the same order and `rank_slice` takes its share. SFT samples come
from JSONL or parquet (`token_ids` + `loss_mask`, or `messages`), loss on assistant tokens only.
`check_data_files` reads every data file in the launcher, so bad data is one line naming file and
row (exit 2). Not here: rollouts, torch.distributed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mua.errors import UsageError
from mua.gym.api import Task
from mua.jsonl import jsonl_objects


class TaskSampler:
    def __init__(
        self, files: list[list[Task]], weights: list[float] | None, seed: int, shuffle: bool = True
    ):
        if not files or not any(files):
            raise UsageError(
                "data.train_files: no tasks found; give task parquet files from `mua prep`"
            )
        self.files = files
        self.weights = weights
        self.seed = seed
        self.shuffle = shuffle
        self.epoch_len = sum(len(f) for f in files)
        self.consumed = 0
        self._cache: tuple[int, list[Task]] | None = None

    def _perm(self, n: int, gen) -> list[int]:
        import torch

        return torch.randperm(n, generator=gen).tolist() if self.shuffle else list(range(n))

    def _epoch_order(self, epoch: int) -> list[Task]:
        if self._cache and self._cache[0] == epoch:
            return self._cache[1]
        import torch  # here, so the launcher can check data files without importing torch

        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        if self.weights is None:
            flat = [t for f in self.files for t in f]
            order = [flat[i] for i in self._perm(len(flat), gen)]
        else:
            w = torch.tensor(self.weights, dtype=torch.float64)
            picks = torch.multinomial(w, self.epoch_len, replacement=True, generator=gen).tolist()
            perms = [self._perm(len(f), gen) for f in self.files]
            cursor = [0] * len(self.files)
            order = []
            for fi in picks:
                f = self.files[fi]
                order.append(f[perms[fi][cursor[fi] % len(f)]])
                cursor[fi] += 1
        self._cache = (epoch, order)
        return order

    @property
    def epoch(self) -> int:
        return self.consumed // self.epoch_len

    def next_tasks(self, k: int) -> list[Task]:
        out = []
        for _ in range(k):
            epoch, pos = divmod(self.consumed, self.epoch_len)
            out.append(self._epoch_order(epoch)[pos])
            self.consumed += 1
        return out

    def state_dict(self) -> dict:
        return {"consumed": self.consumed}

    def load_state_dict(self, state: dict) -> None:
        self.consumed = int(state["consumed"])


def rank_slice(items: list, rank: int, world_size: int) -> list:
    """A rank's share: strided so every rank gets the same count when it divides evenly."""
    return items[rank::world_size]


def cap_files(files: list[list[Task]], max_tasks: int) -> list[list[Task]]:
    """The first `max_tasks` tasks over the files in order, files left empty dropped."""
    left = max_tasks
    trimmed = []
    for f in files:
        trimmed.append(f[:left])
        left = max(0, left - len(trimmed[-1]))
    return [f for f in trimmed if f] or files[:1]


@dataclass
class SFTSample:
    token_ids: list[int]
    loss_mask: list[int]


def _rows_of(path: Path) -> list[dict]:
    if not path.exists():
        raise UsageError(f"{path}: SFT data file not found; write one with `mua rollout`")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        from mua.gym.taskfile import utf8_rows

        try:
            table = pq.read_table(path)
        except Exception as e:
            raise UsageError(f"{path}: not a readable parquet file ({e})") from None
        return utf8_rows(table, path)
    return [row for _, row in jsonl_objects(path, "one conversation object per line")]


def _sft_row_problem(row: dict) -> str | None:
    if row.get("token_ids") is not None and row.get("loss_mask") is not None:
        if len(row["token_ids"]) != len(row["loss_mask"]):
            return "token_ids and loss_mask differ in length"
        return None
    messages = row.get("messages")
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except ValueError as e:
            return f"messages is not valid JSON ({e})"
    if not messages:
        return "needs `token_ids` + `loss_mask` or a non-empty `messages` (as written by `mua rollout`)"
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages
    ):
        return "messages must be a list of chat messages with a role"
    return None


def check_data_files(recipe) -> None:
    """Read every train/test file of `recipe` and refuse bad data (see the module docstring)."""
    from mua.gym.taskfile import read_tasks

    if recipe.algo.kind == "sft":
        for p in recipe.data.train_files:
            rows = _rows_of(Path(p))
            if not rows:
                raise UsageError(f"{p}: holds no conversations; write SFT data with `mua rollout`")
            for i, row in enumerate(rows):
                problem = _sft_row_problem(row)
                if problem:
                    raise UsageError(f"{p}: row {i}: {problem}")
        return
    for p in recipe.data.train_files:
        if not read_tasks(p):
            raise UsageError(
                f"{p}: holds no tasks; give a non-empty task file from `mua prep` in data.train_files"
            )
    seen: dict[tuple[str, str], str] = {}
    for p in recipe.data.test_files:  # held-out tasks are keyed by id across files
        for task in read_tasks(p):
            key = (task.gym, task.task_id)
            if key in seen:
                raise UsageError(
                    f"{p}: task_id {task.task_id!r} is also in {seen[key]}; held-out task ids "
                    "must be unique across data.test_files"
                )
            seen[key] = str(p)


def render_assistant_mask(tokenizer, messages: list[dict], tools: list | None = None) -> SFTSample:
    """Render a conversation and mark the tokens of assistant turns (content + end marker)."""
    kw = {"tools": tools} if tools else {}
    text = tokenizer.apply_chat_template(messages, tokenize=False, **kw)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = []
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant":
            continue
        start = len(
            tokenizer.apply_chat_template(
                messages[:i], tokenize=False, add_generation_prompt=True, **kw
            )
        )
        end = len(tokenizer.apply_chat_template(messages[: i + 1], tokenize=False, **kw))
        spans.append((start, end))
    mask = [int(any(s <= a < e for s, e in spans)) for a, _ in enc["offset_mapping"]]
    return SFTSample(list(enc["input_ids"]), mask)


def load_sft_samples(paths: list[str], tokenizer, max_tokens: int | None = None) -> list[SFTSample]:
    samples = []
    for p in paths:
        path = Path(p)
        for i, row in enumerate(_rows_of(path)):
            problem = _sft_row_problem(row)
            if problem:
                raise UsageError(f"{path}: row {i}: {problem}")
            if row.get("token_ids") is not None and row.get("loss_mask") is not None:
                s = SFTSample(list(row["token_ids"]), [int(x) for x in row["loss_mask"]])
            else:
                msgs = row["messages"]
                msgs = json.loads(msgs) if isinstance(msgs, str) else msgs
                s = render_assistant_mask(tokenizer, msgs, row.get("tools"))
            if max_tokens:
                s = SFTSample(s.token_ids[:max_tokens], s.loss_mask[:max_tokens])
            if sum(s.loss_mask):
                samples.append(s)
    if not samples:
        raise UsageError(
            f"data.train_files {paths}: no conversation with assistant tokens to train on"
        )
    return samples
