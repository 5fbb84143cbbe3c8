"""The retail agent's tools over `RetailDB`, with tau2-bench's semantics and error texts.

Behaviour (checks, their order, the exact `ValueError` messages, rounding, and tau2's quirk
that `modify_pending_order_items` prices every swapped item at the last new variant's price)
follows tau2-bench v1.0.1 so that tool messages and database hashes agree with it. The tool
descriptions shown to the model are written for mua; see docs/fidelity.md.
The database lookups they share are in `gyms.tau2.retail.lookups`.
"""

from __future__ import annotations

import json

from gyms.common.tool_docs import shared_args
from gyms.tau2.arithmetic import arithmetic
from gyms.tau2.retail.lookups import RetailLookups
from gyms.tau2.retail.models import (
    GiftCard,
    Order,
    OrderPayment,
    Product,
    User,
    UserAddress,
    Variant,
)
from gyms.tau2.toolkit import GENERIC, HUMAN_TRANSFER, READ, WRITE, tool

# what an exchange / a modification of items checks, in tau2's words: (the order's status, the
# error for another status, for an item not in the order, for lists of different lengths, and
# what a gift card is short of)
_SWAPS = {
    "exchange": (
        "delivered",
        "Non-delivered order cannot be exchanged",
        "Number of {item_id} not found.",
        "The number of items to be exchanged should match.",
        "the price difference",
    ),
    "modify": (
        "pending",
        "Non-pending order cannot be modified",
        "{item_id} not found",
        "The number of items to be exchanged should match",
        "the new item",
    ),
}


# What an argument of these names means in every tool that takes it (`shared_args`).
_SHARED_ARGS = {
    "order_id": "The order id, starting with '#', such as '#W0000000'.",
    "payment_method_id": "The payment method id that pays or receives the price\ndifference, such as 'gift_card_0000000' or 'credit_card_0000000'.",
    "user_id": "The user id, e.g. 'sara_doe_496'.",
    "address1": "First address line, e.g. '123 Main St'.",
    "address2": "Second address line, e.g. 'Apt 1', or ''.",
    "city": "City, e.g. 'San Francisco'.",
    "state": "State, e.g. 'CA'.",
    "country": "Country, e.g. 'USA'.",
    "zip": "Zip code, e.g. '12345'.",
}


@shared_args(_SHARED_ARGS)
class RetailTools(RetailLookups):
    """Tools of the retail domain (class name kept: Python puts it in argument errors)."""

    # ---- tools -----------------------------------------------------------------------------
    @tool(GENERIC)
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return the result rounded to 2 decimals.

        Args:
            expression: Numbers, + - * /, parentheses and spaces only, e.g. '(12.5 + 3) * 2'.
        """
        return arithmetic(expression)

    @tool(WRITE)
    def cancel_pending_order(self, order_id: str, reason: str) -> Order:
        """Cancel an order that is still pending and refund its payments.

        Only pending orders can be cancelled. Explain the cancellation and get an explicit
        yes from the user first. Gift-card payments are refunded at once, other methods in
        5-7 business days. Returns the order after cancellation.

        Args:
            reason: Either 'no longer needed' or 'ordered by mistake'.
        """
        order = self._get_order(order_id)
        if order.status != "pending":
            raise ValueError("Non-pending order cannot be cancelled")
        if reason not in {"no longer needed", "ordered by mistake"}:
            raise ValueError("Invalid reason")
        refunds = []
        for payment in order.payment_history:
            refunds.append(
                OrderPayment(
                    transaction_type="refund",
                    amount=payment.amount,
                    payment_method_id=payment.payment_method_id,
                )
            )
            user = self._get_user(order.user_id)
            method = self._get_payment_method(user.user_id, payment.payment_method_id)
            if isinstance(method, GiftCard):
                method.balance = round(method.balance + payment.amount, 2)
        order.status = "cancelled"
        order.cancel_reason = reason
        order.payment_history.extend(refunds)
        return order

    def _priced_swap(
        self,
        kind: str,
        order_id: str,
        item_ids: list[str],
        new_item_ids: list[str],
        payment_method_id: str,
    ):
        """The checks an `exchange` of delivered items or a `modify` of pending ones makes, in
        tau2's order and words (`_SWAPS`), and what they found: (order, price difference,
        payment method, last variant). A modification refuses an item swapped for itself; an
        exchange rounds the difference before it checks a gift card's balance."""
        status, wrong_status, missing, mismatch, short_balance = _SWAPS[kind]
        exchange = kind == "exchange"
        order = self._get_order(order_id)
        if order.status != status:
            raise ValueError(wrong_status)
        self._check_counts(order, item_ids, missing)
        if len(item_ids) != len(new_item_ids):
            raise ValueError(mismatch)
        diff_price = 0
        variant = None
        for item_id, new_item_id in zip(item_ids, new_item_ids):
            if not exchange and item_id == new_item_id:
                raise ValueError("The new item id should be different from the old item id")
            item = next((i for i in order.items if i.item_id == item_id), None)
            if item is None:
                raise ValueError(f"Item {item_id} not found")
            variant = self._get_variant(item.product_id, new_item_id)
            if not variant.available:
                raise ValueError(f"New item {new_item_id} not found or available")
            diff_price += variant.price - item.price
        if exchange:
            diff_price = round(diff_price, 2)
        method = self._get_payment_method(order.user_id, payment_method_id)
        if isinstance(method, GiftCard) and method.balance < diff_price:
            raise ValueError(f"Insufficient gift card balance to pay for {short_balance}")
        return order, diff_price, method, variant

    @tool(WRITE)
    def exchange_delivered_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> Order:
        """Request an exchange of delivered items for other variants of the same products.

        A delivered order can be returned or exchanged only once. Explain the exchange and
        get an explicit yes from the user first. Returns the order after the request.

        Args:
            item_ids: Item ids to exchange (repeat an id to exchange several of it).
            new_item_ids: The replacement item ids, position by position, each of the same
                product as the item it replaces.
        """
        order, diff_price, _, _ = self._priced_swap(
            "exchange", order_id, item_ids, new_item_ids, payment_method_id
        )
        order.status = "exchange requested"
        order.exchange_items = sorted(item_ids)
        order.exchange_new_items = sorted(new_item_ids)
        order.exchange_payment_method_id = payment_method_id
        order.exchange_price_difference = diff_price
        return order

    @tool(READ)
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Look up a user id by first name, last name and zip code (case-insensitive names).

        Try the email lookup first; use this one when the user cannot give an email or it
        was not found.

        Args:
            first_name: The customer's first name, e.g. 'John'.
            last_name: The customer's last name, e.g. 'Doe'.
            zip: The customer's zip code, e.g. '12345'.
        """
        for user_id, user in self.db.users.items():
            if (
                user.name.first_name.lower() == first_name.lower()
                and user.name.last_name.lower() == last_name.lower()
                and user.address.zip == zip
            ):
                return user_id
        raise ValueError("User not found")

    @tool(READ)
    def find_user_id_by_email(self, email: str) -> str:
        """Look up a user id by email address (case-insensitive).

        Args:
            email: The user's email, e.g. 'someone@example.com'.
        """
        for user_id, user in self.db.users.items():
            if user.email.lower() == email.lower():
                return user_id
        raise ValueError("User not found")

    @tool(READ)
    def get_order_details(self, order_id: str) -> Order:
        """Show an order: status, items, address, fulfillments and payments."""
        return self._get_order(order_id)

    @tool(READ)
    def get_product_details(self, product_id: str) -> Product:
        """Show a product type and all its variants (item ids, options, price, stock).

        Args:
            product_id: The product id, e.g. '6086499569' (not an item id).
        """
        return self._get_product(product_id)

    @tool(READ)
    def get_item_details(self, item_id: str) -> Variant:
        """Show one item (a product variant): options, price and availability.

        Args:
            item_id: The item id, e.g. '1008292230' (not a product id).
        """
        return self._get_item(item_id)

    @tool(READ)
    def get_user_details(self, user_id: str) -> User:
        """Show a user's profile: name, address, email, payment methods and order ids."""
        return self._get_user(user_id)

    @tool(READ)
    def list_all_product_types(self) -> str:
        """List every product type (there are 50) as a JSON object from name to product id."""
        names = {p.name: p.product_id for p in self.db.products.values()}
        return json.dumps(names, sort_keys=True)

    @tool(WRITE)
    def modify_pending_order_address(
        self,
        order_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> Order:
        """Change the shipping address of a pending order.

        Explain the change and get an explicit yes from the user first. Returns the order.
        """
        order = self._get_order(order_id)
        if "pending" not in order.status:
            raise ValueError("Non-pending order cannot be modified")
        order.address = UserAddress(
            address1=address1, address2=address2, city=city, state=state, country=country, zip=zip
        )
        return order

    @tool(WRITE)
    def modify_pending_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> Order:
        """Swap items of a pending order for other variants of the same products (once only).

        Explain the change and get an explicit yes from the user first. Returns the order.

        Args:
            item_ids: Item ids to swap (repeat an id to swap several of it).
            new_item_ids: The replacement item ids, position by position, each a different
                variant of the same product.
        """
        order, diff_price, method, variant = self._priced_swap(
            "modify", order_id, item_ids, new_item_ids, payment_method_id
        )
        order.payment_history.append(
            OrderPayment(
                transaction_type="payment" if diff_price > 0 else "refund",
                amount=abs(diff_price),
                payment_method_id=payment_method_id,
            )
        )
        if isinstance(method, GiftCard):
            method.balance = round(method.balance - diff_price, 2)
        for item_id, new_item_id in zip(item_ids, new_item_ids):
            item = next((i for i in order.items if i.item_id == item_id), None)
            if item is None:
                raise ValueError(f"Item {item_id} not found")
            item.item_id = new_item_id
            item.price = variant.price  # tau2 prices every swapped item at the last variant
            item.options = variant.options
        order.status = "pending (item modified)"
        return order

    @tool(WRITE)
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> Order:
        """Pay a pending order with another payment method (the old one is refunded).

        Explain the change and get an explicit yes from the user first. Returns the order.

        Args:
            payment_method_id: The new payment method id, such as 'gift_card_0000000' or
                'credit_card_0000000'.
        """
        order = self._get_order(order_id)
        if "pending" not in order.status:
            raise ValueError("Non-pending order cannot be modified")
        method = self._get_payment_method(order.user_id, payment_method_id)
        history = order.payment_history
        if len(history) != 1 or history[0].transaction_type != "payment":
            raise ValueError("There should be exactly one payment for a pending order")
        if history[0].payment_method_id == payment_method_id:
            raise ValueError("The new payment method should be different from the current one")
        amount = history[0].amount
        if isinstance(method, GiftCard) and method.balance < amount:
            raise ValueError("Insufficient gift card balance to pay for the order")
        old_id = history[0].payment_method_id
        history.extend(
            [
                OrderPayment(
                    transaction_type="payment", amount=amount, payment_method_id=payment_method_id
                ),
                OrderPayment(transaction_type="refund", amount=amount, payment_method_id=old_id),
            ]
        )
        if isinstance(method, GiftCard):
            method.balance = round(method.balance - amount, 2)
        old_method = self._get_payment_method(order.user_id, old_id)
        if isinstance(old_method, GiftCard):
            old_method.balance = round(old_method.balance + amount, 2)
        return order

    @tool(WRITE)
    def modify_user_address(
        self,
        user_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> User:
        """Change a user's default address.

        Explain the change and get an explicit yes from the user first. Returns the user.
        """
        user = self._get_user(user_id)
        user.address = UserAddress(
            address1=address1, address2=address2, city=city, state=state, country=country, zip=zip
        )
        return user

    @tool(WRITE)
    def return_delivered_order_items(
        self, order_id: str, item_ids: list[str], payment_method_id: str
    ) -> Order:
        """Request a return of items from a delivered order; the status becomes
        'return requested' and the user gets return instructions by email.

        Explain the return and get an explicit yes from the user first. Returns the order.

        Args:
            item_ids: Item ids to return (repeat an id to return several of it).
            payment_method_id: Where the refund goes: the order's original payment method or
                a gift card, such as 'gift_card_0000000'.
        """
        order = self._get_order(order_id)
        if order.status != "delivered":
            raise ValueError("Non-delivered order cannot be returned")
        user = self._get_user(order.user_id)
        method = self._get_payment_method(user.user_id, payment_method_id)
        if (
            not isinstance(method, GiftCard)
            and payment_method_id != order.payment_history[0].payment_method_id
        ):
            raise ValueError("Payment method should be the original payment method")
        self._check_counts(order, item_ids, "Some item not found")
        order.status = "return requested"
        order.return_items = sorted(item_ids)
        order.return_payment_method_id = payment_method_id
        return order

    transfer_to_human_agents = HUMAN_TRANSFER
