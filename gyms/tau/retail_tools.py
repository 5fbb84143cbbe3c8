"""Retail domain tools: users, orders and products of an online shop.

Each tool follows the public tau-bench retail tool of the same name in arguments, checks,
returned text (JSON of the record, or "Error: ...") and state change, so that a database
replayed here hashes like one replayed there. Records are changed only through `db.mut()`.

Deliberately not here: policy enforcement (confirmation, authentication): like the public
benchmark, the tools check data preconditions only and leave policy to the agent.
"""

from __future__ import annotations

import json

from gyms.common.tool_docs import shared_args
from gyms.tau.common_tools import Toolset
from mua.gym.tools import tool

_CANCEL_REASONS = ("no longer needed", "ordered by mistake")


def _missing_items(order: dict, item_ids: list[str]) -> str | None:
    """The first requested id the order holds fewer times than requested (duplicates allowed)."""
    held = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > held.count(item_id):
            return item_id
    return None


# What an argument of these names means in every tool that takes it (`shared_args`).
_SHARED_ARGS = {
    "user_id": "The user id, such as 'sara_doe_496'.",
    "order_id": "The order id, such as '#W0000000'. Note the '#' at the beginning.",
    "payment_method_id": "The payment method id to pay or receive refund for the item price difference, such as 'gift_card_0000000' or 'credit_card_0000000'.",
    "address1": "The first line of the address, such as '123 Main St'.",
    "address2": "The second line of the address, such as 'Apt 1' or ''.",
    "city": "The city, such as 'San Francisco'.",
    "state": "The state, such as 'CA'.",
    "country": "The country, such as 'USA'.",
    "zip": "The zip code, such as '12345'.",
}


@shared_args(_SHARED_ARGS)
class RetailTools(Toolset):
    domain = "retail"

    def _user_of(self, order: dict) -> dict:
        return self.db.get("users", order["user_id"])

    @tool
    def find_user_id_by_email(self, email: str) -> str:
        """Find user id by email. If the user is not found, the function will return an error message.

        Args:
            email: The email of the user, such as 'something@example.com'.
        """
        for user_id, profile in self.db.items("users"):
            if profile["email"].lower() == email.lower():
                return user_id
        return "Error: user not found"

    @tool
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Find user id by first name, last name, and zip code. If the user is not found, the function will return an error message. By default, find user id by email, and only call this function if the user is not found by email or cannot remember email.

        Args:
            first_name: The first name of the customer, such as 'John'.
            last_name: The last name of the customer, such as 'Doe'.
            zip: The zip code of the customer, such as '12345'.
        """
        for user_id, profile in self.db.items("users"):
            name = profile["name"]
            if (
                name["first_name"].lower() == first_name.lower()
                and name["last_name"].lower() == last_name.lower()
                and profile["address"]["zip"] == zip
            ):
                return user_id
        return "Error: user not found"

    @tool
    def get_user_details(self, user_id: str) -> str:
        """Get the details of a user, including their orders."""
        return self._record_json("users", user_id, "user")

    @tool
    def get_order_details(self, order_id: str) -> str:
        """Get the status and details of an order."""
        return self._record_json("orders", order_id, "order")

    @tool
    def get_product_details(self, product_id: str) -> str:
        """Get the inventory details of a product.

        Args:
            product_id: The product id, such as '6086499569'. The product id is different from the item id.
        """
        return self._record_json("products", product_id, "product")

    @tool
    def list_all_product_types(self) -> str:
        """List the name and product id of all product types. Each product type has a variety of different items with unique item ids and options."""
        by_name = {p["name"]: p["product_id"] for p in self.db.values("products")}
        return json.dumps(dict(sorted(by_name.items())))

    @tool
    def cancel_pending_order(self, order_id: str, reason: str) -> str:
        """Cancel a pending order. If the order is already processed or delivered, it cannot be cancelled. The agent needs to explain the cancellation detail and ask for explicit user confirmation (yes/no) to proceed. If the user confirms, the order status will be changed to 'cancelled' and the payment will be refunded.

        Args:
            reason: The reason for cancellation, either 'no longer needed' or 'ordered by mistake'.
        """
        order = self.db.get("orders", order_id)
        if order is None:
            return "Error: order not found"
        if order["status"] != "pending":
            return "Error: non-pending order cannot be cancelled"
        if reason not in _CANCEL_REASONS:
            return "Error: invalid reason"
        order = self.db.mut("orders", order_id)
        refunds = []
        for payment in order["payment_history"]:
            method_id = payment["payment_method_id"]
            refunds.append(
                {
                    "transaction_type": "refund",
                    "amount": payment["amount"],
                    "payment_method_id": method_id,
                }
            )
            if "gift_card" in method_id:  # gift cards are refunded at once
                method = self.db.mut("users", order["user_id"])["payment_methods"][method_id]
                method["balance"] = round(method["balance"] + payment["amount"], 2)
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["payment_history"].extend(refunds)
        return json.dumps(order)

    def _price_difference(
        self, order: dict, item_ids: list[str], new_item_ids: list[str]
    ) -> float | str:
        """Sum of new minus old prices, or an "Error: ..." string for an unknown/unavailable item."""
        diff = 0
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
            item = next(i for i in order["items"] if i["item_id"] == item_id)
            variants = self.db.get("products", item["product_id"])["variants"]
            if not (new_item_id in variants and variants[new_item_id]["available"]):
                return f"Error: new item {new_item_id} not found or available"
            diff += variants[new_item_id]["price"] - item["price"]
        return diff

    def _checked_swap(
        self,
        order_id: str,
        item_ids: list[str],
        new_item_ids: list[str],
        payment_method_id: str,
        *,
        status: str,
        wrong_status: str,
        short_balance: str,
        round_difference: bool,
    ) -> tuple[dict, float, dict] | str:
        """The checks an exchange and an item modification share, in the public tools' order.

        (order, price difference, payment method) when the swap may go ahead, else the
        "Error: ..." text to return. The two tools differ only in the order status they need,
        their wording, and whether the difference is rounded before the gift-card check.
        """
        order = self.db.get("orders", order_id)
        if order is None:
            return "Error: order not found"
        if order["status"] != status:
            return f"Error: {wrong_status}"
        missing = _missing_items(order, item_ids)
        if missing is not None:
            return f"Error: {missing} not found"
        if len(item_ids) != len(new_item_ids):
            return "Error: the number of items to be exchanged should match"
        diff = self._price_difference(order, item_ids, new_item_ids)
        if isinstance(diff, str):
            return diff
        if round_difference:
            diff = round(diff, 2)
        methods = self._user_of(order)["payment_methods"]
        if payment_method_id not in methods:
            return "Error: payment method not found"
        method = methods[payment_method_id]
        if method["source"] == "gift_card" and method["balance"] < diff:
            return f"Error: insufficient gift card balance to pay for {short_balance}"
        return order, diff, method

    @tool
    def exchange_delivered_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> str:
        """Exchange items in a delivered order to new items of the same product type. For a delivered order, return or exchange can be only done once by the agent. The agent needs to explain the exchange detail and ask for explicit user confirmation (yes/no) to proceed.

        Args:
            item_ids: The item ids to be exchanged, each such as '1008292230'. There could be duplicate items in the list.
            new_item_ids: The item ids to be exchanged for, each such as '1008292230'. Each new item id should match the item id in the same position and be of the same product.
        """
        checked = self._checked_swap(
            order_id,
            item_ids,
            new_item_ids,
            payment_method_id,
            status="delivered",
            wrong_status="non-delivered order cannot be exchanged",
            short_balance="the price difference",
            round_difference=True,
        )
        if isinstance(checked, str):
            return checked
        _, diff, _ = checked
        order = self.db.mut("orders", order_id)
        order["status"] = "exchange requested"
        order["exchange_items"] = sorted(item_ids)
        order["exchange_new_items"] = sorted(new_item_ids)
        order["exchange_payment_method_id"] = payment_method_id
        order["exchange_price_difference"] = diff
        return json.dumps(order)

    @tool
    def modify_pending_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> str:
        """Modify items in a pending order to new items of the same product type. For a pending order, this function can only be called once. The agent needs to explain the exchange detail and ask for explicit user confirmation (yes/no) to proceed.

        Args:
            item_ids: The item ids to be modified, each such as '1008292230'. There could be duplicate items in the list.
            new_item_ids: The item ids to be modified for, each such as '1008292230'. Each new item id should match the item id in the same position and be of the same product.
        """
        checked = self._checked_swap(
            order_id,
            item_ids,
            new_item_ids,
            payment_method_id,
            status="pending",
            wrong_status="non-pending order cannot be modified",
            short_balance="the new item",
            round_difference=False,
        )
        if isinstance(checked, str):
            return checked
        _, diff, method = checked
        order = self.db.mut("orders", order_id)
        order["payment_history"].append(
            {
                "transaction_type": "payment" if diff > 0 else "refund",
                "amount": abs(diff),
                "payment_method_id": payment_method_id,
            }
        )
        if method["source"] == "gift_card":
            card = self.db.mut("users", order["user_id"])["payment_methods"][payment_method_id]
            card["balance"] = round(card["balance"] - diff, 2)
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
            item = next(i for i in order["items"] if i["item_id"] == item_id)
            variant = self.db.get("products", item["product_id"])["variants"][new_item_id]
            item["item_id"] = new_item_id
            item["price"] = variant["price"]
            item["options"] = dict(variant["options"])
        order["status"] = "pending (item modified)"
        return json.dumps(order)

    @tool
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> str:
        """Modify the payment method of a pending order. The agent needs to explain the modification detail and ask for explicit user confirmation (yes/no) to proceed.

        Args:
            payment_method_id: The payment method id to pay for the order, such as 'gift_card_0000000' or 'credit_card_0000000'.
        """
        order = self.db.get("orders", order_id)
        if order is None:
            return "Error: order not found"
        if order["status"] != "pending":
            return "Error: non-pending order cannot be modified"
        methods = self._user_of(order)["payment_methods"]
        if payment_method_id not in methods:
            return "Error: payment method not found"
        history = order["payment_history"]
        if len(history) > 1 or history[0]["transaction_type"] != "payment":
            return "Error: there should be exactly one payment for a pending order"
        old_method_id = history[0]["payment_method_id"]
        if old_method_id == payment_method_id:
            return "Error: the new payment method should be different from the current one"
        amount = history[0]["amount"]
        if (
            methods[payment_method_id]["source"] == "gift_card"
            and methods[payment_method_id]["balance"] < amount
        ):
            return "Error: insufficient gift card balance to pay for the order"
        order = self.db.mut("orders", order_id)
        order["payment_history"].extend(
            [
                {
                    "transaction_type": "payment",
                    "amount": amount,
                    "payment_method_id": payment_method_id,
                },
                {
                    "transaction_type": "refund",
                    "amount": amount,
                    "payment_method_id": old_method_id,
                },
            ]
        )
        user_methods = None
        if methods[payment_method_id]["source"] == "gift_card":
            user_methods = self.db.mut("users", order["user_id"])["payment_methods"]
            user_methods[payment_method_id]["balance"] = round(
                user_methods[payment_method_id]["balance"] - amount, 2
            )
        if "gift_card" in old_method_id:
            user_methods = user_methods or self.db.mut("users", order["user_id"])["payment_methods"]
            user_methods[old_method_id]["balance"] = round(
                user_methods[old_method_id]["balance"] + amount, 2
            )
        return json.dumps(order)

    @tool
    def modify_pending_order_address(
        self,
        order_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> str:
        """Modify the shipping address of a pending order. The agent needs to explain the modification detail and ask for explicit user confirmation (yes/no) to proceed."""
        order = self.db.get("orders", order_id)
        if order is None:
            return "Error: order not found"
        if order["status"] != "pending":
            return "Error: non-pending order cannot be modified"
        order = self.db.mut("orders", order_id)
        order["address"] = {
            "address1": address1,
            "address2": address2,
            "city": city,
            "state": state,
            "country": country,
            "zip": zip,
        }
        return json.dumps(order)

    @tool
    def modify_user_address(
        self,
        user_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> str:
        """Modify the default address of a user. The agent needs to explain the modification detail and ask for explicit user confirmation (yes/no) to proceed."""
        if not self.db.has("users", user_id):
            return "Error: user not found"
        user = self.db.mut("users", user_id)
        user["address"] = {
            "address1": address1,
            "address2": address2,
            "city": city,
            "state": state,
            "country": country,
            "zip": zip,
        }
        return json.dumps(user)

    @tool
    def return_delivered_order_items(
        self, order_id: str, item_ids: list[str], payment_method_id: str
    ) -> str:
        """Return some items of a delivered order. The order status will be changed to 'return requested'. The agent needs to explain the return detail and ask for explicit user confirmation (yes/no) to proceed. The user will receive follow-up email for how and where to return the item.

        Args:
            item_ids: The item ids to be returned, each such as '1008292230'. There could be duplicate items in the list.
            payment_method_id: The payment method id to receive the refund, either the original payment method or a gift card, such as 'gift_card_0000000' or 'credit_card_0000000'.
        """
        order = self.db.get("orders", order_id)
        if order is None:
            return "Error: order not found"
        if order["status"] != "delivered":
            return "Error: non-delivered order cannot be returned"
        if payment_method_id not in self._user_of(order)["payment_methods"]:
            return "Error: payment method not found"
        if (
            "gift_card" not in payment_method_id
            and payment_method_id != order["payment_history"][0]["payment_method_id"]
        ):
            return (
                "Error: payment method should be either the original payment method or a gift card"
            )
        if _missing_items(order, item_ids) is not None:
            return "Error: some item not found"
        order = self.db.mut("orders", order_id)
        order["status"] = "return requested"
        order["return_items"] = sorted(item_ids)
        order["return_payment_method_id"] = payment_method_id
        return json.dumps(order)
