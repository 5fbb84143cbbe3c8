"""The offline scripted customer for tau2's telecom domain: follows spoken instructions on the phone.

No model is involved. `TelecomScriptedUser` reads each agent message sentence by sentence,
recognises requests for phone actions in plain words ("turn off airplane mode", "restart your
phone", "grant the messaging app storage permission") or by tool name, performs them with its
own tools through `Tau2Environment.tool_call("user", ...)` (so every call is synced and
recorded) and tells the agent what the phone showed. A toggle is only flipped when the request
names a side the switch is not already on. Questions about the phone ("what does your status
bar show?", "can you send an MMS?", "run a speed test") are answered from a read tool, never
made up. Missing arguments (network mode, app, permission) come from the task's next gold
user action of that name.

Personas (tau2's telecom tasks carry `[PERSONA:None|Easy|Hard]`; mua's `non_cooperative`
maps to Hard): None and Easy give their name and number at once and do everything asked in a
message; Hard gives details only when asked, does one thing per message (the oldest request
first; later ones wait their turn) and hesitates once before a restart (tau2's Hard persona
fears losing photos). The user ends with `###STOP###` when the agent says the work is done
and no gold user action is left (or after three "still not working" replies), and with
`###TRANSFER###` after a transfer. It is a test and quickstart partner, not a measure of
anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gyms.tau2.domain import USER, Tau2Environment

STOP, TRANSFER = "###STOP###", "###TRANSFER###"
PERSONA_RE = re.compile(r"\[PERSONA:([A-Za-z_]+)\]")

# (tool, pattern) in priority order; a sentence may ask for several.
REQUESTS = [
    ("toggle_airplane_mode", r"airplane|flight mode"),
    ("toggle_wifi_calling", r"wi-?fi calling"),
    ("toggle_data_saver_mode", r"data saver"),
    ("toggle_roaming", r"roaming"),
    (
        "toggle_data",
        r"mobile data|cellular data|\bdata (?:on|off)\b|turn (?:on|off) (?:your )?data",
    ),
    ("toggle_wifi", r"\bwi-?fi\b(?! calling)"),
    ("reseat_sim_card", r"re-?seat|re-?insert|remove (?:and|then) (?:re)?insert|take out .*sim"),
    ("reset_apn_settings", r"reset .*apn|apn .*reset|default apn"),
    (
        "reboot_device",
        r"reboot|restart (?:your|the) (?:phone|device)|turn (?:your|the) phone off and",
    ),
    ("disconnect_vpn", r"disconnect .*vpn|vpn .*(?:off|disconnect)|turn off .*vpn"),
    ("connect_vpn", r"\bconnect (?:to )?(?:your |the )?vpn"),
    ("set_network_mode_preference", r"network mode|mode preference|preferred network|network type"),
    ("grant_app_permission", r"permission"),
    ("make_payment", r"\bpay\b|make (?:the |a )?payment|complete the payment"),
    ("check_payment_request", r"payment request"),
    ("run_speed_test", r"speed test|internet speed|how fast"),
    ("can_send_mms", r"\bmms\b|picture message"),
    ("check_status_bar", r"status bar|signal bars|icons"),
    ("check_network_status", r"network status|connection status"),
    ("check_sim_status", r"sim (?:card )?status|sim card"),
    ("check_apn_settings", r"\bapn\b"),
    ("check_vpn_status", r"\bvpn\b"),
    ("check_wifi_calling_status", r"wi-?fi calling"),
    ("check_installed_apps", r"installed apps|which apps"),
]
READ_ONLY = {
    "check_payment_request",
    "run_speed_test",
    "can_send_mms",
    "check_status_bar",
    "check_network_status",
    "check_sim_status",
    "check_apn_settings",
    "check_vpn_status",
    "check_wifi_calling_status",
    "check_installed_apps",
}
# switch state each toggle flips
SWITCHES = {
    "toggle_airplane_mode": "airplane_mode",
    "toggle_wifi_calling": "wifi_calling_enabled",
    "toggle_data_saver_mode": "data_saver_mode",
    "toggle_roaming": "roaming_enabled",
    "toggle_data": "data_enabled",
    "toggle_wifi": "wifi_enabled",
}
# a more specific request found earlier in the sentence hides these broader matches
SUPPRESSED_BY = {
    "toggle_data": {"toggle_roaming", "toggle_data_saver_mode"},
    "toggle_wifi": {"toggle_wifi_calling"},
    "check_wifi_calling_status": {"toggle_wifi_calling"},
    "check_vpn_status": {"connect_vpn", "disconnect_vpn"},
    "check_apn_settings": {"reset_apn_settings"},
    "check_payment_request": {"make_payment"},
    "check_sim_status": {"reseat_sim_card"},
    "check_network_status": {"set_network_mode_preference"},
}
ON = re.compile(r"\b(turn(?:ing)? (?:\w+ )*on|switch(?:ing)? (?:\w+ )*on|enabl\w*|activat\w*)\b")
OFF = re.compile(
    r"\b(turn(?:ing)? (?:\w+ )*off|switch(?:ing)? (?:\w+ )*off|disabl\w*|deactivat\w*)\b"
)
MODES = [
    ("4g_5g_preferred", r"4g_5g_preferred|5g|4g/5g|lte/5g|preferred"),
    ("4g_only", r"4g_only|4g only|lte only"),
    ("3g_only", r"3g"),
    ("2g_only", r"2g"),
]
APPS = ("messaging", "browser")
PERMISSIONS = ("sms", "storage", "phone", "network")
DONE = re.compile(
    r"\b(resolved|fixed|all set|anything else|complet\w*|should (?:now )?work|is working|"
    r"are working)\b"
)
MAX_COMPLAINTS = 3  # "it still does not work" replies before the user gives up
ASKS_NAME = re.compile(r"\b(name|phone number|number|who am i speaking|identify|verify)\b")


def persona_of(task: dict, override: str | None = None) -> str:
    """'None', 'Easy' or 'Hard' from the task id; `non_cooperative` forces 'Hard'."""
    if override == "non_cooperative":
        return "Hard"
    found = PERSONA_RE.search(str(task.get("id", "")))
    return found.group(1) if found else "None"


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text.lower()) if s.strip()]


def requested_tools(sentence: str) -> list[str]:
    """User tools a sentence asks for, in priority order (a tool's own name counts too)."""
    found: list[str] = []
    for name, pattern in REQUESTS:
        if re.search(rf"(?<![a-z_]){name}(?![a-z_])", sentence) or re.search(pattern, sentence):
            if not SUPPRESSED_BY.get(name, set()) & set(found):
                found.append(name)
    return found


def wanted_side(sentence: str) -> bool | None:
    """True for a request to switch on, False for off, None when the sentence does not say."""
    on, off = ON.search(sentence), OFF.search(sentence)
    if on and off:
        return on.start() < off.start()
    return True if on else False if off else None


@dataclass
class TelecomUserTurn:
    text: str
    calls: list[dict] = field(default_factory=list)


class TelecomScriptedUser:
    """Plays one telecom task on the phone of `env` (see the module docstring)."""

    def __init__(self, env: Tau2Environment, task: dict, persona: str | None = None):
        self.env = env
        self.persona = persona_of(task, persona)
        instructions = ((task.get("user_scenario") or {}).get("instructions")) or {}
        if not isinstance(instructions, dict):
            instructions = {"reason_for_call": str(instructions)}
        self.reason = " ".join(str(instructions.get("reason_for_call") or "").split())
        self.known = " ".join(str(instructions.get("known_info") or "").split())
        gold = (task.get("evaluation_criteria") or {}).get("actions") or []
        self.pending = [dict(a) for a in gold if a.get("requestor") == USER]
        self.hesitated = False
        self.queue: list[tuple[str, str]] = []  # (tool, the sentence asking for it)
        self.complaints = 0

    def opening(self) -> str:
        text = f"Hi. {self.reason}"
        if self.persona != "Hard" and self.known:
            text += f" {self.known}"
        return text

    # ---- arguments ---------------------------------------------------------------------------
    def _gold_arguments(self, name: str) -> dict | None:
        for action in self.pending:
            if action["name"] == name:
                return dict(action.get("arguments") or {})
        return None

    def _arguments(self, name: str, sentence: str) -> list[dict]:
        if name == "set_network_mode_preference":
            for mode, pattern in MODES:
                if mode in sentence or re.search(pattern, sentence):
                    return [{"mode": mode}]
            return [self._gold_arguments(name) or {"mode": "4g_5g_preferred"}]
        if name == "grant_app_permission":
            gold = self._gold_arguments(name) or {}
            app = next((a for a in APPS if a in sentence), gold.get("app_name", "messaging"))
            asked = re.sub(r"\b(?:your|the|my|this) (?:phone|device)\b", "", sentence)
            perms = [p for p in PERMISSIONS if re.search(rf"\b{p}\b", asked)]
            if not perms:
                perms = [gold["permission"]] if "permission" in gold else []
            return [{"app_name": app, "permission": p} for p in perms]
        return [{}]

    def _done_gold(self, name: str, arguments: dict) -> None:
        for i, action in enumerate(self.pending):
            if action["name"] == name and (action.get("arguments") or {}) == arguments:
                del self.pending[i]
                return

    # ---- one turn ----------------------------------------------------------------------------
    async def reply(self, agent_text: str) -> TelecomUserTurn:
        return self.respond(agent_text)

    def respond(self, agent_text: str) -> TelecomUserTurn:
        text = (agent_text or "").strip()
        low = text.lower()
        if not low:
            return TelecomUserTurn("Sorry, I did not get that.")
        if re.search(r"\btransferr?(?:ed|ing)?\b.*\b(human|agent|specialist)", low):
            return TelecomUserTurn(TRANSFER)
        for sentence in sentences(text):
            for name in requested_tools(sentence):
                takes_arguments = name in ("grant_app_permission", "set_network_mode_preference")
                if takes_arguments or all(name != queued for queued, _ in self.queue):
                    self.queue.append((name, sentence))  # a switch asked for twice: once
        if self.queue:
            return self._work_queue()
        if ASKS_NAME.search(low) and self.known:
            return TelecomUserTurn(self.known)
        if DONE.search(low):
            if not self.pending:
                return TelecomUserTurn(f"Thank you, that is all. {STOP}")
            self.complaints += 1
            if self.complaints > MAX_COMPLAINTS:
                return TelecomUserTurn(f"It still does not work. I give up. {STOP}")
            return TelecomUserTurn("It is still not working for me. What else can I try?")
        if "?" in low:
            return TelecomUserTurn("Yes, please go ahead.")
        return TelecomUserTurn("Okay. What should I do next?")

    def _work_queue(self) -> TelecomUserTurn:
        """Do what was asked: everything at once, or (Hard) the oldest request only, after
        one worried question before the first restart."""
        calls: list[dict] = []
        said: list[str] = []
        while self.queue:
            name, sentence = self.queue[0]
            if name == "reboot_device" and self.persona == "Hard" and not self.hesitated:
                self.hesitated = True
                said.append("Will restarting delete the photos of my grandchildren?")
                break
            self.queue.pop(0)
            said.extend(self._perform(name, sentence, calls))
            if self.persona == "Hard":
                break
        return TelecomUserTurn(" ".join(said) or "Done.", calls)

    def _perform(self, name: str, sentence: str, calls: list[dict]) -> list[str]:
        device = self.env.user.db.device
        if name in SWITCHES:
            side = wanted_side(sentence)
            current = bool(getattr(device, SWITCHES[name]))
            if side is not None and side == current:
                label = name.removeprefix("toggle_").replace("_", " ")
                return [f"My {label} is already {'on' if current else 'off'}."]
        said = []
        for arguments in self._arguments(name, sentence):
            content, error = self.env.tool_call(USER, name, arguments)
            calls.append({"requestor": USER, "name": name, "arguments": arguments})
            if not error and name not in READ_ONLY:
                self._done_gold(name, arguments)
            said.append(content if name in READ_ONLY else f"I did that. {content}")
        return said
