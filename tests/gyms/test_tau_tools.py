"""tau tools: hand-checked state changes and error strings (retail on the built-in shop, airline on a tiny DB)."""

from __future__ import annotations

import json

import pytest

from gyms.tau import builtin
from gyms.tau.airline_tools import AirlineTools
from gyms.tau.common_tools import invoke, tool_methods
from gyms.tau.db import BaseDB, sha256_of
from gyms.tau.retail_tools import RetailTools
from mua.gym.tools import tool_schema


@pytest.fixture
def shop():
    tables = builtin.make_tables()
    return RetailTools(BaseDB("test:shop", tables).view()), tables


def _user_with(tables, status):
    for user_id, user in tables["users"].items():
        for order_id in user["orders"]:
            if tables["orders"][order_id]["status"] == status:
                return user_id, order_id
    raise AssertionError(status)


def test_tool_lists_match_the_public_domains():
    retail = set(tool_methods(RetailTools(None)))
    airline = set(tool_methods(AirlineTools(None)))
    assert len(retail) == 16 and len(airline) == 14
    assert {"think", "calculate", "transfer_to_human_agents"} <= retail & airline
    for fn in tool_methods(RetailTools(None)).values():
        schema = tool_schema(fn)["function"]
        assert schema["description"] and all(
            p.get("description") for p in schema["parameters"]["properties"].values()
        ), schema["name"]


def test_lookups_and_missing_ids(shop):
    tools, tables = shop
    user_id, order_id = _user_with(tables, "pending")
    user = tables["users"][user_id]
    assert invoke(tools, "find_user_id_by_email", {"email": user["email"].upper()}) == user_id
    name = user["name"]
    assert (
        invoke(
            tools,
            "find_user_id_by_name_zip",
            {
                "first_name": name["first_name"].lower(),
                "last_name": name["last_name"],
                "zip": user["address"]["zip"],
            },
        )
        == user_id
    )
    assert (
        invoke(tools, "find_user_id_by_email", {"email": "nobody@x.com"}) == "Error: user not found"
    )
    assert invoke(tools, "get_order_details", {"order_id": "#W0"}) == "Error: order not found"
    assert invoke(tools, "get_product_details", {"product_id": "1"}) == "Error: product not found"
    assert invoke(tools, "get_user_details", {"user_id": "x"}) == "Error: user not found"
    assert (
        json.loads(invoke(tools, "get_order_details", {"order_id": order_id}))
        == tables["orders"][order_id]
    )
    listing = json.loads(invoke(tools, "list_all_product_types", {}))
    assert list(listing) == sorted(listing) and len(listing) == 6


def test_cancel_refunds_and_records_reason(shop):
    tools, tables = shop
    user_id, order_id = _user_with(tables, "pending")
    before = json.loads(json.dumps(tables))
    assert (
        invoke(tools, "cancel_pending_order", {"order_id": order_id, "reason": "because"})
        == "Error: invalid reason"
    )
    out = json.loads(
        invoke(tools, "cancel_pending_order", {"order_id": order_id, "reason": "no longer needed"})
    )
    paid = tables["orders"][order_id]["payment_history"][0]
    assert out["status"] == "cancelled" and out["cancel_reason"] == "no longer needed"
    assert out["payment_history"][-1] == {
        "transaction_type": "refund",
        "amount": paid["amount"],
        "payment_method_id": paid["payment_method_id"],
    }
    assert (
        invoke(tools, "cancel_pending_order", {"order_id": order_id, "reason": "no longer needed"})
        == "Error: non-pending order cannot be cancelled"
    )
    assert tables == before  # the shared base is never written
    assert tools.db.changed_keys() == {"orders": [order_id]}


def _affordable_by_gift_card(tables):
    for order_id, order in tables["orders"].items():
        methods = tables["users"][order["user_id"]]["payment_methods"]
        gift = next(m for m in methods if m.startswith("gift_card"))
        if (
            order["status"] == "pending"
            and methods[gift]["balance"] >= order["payment_history"][0]["amount"]
        ):
            return order["user_id"], order_id, gift
    raise AssertionError("no pending order a gift card can pay")


def test_gift_card_payment_change_moves_balance(shop):
    tools, tables = shop
    user_id, order_id, gift = _affordable_by_gift_card(tables)
    amount = tables["orders"][order_id]["payment_history"][0]["amount"]
    balance = tables["users"][user_id]["payment_methods"][gift]["balance"]
    out = json.loads(
        invoke(
            tools, "modify_pending_order_payment", {"order_id": order_id, "payment_method_id": gift}
        )
    )
    assert out["payment_history"][1:] == [
        {"transaction_type": "payment", "amount": amount, "payment_method_id": gift},
        {
            "transaction_type": "refund",
            "amount": amount,
            "payment_method_id": tables["orders"][order_id]["payment_history"][0][
                "payment_method_id"
            ],
        },
    ]
    assert tools.db.get("users", user_id)["payment_methods"][gift]["balance"] == round(
        balance - amount, 2
    )
    assert invoke(
        tools, "modify_pending_order_payment", {"order_id": order_id, "payment_method_id": gift}
    ) == ("Error: there should be exactly one payment for a pending order")


def test_item_swaps_check_ids_and_set_status(shop):
    tools, tables = shop
    user_id, order_id = _user_with(tables, "delivered")
    order = tables["orders"][order_id]
    item = order["items"][0]
    variants = tables["products"][item["product_id"]]["variants"]
    new = next(v for v in variants.values() if v["available"] and v["item_id"] != item["item_id"])
    card = order["payment_history"][0]["payment_method_id"]
    args = {
        "order_id": order_id,
        "item_ids": [item["item_id"]],
        "new_item_ids": [new["item_id"]],
        "payment_method_id": card,
    }
    assert (
        invoke(tools, "modify_pending_order_items", args)
        == "Error: non-pending order cannot be modified"
    )
    assert (
        invoke(tools, "exchange_delivered_order_items", {**args, "item_ids": ["123"]})
        == "Error: 123 not found"
    )
    assert (
        invoke(tools, "exchange_delivered_order_items", {**args, "new_item_ids": []})
        == "Error: the number of items to be exchanged should match"
    )
    out = json.loads(invoke(tools, "exchange_delivered_order_items", args))
    assert out["status"] == "exchange requested" and out["exchange_new_items"] == [new["item_id"]]
    assert out["exchange_price_difference"] == round(new["price"] - item["price"], 2)
    assert (
        invoke(
            tools,
            "return_delivered_order_items",
            {"order_id": order_id, "item_ids": [item["item_id"]], "payment_method_id": card},
        )
        == "Error: non-delivered order cannot be returned"
    )


def test_calculate_and_think(shop):
    tools, _ = shop
    assert invoke(tools, "calculate", {"expression": "(2 + 3) * 4 / 3"}) == "6.67"
    assert (
        invoke(tools, "calculate", {"expression": "import os"})
        == "Error: invalid characters in expression"
    )
    assert invoke(tools, "calculate", {"expression": "1/0"}) == "Error: division by zero"
    assert invoke(tools, "calculate", {"expression": "2 *"}).startswith("Error:")
    assert invoke(tools, "think", {"thought": "hmm"}) == ""


@pytest.fixture
def airline():
    flight = {
        "flight_number": "HAT001",
        "origin": "JFK",
        "destination": "SEA",
        "scheduled_departure_time_est": "06:00:00",
        "scheduled_arrival_time_est": "09:00:00",
        "dates": {
            "2024-05-20": {
                "status": "available",
                "available_seats": {"basic_economy": 1, "economy": 5, "business": 0},
                "prices": {"basic_economy": 50, "economy": 100, "business": 400},
            },
            "2024-05-21": {"status": "cancelled"},
        },
    }
    user = {
        "name": {"first_name": "Mia", "last_name": "Li"},
        "reservations": [],
        "payment_methods": {
            "credit_card_1": {"source": "credit_card", "id": "credit_card_1"},
            "gift_card_1": {"source": "gift_card", "amount": 60, "id": "gift_card_1"},
            "certificate_1": {"source": "certificate", "amount": 100, "id": "certificate_1"},
        },
    }
    tables = {"flights": {"HAT001": flight}, "reservations": {}, "users": {"mia_li_1": user}}
    return AirlineTools(BaseDB("test:air", tables).view()), tables


def test_airline_booking_pricing_and_payments(airline):
    tools, tables = airline
    base_hash = sha256_of(tables)
    booking = {
        "user_id": "mia_li_1",
        "origin": "JFK",
        "destination": "SEA",
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": [{"flight_number": "HAT001", "date": "2024-05-20"}],
        "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
        "payment_methods": [
            {"payment_id": "certificate_1", "amount": 100},
            {"payment_id": "credit_card_1", "amount": 80},
        ],
        "total_baggages": 2,
        "nonfree_baggages": 1,
        "insurance": "yes",
    }
    assert invoke(
        tools,
        "book_reservation",
        {**booking, "payment_methods": [{"payment_id": "credit_card_1", "amount": 1}]},
    ) == ("Error: payment amount does not add up, total price is 180, but paid 1")
    assert invoke(
        tools,
        "book_reservation",
        {**booking, "flights": [{"flight_number": "HAT001", "date": "2024-05-21"}]},
    ) == ("Error: flight HAT001 not available on date 2024-05-21")
    assert (
        invoke(tools, "book_reservation", {**booking, "cabin": "business"})
        == "Error: not enough seats on flight HAT001"
    )
    out = json.loads(invoke(tools, "book_reservation", booking))
    assert out["reservation_id"] == "HATHAT" and out["flights"][0] == {
        "flight_number": "HAT001",
        "date": "2024-05-20",
        "price": 100,
        "origin": "JFK",
        "destination": "SEA",
    }
    user = tools.db.get("users", "mia_li_1")
    assert "certificate_1" not in user["payment_methods"] and user["reservations"] == ["HATHAT"]
    assert (
        json.loads(
            invoke(
                tools,
                "book_reservation",
                {**booking, "payment_methods": [{"payment_id": "credit_card_1", "amount": 180}]},
            )
        )["reservation_id"]
        == "HATHAU"
    )
    bags = json.loads(
        invoke(
            tools,
            "update_reservation_baggages",
            {
                "reservation_id": "HATHAT",
                "total_baggages": 3,
                "nonfree_baggages": 2,
                "payment_id": "gift_card_1",
            },
        )
    )
    assert bags["payment_history"][-1] == {"payment_id": "gift_card_1", "amount": 50}
    assert tools.db.get("users", "mia_li_1")["payment_methods"]["gift_card_1"]["amount"] == 10
    cancelled = json.loads(invoke(tools, "cancel_reservation", {"reservation_id": "HATHAT"}))
    assert cancelled["status"] == "cancelled" and cancelled["payment_history"][-1] == {
        "payment_id": "gift_card_1",
        "amount": -50,
    }
    assert (
        invoke(tools, "get_reservation_details", {"reservation_id": "NOPE"})
        == "Error: reservation not found"
    )
    assert (
        invoke(tools, "send_certificate", {"user_id": "mia_li_1", "amount": 150})
        == "Certificate certificate_3221322 added to user mia_li_1 with amount 150."
    )
    assert (
        invoke(
            tools, "update_reservation_passengers", {"reservation_id": "HATHAU", "passengers": []}
        )
        == "Error: number of passengers does not match"
    )
    assert sha256_of(tables) == base_hash


def test_airline_search(airline):
    tools, _ = airline

    def search(tool, date):
        args = {"origin": "JFK", "destination": "SEA", "date": date}
        return json.loads(invoke(tools, tool, args))

    found = search("search_direct_flight", "2024-05-20")
    assert len(found) == 1 and found[0]["prices"]["economy"] == 100 and "dates" not in found[0]
    assert search("search_direct_flight", "2024-05-21") == []
    assert search("search_onestop_flight", "2024-05-20") == []
    assert json.loads(invoke(tools, "list_all_airports", {}))["SEA"] == "Seattle"
