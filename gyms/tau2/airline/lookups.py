"""The airline database lookups the tools share (environment functions, not tools).

`AirlineLookups` finds users, reservations, flights and their dated instances with tau2-bench's
error texts, searches direct flights, picks a new reservation id and checks a payment for a
reservation update; `AIRPORTS` and the fixed clock `NOW` are tau2's. The tools the agent calls
are in `gyms.tau2.airline.tools`.
"""

from __future__ import annotations

from gyms.tau2.airline.models import DirectFlight, Payment, Reservation
from gyms.tau2.toolkit import Toolkit

AIRPORTS = (
    ("SFO", "San Francisco"),
    ("JFK", "New York"),
    ("LAX", "Los Angeles"),
    ("ORD", "Chicago"),
    ("DFW", "Dallas"),
    ("DEN", "Denver"),
    ("SEA", "Seattle"),
    ("ATL", "Atlanta"),
    ("MIA", "Miami"),
    ("BOS", "Boston"),
    ("PHX", "Phoenix"),
    ("IAH", "Houston"),
    ("LAS", "Las Vegas"),
    ("MCO", "Orlando"),
    ("EWR", "Newark"),
    ("CLT", "Charlotte"),
    ("MSP", "Minneapolis"),
    ("DTW", "Detroit"),
    ("PHL", "Philadelphia"),
    ("LGA", "LaGuardia"),
)
NOW = "2024-05-15T15:00:00"


def as_models(values: list, model: type) -> list:
    """tau2 converts a list only when every entry is a dict."""
    if all(isinstance(v, dict) for v in values):
        return [model(**v) for v in values]
    return values


class AirlineLookups(Toolkit):
    """Reads and checks over `FlightDB` that several airline tools share."""

    def _get_user(self, user_id: str):
        if user_id not in self.db.users:
            raise ValueError(f"User {user_id} not found")
        return self.db.users[user_id]

    def _get_reservation(self, reservation_id: str) -> Reservation:
        if reservation_id not in self.db.reservations:
            raise ValueError(f"Reservation {reservation_id} not found")
        return self.db.reservations[reservation_id]

    def _get_flight(self, flight_number: str):
        if flight_number not in self.db.flights:
            raise ValueError(f"Flight {flight_number} not found")
        return self.db.flights[flight_number]

    def _get_flight_instance(self, flight_number: str, date: str):
        flight = self._get_flight(flight_number)
        if date not in flight.dates:
            raise ValueError(f"Flight {flight_number} not found on date {date}")
        return flight.dates[date]

    def _get_new_reservation_id(self) -> str:
        for reservation_id in ("HATHAT", "HATHAU", "HATHAV"):
            if reservation_id not in self.db.reservations:
                return reservation_id
        raise ValueError("Too many reservations")

    def _search_direct_flight(self, date, origin=None, destination=None, leave_after=None):
        results = []
        for flight in self.db.flights.values():
            if (
                (origin is None or flight.origin == origin)
                and (destination is None or flight.destination == destination)
                and date in flight.dates
                and flight.dates[date].status == "available"
                and (leave_after is None or flight.scheduled_departure_time_est >= leave_after)
            ):
                results.append(
                    DirectFlight(
                        flight_number=flight.flight_number,
                        origin=flight.origin,
                        destination=flight.destination,
                        status="available",
                        scheduled_departure_time_est=flight.scheduled_departure_time_est,
                        scheduled_arrival_time_est=flight.scheduled_arrival_time_est,
                        available_seats=flight.dates[date].available_seats,
                        prices=flight.dates[date].prices,
                    )
                )
        return results

    def _charge_update(self, reservation, user, payment_id: str, total_price: int) -> None:
        """Charge (or refund) `total_price` for a change of `reservation` to the user's method."""
        if payment_id not in user.payment_methods:
            raise ValueError("Payment method not found")
        method = user.payment_methods[payment_id]
        if method.source == "certificate":
            raise ValueError("Certificate cannot be used to update reservation")
        if method.source == "gift_card" and method.amount < total_price:
            raise ValueError("Gift card balance is not enough")
        if method.source == "gift_card":
            method.amount -= total_price
        if total_price != 0:
            reservation.payment_history.append(Payment(payment_id=payment_id, amount=total_price))
