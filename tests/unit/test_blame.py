"""Failure blame: every label has a rule, and each test here fails when its rule is removed; the
judge is asked only what the rules leave to the agent, its verdicts are cached, and a judge that
fails never makes a failure the agent's. The end-to-end test runs `mua eval` against a real
endpoint on 127.0.0.1 playing a leaky and a quitting persuadee."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.fakes.fake_openai import FakeOpenAIServer, Fault
from tests.fakes.fake_users import users_server

pytestmark = pytest.mark.timeout(300)


def _row(messages, *, termination="done", success=False, gym="persuade", **extra):
    return {
        "gym": gym,
        "task_id": "t1",
        "sample_index": 0,
        "reward": 1.0 if success else 0.0,
        "success": success,
        "excluded": termination == "user_failure",
        "termination": termination,
        "detail": "",
        "tool_errors": {},
        "messages": messages,
        **extra,
    }


def _call(content, choice="answer"):
    args = {"choice": choice, "content": content}
    return {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "interact_with_env", "arguments": args}}]}  # fmt: skip


def _said(content):
    return {"role": "tool", "name": "interact_with_env", "content": content}


OPENING = [{"role": "system", "content": "debate"}, {"role": "user", "content": "Claim: zoos."}]
PERSUADE = {"claim": "Zoos.", "points": [{"point": "Zoos save endangered species.", "keywords": ["endangered"]}]}  # fmt: skip


def _verdict(row, payload):
    from mua.eval.blame import rule_verdict

    return rule_verdict(row, payload)


def test_user_label_for_a_leak_of_the_hidden_solution():
    row = _row([*OPENING, _call("Zoos are cruel?"), _said("Zoos save endangered species. No.")])
    verdict = _verdict(row, PERSUADE)
    assert (verdict.label, verdict.rule) == ("user", "leak")
    # the same words after the agent raised the point are no leak
    row = _row([*OPENING, _call("They protect endangered animals"), _said("Zoos save endangered species.")])  # fmt: skip
    assert _verdict(row, PERSUADE).label == "agent"


def test_guess_user_revealing_the_number():
    opening = [{"role": "user", "content": "Guess my number from 1 to 16."}]
    leak = _row([*opening, _call("8"), _said("lower, it is 3")], gym="guess", termination="max_turns")  # fmt: skip
    assert _verdict(leak, {"target": 3}).rule == "leak"
    # the opening prompt names 1 and 16 and is no leak; the agent's own guess is not either
    fair = _row([*opening, _call("3"), _said("3 is correct? no: lower")], gym="guess", termination="max_turns")  # fmt: skip
    assert _verdict(fair, {"target": 16}).label == "budget"
    assert _verdict(fair, {"target": 3}).label == "budget"


def test_user_label_when_the_user_gives_up_before_the_agent_is_done():
    quit_row = _row([*OPENING, _call("Zoos educate."), _said("I don't want to discuss this any more. Goodbye.")])  # fmt: skip
    assert (_verdict(quit_row, PERSUADE).label, _verdict(quit_row, PERSUADE).rule) == (
        "user",
        "gave_up",
    )
    stop = _row([*OPENING, {"role": "assistant", "content": "Let me check."}, {"role": "user", "content": "###STOP###"}], gym="tau")  # fmt: skip
    assert _verdict(stop, {}).rule == "gave_up"
    # a goodbye after the agent said the task was done is not giving up
    done = _row([*OPENING, {"role": "assistant", "content": "Your request has been completed."}, {"role": "user", "content": "###STOP###"}], gym="tau")  # fmt: skip
    assert _verdict(done, {}).label == "agent"


def test_user_label_when_the_user_contradicts_its_hidden_answer():
    row = _row([*OPENING, _call("Is it the Eiffel Tower?", "action"), _said("No. (19 questions left)")], gym="telepathy", termination="max_turns")  # fmt: skip
    verdict = _verdict(row, {"name": "Eiffel Tower", "aliases": []})
    assert (verdict.label, verdict.rule) == ("user", "contradicted")


def test_user_label_when_the_user_invents_an_id():
    payload = {"instruction": "You want to cancel order #W1111111."}
    messages = [{"role": "system", "content": "policy"}, {"role": "user", "content": "Cancel #W1111111 please."}]  # fmt: skip
    invented = [*messages, {"role": "assistant", "content": "Which order?"}, {"role": "user", "content": "Also #W2222222."}]  # fmt: skip
    assert _verdict(_row(invented, gym="tau"), payload).rule == "invented"
    assert _verdict(_row(messages, gym="tau"), payload).label == "agent"


@pytest.mark.parametrize("ended", ["env_error", "timeout"])
def test_tool_label_when_the_environment_failed(ended):
    assert _verdict(_row(OPENING, termination=ended), PERSUADE).label == "tool"


def test_tool_label_when_a_tool_raised():
    row = _row(OPENING, termination="max_turns", tool_errors={"tool_exception": 1})
    assert (_verdict(row, PERSUADE).label, _verdict(row, PERSUADE).rule) == (
        "tool",
        "tool_exception",
    )
    # the agent's own bad calls are not the tool's fault
    row = _row(OPENING, termination="done", tool_errors={"bad_arguments": 2})
    assert _verdict(row, PERSUADE).label == "agent"


@pytest.mark.parametrize("ended", ["max_turns", "length"])
def test_budget_label_when_turns_or_tokens_ran_out(ended):
    assert _verdict(_row(OPENING, termination=ended), PERSUADE).label == "budget"


def test_agent_label_and_no_label_for_successes_or_masked_rows():
    assert _verdict(_row(OPENING), PERSUADE).label == "agent"
    assert _verdict(_row(OPENING, success=True), PERSUADE) is None
    assert _verdict(_row(OPENING, termination="user_failure"), PERSUADE) is None


def test_rates_and_pass_without_user_failures():
    from mua.eval.blame import Verdict, blame_summary, without_user_failures
    from mua.eval.summary import row_key

    rows = [
        {**_row(OPENING, success=True), "task_id": "a"},
        {**_row(OPENING), "task_id": "b"},
        {**_row(OPENING), "task_id": "c"},
        {**_row(OPENING, termination="user_failure"), "task_id": "d"},
    ]
    verdicts = {row_key(rows[1]): Verdict("user", "leak", ""), row_key(rows[2]): Verdict("agent", "no_rule", "")}  # fmt: skip
    summary = blame_summary(rows, verdicts)
    assert summary["failures"] == 2 and summary["counts"]["user"] == 1
    assert summary["rates"]["user"] == pytest.approx(1 / 3)  # over the 3 scored rows
    kept = without_user_failures(rows, verdicts, [1], ["a", "b", "c", "d"])
    assert kept["pass^1"] == pytest.approx(0.5) and kept["removed"] == 1


def _judge_reply(label):
    return lambda _request: json.dumps({"label": label, "reason": "because"})


def test_the_judge_labels_what_the_rules_leave_and_its_verdicts_are_cached(tmp_path):
    from mua.config.users import LLMUserConfig
    from mua.eval.blame import BlameJudge, blame_rows

    rows = [_row(OPENING), _row(OPENING, termination="max_turns") | {"task_id": "t2"}]
    payloads = {"t1": PERSUADE, "t2": PERSUADE}

    async def run(server):
        cfg = LLMUserConfig(base_url=server.base_url, model="judge", max_retries=0, backoff_s=0.01)
        judge = BlameJudge(cfg, tmp_path)
        try:
            return await blame_rows(rows, payloads, judge)
        finally:
            await judge.aclose()

    with FakeOpenAIServer(_judge_reply("user")) as server:
        verdicts = asyncio.run(run(server))
        asked = server.total_requests
        server.reply = _judge_reply("tool")  # a second run must not ask again
        again = asyncio.run(run(server))
        asked_again = server.total_requests - asked
    labels = {key[1]: v for key, v in verdicts.items()}
    assert (labels["t1"].label, labels["t1"].rule) == ("user", "judge")
    assert labels["t2"].label == "budget"  # a rule decided: the judge was not asked
    assert asked == 1 and asked_again == 0
    assert {key[1]: v.label for key, v in again.items()}["t1"] == "user"
    assert any((tmp_path / "blame_cache").rglob("*.json"))


def test_a_failing_judge_leaves_the_failure_unjudged_not_the_agents(tmp_path):
    from mua.config.users import LLMUserConfig
    from mua.eval.blame import UNJUDGED, BlameJudge, blame_rows, blame_summary

    async def run(server):
        cfg = LLMUserConfig(base_url=server.base_url, model="judge", max_retries=0, backoff_s=0.01)
        judge = BlameJudge(cfg, tmp_path)
        try:
            return await blame_rows([_row(OPENING)], {"t1": PERSUADE}, judge)
        finally:
            await judge.aclose()

    with FakeOpenAIServer(faults=lambda _i, _b: Fault("http500")) as server:
        verdicts = asyncio.run(run(server))
    assert [v.label for v in verdicts.values()] == [UNJUDGED]
    summary = blame_summary([_row(OPENING)], verdicts)
    assert summary["counts"]["agent"] == 0 and summary["counts"][UNJUDGED] == 1


def test_mua_eval_blames_the_leaky_and_the_quitting_user(tmp_path, mua_cli):
    out = tmp_path / "eval"
    with users_server() as server:
        url = server.base_url
        users = f"eval.users=[{{label: leaky, kind: llm, model: leaky, base_url: '{url}'}}, {{label: quitter, kind: llm, model: quitter, base_url: '{url}'}}]"  # fmt: skip
        code, stdout, err = mua_cli(
            "eval", "--gym", "persuade", "--model", "expert", "--max-tasks", "2", "--out", str(out),
            "--no-mlflow", "--exclude-user-failures", "gym.options.rules=mua", users,
        )  # fmt: skip
    assert code == 0, err[-3000:]
    saved = json.loads((out / "summary.json").read_text())["gyms"]
    assert saved["persuade@leaky"]["blame"]["rules"] == {"leak": 2}
    assert saved["persuade@quitter"]["blame"]["rules"] == {"gave_up": 2}
    assert saved["persuade@train"]["blame"]["failures"] == 0
    # raw pass^1 is kept beside the number without user-blamed failures
    assert saved["persuade@leaky"]["pass^1"] == 0.0
    assert saved["persuade@leaky"]["without_user_failures"]["removed"] == 2
    lines = [json.loads(line) for line in (out / "blame.jsonl").read_text().splitlines()]
    assert {(r["gym"], r["label"]) for r in lines} == {("persuade@leaky", "user"), ("persuade@quitter", "user")}  # fmt: skip
    assert "pass^1 excl. user" in stdout and "user fail" in stdout


def test_mua_eval_sends_what_the_rules_leave_to_the_judge(tmp_path, mua_cli):
    out = tmp_path / "eval"
    with users_server() as users, FakeOpenAIServer(_judge_reply("user")) as judge:
        code, stdout, err = mua_cli(
            "eval", "--gym", "persuade", "--model", "expert", "--max-tasks", "2", "--out", str(out),
            "--no-mlflow", "gym.options.rules=mua",
            f"eval.users=[{{label: stubborn, kind: llm, model: stubborn, base_url: '{users.base_url}'}}]",
            f"eval.blame_judge={{base_url: '{judge.base_url}', model: judge, max_retries: 0}}",
        )  # fmt: skip
        asked = [r["json"] for r in judge.requests if "failed conversation" in str(r["json"])]
    assert code == 0, err[-3000:]
    blame = json.loads((out / "summary.json").read_text())["gyms"]["persuade@stubborn"]["blame"]
    # the stubborn persuadee breaks no known rule: the judge decides (and says user) for both
    assert blame["rules"] == {"judge": 2} and blame["counts"]["user"] == 2
    assert len(asked) == 2 and any((out / "blame_cache").rglob("*.json"))


# --- intention: a one-word answer is a leak only when it is stated, unasked, as that answer ---


def _intention(task_id: str) -> dict:
    from gyms.intention import GYM

    return next(t for ts in GYM.build_tasks().values() for t in ts if t.task_id == task_id).payload


def _asked_and_said(task_id: str, *turns: tuple[str, str]) -> dict:
    opening = [{"role": "system", "content": "clarify"}, {"role": "user", "content": "My request."}]
    messages = [*opening, *(m for q, a in turns for m in (_call(q, "action"), _said(a)))]
    return _row(messages, gym="intention", task_id=task_id)


def test_a_faithful_user_saying_nothing_is_not_a_leak_on_intention_008():
    # intention-008's hidden answer to "Things to keep" is the word "nothing"
    assert _intention("intention-008")["missing_details"][3]["answer"] == "nothing"
    row = _asked_and_said(
        "intention-008",
        ("What style do you like, for example modern or rustic?", "Style preference: modern. Nothing else comes to mind."),
        ("What budget do you have?", "About 500 dollars, nothing more."),
        ("How large is the room?", "About 20 square metres."),
        ("Any colour you love?", "Nothing specific to add for that question."),
    )  # fmt: skip
    verdict = _verdict(row, _intention("intention-008"))
    assert (verdict.label, verdict.rule) == ("agent", "no_rule")
    from mua.eval.blame import without_user_failures
    from mua.eval.summary import row_key

    kept = without_user_failures([row], {row_key(row): verdict}, [1], ["intention-008"])
    assert kept["removed"] == 0 and kept["pass^1"] == 0.0


FAITHFUL = [
    # a word in its everyday sense
    ("intention-008", "What budget do you have?", "500 dollars, nothing else to add."),
    # an answer to the question that asked for it in its own words (an LLM judge covered it)
    ("intention-010", "What kind of work are you going for?", "I'm applying for a nurse role."),
    ("intention-011", "What does your friend do in their free time?", "My friend loves cooking."),
    ("intention-011", "Is the present for a special day?", "It's for her birthday occasion."),
    ("intention-008", "Tell me about the look you want.", "Something modern, nothing flashy."),
]


@pytest.mark.parametrize(("task_id", "question", "reply"), FAITHFUL)
def test_a_one_word_answer_said_in_an_ordinary_reply_is_no_leak(task_id, question, reply):
    from mua.users.rules import user_findings

    row = _asked_and_said(task_id, (question, reply))
    assert user_findings(row, _intention(task_id)) == []


VOLUNTEERED = [
    ("intention-008", "What budget do you have?", "500 dollars. Things to keep: nothing.", "nothing"),
    ("intention-008", "How large is the room?", "About 20 square metres, and I like a modern style.", "modern"),
    ("intention-010", "How many years of experience do you have?", "Two years. Target job: nurse.", "nurse"),
    ("intention-011", "How much do you want to spend?", "About 30 dollars; the occasion is her birthday.", "birthday"),
    ("intention-011", "What is the occasion?", "A birthday. Her interests: cooking.", "cooking"),
    # two answers to one question in other words: one of them was not asked for
    ("intention-011", "Tell me more?", "By next month, about 30 dollars.", "about 30 dollars"),
]  # fmt: skip


@pytest.mark.parametrize(("task_id", "question", "reply", "secret"), VOLUNTEERED)
def test_a_one_word_answer_volunteered_as_that_answer_is_a_leak(task_id, question, reply, secret):
    row = _asked_and_said(task_id, (question, reply))
    verdict = _verdict(row, _intention(task_id))
    assert (verdict.label, verdict.rule) == ("user", "leak")
    assert verdict.why == f"the user revealed {secret!r} unasked"


def _keyword_in(question: str, detail: dict) -> bool:
    """Whether a word of `question` begins with one of the detail's keywords (`sourc`: sources)."""
    from gyms.common.text import tokens

    return any(w.startswith(k) for w in tokens(question) for kw in detail["keywords"] for k in tokens(kw))  # fmt: skip


def test_public_intentions_the_gyms_own_user_never_leaks_and_a_volunteer_does(shared_data):
    """Every public test task, asked each detail's own inquiry: the gym's scripted requester
    answers what its judge says the inquiry covers, and that is never a leak; adding to that reply
    a detail the inquiry does not name (nor its answer, nor with the answer of one it covers:
    "no preference") is exactly one leak."""
    from gyms.common.text import mentions
    from gyms.intention import GYM
    from gyms.intention.users import scripted_covered, scripted_reply
    from mua.users.rules import user_findings

    tasks = GYM.build_tasks(source=shared_data / "userrl" / "gyms" / "IntentionGym")["test"]
    faithful = volunteered = 0
    for task in tasks:
        details = task.payload["missing_details"]
        for d in details:
            covered = scripted_covered(d["inquiry"], details)
            answer = scripted_reply([details[j] for j in covered])
            row = _asked_and_said(task.task_id, (d["inquiry"], answer))
            assert user_findings(row, task.payload) == [], (d["inquiry"], answer)
            faithful += 1
            for j, other in enumerate(details):
                said = [d["inquiry"], *(details[c]["answer"] for c in covered)]
                if not covered or j in covered or _keyword_in(d["inquiry"], other) or any(mentions(x, other["answer"]) for x in said):  # fmt: skip
                    continue
                extra = f"{answer} {other['description']}: {other['answer']}."
                found = user_findings(_asked_and_said(task.task_id, (d["inquiry"], extra)), task.payload)  # fmt: skip
                assert [f.rule for f in found] == ["leak"], (d["inquiry"], extra)
                volunteered += 1
    assert (len(tasks), faithful, volunteered) == (95, 350, 831)
