"""The built-in tau data: a small synthetic shop (retail layout), its policy, and generated tasks.

Everything here is produced by code from fixed seeds, so tests and demos run without the public
data: 6 product types with option variants, 8 customers with 4 orders each (pending, delivered,
processed), and 27 tasks over 9 scenario kinds (cancel, return, exchange, item change, order
address, default address, payment change, an information request with a required output, and a
request the policy refuses, which changes nothing). Task i goes to `test` when i % 3 == 2, else
`train`.

Deliberately not here: the public tau-bench data (data_prep.tau) and any airline data.
"""

from __future__ import annotations

import itertools
import random

POLICY = """# Shop agent policy

You are a customer service agent of an online shop. You can help a customer cancel or modify
pending orders, return or exchange delivered orders, change their default address, and answer
questions about their own profile, orders and the shop's products.

- First authenticate the customer: find their user id by email, or by first name, last name and
  zip code. Do this even when the customer gives a user id.
- Help only the authenticated customer; refuse requests about other customers.
- Before any action that changes the database (cancel, modify, return, exchange, address change),
  list the details and get an explicit "yes" from the customer.
- Make at most one tool call at a time, and do not write to the customer in the same turn.
- Do not make up information, procedures or recommendations.
- Order statuses: pending, processed, delivered, cancelled. Only pending orders can be cancelled or
  modified; only delivered orders can be returned or exchanged.
- A cancellation reason is either "no longer needed" or "ordered by mistake".
- An item can only be exchanged or modified into another available item of the same product.
  A price difference is paid or refunded with a payment method of the customer; a gift card must
  cover any amount it pays.
- A return is refunded to the original payment method or to a gift card of the customer.
- Transfer to a human agent only when the request cannot be handled with your tools.
"""

_PRODUCTS = [
    ("T-Shirt", {"color": ["red", "blue", "black"], "size": ["S", "M", "L"]}, 30.0),
    ("Water Bottle", {"capacity": ["500ml", "750ml", "1000ml"], "color": ["green", "white"]}, 25.0),
    (
        "Desk Lamp",
        {"color": ["black", "silver"], "power source": ["battery", "USB", "AC adapter"]},
        80.0,
    ),
    ("Backpack", {"color": ["grey", "navy"], "size": ["small", "large"]}, 90.0),
    ("Headphones", {"type": ["in-ear", "over-ear"], "color": ["black", "white", "red"]}, 150.0),
    ("Coffee Mug", {"material": ["ceramic", "glass"], "color": ["white", "yellow"]}, 15.0),
]
_FIRST = ["Ada", "Bruno", "Chiara", "Dev", "Elif", "Femi", "Greta", "Hugo"]
_LAST = ["Moreau", "Okafor", "Lindqvist", "Sato", "Novak", "Ramos", "Haddad", "Keller"]
_STREETS = ["Maple Avenue", "Harbor Road", "Elm Street", "Cedar Lane", "Lake Drive", "Hill Court"]
_CITIES = [
    ("Portland", "OR"),
    ("Austin", "TX"),
    ("Denver", "CO"),
    ("Madison", "WI"),
    ("Raleigh", "NC"),
]
_ORDER_STATUSES = ["pending", "delivered", "pending", "processed"]


def _digits(rng: random.Random, n: int) -> str:
    return str(rng.randint(10 ** (n - 1), 10**n - 1))


def _address(rng: random.Random) -> dict:
    city, state = rng.choice(_CITIES)
    return {
        "address1": f"{rng.randint(10, 999)} {rng.choice(_STREETS)}",
        "address2": f"Suite {rng.randint(100, 999)}",
        "city": city,
        "country": "USA",
        "state": state,
        "zip": _digits(rng, 5),
    }


def _make_products(rng: random.Random) -> dict[str, dict]:
    products = {}
    for name, dims, base_price in _PRODUCTS:
        product_id = _digits(rng, 10)
        variants = {}
        for i, combo in enumerate(itertools.product(*dims.values())):
            item_id = _digits(rng, 10)
            variants[item_id] = {
                "item_id": item_id,
                "options": dict(zip(dims, combo, strict=True)),
                "available": i % 4 != 3,
                "price": round(base_price * rng.uniform(0.8, 1.25), 2),
            }
        products[product_id] = {"name": name, "product_id": product_id, "variants": variants}
    return products


def _payment_methods(rng: random.Random) -> dict[str, dict]:
    card, gift, paypal = (
        f"{kind}_{_digits(rng, 7)}" for kind in ("credit_card", "gift_card", "paypal")
    )
    return {
        card: {
            "source": "credit_card",
            "brand": rng.choice(["visa", "mastercard"]),
            "last_four": _digits(rng, 4),
            "id": card,
        },
        gift: {"source": "gift_card", "balance": float(rng.randint(20, 300)), "id": gift},
        paypal: {"source": "paypal", "id": paypal},
    }


def _make_order(rng: random.Random, user_id: str, user: dict, products: dict, status: str) -> dict:
    order_id = f"#W{_digits(rng, 7)}"
    items = []
    for product in rng.sample(list(products.values()), rng.randint(1, 3)):
        available = [v for v in product["variants"].values() if v["available"]]
        variant = rng.choice(available)
        items.append(
            {
                "name": product["name"],
                "product_id": product["product_id"],
                "item_id": variant["item_id"],
                "price": variant["price"],
                "options": dict(variant["options"]),
            }
        )
    fulfillments = []
    if status != "pending":
        fulfillments = [
            {"tracking_id": [_digits(rng, 12)], "item_ids": [i["item_id"] for i in items]}
        ]
    method_id = next(iter(user["payment_methods"]))  # the credit card
    return {
        "order_id": order_id,
        "user_id": user_id,
        "address": dict(user["address"]),
        "items": items,
        "fulfillments": fulfillments,
        "status": status,
        "payment_history": [
            {
                "transaction_type": "payment",
                "amount": round(sum(i["price"] for i in items), 2),
                "payment_method_id": method_id,
            }
        ],
    }


def make_tables() -> dict[str, dict[str, dict]]:
    """The synthetic shop: {"orders": ..., "products": ..., "users": ...} (same every call)."""
    rng = random.Random(20240515)
    products = _make_products(rng)
    users, orders = {}, {}
    for first, last in zip(_FIRST, _LAST, strict=True):
        user_id = f"{first.lower()}_{last.lower()}_{rng.randint(1000, 9999)}"
        user = {
            "name": {"first_name": first, "last_name": last},
            "address": _address(rng),
            "email": f"{first.lower()}.{last.lower()}{rng.randint(10, 99)}@example.com",
            "payment_methods": _payment_methods(rng),
            "orders": [],
        }
        for status in _ORDER_STATUSES:
            order = _make_order(rng, user_id, user, products, status)
            orders[order["order_id"]] = order
            user["orders"].append(order["order_id"])
        users[user_id] = user
    return {"orders": orders, "products": products, "users": users}
