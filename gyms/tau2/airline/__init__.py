"""tau2's airline domain: booking, changing and cancelling flight reservations."""

from __future__ import annotations

from pathlib import Path

from gyms.tau2.airline.models import FlightDB
from gyms.tau2.airline.tools import AirlineTools
from gyms.tau2.domain import Tau2Domain, db_domain


def make_domain(data_dir: Path) -> Tau2Domain:
    return db_domain("airline", data_dir, AirlineTools, FlightDB)
