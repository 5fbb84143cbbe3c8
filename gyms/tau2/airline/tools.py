"""The airline agent's tools over `FlightDB`, with tau2-bench's semantics and error texts.

Checks, their order, the exact `ValueError` messages, the fixed clock (2024-05-15T15:00:00),
the fixed new ids (reservation HATHAT.., certificate_3221322..) and tau2's quirks (a cancelled
reservation keeps its seats) follow tau2-bench v1.0.1 so that tool messages and database
hashes agree with it. The tool descriptions shown to the model are written for mua.
The database lookups they share are in `gyms.tau2.airline.lookups`.
"""

from __future__ import annotations

from copy import deepcopy

from gyms.common.tool_docs import shared_args
from gyms.tau2.airline.lookups import AIRPORTS, NOW, AirlineLookups, as_models
from gyms.tau2.airline.models import (
    AirportCode,
    CabinClass,
    Certificate,
    DirectFlight,
    FlightDateStatusAvailable,
    FlightInfo,
    FlightType,
    Insurance,
    Passenger,
    Payment,
    Reservation,
    ReservationFlight,
    User,
)
from gyms.tau2.arithmetic import arithmetic
from gyms.tau2.toolkit import GENERIC, HUMAN_TRANSFER, READ, WRITE, tool

# What an argument of these names means in every tool that takes it (`shared_args`).
_SHARED_ARGS = {
    "user_id": "The user id, e.g. 'sara_doe_496'.",
    "cabin": "'basic_economy', 'economy' or 'business'.",
    "passengers": "Each passenger as {'first_name', 'last_name', 'dob' (YYYY-MM-DD)}.",
    "reservation_id": "The reservation id, e.g. 'ZFA04Y'.",
    "origin": "IATA code of the departure airport, e.g. 'JFK'.",
    "destination": "IATA code of the arrival airport, e.g. 'LAX'.",
    "date": "Departure date, YYYY-MM-DD, e.g. '2024-05-01'.",
    "payment_id": "Payment method id from the user's profile, e.g. 'credit_card_7815826'\nor 'gift_card_7815826'.",
}


@shared_args(_SHARED_ARGS)
class AirlineTools(AirlineLookups):
    """Tools of the airline domain (class name kept: Python puts it in argument errors)."""

    # ---- tools -----------------------------------------------------------------------------
    @tool(WRITE)
    def book_reservation(
        self,
        user_id: str,
        origin: str,
        destination: str,
        flight_type: FlightType,
        cabin: CabinClass,
        flights: list[FlightInfo | dict],
        passengers: list[Passenger | dict],
        payment_methods: list[Payment | dict],
        total_baggages: int,
        nonfree_baggages: int,
        insurance: Insurance,
    ) -> Reservation:
        """Book a new reservation for a user and charge its payment methods.

        Args:
            origin: IATA code of the trip's origin, e.g. 'SFO'.
            destination: IATA code of the trip's destination, e.g. 'JFK'.
            flight_type: 'one_way' or 'round_trip'.
            flights: Every flight segment of the trip, each {'flight_number': 'HAT001',
                'date': '2024-05-01'}.
            payment_methods: Each payment as {'payment_id', 'amount'}; the amounts must add up
                to the total price.
            total_baggages: Total number of checked bags.
            nonfree_baggages: Number of paid checked bags.
            insurance: 'yes' or 'no' (travel insurance, 30 per passenger).
        """
        flights = as_models(flights, FlightInfo)
        passengers = as_models(passengers, Passenger)
        payment_methods = as_models(payment_methods, Payment)
        user = self._get_user(user_id)
        reservation_id = self._get_new_reservation_id()
        reservation = Reservation(
            reservation_id=reservation_id,
            user_id=user_id,
            origin=origin,
            destination=destination,
            flight_type=flight_type,
            cabin=cabin,
            flights=[],
            passengers=deepcopy(passengers),
            payment_history=deepcopy(payment_methods),
            created_at=NOW,
            total_baggages=total_baggages,
            nonfree_baggages=nonfree_baggages,
            insurance=insurance,
        )
        total_price = 0
        dated = []
        for info in flights:
            number = info.flight_number
            flight = self._get_flight(number)
            instance = self._get_flight_instance(flight_number=number, date=info.date)
            if not isinstance(instance, FlightDateStatusAvailable):
                raise ValueError(f"Flight {number} not available on date {info.date}")
            if instance.available_seats[cabin] < len(passengers):
                raise ValueError(f"Not enough seats on flight {number}")
            price = instance.prices[cabin]
            reservation.flights.append(
                ReservationFlight(
                    origin=flight.origin,
                    destination=flight.destination,
                    flight_number=number,
                    date=info.date,
                    price=price,
                )
            )
            dated.append(instance)
            total_price += price * len(passengers)
        if insurance == "yes":
            total_price += 30 * len(passengers)
        total_price += 50 * nonfree_baggages
        for payment in payment_methods:
            if payment.payment_id not in user.payment_methods:
                raise ValueError(f"Payment method {payment.payment_id} not found")
            method = user.payment_methods[payment.payment_id]
            if method.source in {"gift_card", "certificate"} and method.amount < payment.amount:
                raise ValueError(f"Not enough balance in payment method {payment.payment_id}")
        total_payment = sum(p.amount for p in payment_methods)
        if total_payment != total_price:
            raise ValueError(
                f"Payment amount does not add up, total price is {total_price}, but paid {total_payment}"
            )
        for payment in payment_methods:
            method = user.payment_methods[payment.payment_id]
            if method.source == "gift_card":
                method.amount -= payment.amount
            elif method.source == "certificate":
                user.payment_methods.pop(payment.payment_id)
        for instance in dated:
            instance.available_seats[cabin] -= len(passengers)
        self.db.reservations[reservation_id] = reservation
        self.db.users[user_id].reservations.append(reservation_id)
        return reservation

    @tool(GENERIC)
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return the result rounded to 2 decimals.

        Args:
            expression: Numbers, + - * /, parentheses and spaces only, e.g. '(120 + 30) * 2'.
        """
        return arithmetic(expression)

    @tool(WRITE)
    def cancel_reservation(self, reservation_id: str) -> Reservation:
        """Cancel a whole reservation and refund every payment to its original method."""
        reservation = self._get_reservation(reservation_id)
        refunds = [
            Payment(payment_id=p.payment_id, amount=-p.amount) for p in reservation.payment_history
        ]
        reservation.payment_history.extend(refunds)
        reservation.status = "cancelled"
        return reservation

    @tool(READ)
    def get_reservation_details(self, reservation_id: str) -> Reservation:
        """Show a reservation: flights, passengers, cabin, bags, insurance and payments.

        Args:
            reservation_id: The reservation id, e.g. '8JX2WO'.
        """
        return self._get_reservation(reservation_id)

    @tool(READ)
    def get_user_details(self, user_id: str) -> User:
        """Show a user's profile: membership, payment methods, saved passengers, reservations."""
        return self._get_user(user_id)

    @tool(READ)
    def list_all_airports(self) -> list[AirportCode]:
        """List the airports served, as IATA code and city."""
        return [AirportCode(iata=code, city=city) for code, city in AIRPORTS]

    @tool(READ)
    def search_direct_flight(self, origin: str, destination: str, date: str) -> list[DirectFlight]:
        """Find direct flights with seats for sale between two airports on a date."""
        return self._search_direct_flight(date=date, origin=origin, destination=destination)

    @tool(READ)
    def search_onestop_flight(self, origin: str, destination: str, date: str) -> list:
        """Find one-stop connections with seats for sale between two airports on a date."""
        results = []
        for first in self._search_direct_flight(date=date, origin=origin):
            first.date = date
            date2 = (
                f"2024-05-{int(date[-2:]) + 1}"
                if "+1" in first.scheduled_arrival_time_est
                else date
            )
            for second in self._search_direct_flight(
                date=date2,
                origin=first.destination,
                destination=destination,
                leave_after=first.scheduled_arrival_time_est,
            ):
                second.date = date2
                results.append([first, second])
        return results

    @tool(WRITE)
    def send_certificate(self, user_id: str, amount: int) -> str:
        """Give a user a travel certificate worth `amount` dollars (a goodwill gesture).

        Args:
            amount: The certificate's value in dollars.
        """
        user = self._get_user(user_id)
        for payment_id in (f"certificate_{n}" for n in (3221322, 3221323, 3221324)):
            if payment_id not in user.payment_methods:
                user.payment_methods[payment_id] = Certificate(
                    id=payment_id, amount=amount, source="certificate"
                )
                return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
        raise ValueError("Too many certificates")

    transfer_to_human_agents = HUMAN_TRANSFER

    @tool(WRITE)
    def update_reservation_baggages(
        self, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
    ) -> Reservation:
        """Change the checked bags of a reservation; extra paid bags cost 50 each.

        Args:
            total_baggages: New total number of checked bags.
            nonfree_baggages: New number of paid checked bags.
        """
        reservation = self._get_reservation(reservation_id)
        user = self._get_user(reservation.user_id)
        total_price = 50 * max(0, nonfree_baggages - reservation.nonfree_baggages)
        self._charge_update(reservation, user, payment_id, total_price)
        reservation.total_baggages = total_baggages
        reservation.nonfree_baggages = nonfree_baggages
        return reservation

    @tool(WRITE)
    def update_reservation_flights(
        self,
        reservation_id: str,
        cabin: CabinClass,
        flights: list[FlightInfo | dict],
        payment_id: str,
    ) -> Reservation:
        """Replace a reservation's flights and/or cabin, paying or refunding the difference.

        Args:
            flights: Every flight segment of the new itinerary (unchanged ones included),
                each {'flight_number': 'HAT001', 'date': '2024-05-01'}.
        """
        flights = as_models(flights, FlightInfo)
        reservation = self._get_reservation(reservation_id)
        user = self._get_user(reservation.user_id)
        count = len(reservation.passengers)
        total_price = 0
        new_flights = []
        for info in flights:
            kept = next(
                (
                    f
                    for f in reservation.flights
                    if f.flight_number == info.flight_number
                    and f.date == info.date
                    and cabin == reservation.cabin
                ),
                None,
            )
            if kept:
                total_price += kept.price * count
                new_flights.append(kept)
                continue
            flight = self._get_flight(info.flight_number)
            instance = self._get_flight_instance(flight_number=info.flight_number, date=info.date)
            if not isinstance(instance, FlightDateStatusAvailable):
                raise ValueError(f"Flight {info.flight_number} not available on date {info.date}")
            if instance.available_seats[cabin] < count:
                raise ValueError(f"Not enough seats on flight {info.flight_number}")
            segment = ReservationFlight(
                flight_number=info.flight_number,
                date=info.date,
                price=instance.prices[cabin],
                origin=flight.origin,
                destination=flight.destination,
            )
            total_price += segment.price * count
            new_flights.append(segment)
        total_price -= sum(f.price for f in reservation.flights) * count
        self._charge_update(reservation, user, payment_id, total_price)
        reservation.flights = new_flights
        reservation.cabin = cabin
        return reservation

    @tool(WRITE)
    def update_reservation_passengers(
        self, reservation_id: str, passengers: list[Passenger | dict]
    ) -> Reservation:
        """Replace the passenger details of a reservation (the number must stay the same)."""
        passengers = as_models(passengers, Passenger)
        reservation = self._get_reservation(reservation_id)
        if len(passengers) != len(reservation.passengers):
            raise ValueError("Number of passengers does not match")
        reservation.passengers = deepcopy(passengers)
        return reservation

    @tool(READ)
    def get_flight_status(self, flight_number: str, date: str) -> str:
        """The status of a flight on a date ('available', 'on time', 'delayed', ...).

        Args:
            flight_number: The flight number, e.g. 'HAT001'.
            date: The date, YYYY-MM-DD, e.g. '2024-05-01'.
        """
        return self._get_flight_instance(flight_number, date).status
