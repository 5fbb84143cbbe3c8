"""tau tasks as canonical rows: the built-in shop's tasks, or the public tau-bench tasks.

`build_tasks(source=None)` gives the generated built-in tasks (retail layout; train 18, test 9).
`build_tasks(source=PATH, options={"domain": "retail"|"airline"|"all"})` reads the public files
(retail: train 500, dev 20, test 115; airline: test 50) through `data_prep.tau`. The splits are
the public files' own, so `seed` changes nothing. Each task's prompt is the domain policy and the
scripted customer's opening; the payload holds domain, database name, user id, instruction,
gold actions and required outputs (public tasks also record whether the gold actions change
the database, for the do-nothing baseline). A public task names its database "tau-bench", never a
path: the recipe's `gym.options.data_dir` says where the data is (see domains.py). A task whose
user id is not in the database stops prep with one line naming the file and the task.

Deliberately not here: reading/validating the files (data_prep.tau), the database itself (db.py).
"""

from __future__ import annotations

from data_prep import tau as tau_files
from gyms.tau import builtin, domains, reward
from gyms.tau.builtin_tasks import make_task_dicts
from gyms.tau.domains import PUBLIC_DB
from gyms.tau.users import ScriptedCustomer
from mua.errors import UsageError
from mua.gym.api import Task

GYM_NAME = "tau"


def _task(task_id: str, split: str, policy: str, payload: dict, source: str) -> Task:
    opening = "Hi! " + ScriptedCustomer(payload, None).wishes[0]
    prompt = [{"role": "system", "content": policy}, {"role": "user", "content": opening}]
    return Task(
        task_id=task_id, gym=GYM_NAME, split=split, prompt=prompt, payload=payload, source=source
    )


def builtin_tasks() -> dict[str, list[Task]]:
    out: dict[str, list[Task]] = {"train": [], "test": []}
    for i, row in enumerate(make_task_dicts()):
        split = "test" if i % 3 == 2 else "train"
        payload = {"domain": "retail", "db": "builtin", "split": split, "index": i, **row}
        out[split].append(_task(f"tau-builtin-{i:03d}", split, builtin.POLICY, payload, "builtin"))
    return out


def public_tasks(source, domain: str) -> dict[str, list[Task]]:
    folder = tau_files.domain_dir(source, domain)
    policy = tau_files.read_policy(folder)
    base = domains.load_base({"domain": domain, "db": PUBLIC_DB}, {"data_dir": str(folder)})
    toolset = domains.toolset_class({"domain": domain})
    out: dict[str, list[Task]] = {}
    for split, rows in tau_files.read_tasks(folder, domain, set(base.tables["users"])).items():
        for i, row in enumerate(rows):
            payload = {"domain": domain, "db": PUBLIC_DB, "split": split, "index": i, **row}
            # Recorded at prep so the do-nothing baseline needs no database at evaluation time.
            payload["changes_db"] = reward.changes_database(base, toolset, row["actions"])
            task = _task(
                f"tau-{domain}-{split}-{i:03d}", split, policy, payload, f"tau-bench:{domain}"
            )
            out.setdefault(split, []).append(task)
    return out


def build_tasks(source=None, seed: int = 0, options: dict | None = None) -> dict[str, list[Task]]:
    """split -> tasks; built-in when `source` is None, else the public data at `source`."""
    if source is None:
        return builtin_tasks()
    domain = (options or {}).get("domain", "retail")
    if domain == "all":
        merged: dict[str, list[Task]] = {}
        for name in tau_files.DOMAINS:
            for split, tasks in public_tasks(source, name).items():
                merged.setdefault(split, []).extend(tasks)
        return merged
    if domain not in tau_files.DOMAINS:
        raise UsageError(
            f"tau: unknown domain {domain!r}; set gym.options.domain to retail, airline or all"
        )
    return public_tasks(source, domain)
