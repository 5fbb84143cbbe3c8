"""tau2's telecom environment: the carrier database and the customer's phone, kept in step.

`TelecomEnvironment.sync()` runs after every successful tool call and environment function
(the base class calls it) and copies the carrier's view onto the phone's surroundings exactly
as tau2-bench v1.0.1's `TelecomEnvironment.sync_tools` does: the line's status (active or
not), whether roaming is allowed, whether the data cap (plan limit plus refuelled data) is
used up; a payment the customer made marks its bill paid and clears the request; and when no
request is pending, the first bill awaiting payment becomes the phone's payment request.

`replay_gold()` runs a task's gold actions the way tau2's evaluator builds its reference
environment: straight tool calls in list order, no sync between them, failures ignored. This
module does not score anything; see the gym's reward module.
"""

from __future__ import annotations

from gyms.tau2.domain import AGENT, USER, Tau2Environment
from gyms.tau2.telecom.carrier_models import LineStatus
from gyms.tau2.telecom.carrier_tools import TelecomTools
from gyms.tau2.telecom.phone_models import PaymentRequest
from gyms.tau2.telecom.phone_tools import TelecomUserTools


class TelecomEnvironment(Tau2Environment):
    """Agent toolkit `TelecomTools`, user toolkit `TelecomUserTools`, coupled by `sync()`."""

    agent: TelecomTools
    user: TelecomUserTools

    def sync(self) -> None:
        where = self.user.db.surroundings
        phone_number = where.phone_number
        if phone_number is None:
            return
        carrier = self.agent
        line = carrier._get_line_by_phone(phone_number)
        where.line_active = line.status == LineStatus.ACTIVE
        where.roaming_allowed = bool(line.roaming_enabled)
        plan = carrier._get_plan_by_id(line.plan_id)
        where.mobile_data_usage_exceeded = (
            line.data_used_gb >= plan.data_limit_gb + line.data_refueling_gb
        )
        request = where.payment_request
        if request is not None and request.paid:
            carrier._set_bill_to_paid(request.bill_id)
            where.payment_request = None
        if where.payment_request is None:
            customer = carrier.get_customer_by_phone(phone_number)
            waiting = carrier._get_bills_awaiting_payment(customer)
            if waiting:
                where.payment_request = PaymentRequest(
                    bill_id=waiting[0].bill_id, amount_due=waiting[0].total_due
                )

    def replay_gold(self, actions: list[dict]) -> list[str]:
        """Gold actions as tau2's evaluator replays them (no sync); the errors met, if any."""
        errors = []
        for action in actions:
            requestor = action.get("requestor", AGENT)
            name = action["name"]
            kit = self.user if requestor == USER else self.agent
            if requestor == AGENT and self.solo and self.user.has_tool(name):
                kit = self.user
            try:
                if not kit.has_tool(name):
                    raise ValueError(f"Tool '{name}' not found.")
                getattr(kit, name)(**(action.get("arguments") or {}))
            except Exception as exc:  # noqa: BLE001 - tau2 logs and goes on
                errors.append(f"{name}: {exc}")
        return errors
