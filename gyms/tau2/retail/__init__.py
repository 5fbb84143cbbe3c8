"""tau2's retail domain: orders, exchanges and returns of an online shop (agent tools only)."""

from __future__ import annotations

from pathlib import Path

from gyms.tau2.domain import Tau2Domain, db_domain
from gyms.tau2.retail.models import RetailDB
from gyms.tau2.retail.tools import RetailTools


def make_domain(data_dir: Path) -> Tau2Domain:
    return db_domain("retail", data_dir, RetailTools, RetailDB)
