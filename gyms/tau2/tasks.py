"""tau2 tasks from a tau2-bench data folder, as mua task rows, with the published splits.

`build_tasks(source, options={"domain": ...})` reads `tau2/domains/<domain>/tasks.json` and
`split_tasks.json` from the folder the user named (laid out like tau2-bench's `data/`) and
returns every published split (`train`, `test`, `base`; telecom also `small` and `full`).
`domain: all` merges retail, airline and telecom (task ids carry the domain, so they stay
unique). Each row's payload is the tau2 task itself plus its domain; the data folder is not
stored in rows: the recipe's `gym.options.data_dir` says where it is at run time.

Checks, each failing with one line that names the file and the fix: the folder and the
domain's files exist, the JSON parses, tasks have ids and evaluation criteria, the split file
names only known tasks, and the domain's database validates (a data folder of another tau2
version fails here, not in the middle of a run).

Deliberately not here: running tasks (env.py) or scoring them (reward.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from gyms.tau2.domain import DOMAINS, domains_dir, load_domain
from gyms.tau2.prompts import GREETING, system_prompt
from mua.errors import UsageError
from mua.gym.api import Task

GYM_NAME = "tau2"
PUBLISHED = ("retail", "airline", "telecom")


def check_domain(name: str) -> str:
    if name != "all" and name not in DOMAINS:
        raise UsageError(
            f"tau2: unknown domain {name!r}; set --option domain= (or gym.options.domain) to "
            f"one of {', '.join(DOMAINS)} or all"
        )
    return name


def check_data_dir(source) -> Path:
    from gyms.tau2.leaderboard.checkout import data_folder

    root = data_folder(source)
    if not root.is_dir():
        raise UsageError(
            f"tau2: data folder {root} does not exist; point --source (or gym.options.data_dir) "
            "at a tau2-bench checkout or a copy of its data/ folder (holding tau2/domains/)"
        )
    if not domains_dir(root).is_dir():
        raise UsageError(
            f"tau2: {root} has no tau2/domains/ folder; point it at a tau2-bench checkout or "
            "its data/ folder"
        )
    return root


def _read_json(path: Path):
    if not path.is_file():
        raise UsageError(
            f"tau2: missing {path}; the data folder is incomplete (copy tau2-bench v1.0.1's "
            "data/tau2 folder)"
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UsageError(f"tau2: {path} is not valid JSON ({err}); re-copy the file") from err


def read_tasks(root: Path, domain: str) -> tuple[list[dict], dict[str, list[str]]]:
    """(tasks, split name -> task ids) of one domain, checked."""
    spec = load_domain_checked(root, domain)
    folder = spec.domain_dir
    tasks = _read_json(folder / "tasks.json")
    if isinstance(tasks, dict) and "tasks" in tasks:
        tasks = tasks["tasks"]
    if not isinstance(tasks, list):
        raise UsageError(f"tau2: {folder / 'tasks.json'} should hold a list of tasks")
    for i, task in enumerate(tasks):
        if not isinstance(task, dict) or "id" not in task or "user_scenario" not in task:
            raise UsageError(
                f"tau2: task {i} of {folder / 'tasks.json'} has no id or user_scenario; "
                "this is not tau2-bench v1.0.1 data"
            )
        criteria = task.get("evaluation_criteria")
        if criteria is not None and "reward_basis" not in criteria:
            raise UsageError(
                f"tau2: task {task['id']} of {folder / 'tasks.json'} has no reward_basis; "
                "this is not tau2-bench v1.0.1 data"
            )
    splits = _read_json(folder / "split_tasks.json")
    known = {str(t["id"]) for t in tasks}
    for split, ids in splits.items():
        unknown = [i for i in ids if str(i) not in known]
        if unknown:
            raise UsageError(
                f"tau2: split {split!r} of {folder / 'split_tasks.json'} names {len(unknown)} "
                f"task(s) not in tasks.json (first: {unknown[0]}); the two files are of "
                "different versions"
            )
    return tasks, splits


def load_domain_checked(root: Path, domain: str):
    """The domain, with its files present and its database(s) validating."""
    check_domain(domain)
    try:
        spec = load_domain(domain, root)
    except ModuleNotFoundError as err:
        raise UsageError(
            f"tau2: the {domain} domain's code is not in this installation ({err.name} is "
            "missing); choose another domain"
        ) from err
    except FileNotFoundError as err:
        raise UsageError(
            f"tau2: missing {err.filename}; the data folder is incomplete (copy tau2-bench "
            "v1.0.1's data/tau2 folder)"
        ) from err
    for name in spec.required_files:
        if not (spec.domain_dir / name).is_file():
            raise UsageError(
                f"tau2: missing {spec.domain_dir / name}; the data folder is incomplete "
                "(copy tau2-bench v1.0.1's data/tau2 folder)"
            )
    try:
        spec.check_loads()
    except (ValueError, TypeError, KeyError) as err:
        first = str(err).splitlines()[0]
        raise UsageError(
            f"tau2: the {domain} database in {spec.domain_dir} does not load ({first}); "
            "it is not tau2-bench v1.0.1 data"
        ) from err
    return spec


def task_row(domain: str, split: str, task: dict, policy: str, extra=None) -> Task:
    """One row; its prompt is the agent's opening view (system prompt and greeting).

    `extra` (leaderboard.prep.RowExtras) replaces the prompt by tau2's and records the
    checkout's version and commit in the payload."""
    payload = {"domain": domain, "task": task}
    prompt = [
        {"role": "system", "content": system_prompt(policy, False, None)},
        {"role": "assistant", "content": GREETING},
    ]
    if extra is not None:
        prompt = extra.prompt(domain) or prompt
        payload["tau2_checkout"] = extra.checkout
    return Task(
        task_id=f"tau2-{domain}-{task['id']}",
        gym=GYM_NAME,
        split=split,
        prompt=prompt,
        payload=payload,
        source=f"tau2-bench:{domain}",
    )


def build_tasks(source=None, seed: int = 0, options: dict | None = None) -> dict[str, list[Task]]:
    """split -> tasks of the domain named by `options["domain"]` (default retail)."""
    if source is None:
        raise UsageError(
            "tau2 has no built-in tasks; run `mua prep --gym tau2 --source <tau2 data folder> "
            "--option domain=retail|airline|telecom|all`, or give data.test_files"
        )
    from gyms.tau2.leaderboard.prep import row_extras

    for key in options or {}:
        if key not in ("domain", "profile"):
            raise UsageError(
                f"tau2: unknown prep option {key!r}; known: domain=retail|airline|"
                "telecom|telecom-workflow|all, profile=mua|leaderboard"
            )
    domain = check_domain((options or {}).get("domain", "retail"))
    root = check_data_dir(source)
    extra = row_extras(source, (options or {}).get("profile", "mua"))
    out: dict[str, list[Task]] = {}
    for name in PUBLISHED if domain == "all" else (domain,):
        tasks, splits = read_tasks(root, name)
        policy = load_domain(name, root).policy
        by_id = {str(t["id"]): t for t in tasks}
        for split, ids in splits.items():
            out.setdefault(split, []).extend(
                task_row(name, split, by_id[str(i)], policy, extra) for i in ids
            )
    return out
