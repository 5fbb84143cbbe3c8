"""Contract tests of the travel gym: scenarios, scoring, the scripted traveller, expert vs random."""

from __future__ import annotations

import asyncio
import json
import random
import statistics

import pytest

from gyms.common.actions import call_action
from gyms.travel import GYM, random_action
from gyms.travel.scenarios import CATALOGUE, make_scenario, satisfies
from mua.families.tool_calls import parse_action
from mua.gym.api import AgentAction, GymContext, Task, ToolCall

MUA = {"rules": "mua"}  # these tests pin the mua rule set; upstream rules: test_travel_upstream.py


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def splits():
    return GYM.build_tasks(None, 0, {"num_train": 20, "num_test": 60})


async def _episode(task: Task, policy, ctx=None, max_turns=30):
    env = GYM.make_env(ctx or GymContext(options=MUA))
    reset = await env.reset(task)
    messages, total, comps = list(reset.messages), 0.0, {}
    for _ in range(max_turns):
        msg = await policy(messages, task)
        calls = [
            ToolCall(c["function"]["name"], c["function"]["arguments"])
            for c in msg.get("tool_calls", [])
        ]
        result = await env.step(AgentAction(text=msg.get("content", ""), tool_calls=calls))
        messages += [msg, *result.messages]
        total += result.reward
        for k, v in result.components.items():
            comps[k] = comps.get(k, 0.0) + v
        if result.done:
            break
    await env.close()
    return total, comps, messages


def test_catalogue_preferences_can_be_met_and_broken():
    for aspect, spec in CATALOGUE.items():
        for attribute, (values, prefs) in spec["attributes"].items():
            for op, value, text in prefs:
                pref = {"attribute": attribute, "op": op, "value": value}
                met = [satisfies({attribute: v}, pref) for v in values]
                assert any(met) and not all(met), (aspect, attribute, op, value)
                assert text and str(value) not in text  # implicit phrasing


def test_scenarios_have_one_cheapest_best_and_decoys_for_every_preference():
    for i in range(150):
        trip = make_scenario(random.Random(i), num_aspects=3, prefs_per_aspect=2, num_options=8)
        assert "hotel" not in [a["name"] for a in trip["aspects"]] or "apartment" not in [
            a["name"] for a in trip["aspects"]
        ]
        for spec in trip["aspects"]:
            opts, prefs = spec["options"], spec["preferences"]
            ok = [o for o in opts if all(satisfies(o, p) for p in prefs)]
            best = min(ok, key=lambda o: o["price"])
            assert spec["best"] == best["id"] and len(ok) >= 2
            assert sorted(spec["acceptable"]) == sorted(o["id"] for o in ok)
            assert len({o["price"] for o in opts}) == len(opts)
            for p in prefs:  # skipping this preference would pick a cheaper wrong option
                decoys = [
                    o
                    for o in opts
                    if not satisfies(o, p) and all(satisfies(o, q) for q in prefs if q is not p)
                ]
                assert any(o["price"] < best["price"] for o in decoys)


def test_build_tasks_is_deterministic_and_splits_differ():
    a = GYM.build_tasks(None, 5, {"num_train": 4, "num_test": 3})
    b = GYM.build_tasks(None, 5, {"num_train": 4, "num_test": 3})
    assert [t.to_row() for t in a["train"]] == [t.to_row() for t in b["train"]]
    assert {len(a["train"]), len(a["test"])} == {4, 3}
    assert a["train"][0].payload != a["test"][0].payload
    c = GYM.build_tasks(None, 6, {"num_train": 4, "num_test": 3})
    assert a["train"][0].payload != c["train"][0].payload


def test_answer_scores_best_acceptable_and_wrong(splits):
    task = splits["test"][0]
    aspects = task.payload["aspects"]
    n = len(aspects)

    async def score(picks):
        env = GYM.make_env(GymContext(options=MUA))
        await env.reset(task)
        rewards = []
        for pick in picks:
            r = await env.step(call_action("answer", pick))
            rewards.append(r.reward)
        return rewards, r.done

    first = aspects[0]
    acceptable = [i for i in first["acceptable"] if i != first["best"]][0]
    wrong = next(o["id"] for o in first["options"] if o["id"] not in first["acceptable"])
    rest = [a["best"] for a in aspects[1:]]
    assert run(score([first["best"], *rest])) == ([pytest.approx(1 / n)] * n, True)
    assert run(score([acceptable, *rest]))[0][0] == pytest.approx(0.8 / n)
    assert run(score([wrong, *rest]))[0][0] == 0.0


def test_bad_answers_are_observations_and_do_not_use_up_the_aspect(splits):
    task = splits["test"][1]
    aspects = task.payload["aspects"]

    async def go():
        env = GYM.make_env(GymContext(options=MUA))
        await env.reset(task)
        other_prefix = next(
            s["prefix"] for a, s in CATALOGUE.items() if a not in [x["name"] for x in aspects]
        )
        outs = [
            await env.step(call_action("answer", f"{other_prefix}1")),
            await env.step(call_action("answer", "")),
            await env.step(
                call_action(
                    "answer", f"{aspects[0]['options'][0]['id']} {aspects[0]['options'][1]['id']}"
                )
            ),
            await env.step(call_action("choose", "x")),
            await env.step(call_action("answer", aspects[0]["best"])),
        ]
        return outs

    outs = run(go())
    for r in outs[:4]:
        assert (
            r.reward == 0
            and not r.done
            and r.info["errors"]
            and "Error" in r.messages[0]["content"]
        )
    assert outs[4].reward == pytest.approx(1 / len(aspects))


def test_search_lists_options_and_scripted_traveller_reveals_on_relevant_questions(splits):
    task = splits["test"][2]
    first = task.payload["aspects"][0]
    name = "rental car" if first["name"] == "car" else first["name"]
    prefs = [p["text"] for p in first["preferences"]]

    async def go():
        env = GYM.make_env(
            GymContext(options=MUA, reward_weights={"search": 0.1, "preference": 0.2})
        )
        await env.reset(task)
        search = await env.step(call_action("search", f"{name} please"))
        q1 = await env.step(call_action("action", f"What do you want in a {name}?"))
        q2 = await env.step(
            AgentAction(text=f"Anything else about the {name}?")
        )  # plain text goes to the user
        q3 = await env.step(call_action("action", f"More about the {name}?"))
        return search, q1, q2, q3

    search, q1, q2, q3 = run(go())
    for o in first["options"]:
        assert f"{o['id']}: ${o['price']}" in search.messages[0]["content"]
    assert search.components == {"search": pytest.approx(0.1 / len(task.payload["aspects"]))}
    assert q1.messages[0]["content"] == prefs[0] and q2.messages[0]["role"] == "user"
    assert q2.messages[0]["content"] == prefs[1]
    total_prefs = sum(len(a["preferences"]) for a in task.payload["aspects"])
    assert q1.components["preference"] == pytest.approx(0.2 / total_prefs)
    assert "preference" not in q3.components and "everything" in q3.messages[0]["content"]


def test_traveller_volunteers_a_preference_after_three_turns_without_a_question(splits):
    task = splits["test"][3]
    first_pref = task.payload["aspects"][0]["preferences"][0]["text"]

    async def go():
        env = GYM.make_env(GymContext(options=MUA))
        await env.reset(task)
        return [await env.step(call_action("search", "nothing useful")) for _ in range(3)]

    outs = run(go())
    assert all(len(r.messages) == 1 for r in outs[:2])
    assert outs[2].messages[-1]["role"] == "user" and outs[2].messages[-1]["content"].startswith(
        "By the way"
    )
    assert first_pref[1:] in outs[2].messages[-1]["content"]
    assert outs[2].info["revealed"] == 1


def test_bracket_text_and_finish(splits):
    task = splits["test"][4]
    best = task.payload["aspects"][0]["best"]

    async def go():
        env = GYM.make_env(GymContext(options=MUA))
        await env.reset(task)
        a = await env.step(AgentAction(text=f"<think>[answer] X9</think>I pick [answer] {best}"))
        b = await env.step(AgentAction(text="[finish]"))
        c = await env.step(call_action("answer", best))
        return a, b, c

    a, b, c = run(go())
    assert (
        a.reward == pytest.approx(1 / len(task.payload["aspects"]))
        and a.messages[0]["role"] == "user"
    )
    assert b.done and c.done and c.reward == 0


def test_expert_scores_high_and_random_low(splits):
    expert = GYM.expert(GymContext(options=MUA))
    expert_rewards = [run(_episode(t, expert))[0] for t in splits["test"]]

    async def random_policy_factory(seed):
        rng = random.Random(seed)

        async def policy(messages, task):
            from mua.families.tool_calls import action_as_message

            return action_as_message(parse_action(random_action(rng)))

        return policy

    random_rewards = [
        run(_episode(t, run(random_policy_factory(i)), max_turns=12))[0]
        for i, t in enumerate(splits["test"])
    ]
    expert_mean, random_mean = statistics.mean(expert_rewards), statistics.mean(random_rewards)
    print(
        f"travel test split (60 tasks): expert mean {expert_mean:.3f}, random mean {random_mean:.3f}"
    )
    assert expert_mean >= 0.95
    assert random_mean <= 0.3


def test_expert_earns_search_and_preference_components_when_weighted(splits):
    ctx = GymContext(options=MUA, reward_weights={"search": 0.1, "preference": 0.1})
    total, comps, _ = run(_episode(splits["test"][5], GYM.expert(ctx), ctx=ctx))
    assert comps["answer"] == pytest.approx(1.0)
    assert comps["search"] == pytest.approx(0.1) and comps["preference"] == pytest.approx(0.1)
    assert total == pytest.approx(1.2)


def test_500_malformed_or_adversarial_actions_raise_nothing(splits):
    rng = random.Random(0)
    junk_args = [
        None,
        7,
        [],
        {"choice": None},
        {"choice": "answer", "content": {"x": 1}},
        "{bad json",
        {"choice": "answer", "content": "H1" * 5000},
        {"choice": "search", "content": "\x00"},
        {"choice": "action", "content": ""},
        {"choice": "action", "extra": 1},
        {"content": "H1"},
    ]

    async def go():
        env = GYM.make_env(GymContext(options=MUA))
        await env.reset(splits["test"][6])
        for i in range(500):
            if i % 3 == 0:
                action = parse_action(random_action(rng))
            elif i % 3 == 1:
                action = AgentAction(
                    text="",
                    tool_calls=[
                        ToolCall(
                            rng.choice(["interact_with_env", "nope", ""]), rng.choice(junk_args)
                        )
                    ],
                )
            else:
                action = AgentAction(
                    text=rng.choice(["", "?" * 300, "[answer]", "[search] car car car"]),
                    parse_errors=["could not read tool call"] if rng.random() < 0.3 else [],
                )
            result = await env.step(action)
            assert isinstance(result.reward, float) and result.messages
            json.dumps(result.messages)
            if result.done:
                await env.reset(splits["test"][6 + i % 5])
        await env.close()

    run(go())
