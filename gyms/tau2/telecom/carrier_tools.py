"""The agent's toolkit in tau2's telecom domain: look-ups and changes on the carrier database.

Tools (offered to the agent) find customers, read details, bills and data usage, suspend and
resume lines, enable or disable roaming, refuel data, send a payment request and transfer to
a human. The other public methods are environment functions used by task initialization
(`set_data_usage`, `suspend_line_for_overdue_bill`) and by env assertions (`assert_*`).
Results and error messages are worded as tau2-bench v1.0.1 words them, since the agent reads
them and replayed calls are compared by their text. "Today" is tau2's fixed 2025-02-25.

The phone and its coupling to this database are in `phone_tools.py` and `environment.py`.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from gyms.common.tool_docs import shared_args
from gyms.tau2.telecom.carrier_models import (
    Bill,
    BillStatus,
    Customer,
    Device,
    Line,
    LineItem,
    LineStatus,
    Plan,
    TelecomDB,
)
from gyms.tau2.toolkit import GENERIC, READ, WRITE, Toolkit, tool

TODAY = datetime.date(2025, 2, 25)


def _first_of_next_month(day: datetime.date) -> datetime.date:
    return (day.replace(day=1) + datetime.timedelta(days=32)).replace(day=1)


# What an argument of these names means in every tool that takes it (`shared_args`).
_SHARED_ARGS = {
    "customer_id": "The customer who owns the line.",
}


@shared_args(_SHARED_ARGS)
class TelecomTools(Toolkit):
    """Carrier tools over a `TelecomDB` (the class name appears in argument-error messages)."""

    db: TelecomDB

    # ---- look-ups (also used by the environment) ------------------------------------------
    def _find(self, items: list, key: str, value: str, label: str):
        for item in items:
            if getattr(item, key) == value:
                return item
        raise ValueError(f"{label} {value} not found")

    def _get_line_by_id(self, line_id: str) -> Line:
        return self._find(self.db.lines, "line_id", line_id, "Line with ID")

    def _get_line_by_phone(self, phone_number: str) -> Line:
        return self._find(self.db.lines, "phone_number", phone_number, "Line with phone number")

    def _get_plan_by_id(self, plan_id: str) -> Plan:
        return self._find(self.db.plans, "plan_id", plan_id, "Plan with ID")

    def _get_device_by_id(self, device_id: str) -> Device:
        return self._find(self.db.devices, "device_id", device_id, "Device with ID")

    def _get_bill_by_id(self, bill_id: str) -> Bill:
        return self._find(self.db.bills, "bill_id", bill_id, "Bill with ID")

    def _get_target_line(self, customer_id: str, line_id: str) -> Line:
        customer = self.get_customer_by_id(customer_id)
        if line_id not in customer.line_ids:
            raise ValueError(f"Line {line_id} not found for customer {customer_id}")
        return self._get_line_by_id(line_id)

    def _get_bills_awaiting_payment(self, customer: Customer) -> list[Bill]:
        bills = [self._get_bill_by_id(b) for b in customer.bill_ids]
        return [b for b in bills if b.status == BillStatus.AWAITING_PAYMENT]

    def _set_bill_to_paid(self, bill_id: str) -> str:
        self._get_bill_by_id(bill_id).status = BillStatus.PAID
        return f"Bill {bill_id} set to paid"

    def get_available_plan_ids(self) -> list[str]:
        return [plan.plan_id for plan in self.db.plans]

    # ---- customer tools ---------------------------------------------------------------------
    @tool(READ)
    def get_customer_by_phone(self, phone_number: str) -> Customer:
        """Look up the customer who owns a phone number (their contact number or one of their lines).

        Args:
            phone_number: The phone number to look up.
        """
        for customer in self.db.customers:
            if customer.phone_number == phone_number:
                return customer
            for line_id in customer.line_ids:
                if self._get_line_by_id(line_id).phone_number == phone_number:
                    return customer
        raise ValueError(f"Customer with phone number {phone_number} not found")

    @tool(READ)
    def get_customer_by_id(self, customer_id: str) -> Customer:
        """Look up a customer by customer ID.

        Args:
            customer_id: The customer's unique ID.
        """
        return self._find(self.db.customers, "customer_id", customer_id, "Customer with ID")

    @tool(READ)
    def get_customer_by_name(self, full_name: str, dob: str) -> list[Customer]:
        """List the customers with this full name (case-insensitive) and date of birth.

        Args:
            full_name: The customer's full name.
            dob: The customer's date of birth, as YYYY-MM-DD.
        """
        wanted = full_name.lower()
        return [
            c for c in self.db.customers if c.full_name.lower() == wanted and c.date_of_birth == dob
        ]

    @tool(READ)
    def get_details_by_id(self, id: str) -> Any:  # noqa: A002 - tau2's parameter name
        """Show the record behind an ID: a line (L...), device (D...), bill (B...), customer (C...) or plan (P...).

        Args:
            id: The ID to show.
        """
        readers = {
            "L": self._get_line_by_id,
            "D": self._get_device_by_id,
            "B": self._get_bill_by_id,
            "C": self.get_customer_by_id,
            "P": self._get_plan_by_id,
        }
        reader = readers.get(id[:1])
        if reader is None:
            raise ValueError(f"Unknown ID format or type: {id}")
        return reader(id)

    # ---- line tools -------------------------------------------------------------------------
    @tool(WRITE)
    def suspend_line(self, customer_id: str, line_id: str, reason: str) -> dict:
        """Suspend an active line (at most 6 months; a $5/month holding fee applies).

        Args:
            line_id: The line to suspend.
            reason: Why the line is suspended.
        """
        line = self._get_target_line(customer_id, line_id)
        if line.status != LineStatus.ACTIVE:
            raise ValueError("Line must be active to suspend")
        line.status = LineStatus.SUSPENDED
        line.suspension_start_date = TODAY
        return {
            "message": "Line suspended successfully. $5/month holding fee will apply.",
            "line": line,
        }

    @tool(WRITE)
    def resume_line(self, customer_id: str, line_id: str) -> dict:
        """Reactivate a line that is suspended or pending activation.

        Args:
            line_id: The line to resume.
        """
        line = self._get_target_line(customer_id, line_id)
        if line.status not in (LineStatus.SUSPENDED, LineStatus.PENDING_ACTIVATION):
            raise ValueError("Line must be suspended to resume")
        line.status = LineStatus.ACTIVE
        line.suspension_start_date = None
        return {"message": "Line resumed successfully", "line": line}

    # ---- billing tools ----------------------------------------------------------------------
    @tool(READ)
    def get_bills_for_customer(self, customer_id: str, limit: int = 12) -> list[Bill]:
        """List a customer's bills, newest issue date first.

        Args:
            customer_id: The customer whose bills to list.
            limit: How many bills to return at most.
        """
        customer = self.get_customer_by_id(customer_id)
        bills = [self._get_bill_by_id(b) for b in customer.bill_ids]
        return sorted(bills, key=lambda b: b.issue_date, reverse=True)[:limit]

    @tool(WRITE)
    def send_payment_request(self, customer_id: str, bill_id: str) -> str:
        """Ask the customer to pay one of their bills; it then awaits payment.

        Only one bill may await payment at a time, and the bill's status is not checked:
        look at it first, since a paid bill would be requested again.

        Args:
            customer_id: The customer who owns the bill.
            bill_id: The bill to request payment for.
        """
        customer = self.get_customer_by_id(customer_id)
        if self._get_bills_awaiting_payment(customer):
            raise ValueError("A bill is already awaiting payment for this customer")
        if bill_id not in customer.bill_ids:
            raise ValueError(f"Bill {bill_id} not found for customer {customer_id}")
        bill = self._get_bill_by_id(bill_id)
        bill.status = BillStatus.AWAITING_PAYMENT
        return f"Payment request sent to the customer for bill {bill.bill_id}"

    def _apply_one_time_charge(self, customer_id: str, amount: float, description: str) -> None:
        """Add a charge (or a credit, if negative) to the customer's draft bill, opening one
        for next month when there is none (with a random ID, as tau2 does)."""
        customer = self.get_customer_by_id(customer_id)
        draft = None
        for bill_id in customer.bill_ids:
            bill = self._get_bill_by_id(bill_id)
            if bill.status == BillStatus.DRAFT:
                draft = bill
                break
        if draft is None:
            start = _first_of_next_month(TODAY)
            draft = Bill(
                bill_id=f"B{uuid.uuid4().hex[:8]}",
                customer_id=customer_id,
                period_start=start,
                period_end=_first_of_next_month(start) - datetime.timedelta(days=1),
                issue_date=start,
                total_due=0,
                due_date=start + datetime.timedelta(days=14),
                status=BillStatus.DRAFT,
            )
            self.db.bills.append(draft)
            customer.bill_ids.append(draft.bill_id)
        draft.line_items.append(
            LineItem(
                description=description,
                amount=amount,
                date=TODAY,
                item_type="Credit" if amount < 0 else "Charge",
            )
        )
        draft.total_due += amount

    # ---- usage and roaming tools ------------------------------------------------------------
    @tool(READ)
    def get_data_usage(self, customer_id: str, line_id: str) -> dict:
        """Show a line's data use this billing cycle, its plan's limit, refuelled data and the cycle's end.

        Args:
            line_id: The line to check.
        """
        line = self._get_target_line(customer_id, line_id)
        plan = self._get_plan_by_id(line.plan_id)
        return {
            "line_id": line_id,
            "data_used_gb": line.data_used_gb,
            "data_limit_gb": plan.data_limit_gb,
            "data_refueling_gb": line.data_refueling_gb,
            "cycle_end_date": _first_of_next_month(TODAY) - datetime.timedelta(days=1),
        }

    def set_data_usage(self, customer_id: str, line_id: str, data_used_gb: float) -> str:
        """Set a line's data use (task set-up); the value is stored as given."""
        line = self._get_target_line(customer_id, line_id)
        line.data_used_gb = data_used_gb
        return f"Data usage set to {data_used_gb} GB for line {line_id}"

    @tool(WRITE)
    def enable_roaming(self, customer_id: str, line_id: str) -> str:
        """Turn international roaming on for a line.

        Args:
            line_id: The line to allow roaming on.
        """
        line = self._get_target_line(customer_id, line_id)
        if line.roaming_enabled:
            return "Roaming was already enabled"
        line.roaming_enabled = True
        return "Roaming enabled successfully"

    @tool(WRITE)
    def disable_roaming(self, customer_id: str, line_id: str) -> str:
        """Turn international roaming off for a line.

        Args:
            line_id: The line to stop roaming on.
        """
        line = self._get_target_line(customer_id, line_id)
        if not line.roaming_enabled:
            return "Roaming was already disabled"
        line.roaming_enabled = False
        return "Roaming disabled successfully"

    @tool(GENERIC)
    def transfer_to_human_agents(self, summary: str) -> str:
        """Hand the customer over to a human agent with a summary of the issue. Do so only when the
        customer explicitly asks for a human, or when the policy and your tools cannot solve the issue.

        Args:
            summary: A short summary of the customer's issue.
        """
        return "Transfer successful"

    @tool(WRITE)
    def refuel_data(self, customer_id: str, line_id: str, gb_amount: float) -> dict:
        """Add data to a line for this cycle, charged to the customer's bill at the plan's per-GB price.

        Args:
            line_id: The line to add data to.
            gb_amount: How many gigabytes to add.
        """
        line = self._get_target_line(customer_id, line_id)
        if gb_amount <= 0:
            raise ValueError("Refuel amount must be positive")
        plan = self._get_plan_by_id(line.plan_id)
        price = plan.data_refueling_price_per_gb
        charge = gb_amount * price
        line.data_refueling_gb += gb_amount
        self._apply_one_time_charge(
            customer_id, charge, f"Data refueling: {gb_amount} GB at ${price}/GB"
        )
        return {
            "message": f"Successfully added {gb_amount} GB of data for line {line_id} for ${charge:.2f}",
            "new_data_refueling_gb": line.data_refueling_gb,
            "charge": charge,
        }

    # ---- task set-up -----------------------------------------------------------------------
    def suspend_line_for_overdue_bill(
        self, customer_id: str, line_id: str, new_bill_id: str, contract_ended: bool
    ) -> str:
        """Give the customer an overdue bill for last month and suspend the line (task set-up)."""
        line = self._get_line_by_id(line_id)
        if line.status != LineStatus.ACTIVE:
            raise ValueError("Line must be active to suspend for unpaid bill")
        amount = self._get_plan_by_id(line.plan_id).price_per_month
        if amount <= 0:
            raise ValueError("Amount must be positive for overdue bill")
        customer = self.get_customer_by_id(customer_id)
        if any(self._get_bill_by_id(b).status == BillStatus.OVERDUE for b in customer.bill_ids):
            raise ValueError("Customer already has an overdue bill")
        last_month_end = TODAY.replace(day=1) - datetime.timedelta(days=1)
        last_month_start = last_month_end.replace(day=1)
        bill = Bill(
            bill_id=new_bill_id,
            customer_id=customer_id,
            period_start=last_month_start,
            period_end=last_month_end,
            issue_date=last_month_start,
            total_due=0,
            due_date=last_month_start + datetime.timedelta(days=14),
            status=BillStatus.OVERDUE,
        )
        bill.line_items.append(
            LineItem(
                description=f"Charge for line {line.line_id}",
                amount=amount,
                date=TODAY,
                item_type="Charge" if amount > 0 else "Credit",
            )
        )
        bill.total_due += amount
        self.db.bills.append(bill)
        customer.bill_ids.append(new_bill_id)
        line.status = LineStatus.SUSPENDED
        line.suspension_start_date = TODAY
        if contract_ended:
            line.contract_end_date = last_month_end
        return (
            f"Line {line_id} suspended for unpaid bill {new_bill_id}. "
            f"Contract ended: {contract_ended}"
        )

    # ---- env assertions ---------------------------------------------------------------------
    def assert_data_refueling_amount(
        self, customer_id: str, line_id: str, expected_amount: float
    ) -> bool:
        line = self._get_target_line(customer_id, line_id)
        return abs(line.data_refueling_gb - expected_amount) < 1e-6

    def assert_line_status(self, customer_id: str, line_id: str, expected_status: str) -> bool:
        return self._get_target_line(customer_id, line_id).status == expected_status

    def assert_overdue_bill_exists(self, customer_id: str, overdue_bill_id: str) -> bool:
        customer = self.get_customer_by_id(customer_id)
        if overdue_bill_id not in customer.bill_ids:
            raise ValueError(f"Overdue bill {overdue_bill_id} not found")
        if self._get_bill_by_id(overdue_bill_id).status != BillStatus.OVERDUE:
            raise ValueError(f"Overdue bill {overdue_bill_id} is not overdue")
        return True

    def assert_no_overdue_bill(self, overdue_bill_id: str) -> bool:
        """True when the bill is gone or paid."""
        try:
            return self._get_bill_by_id(overdue_bill_id).status == BillStatus.PAID
        except ValueError:
            return True
