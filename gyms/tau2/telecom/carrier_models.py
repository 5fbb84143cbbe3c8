"""The carrier's side of tau2's telecom domain: plans, customers, lines, bills and devices.

Field names, defaults and number types follow tau2-bench v1.0.1 exactly, because the agent
database is compared by hashing its `model_dump()`; one different default (a date where tau2
keeps a date, a float where tau2 keeps a float) changes every hash. Defaults are not
validated, so `Customer.created_at` defaults to a `date` even though the field holds
datetimes, as in tau2. This module holds data only; the agent's tools live in
`carrier_tools.py`.
"""

from __future__ import annotations

import datetime
import sys
from enum import Enum
from pathlib import Path

from pydantic import Field

from gyms.tau2.toolkit import DBModel

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ACCOUNT_CREATION_DEFAULT = datetime.date(2025, 1, 1)


def read_toml(path: Path | str) -> dict:
    """The contents of a TOML file (tau2 keeps both telecom databases as TOML)."""
    with open(path, "rb") as fh:
        return tomllib.load(fh)


class Address(DBModel):
    street: str
    city: str
    state: str
    zip_code: str


class Plan(DBModel):
    plan_id: str
    name: str
    data_limit_gb: float
    price_per_month: float
    data_refueling_price_per_gb: float


class DeviceType(str, Enum):
    PHONE = "phone"
    ROUTER = "router"
    TABLET = "tablet"
    WATCH = "watch"
    OTHER = "other"


class Device(DBModel):
    device_id: str
    device_type: DeviceType
    model: str
    imei: str | None = None
    is_esim_capable: bool
    activated: bool = False
    activation_date: datetime.datetime | None = None
    last_esim_transfer_date: datetime.datetime | None = None


class LineStatus(str, Enum):
    ACTIVE = "Active"
    SUSPENDED = "Suspended"
    PENDING_ACTIVATION = "Pending Activation"
    CLOSED = "Closed"


class Line(DBModel):
    line_id: str
    phone_number: str
    status: LineStatus = LineStatus.PENDING_ACTIVATION
    plan_id: str
    device_id: str | None = None
    data_used_gb: float = 0.0
    data_refueling_gb: float = 0.0
    roaming_enabled: bool = False
    contract_end_date: datetime.date | None = None
    last_plan_change_date: datetime.date | None = None
    last_sim_replacement_date: datetime.date | None = None
    suspension_start_date: datetime.date | None = None


class LineItem(DBModel):
    description: str
    amount: float
    date: datetime.date
    item_type: str


class BillStatus(str, Enum):
    DRAFT = "Draft"
    ISSUED = "Issued"
    AWAITING_PAYMENT = "Awaiting Payment"
    PAID = "Paid"
    OVERDUE = "Overdue"
    DISPUTED = "Disputed"


class Bill(DBModel):
    bill_id: str
    customer_id: str
    period_start: datetime.date
    period_end: datetime.date
    issue_date: datetime.date
    total_due: float
    due_date: datetime.date
    line_items: list[LineItem] = Field(default_factory=list)
    status: BillStatus = BillStatus.DRAFT


class AccountStatus(str, Enum):
    ACTIVE = "Active"
    SUSPENDED = "Suspended"
    PENDING_VERIFICATION = "Pending Verification"
    CLOSED = "Closed"


class PaymentMethodType(str, Enum):
    CREDIT_CARD = "Credit Card"
    DEBIT_CARD = "Debit Card"
    PAYPAL = "PayPal"


class PaymentMethod(DBModel):
    method_type: PaymentMethodType
    account_number_last_4: str
    expiration_date: str


class Customer(DBModel):
    customer_id: str
    full_name: str
    date_of_birth: str
    email: str
    phone_number: str
    address: Address
    account_status: AccountStatus = AccountStatus.PENDING_VERIFICATION
    payment_methods: list[PaymentMethod] = Field(default_factory=list)
    line_ids: list[str] = Field(default_factory=list)
    bill_ids: list[str] = Field(default_factory=list)
    created_at: datetime.datetime = ACCOUNT_CREATION_DEFAULT  # a date, unvalidated, as in tau2
    last_extension_date: datetime.date | None = None
    goodwill_credit_used_this_year: float = 0.0


class TelecomDB(DBModel):
    """The carrier's whole database, the agent's side of the domain."""

    plans: list[Plan] = Field(default_factory=list)
    customers: list[Customer] = Field(default_factory=list)
    lines: list[Line] = Field(default_factory=list)
    bills: list[Bill] = Field(default_factory=list)
    devices: list[Device] = Field(default_factory=list)

    @classmethod
    def load(cls, path: Path | str) -> TelecomDB:
        return cls.model_validate(read_toml(path))
