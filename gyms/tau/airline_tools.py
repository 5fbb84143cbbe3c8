"""Airline domain tools: users, reservations and flights of an airline.

Each tool follows the public tau-bench airline tool of the same name in arguments, checks,
returned text and state change (including its conventions: new reservations are numbered
HATHAT, HATHAU, HATHAV; certificates certificate_3221322..4; seat counts are not updated).
Two deliberate differences, both read-only: `get_reservation_details` says "reservation not
found" (not "user not found") for a missing id, and `search_onestop_flight` reads the second
leg's status on the second leg's date (the public tool can crash on an overnight first leg).

Deliberately not here: policy enforcement (left to the agent, as in the public benchmark).
"""

from __future__ import annotations

import copy
import json
from typing import Literal

from gyms.common.tool_docs import shared_args
from gyms.tau.common_tools import Toolset
from mua.gym.tools import tool

Cabin = Literal["basic_economy", "economy", "business"]
AIRPORTS = {
    "SFO": "San Francisco",
    "JFK": "New York",
    "LAX": "Los Angeles",
    "ORD": "Chicago",
    "DFW": "Dallas",
    "DEN": "Denver",
    "SEA": "Seattle",
    "ATL": "Atlanta",
    "MIA": "Miami",
    "BOS": "Boston",
    "PHX": "Phoenix",
    "IAH": "Houston",
    "LAS": "Las Vegas",
    "MCO": "Orlando",
    "EWR": "Newark",
    "CLT": "Charlotte",
    "MSP": "Minneapolis",
    "DTW": "Detroit",
    "PHL": "Philadelphia",
    "LGA": "LaGuardia",
}


# What an argument of these names means in every tool that takes it (`shared_args`).
_SHARED_ARGS = {
    "origin": "The origin city airport in three letters, such as 'JFK'.",
    "destination": "The destination city airport in three letters, such as 'LAX'.",
    "cabin": "'basic_economy', 'economy' or 'business'.",
    "reservation_id": "The reservation ID, such as 'ZFA04Y'.",
    "payment_id": "The payment id stored in user profile, such as 'credit_card_7815826' or 'gift_card_7815826'.",
}


@shared_args(_SHARED_ARGS)
class AirlineTools(Toolset):
    domain = "airline"

    def _priced_segment(self, segment: dict, cabin: str, n_passengers: int) -> str | None:
        """Fill price/origin/destination of a requested segment, or say why it cannot be booked."""
        number, date = segment["flight_number"], segment["date"]
        flight = self.db.get("flights", number)
        if flight is None:
            return f"Error: flight {number} not found"
        if date not in flight["dates"]:
            return f"Error: flight {number} not found on date {date}"
        on_date = flight["dates"][date]
        if on_date["status"] != "available":
            return f"Error: flight {number} not available on date {date}"
        if on_date["available_seats"][cabin] < n_passengers:
            return f"Error: not enough seats on flight {number}"
        segment["price"] = on_date["prices"][cabin]
        segment["origin"] = flight["origin"]
        segment["destination"] = flight["destination"]
        return None

    @tool
    def get_user_details(self, user_id: str) -> str:
        """Get the details of a user, including their reservations.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
        """
        return self._record_json("users", user_id, "user")

    @tool
    def get_reservation_details(self, reservation_id: str) -> str:
        """Get the details of a reservation.

        Args:
            reservation_id: The reservation id, such as '8JX2WO'.
        """
        return self._record_json("reservations", reservation_id, "reservation")

    @tool
    def list_all_airports(self) -> str:
        """List all airports and their cities."""
        return json.dumps(AIRPORTS)

    @tool
    def search_direct_flight(self, origin: str, destination: str, date: str) -> str:
        """Search direct flights between two cities on a specific date.

        Args:
            date: The date of the flight in the format 'YYYY-MM-DD', such as '2024-05-01'.
        """
        results = []
        for flight in self.db.values("flights"):
            if flight["origin"] == origin and flight["destination"] == destination:
                on_date = flight["dates"].get(date)
                if on_date is not None and on_date["status"] == "available":
                    row = {k: v for k, v in flight.items() if k != "dates"}
                    row.update(on_date)
                    results.append(row)
        return json.dumps(results)

    @tool
    def search_onestop_flight(self, origin: str, destination: str, date: str) -> str:
        """Search one-stop flights between two cities on a specific date.

        Args:
            date: The date of the first flight in the format 'YYYY-MM-DD', such as '2024-05-01'.
        """
        flights = list(self.db.values("flights"))
        results = []
        for first in flights:
            if first["origin"] != origin or date not in first["dates"]:
                continue
            overnight = "+1" in first["scheduled_arrival_time_est"]
            date2 = f"2024-05-{int(date[-2:]) + 1}" if overnight else date  # public convention
            for second in flights:
                if second["destination"] != destination or first["destination"] != second["origin"]:
                    continue
                if first["scheduled_arrival_time_est"] > second["scheduled_departure_time_est"]:
                    continue
                if date2 not in second["dates"]:
                    continue
                if (
                    first["dates"][date]["status"] != "available"
                    or second["dates"][date2]["status"] != "available"
                ):
                    continue
                leg1 = {k: v for k, v in first.items() if k != "dates"}
                leg1.update(first["dates"][date])
                leg1["date"] = date
                leg2 = {k: v for k, v in second.items() if k != "dates"}
                leg2.update(second["dates"][date2])
                leg2["date"] = date2
                results.append([leg1, leg2])
        return json.dumps(results)

    @tool
    def book_reservation(
        self,
        user_id: str,
        origin: str,
        destination: str,
        flight_type: Literal["one_way", "round_trip"],
        cabin: Cabin,
        flights: list[dict],
        passengers: list[dict],
        payment_methods: list[dict],
        total_baggages: int,
        nonfree_baggages: int,
        insurance: Literal["yes", "no"],
    ) -> str:
        """Book a reservation.

        Args:
            user_id: The ID of the user to book the reservation, such as 'sara_doe_496'.
            origin: The IATA code for the origin city, such as 'SFO'.
            destination: The IATA code for the destination city, such as 'JFK'.
            flight_type: 'one_way' or 'round_trip'.
            flights: Each flight segment as an object {"flight_number": "HAT001", "date": "2024-05-01"}.
            passengers: Each passenger as an object {"first_name": "Noah", "last_name": "Brown", "dob": "1990-01-01"}.
            payment_methods: Each payment as an object {"payment_id": "credit_card_7815826", "amount": 100}; payment ids come from the user profile.
            total_baggages: The total number of baggage items included in the reservation.
            nonfree_baggages: The number of non-free baggage items included in the reservation.
            insurance: 'yes' or 'no'.
        """
        user = self.db.get("users", user_id)
        if user is None:
            return "Error: user not found"
        reservation_id = next(
            (r for r in ("HATHAT", "HATHAU") if not self.db.has("reservations", r)), "HATHAV"
        )
        segments = copy.deepcopy(flights)
        total_price = 0
        for segment in segments:
            problem = self._priced_segment(segment, cabin, len(passengers))
            if problem:
                return problem
            total_price += segment["price"] * len(passengers)
        if insurance == "yes":
            total_price += 30 * len(passengers)
        total_price += 50 * nonfree_baggages
        for payment in payment_methods:
            payment_id, amount = payment["payment_id"], payment["amount"]
            if payment_id not in user["payment_methods"]:
                return f"Error: payment method {payment_id} not found"
            method = user["payment_methods"][payment_id]
            if method["source"] in ("gift_card", "certificate") and method["amount"] < amount:
                return f"Error: not enough balance in payment method {payment_id}"
        paid = sum(payment["amount"] for payment in payment_methods)
        if paid != total_price:
            return f"Error: payment amount does not add up, total price is {total_price}, but paid {paid}"
        user = self.db.mut("users", user_id)
        for payment in payment_methods:
            method = user["payment_methods"][payment["payment_id"]]
            if method["source"] == "gift_card":
                method["amount"] -= payment["amount"]
            elif method["source"] == "certificate":
                del user["payment_methods"][payment["payment_id"]]
        reservation = {
            "reservation_id": reservation_id,
            "user_id": user_id,
            "origin": origin,
            "destination": destination,
            "flight_type": flight_type,
            "cabin": cabin,
            "flights": segments,
            "passengers": copy.deepcopy(passengers),
            "payment_history": copy.deepcopy(payment_methods),
            "created_at": "2024-05-15T15:00:00",
            "total_baggages": total_baggages,
            "nonfree_baggages": nonfree_baggages,
            "insurance": insurance,
        }
        self.db.put("reservations", reservation_id, reservation)
        user["reservations"].append(reservation_id)
        return json.dumps(reservation)

    @tool
    def cancel_reservation(self, reservation_id: str) -> str:
        """Cancel the whole reservation."""
        if not self.db.has("reservations", reservation_id):
            return "Error: reservation not found"
        reservation = self.db.mut("reservations", reservation_id)
        refunds = [
            {"payment_id": p["payment_id"], "amount": -p["amount"]}
            for p in reservation["payment_history"]
        ]
        reservation["payment_history"].extend(refunds)
        reservation["status"] = "cancelled"
        return json.dumps(reservation)

    def _payment_for_change(self, reservation: dict, payment_id: str, price: float) -> str | None:
        """Why `payment_id` cannot pay `price` for a change, or None when it can."""
        methods = self.db.get("users", reservation["user_id"])["payment_methods"]
        if payment_id not in methods:
            return "Error: payment method not found"
        method = methods[payment_id]
        if method["source"] == "certificate":
            return "Error: certificate cannot be used to update reservation"
        if method["source"] == "gift_card" and method["amount"] < price:
            return "Error: gift card balance is not enough"
        return None

    def _charge(self, reservation: dict, payment_id: str, price: float) -> None:
        user = self.db.get("users", reservation["user_id"])
        if user["payment_methods"][payment_id]["source"] == "gift_card":
            self.db.mut("users", reservation["user_id"])["payment_methods"][payment_id][
                "amount"
            ] -= price

    @tool
    def update_reservation_baggages(
        self, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
    ) -> str:
        """Update the baggage information of a reservation.

        Args:
            total_baggages: The updated total number of baggage items included in the reservation.
            nonfree_baggages: The updated number of non-free baggage items included in the reservation.
        """
        reservation = self.db.get("reservations", reservation_id)
        if reservation is None:
            return "Error: reservation not found"
        total_price = 50 * max(0, nonfree_baggages - reservation["nonfree_baggages"])
        problem = self._payment_for_change(reservation, payment_id, total_price)
        if problem:
            return problem
        reservation = self.db.mut("reservations", reservation_id)
        reservation["total_baggages"] = total_baggages
        reservation["nonfree_baggages"] = nonfree_baggages
        self._charge(reservation, payment_id, total_price)
        if total_price != 0:
            reservation["payment_history"].append({"payment_id": payment_id, "amount": total_price})
        return json.dumps(reservation)

    @tool
    def update_reservation_flights(
        self, reservation_id: str, cabin: Cabin, flights: list[dict], payment_id: str
    ) -> str:
        """Update the flight information of a reservation.

        Args:
            flights: Every flight segment of the ENTIRE new reservation as an object {"flight_number": "HAT001", "date": "2024-05-01"}; unchanged segments must be included too.
        """
        reservation = self.db.get("reservations", reservation_id)
        if reservation is None:
            return "Error: reservation not found"
        n_passengers = len(reservation["passengers"])
        segments = copy.deepcopy(flights)
        total_price = 0
        for segment in segments:
            kept = [
                f
                for f in reservation["flights"]
                if f["flight_number"] == segment["flight_number"]
                and f["date"] == segment["date"]
                and cabin == reservation["cabin"]
            ]
            if kept:  # an unchanged segment keeps its price
                segment.update(
                    price=kept[0]["price"],
                    origin=kept[0]["origin"],
                    destination=kept[0]["destination"],
                )
            else:
                problem = self._priced_segment(segment, cabin, n_passengers)
                if problem:
                    return problem
            total_price += segment["price"] * n_passengers
        total_price -= sum(f["price"] for f in reservation["flights"]) * n_passengers
        problem = self._payment_for_change(reservation, payment_id, total_price)
        if problem:
            return problem
        reservation = self.db.mut("reservations", reservation_id)
        self._charge(reservation, payment_id, total_price)
        reservation["flights"] = segments
        if total_price != 0:
            reservation["payment_history"].append({"payment_id": payment_id, "amount": total_price})
        return json.dumps(reservation)

    @tool
    def update_reservation_passengers(self, reservation_id: str, passengers: list[dict]) -> str:
        """Update the passenger information of a reservation.

        Args:
            passengers: Each passenger as an object {"first_name": "Noah", "last_name": "Brown", "dob": "1990-01-01"}; the number of passengers cannot change.
        """
        reservation = self.db.get("reservations", reservation_id)
        if reservation is None:
            return "Error: reservation not found"
        if len(passengers) != len(reservation["passengers"]):
            return "Error: number of passengers does not match"
        reservation = self.db.mut("reservations", reservation_id)
        reservation["passengers"] = copy.deepcopy(passengers)
        return json.dumps(reservation)

    @tool
    def send_certificate(self, user_id: str, amount: int | float) -> str:
        """Send a certificate to a user. Be careful!

        Args:
            user_id: The ID of the user to send the certificate to, such as 'sara_doe_496'.
            amount: Certificate amount to send.
        """
        user = self.db.get("users", user_id)
        if user is None:
            return "Error: user not found"
        for number in (3221322, 3221323, 3221324):
            payment_id = f"certificate_{number}"
            if payment_id not in user["payment_methods"]:
                user = self.db.mut("users", user_id)
                user["payment_methods"][payment_id] = {
                    "source": "certificate",
                    "amount": amount,
                    "id": payment_id,
                }
                return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
        return "Error: no more certificates can be sent to this user"
