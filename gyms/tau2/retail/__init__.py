"""tau2's retail domain: orders, exchanges and returns of an online shop (agent tools only)."""

from __future__ import annotations

from pathlib import Path

from gyms.tau2.dbcache import fresh_db
from gyms.tau2.domain import Tau2Domain, Tau2Environment, domains_dir
from gyms.tau2.retail.models import RetailDB
from gyms.tau2.retail.tools import RetailTools

FILES = ("db.json", "policy.md", "tasks.json", "split_tasks.json")


def make_domain(data_dir: Path) -> Tau2Domain:
    folder = domains_dir(data_dir) / "retail"
    policy = (folder / "policy.md").read_text(encoding="utf-8")

    def factory(solo: bool) -> Tau2Environment:
        return Tau2Environment(
            "retail", policy, RetailTools(fresh_db(folder / "db.json", RetailDB))
        )

    return Tau2Domain("retail", Path(data_dir), policy, factory, required_files=FILES)
