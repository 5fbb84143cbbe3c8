"""tau customers: a deterministic scripted one and one played by an LLM.

Both have `start() -> opening message` and `reply(agent_text) -> message` (async). A reply
containing `###STOP###` ends the episode.

The scripted customer knows the facts of its task: name, zip code, email and user id (from
the instruction, falling back to its own profile in the database), the order/reservation ids,
and one "wish" per gold database-changing action, stated with the exact ids and values the
gold call uses. It answers by keyword: identity questions get identity facts, id questions
get ids, a request for confirmation gets "yes", anything else gets the next unstated wish, and
a message announcing completion gets `###STOP###`. It cannot judge whether the agent's
statements are true, follow free-form reasoning, or refuse things its instruction forbids.

The LLM customer is prompted with the task instruction and talks through `GymContext.llm` (a
`JudgeClient`); its failures (`UserFailure`) propagate to the runner. Its system prompt follows
the rules: `upstream` gives tau-bench's simulator rules (the same six, in mua's words, and only a
satisfied goal ends the conversation); `mua` gives mua's shorter variant, which also ends the
conversation when the goal cannot be achieved.

Deliberately not here: episode control and reward (env.py, reward.py).
"""

from __future__ import annotations

import re

from mua.gym.api import JudgeClient, UserFailure

STOP = "###STOP###"
_DONE = re.compile(
    r"\b(has been|have been|successfully|is now|are now|completed|all set|all done|is done|processed your|"
    r"cannot be cancel|can't be cancel|can not be cancel|unable to cancel|not able to cancel)\b",
    re.I,
)
_CONFIRM = re.compile(
    r"\b(confirm|proceed|shall i|should i|would you like me to|do you want me to|yes/no|go ahead)\b",
    re.I,
)


def announces_done(agent_text: str) -> bool:
    """Whether an agent message says the work is done, or that it cannot be done."""
    return bool(_DONE.search(agent_text or ""))


def _describe(action: dict) -> str | None:
    """One sentence stating what a gold database-changing call asks for, or None for lookups."""
    name, kw = action["name"], action.get("kwargs", {})

    def ids(key: str) -> str:
        return ", ".join(str(x) for x in kw.get(key, []))

    def addr() -> str:
        return ", ".join(
            str(kw.get(k, "")) for k in ("address1", "address2", "city", "state", "zip", "country")
        )

    templates = {
        "cancel_pending_order": lambda: (
            f"I want to cancel order {kw.get('order_id')}; the reason is: {kw.get('reason')}."
        ),
        "modify_pending_order_address": lambda: (
            f"Please ship order {kw.get('order_id')} to {addr()}."
        ),
        "modify_user_address": lambda: f"Please change my default address to {addr()}.",
        "modify_pending_order_payment": lambda: (
            f"I want to pay for order {kw.get('order_id')} with {kw.get('payment_method_id')}."
        ),
        "modify_pending_order_items": lambda: (
            f"In order {kw.get('order_id')} please change item(s) {ids('item_ids')} to {ids('new_item_ids')}, using {kw.get('payment_method_id')} for any difference."
        ),
        "exchange_delivered_order_items": lambda: (
            f"In order {kw.get('order_id')} I want to exchange item(s) {ids('item_ids')} for {ids('new_item_ids')}, using {kw.get('payment_method_id')} for any difference."
        ),
        "return_delivered_order_items": lambda: (
            f"I want to return item(s) {ids('item_ids')} from order {kw.get('order_id')}, refunded to {kw.get('payment_method_id')}."
        ),
        "cancel_reservation": lambda: f"I want to cancel reservation {kw.get('reservation_id')}.",
        "update_reservation_baggages": lambda: (
            f"For reservation {kw.get('reservation_id')} I need {kw.get('total_baggages')} bags in total ({kw.get('nonfree_baggages')} non-free), paid with {kw.get('payment_id')}."
        ),
        "update_reservation_flights": lambda: (
            f"Please change reservation {kw.get('reservation_id')} to {kw.get('cabin')} on flights {_segments(kw.get('flights'))}, paid with {kw.get('payment_id')}."
        ),
        "update_reservation_passengers": lambda: (
            f"The passengers of reservation {kw.get('reservation_id')} should be {_people(kw.get('passengers'))}."
        ),
        "book_reservation": lambda: (
            f"I want to book a {kw.get('flight_type')} {kw.get('cabin')} trip from {kw.get('origin')} to {kw.get('destination')} "
            f"on flights {_segments(kw.get('flights'))} for {_people(kw.get('passengers'))}, with {kw.get('total_baggages')} bags "
            f"({kw.get('nonfree_baggages')} non-free), insurance {kw.get('insurance')}, paying "
            + "; ".join(
                f"{p.get('amount')} with {p.get('payment_id')}"
                for p in kw.get("payment_methods", [])
                if isinstance(p, dict)
            )
            + "."
        ),
        "send_certificate": lambda: (
            f"I think I deserve a certificate of {kw.get('amount')} for the trouble."
        ),
        "transfer_to_human_agents": lambda: "I would like to talk to a human agent, please.",
    }
    make = templates.get(name)
    return make() if make else None


def _segments(flights) -> str:
    return ", ".join(
        f"{f.get('flight_number')} on {f.get('date')}" for f in flights or [] if isinstance(f, dict)
    )


def _people(passengers) -> str:
    return ", ".join(
        f"{p.get('first_name')} {p.get('last_name')} (born {p.get('dob')})"
        for p in passengers or []
        if isinstance(p, dict)
    )


def _first(pattern: str, text: str) -> str | None:
    m = re.search(pattern, text)
    return m.group(1) if m else None


class ScriptedCustomer:
    """Rule-based customer over the task's structured data (see the module docstring)."""

    def __init__(self, payload: dict, profile: dict | None):
        text = payload.get("instruction", "")
        profile = profile or {}
        name = profile.get("name", {})
        self.first = _first(r"(?:name is|You are) ([A-Z][a-z]+) [A-Z]", text) or name.get(
            "first_name", ""
        )
        self.last = _first(r"(?:name is|You are) [A-Z][a-z]+ ([A-Z][a-z]+)", text) or name.get(
            "last_name", ""
        )
        self.zip = _first(r"\b(\d{5})\b", text) or profile.get("address", {}).get("zip", "")
        self.email = _first(r"([\w.+-]+@[\w-]+\.[\w.]+\w)", text) or profile.get("email", "")
        self.user_id = payload.get("user_id", "")
        kwargs = [a.get("kwargs", {}) for a in payload.get("actions", [])]
        self.order_ids = list(
            dict.fromkeys(
                re.findall(r"#W\d+", text) + [k["order_id"] for k in kwargs if "order_id" in k]
            )
        )
        self.reservation_ids = list(
            dict.fromkeys(k["reservation_id"] for k in kwargs if "reservation_id" in k)
        )
        wishes = [_describe(a) for a in payload.get("actions", [])]
        self.wishes = [w for w in wishes if w] or ["I have a question about my account and orders."]
        self.stated = 0

    async def start(self) -> str:
        return self.opening()

    async def reply(self, agent_text: str) -> str:
        return self.answer(agent_text)

    def opening(self) -> str:
        """The first message: a greeting and the first wish."""
        return self._next_wish(prefix="Hi! ")

    def _next_wish(self, prefix: str = "") -> str:
        if self.stated < len(self.wishes):
            self.stated += 1
            return prefix + self.wishes[self.stated - 1]
        return prefix + "That is everything I need. Please go ahead and take care of it."

    def facts_asked(self, agent_text: str) -> list[tuple[str, list[str]]]:
        """(the sentence stating it, its values) of each fact `agent_text` asks for that this
        customer knows."""
        low = (agent_text or "").lower()
        facts = []
        if re.search(r"\be-?mail\b", low) and self.email:
            facts.append((f"My email is {self.email}.", [self.email]))
        if re.search(r"\b(name|zip)\b", low) and self.first:
            facts.append(
                (
                    f"My name is {self.first} {self.last} and my zip code is {self.zip}.",
                    [v for v in (self.first, self.last, self.zip) if v],
                )
            )
        if re.search(r"\buser[ _]id\b", low) and self.user_id:
            facts.append((f"My user id is {self.user_id}.", [self.user_id]))
        if (
            re.search(r"\border\b", low)
            and re.search(r"\b(id|ids|number)\b", low)
            and self.order_ids
        ):
            facts.append((f"The order id is {', '.join(self.order_ids)}.", list(self.order_ids)))
        if (
            re.search(r"\breservation\b", low)
            and re.search(r"\b(id|ids|number|code)\b", low)
            and self.reservation_ids
        ):
            ids = list(self.reservation_ids)
            facts.append((f"The reservation id is {', '.join(ids)}.", ids))
        return facts

    def answer(self, agent_text: str) -> str:
        """The reply to `agent_text` (the customer's state moves on: wishes stated)."""
        low = (agent_text or "").lower()
        if not low.strip():
            return "Sorry, I did not get that. Could you say it again?"
        done = bool(_DONE.search(low)) and self.stated >= len(self.wishes)
        if done and "?" not in low:
            return STOP
        facts = self.facts_asked(low)
        if facts:
            return " ".join(sentence for sentence, _ in facts)
        if _CONFIRM.search(low) and "?" in low:
            return "Yes, please proceed."
        if done:
            return STOP
        if _DONE.search(low) and self.stated < len(
            self.wishes
        ):  # one part done: say everything left
            rest = self.wishes[self.stated :]
            self.stated = len(self.wishes)
            return "Thanks. I also need this: " + " ".join(rest)
        return self._next_wish()


def _mua_prompt(instruction: str) -> str:
    return (
        "You are playing a customer talking to a customer service agent.\n\n"
        f"Instruction: {instruction}\n\n"
        "Rules:\n"
        "- Write one short customer message at a time.\n"
        "- Reveal the information in the instruction only when it is needed for the current step.\n"
        "- Never invent facts that are not in the instruction (ids, names, numbers); if asked for something "
        "you do not know, say you do not have it.\n"
        "- Use your own words instead of copying the instruction, and keep to the personality it describes.\n"
        f"- When your goal is fully achieved (or cannot be achieved), reply with exactly {STOP} and nothing else."
    )


def _upstream_prompt(instruction: str) -> str:
    # tau-bench's user-simulator instructions, rule for rule and in the same order, in mua's own
    # words; the layout ("Instruction:" block, "Rules:" list) and the stop marker are the
    # simulator's. Unlike the mua variant, only a satisfied goal ends the
    # conversation.
    return (
        "You are a user in a conversation with an agent.\n\n"
        f"Instruction: {instruction}\n\n"
        "Rules:\n"
        "- Write only one line per turn: the user's next message.\n"
        "- Do not reveal the whole instruction at once; give only what the current step needs.\n"
        "- Do not make up anything the instruction does not give you. If the agent asks for "
        "something that is not in it (say, an order id), do not invent one: say you do not "
        "remember it or do not have it.\n"
        f"- Once the goal of the instruction is met, send '{STOP}' as a message of its own, with "
        "nothing else, to end the conversation.\n"
        "- Do not repeat the instruction word for word; say the same things in your own words.\n"
        "- Keep the conversation natural and stay true to the personality the instruction describes."
    )


PROMPTS = {"upstream": _upstream_prompt, "mua": _mua_prompt}


class LLMCustomer:
    """Customer played by an LLM from the task instruction (roles flipped: the agent is 'user')."""

    def __init__(self, llm: JudgeClient, instruction: str, rules: str = "upstream"):
        self.llm = llm
        self.messages = [
            {"role": "system", "content": PROMPTS[rules](instruction)},
            {"role": "user", "content": "Hi! How can I help you today?"},
        ]

    async def _say(self) -> str:
        text = await self.llm.complete(self.messages)
        if not isinstance(text, str) or not text.strip():
            raise UserFailure("tau LLM customer returned an empty reply")
        text = text.strip()
        self.messages.append({"role": "assistant", "content": text})
        return text

    async def start(self) -> str:
        return await self._say()

    async def reply(self, agent_text: str) -> str:
        self.messages.append({"role": "user", "content": agent_text or ""})
        return await self._say()
