"""The user seat on travel and tau: the traveller's and the customer's scripted users are fully
faithful against the gyms' experts, the checks find the replies that break the users' rules,
and a seat reply reaches the travel env as the LLM traveller's JSON with the right preference
id. (tau2's seat, with the user's own tools: tests/gyms/test_tau2_user_seat.py.)"""

from __future__ import annotations

import asyncio

import pytest

from gyms.travel.users import LLMTraveller, Preferences
from mua.gym import get_gym
from tests.unit.test_user_seat import replies, run_seat, scripted_seat, tok  # noqa: F401


def test_travel_scripted_traveller_tells_one_preference_per_question(tok):  # noqa: F811
    entry, tasks, trajs = scripted_seat(tok, "travel", 3, 16, "What matters to you")
    task = tasks[0]  # Kyoto: a hotel (2 preferences), then a rental car (2)
    hotel = [p["text"] for p in task.payload["aspects"][0]["preferences"]]
    car = [p["text"] for p in task.payload["aspects"][1]["preferences"]]
    said = [m["content"] for m in trajs[0].messages]
    assert said[1] == "[action] What matters to you about the hotel?"  # no <think> shown
    assert said[2] == hotel[0] and said[4] == hotel[1]
    seat = get_gym("travel").user_seat
    ask_hotel, ask_car = said[1], "[action] And the rental car: what matters there?"
    assert seat.finding([ask_hotel], [hotel[0]], task) is None
    assert "another aspect" in seat.finding([ask_hotel], [car[0]], task)
    assert "told none" in seat.finding([ask_hotel], ["Anything is fine."], task)
    assert "2 preferences" in seat.finding([ask_hotel], [f"{hotel[0]} {hotel[1]}"], task)
    assert "asked about none" in seat.finding(["[action] Great."], [car[1]], task)
    # a paraphrase with most of the preference's words counts; a repeat does not tell a new one
    assert seat.finding([ask_car], ["Well, we plan long drives all over the region."], task) is None
    assert "told none" in seat.finding([ask_hotel, ask_hotel], [hotel[0], hotel[0]], task)
    (careless,) = run_seat(tok, entry, tasks[:1], replies("Okay, sounds good."), max_turns=16)
    assert careless.reward == pytest.approx(0.0)  # every question about an aspect went unanswered


def test_travel_seat_reply_reaches_the_env_with_the_preference_id(tok):  # noqa: F811
    seat = get_gym("travel").user_seat
    task = get_gym("travel").build_tasks(None, seed=0)["train"][0]
    prefs = Preferences(task.payload)
    prefs.revealed.add("0.0")

    class SeatLike:  # what `mua.users.seat_env.SeatClient` does with the policy's reply
        def __init__(self, reply):
            self.reply = reply

        async def complete_json(self, messages, validate=None):
            return validate(seat.as_json(self.reply, messages))

    def respond(reply):
        return asyncio.run(LLMTraveller(SeatLike(reply)).respond("Hotel?", prefs, 0))

    second = prefs.text("0.1")
    assert respond(f"Oh, and {second.lower()}") == (f"Oh, and {second.lower()}", ["0.1"])
    # an already told preference is no new reveal, and plain talk reveals nothing
    assert respond(prefs.text("0.0")) == (prefs.text("0.0"), [])
    assert respond("Not sure yet.") == ("Not sure yet.", [])


def test_tau_scripted_customer_sees_the_envs_own_chat(tok):  # noqa: F811
    entry, tasks, trajs = scripted_seat(tok, "tau", 3, 30, "Instruction: Your ")
    said = [m["content"] for m in trajs[0].messages]
    (own,) = run_seat(tok, entry, tasks[:1], replies("Hi."), 30, options={"rules": "mua"})
    assert own.messages[0]["content"].startswith("You are playing a customer")  # the env's prompt
    assert said[1] == "Hi! How can I help you today?"  # the greeting, before the agent speaks
    assert said[2].startswith("Hi! I want to cancel order #W9430347")
    assert said[-1] == "###STOP###"
    (quitter,) = run_seat(tok, entry, tasks[:1], replies("###STOP###"), max_turns=30)
    # its first ###STOP###, before the agent said anything, is found; its second, after the
    # agent said the order was cancelled, is right
    assert quitter.reward == pytest.approx(0.5)
    seat = get_gym("tau").user_seat
    task = tasks[0]
    opening = "Hi! I want to cancel order #W9430347."
    asked = ["Hi! How can I help you today?", "Could you give me your name and zip code?"]
    ok = "I'm Ada Moreau, zip 70115."
    assert seat.finding(asked, [opening, ok], task) is None
    assert "'70115'" in seat.finding(asked, [opening, "I'm Ada Moreau."], task)
    looking = [asked[0], "Let me look into that for you."]
    assert "before the agent said" in seat.finding(looking, [opening, "###STOP###"], task)
    done = asked + ["Your order has been cancelled successfully."]
    assert seat.finding(done, [opening, ok, "###STOP###"], task) is None
    assert "did not end" in seat.finding(done, [opening, ok, "Thanks a lot!"], task)
