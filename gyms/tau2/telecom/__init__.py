"""tau2's telecom domain: a carrier database for the agent, a phone for the customer.

`make_domain(data_dir)` (policy: main policy plus the tech-support manual) and
`make_workflow_domain(data_dir)` (main policy plus the tech-support workflow) build
`Tau2Domain`s from a folder laid out like tau2-bench's `data/`; both support solo mode, where
the agent gets the solo policy and the phone's tools as well as its own. Missing files raise
`FileNotFoundError` naming the file.
"""

from __future__ import annotations

from pathlib import Path

from gyms.tau2.domain import Tau2Domain, domains_dir
from gyms.tau2.telecom.carrier_models import TelecomDB
from gyms.tau2.telecom.carrier_tools import TelecomTools
from gyms.tau2.telecom.environment import TelecomEnvironment
from gyms.tau2.telecom.phone_models import TelecomUserDB
from gyms.tau2.telecom.phone_tools import TelecomUserTools

REQUIRED_FILES = (
    "db.toml",
    "user_db.toml",
    "main_policy.md",
    "main_policy_solo.md",
    "tech_support_manual.md",
    "tech_support_workflow.md",
    "tech_support_workflow_solo.md",
    "tasks.json",
    "split_tasks.json",
)
# tech-support document per policy variant: (with a user, solo)
SUPPORT_DOCS = {
    "manual": ("tech_support_manual.md", "tech_support_manual.md"),
    "workflow": ("tech_support_workflow.md", "tech_support_workflow_solo.md"),
}


def telecom_dir(data_dir: Path | str) -> Path:
    return domains_dir(data_dir) / "telecom"


def check_files(folder: Path) -> None:
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"tau2 telecom data in {folder} lacks {', '.join(missing)}; point --source at a "
            "copy of tau2-bench v1.0.1's data folder"
        )


def telecom_policy(folder: Path, variant: str, solo: bool) -> str:
    """The agent's policy text: main policy and tech-support document, tagged as tau2 does."""
    main = (folder / ("main_policy_solo.md" if solo else "main_policy.md")).read_text()
    support = (folder / SUPPORT_DOCS[variant][1 if solo else 0]).read_text()
    return (
        f"<main_policy>\n{main}\n</main_policy>\n"
        f"<tech_support_policy>\n{support}\n</tech_support_policy>"
    )


def _domain(data_dir: Path | str, variant: str) -> Tau2Domain:
    folder = telecom_dir(data_dir)
    check_files(folder)
    name = "telecom" if variant == "manual" else "telecom-workflow"
    carrier = TelecomDB.load(folder / "db.toml")
    phone = TelecomUserDB.load(folder / "user_db.toml")

    def factory(solo: bool) -> TelecomEnvironment:
        return TelecomEnvironment(
            domain_name=name,
            policy=telecom_policy(folder, variant, solo),
            agent=TelecomTools(carrier.model_copy(deep=True)),
            user=TelecomUserTools(phone.model_copy(deep=True)),
            solo=solo,
        )

    return Tau2Domain(
        name=name,
        data_dir=Path(data_dir),
        policy=telecom_policy(folder, variant, False),
        factory=factory,
        data_name="telecom",
        has_user_tools=True,
        supports_solo=True,
        required_files=REQUIRED_FILES,
    )


def make_domain(data_dir: Path | str) -> Tau2Domain:
    return _domain(data_dir, "manual")


def make_workflow_domain(data_dir: Path | str) -> Tau2Domain:
    return _domain(data_dir, "workflow")
