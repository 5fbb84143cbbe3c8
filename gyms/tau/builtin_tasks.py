"""Generated tasks over the built-in shop: instruction, gold actions and required outputs.

Nine scenario kinds, each written as a second-person instruction (as in the public tasks) plus
the gold tool calls that solve it under the built-in policy. Each kind is generated for three
customers, chosen so every gold action succeeds; the set is the same on every call.

Deliberately not here: the shop's tables (builtin.py) and Task rows (data.py).
"""

from __future__ import annotations

import random

from gyms.tau.builtin import make_tables

KINDS = (
    "cancel",
    "return",
    "exchange",
    "modify_items",
    "order_address",
    "user_address",
    "modify_payment",
    "order_total",
    "refuse_cancel",
)
PER_KIND = 3


def _options(options: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items())


def _who(user: dict, by_email: bool) -> tuple[str, dict]:
    name = user["name"]
    if by_email:
        return f"Your email is {user['email']}.", {
            "name": "find_user_id_by_email",
            "kwargs": {"email": user["email"]},
        }
    text = f"Your name is {name['first_name']} {name['last_name']} and your zip code is {user['address']['zip']}."
    call = {
        "name": "find_user_id_by_name_zip",
        "kwargs": {
            "first_name": name["first_name"],
            "last_name": name["last_name"],
            "zip": user["address"]["zip"],
        },
    }
    return text, call


def _orders(tables: dict, user: dict, status: str) -> list[dict]:
    return [tables["orders"][o] for o in user["orders"] if tables["orders"][o]["status"] == status]


def _swap_target(tables: dict, order: dict) -> tuple[dict, dict] | None:
    """An item of the order and another available variant of the same product."""
    for item in order["items"]:
        variants = tables["products"][item["product_id"]]["variants"].values()
        other = [v for v in variants if v["available"] and v["item_id"] != item["item_id"]]
        if other:
            return item, other[0]
    return None


def _new_address(rng: random.Random) -> dict:
    return {
        "address1": f"{rng.randint(10, 999)} Orchard Way",
        "address2": f"Apt {rng.randint(1, 40)}",
        "city": "Boise",
        "state": "ID",
        "country": "USA",
        "zip": str(rng.randint(83700, 83799)),
    }


def _scenario(
    kind: str, tables: dict, user: dict, rng: random.Random
) -> tuple[str, list[dict], list[str]] | None:
    """(what the customer wants, write actions, outputs) or None when this customer cannot have it."""
    pending, delivered = _orders(tables, user, "pending"), _orders(tables, user, "delivered")
    methods = user["payment_methods"]
    gift = next(m for m in methods if m.startswith("gift_card"))
    paypal = next(m for m in methods if m.startswith("paypal"))
    if kind == "cancel":
        order, reason = pending[0], rng.choice(["no longer needed", "ordered by mistake"])
        return (
            f"You want to cancel your pending order {order['order_id']} because it was {reason}.",
            [
                {
                    "name": "cancel_pending_order",
                    "kwargs": {"order_id": order["order_id"], "reason": reason},
                }
            ],
            [],
        )
    if kind == "return":
        order = delivered[0]
        item = order["items"][0]
        method = order["payment_history"][0]["payment_method_id"]
        return (
            f"You received order {order['order_id']} and want to return the {item['name']} ({_options(item['options'])}), "
            f"refunded to the original payment method.",
            [
                {
                    "name": "return_delivered_order_items",
                    "kwargs": {
                        "order_id": order["order_id"],
                        "item_ids": [item["item_id"]],
                        "payment_method_id": method,
                    },
                }
            ],
            [],
        )
    if kind in ("exchange", "modify_items"):
        order = (delivered if kind == "exchange" else pending)[0]
        target = _swap_target(tables, order)
        if target is None:
            return None
        item, new = target
        verb, tool = (
            ("exchange", "exchange_delivered_order_items")
            if kind == "exchange"
            else ("change", "modify_pending_order_items")
        )
        balance = methods[gift]["balance"]
        payer = gift if balance >= new["price"] - item["price"] else paypal
        return (
            f"In order {order['order_id']} you want to {verb} the {item['name']} ({_options(item['options'])}) for the one with "
            f"{_options(new['options'])}, settling any price difference with {payer}.",
            [
                {
                    "name": tool,
                    "kwargs": {
                        "order_id": order["order_id"],
                        "item_ids": [item["item_id"]],
                        "new_item_ids": [new["item_id"]],
                        "payment_method_id": payer,
                    },
                }
            ],
            [],
        )
    if kind in ("order_address", "user_address"):
        address = _new_address(rng)
        where = ", ".join(
            address[k] for k in ("address1", "address2", "city", "state", "zip", "country")
        )
        if kind == "order_address":
            order_id = pending[0]["order_id"]
            return (
                f"You moved: pending order {order_id} should be shipped to {where}.",
                [
                    {
                        "name": "modify_pending_order_address",
                        "kwargs": {"order_id": order_id, **address},
                    }
                ],
                [],
            )
        return (
            f"You moved and want your default address changed to {where}.",
            [{"name": "modify_user_address", "kwargs": {"user_id": None, **address}}],
            [],
        )
    if kind == "modify_payment":
        order_id = pending[-1]["order_id"]
        return (
            f"You want to pay for pending order {order_id} with your PayPal account ({paypal}) instead.",
            [
                {
                    "name": "modify_pending_order_payment",
                    "kwargs": {"order_id": order_id, "payment_method_id": paypal},
                }
            ],
            [],
        )
    if kind == "order_total":
        order = delivered[0]
        return (
            f"You want to know how much you paid in total for order {order['order_id']}.",
            [],
            [str(order["payment_history"][0]["amount"])],
        )
    if kind == "refuse_cancel":
        order = delivered[0]
        return (
            f"You want to cancel order {order['order_id']}, which was already delivered. If the agent says it cannot be "
            f"cancelled, accept that and end the conversation.",
            [],
            [],
        )
    raise ValueError(kind)


def make_task_dicts() -> list[dict]:
    """The built-in tasks as {user_id, instruction, actions, outputs}, in a fixed order."""
    tables = make_tables()
    user_ids = list(tables["users"])
    rng = random.Random(7)
    tasks = []
    for k, kind in enumerate(KINDS):
        made, u = 0, k
        while made < PER_KIND:
            user_id = user_ids[u % len(user_ids)]
            u += 1
            user = tables["users"][user_id]
            found = _scenario(kind, tables, user, rng)
            if found is None:
                continue
            wish, writes, outputs = found
            who_text, who_call = _who(user, by_email=(made % 2 == 1))
            for action in writes:
                if "user_id" in action["kwargs"]:
                    action["kwargs"]["user_id"] = user_id
            order_ids = [a["kwargs"]["order_id"] for a in writes if "order_id" in a["kwargs"]]
            order_ids += [
                w for w in wish.split() if w.startswith("#W") and w.rstrip(",.") not in order_ids
            ][:1]
            lookups = [
                {"name": "get_order_details", "kwargs": {"order_id": o.rstrip(",.")}}
                for o in order_ids
            ]
            tasks.append(
                {
                    "user_id": user_id,
                    "instruction": f"{who_text} {wish}",
                    "kind": kind,
                    "actions": [who_call, *lookups, *writes],
                    "outputs": outputs,
                }
            )
            made += 1
    return tasks
