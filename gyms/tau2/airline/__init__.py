"""tau2's airline domain: booking, changing and cancelling flight reservations."""

from __future__ import annotations

from pathlib import Path

from gyms.tau2.airline.models import FlightDB
from gyms.tau2.airline.tools import AirlineTools
from gyms.tau2.dbcache import fresh_db
from gyms.tau2.domain import Tau2Domain, Tau2Environment, domains_dir

FILES = ("db.json", "policy.md", "tasks.json", "split_tasks.json")


def make_domain(data_dir: Path) -> Tau2Domain:
    folder = domains_dir(data_dir) / "airline"
    policy = (folder / "policy.md").read_text(encoding="utf-8")

    def factory(solo: bool) -> Tau2Environment:
        return Tau2Environment(
            "airline", policy, AirlineTools(fresh_db(folder / "db.json", FlightDB))
        )

    return Tau2Domain("airline", Path(data_dir), policy, factory, required_files=FILES)
