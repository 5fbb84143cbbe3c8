"""tau2-bench v1.0.1's reward for one finished conversation, component by component.

The reward is 0 unless the user or the agent ended the conversation (`user_stop`,
`agent_stop`); a task without evaluation criteria scores 1. Otherwise it is the product, over
the task's `reward_basis`, of:

- DB: the agent-side and user-side database hashes of the *predicted* environment (a fresh
  environment, the task's initial state, then the conversation's state-changing tool calls
  replayed in order, synced after each) equal those of the *gold* environment (a fresh,
  non-solo environment, the initial state, then the task's actions in list order for both
  requestors, failures ignored, not synced after each: tau2's own replay);
- ENV_ASSERTION: every assertion of the task holds on the predicted environment;
- ACTION: every gold action matches some tool call of the conversation (name, and the
  arguments named by `compare_args`, or all the call's arguments when it names none);
- COMMUNICATE: every `communicate_info` string occurs, case-insensitively and with commas
  removed, in some assistant text message;
- NL_ASSERTION: an LLM judge finds every natural-language assertion met (`judge.py`).

`components` are the 0/1 results of the basis components; `details` say why.
Deliberately not here: running the conversation (env.py) or calling the judge (judge.py).
"""

from __future__ import annotations

from gyms.tau2.domain import AGENT, USER, Tau2Domain, Tau2Environment

COMPONENTS = {
    "DB": "db",
    "ENV_ASSERTION": "env_assertion",
    "ACTION": "action",
    "COMMUNICATE": "communicate",
    "NL_ASSERTION": "nl_assertion",
}
ENDED = ("user_stop", "agent_stop")


def gold_environment(domain: Tau2Domain, task: dict) -> Tau2Environment:
    """tau2's gold replay: initial state, then every gold action (no sync between actions)."""
    env = domain.new_environment()
    env.apply_initial_state(task.get("initial_state"))
    for action in (task.get("evaluation_criteria") or {}).get("actions") or []:
        kit = env.toolkit(USER if action.get("requestor") == USER else AGENT)
        kit.call(action["name"], dict(action.get("arguments") or {}))
    return env


def predicted_environment(
    domain: Tau2Domain, task: dict, calls: list[dict], solo: bool = False
) -> Tau2Environment:
    """The conversation's end state: initial state, then its mutating tool calls, synced."""
    env = domain.new_environment(solo=solo)
    env.apply_initial_state(task.get("initial_state"))
    for call in calls:
        if env.has_tool(call["name"]) and env.is_mutating(call["name"]):
            env.tool_call(call.get("requestor", AGENT), call["name"], call.get("arguments") or {})
    env.sync()
    return env


def action_matches(action: dict, call: dict) -> bool:
    if action["name"] != call["name"]:
        return False
    args = call.get("arguments") or {}
    keys = action.get("compare_args")
    keys = list(args) if keys is None else keys
    if not keys:
        return True
    gold = action.get("arguments") or {}
    return {k: v for k, v in args.items() if k in keys} == {
        k: v for k, v in gold.items() if k in keys
    }


def communicated(info: str, assistant_texts: list[str]) -> bool:
    return any(info.lower() in text.lower().replace(",", "") for text in assistant_texts)


def run_assertions(env: Tau2Environment, assertions: list[dict]) -> list[dict]:
    out = []
    for a in assertions:
        try:
            met = env.run_assertion(
                a.get("env_type", AGENT),
                a["func_name"],
                a.get("arguments") or {},
                a.get("assert_value", True),
            )
            out.append({"func_name": a["func_name"], "met": met})
        except Exception as exc:  # noqa: BLE001 - a broken assertion is a failed one, reported
            out.append({"func_name": a["func_name"], "met": False, "error": str(exc)})
    return out


def score(
    domain: Tau2Domain,
    task: dict,
    calls: list[dict],
    assistant_texts: list[str],
    termination: str,
    nl_results: list[bool] | None = None,
    solo: bool = False,
    skip: tuple[str, ...] = (),
) -> tuple[float, dict[str, float], dict]:
    """(reward, components, details) of a conversation ended by `termination`.

    `calls`: every tool call of the conversation in order, each `requestor`, `name`,
    `arguments`. `nl_results`: the judge's verdict per NL assertion (None when not judged).
    `skip`: basis components left out on purpose (the judge-free basis); the details say so.
    """
    criteria = task.get("evaluation_criteria")
    if termination not in ENDED:
        return 0.0, {}, {"note": f"conversation not ended by user or agent ({termination})"}
    if criteria is None:
        return 1.0, {}, {"note": "no evaluation criteria"}
    basis = [b for b in criteria.get("reward_basis") or [] if b not in skip]
    details: dict = {"reward_basis": basis, "skipped": list(skip)}
    results: dict[str, float] = {}
    actions = criteria.get("actions")
    assertions = criteria.get("env_assertions")
    if {"DB", "ENV_ASSERTION"} & set(basis):
        if actions is None and assertions is None:
            db_ok, checks = True, []
        else:
            predicted = predicted_environment(domain, task, calls, solo=solo)
            gold = gold_environment(domain, task)
            db_ok = (predicted.db_hash(), predicted.user_db_hash()) == (
                gold.db_hash(),
                gold.user_db_hash(),
            )
            checks = run_assertions(predicted, assertions or [])
        details["db_match"] = db_ok
        details["env_assertions"] = checks
        results["DB"] = float(db_ok)
        results["ENV_ASSERTION"] = float(all(c["met"] for c in checks))
    if "ACTION" in basis:
        found = [any(action_matches(a, c) for c in calls) for a in actions or []]
        details["action_checks"] = found
        results["ACTION"] = float(all(found))
    if "COMMUNICATE" in basis:
        infos = criteria.get("communicate_info") or []
        found = [communicated(i, assistant_texts) for i in infos]
        details["communicate_checks"] = found
        results["COMMUNICATE"] = float(all(found))
    if "NL_ASSERTION" in basis:
        if criteria.get("nl_assertions"):
            if nl_results is None:
                raise ValueError("NL_ASSERTION in the basis but no judge verdicts were given")
            details["nl_assertions"] = list(nl_results)
            results["NL_ASSERTION"] = float(all(nl_results))
        else:
            results["NL_ASSERTION"] = 1.0
    reward = 1.0
    components = {}
    for name in basis:
        reward *= results[name]
        components[COMPONENTS[name]] = results[name]
    return reward, components, details
