"""What `mua prep --gym tau2` adds to rows when `--source` is a tau2-bench checkout.

`row_extras(source, profile)` is None for a bare data folder under the `mua` profile; for a
checkout it records `{"version", "commit"}` in every row's payload (`tau2_checkout`), and under
`profile=leaderboard` each row's prompt is tau2's opening for the agent (system prompt and
greeting, as `profile.agent_opening` builds it). `profile=leaderboard` without a checkout is
refused in one line naming what to point at.
"""

from __future__ import annotations

from gyms.tau2.leaderboard.checkout import data_folder, find_checkout
from gyms.tau2.leaderboard.profile import NAME, PROFILES, agent_opening, refuse_without_checkout
from gyms.tau2.leaderboard.source import Tau2Source
from mua.errors import UsageError


class RowExtras:
    def __init__(self, checkout, profile: str):
        self.checkout = checkout.describe()
        self.source = Tau2Source(checkout) if profile == NAME else None
        self.root = data_folder(checkout.root)
        self._prompts: dict[str, list[dict]] = {}

    def prompt(self, domain: str) -> list[dict] | None:
        if self.source is None:
            return None
        if domain not in self._prompts:
            from gyms.tau2.domain import load_domain

            env = load_domain(domain, self.root).new_environment()
            self._prompts[domain] = agent_opening(self.source, env, domain)["messages"]
        return self._prompts[domain]


def row_extras(source, profile: str) -> RowExtras | None:
    if profile not in PROFILES:
        raise UsageError(f"tau2: profile={profile!r} is not one of {', '.join(PROFILES)}")
    checkout = find_checkout(source)
    if checkout is None:
        if profile == NAME:
            raise refuse_without_checkout(source)
        return None
    return RowExtras(checkout, profile)
