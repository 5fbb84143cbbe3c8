"""The tau2 gym's options (`gym.options` in a recipe, `--option` for `mua prep`), checked once.

- `data_dir`: the tau2-bench data folder, or a whole tau2-bench checkout (the `--source`
  given to `mua prep`); required to run tasks, since rows never store a path.
- `profile`: `mua` (default: mua's own prompt wording) or `leaderboard` (tau2's prompts, tool
  schemas and defaults read from the checkout `data_dir` names; see gyms/tau2/leaderboard/).
- `domain`: retail | airline | telecom | telecom-workflow | all; read by `mua prep` only (each
  row carries its own domain).
- `solo`: telecom solo mode (no user; the agent gets the ticket and the user's tools).
- `persona`: `task` (default: as the task says) or `non_cooperative`.
- `judge`: where NL assertions are judged: `user` (the recipe's LLM user endpoint), or an
  endpoint section like `user:` (`base_url`, `model`, `api_key_env`, `cache_dir`, ...).
- `basis`: `tau2` (default: every reward_basis component; a task that needs a judge refuses
  to run without one) or `no_nl` (NL_ASSERTION left out: NOT comparable with tau2's numbers,
  and every result row says so).
- `max_errors`: tool errors after which the conversation ends unscored (tau2: 10).
- `seed`: under `profile: leaderboard`, the run's seed each trial's seed is drawn from, as
  tau2's `--seed` (default: the checkout's DEFAULT_SEED, 300).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gyms.common.options import known_options, one_of
from gyms.tau2.domain import DOMAINS
from mua.errors import UsageError

KNOWN = (
    "data_dir",
    "domain",
    "solo",
    "persona",
    "judge",
    "basis",
    "max_errors",
    "profile",
    "seed",
)
PERSONAS = ("task", "non_cooperative")
BASES = ("tau2", "no_nl")


@dataclass(frozen=True)
class Tau2Options:
    data_dir: Path | None = None
    solo: bool = False
    persona: str = "task"
    judge: object = None
    basis: str = "tau2"
    max_errors: int = 10
    profile: str = "mua"
    checkout: object = None  # a leaderboard.checkout.Checkout when data_dir is a checkout
    seed: int | None = None  # None: the checkout's DEFAULT_SEED


def check_options(options: dict | None) -> Tau2Options:
    options = known_options(options, KNOWN, "tau2")
    if "domain" in options and options["domain"] != "all":
        one_of("domain", options["domain"], tuple(DOMAINS))
    data_dir = options.get("data_dir")
    if data_dir is not None:
        data_dir = Path(str(data_dir)).expanduser()
        if not data_dir.is_dir():
            raise UsageError(
                f"gym.options.data_dir: {data_dir} is not a folder; point it at tau2-bench's "
                "data folder (the one holding tau2/domains/)"
            )
    from gyms.tau2.leaderboard.checkout import data_folder, find_checkout
    from gyms.tau2.leaderboard.profile import PROFILES, refuse_without_checkout

    profile = one_of("profile", options.get("profile", "mua"), PROFILES)
    checkout = find_checkout(data_dir) if data_dir is not None else None
    if checkout is not None:
        data_dir = data_folder(data_dir)
    if profile != "mua" and checkout is None:
        raise refuse_without_checkout(data_dir or "gym.options.data_dir (unset)")
    judge = options.get("judge")
    if judge is not None and judge != "user" and not isinstance(judge, dict):
        raise UsageError(
            "gym.options.judge: give `user` (judge with the LLM user's endpoint) or an endpoint "
            "section {base_url, model, api_key_env, cache_dir}"
        )
    max_errors = options.get("max_errors", 10)
    if not isinstance(max_errors, int) or max_errors < 1:
        raise UsageError(f"gym.options.max_errors must be a positive integer, got {max_errors!r}")
    seed = options.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise UsageError(
            f"gym.options.seed must be a non-negative integer (tau2's --seed), got {seed!r}"
        )
    if seed is not None and profile != "leaderboard":
        raise UsageError(
            "gym.options.seed seeds tau2's leaderboard requests; set gym.options.profile: "
            "leaderboard or drop seed"
        )
    return Tau2Options(
        data_dir=data_dir,
        solo=bool(options.get("solo", False)),
        persona=one_of("persona", options.get("persona", "task"), PERSONAS),
        judge=judge,
        basis=one_of("basis", options.get("basis", "tau2"), BASES),
        max_errors=max_errors,
        profile=profile,
        checkout=checkout,
        seed=seed,
    )
