"""What the travel cluster is: its domain, its description, the dependency edges it states
and the facts its tasks' words use. Its ``trajsynth.clusters`` entry point names ``CLUSTER``."""

from __future__ import annotations

from trajsynth.schemas import BundledCluster, DeclaredEdge, Domain, DomainFacts, Precondition

__all__ = ["CLUSTER"]

CLUSTER = BundledCluster(
    cluster_id="travel",
    domain=Domain.TRAVEL,
    description=(
        "An airline's booking desk: find a traveller, look up airports, search flights by route "
        "and date, read fare rules and seat maps, book, change seats, cancel with refunds."
    ),
    module=__name__.rpartition(".")[0],  # this folder's package
    declared_edges=[
        DeclaredEdge(
            source="find_airports",
            target="search_flights",
            out_field="airports[].code",
            in_param="origin",
        ),
        DeclaredEdge(
            source="find_airports",
            target="search_flights",
            out_field="airports[].code",
            in_param="destination",
        ),
        DeclaredEdge(
            source="find_user",
            target="book_flight",
            out_field="payment_methods[].payment_method_id",
            in_param="payment_method_id",
        ),
        DeclaredEdge(
            source="get_seat_map",
            target="change_seat",
            out_field="available_seats[]",
            in_param="seat",
        ),
        DeclaredEdge(
            source="get_seat_map",
            target="book_flight",
            out_field="available_seats[]",
            in_param="seat",
        ),
    ],
    # what the tools accept (the server's policy): only a scheduled flight is booked, once per
    # user, with a free seat in the cabin, with a
    # payment method of the user; only a confirmed booking's seat is changed, never on a basic
    # fare, and only to a free seat; only a confirmed booking is cancelled
    preconditions=[
        Precondition(
            tool="book_flight",
            param="flight_id",
            table="flights",
            column="flight_id",
            where={"status": ["scheduled"]},
        ),
        Precondition(
            tool="book_flight",
            param="flight_id",
            table="bookings",
            column="flight_id",
            where={"status": ["confirmed"]},
            same={"user_id": "user_id"},
            absent=True,
        ),
        Precondition(
            tool="book_flight",
            param="flight_id",
            table="seats",
            column="flight_id",
            where={"status": ["available"]},
            same={"cabin": "cabin"},
        ),
        Precondition(
            tool="book_flight",
            param="payment_method_id",
            table="payment_methods",
            column="payment_method_id",
            same={"user_id": "user_id"},
        ),
        Precondition(
            tool="change_seat",
            param="booking_id",
            table="bookings",
            column="booking_id",
            where={"status": ["confirmed"], "fare_basis": ["standard", "flex"]},
        ),
        Precondition(
            tool="change_seat",
            param="seat",
            table="seats",
            column="seat",
            where={"status": ["available"]},
        ),
        Precondition(
            tool="cancel_booking",
            param="booking_id",
            table="bookings",
            column="booking_id",
            where={"status": ["confirmed"]},
        ),
    ],
    facts=DomainFacts(persona="A traveller planning a trip."),
)
