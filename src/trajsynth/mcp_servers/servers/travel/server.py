"""Airline travel: flight search, fares, booking, seats and cancellation, as an MCP server.

This module is the MCP server and its tools; their state (``$TRAJSYNTH_WORKDIR/travel.sqlite``, its
tables and seeding) is ``state.py``'s ``STORE``. Policy the tools enforce, as an airline would: only
scheduled flights that have not departed can be booked; basic fares are economy only, non-refundable
and allow no seat change; standard fares refund the price minus a cancellation fee; flex fares
refund in full; a flight the airline cancelled refunds in full whatever the fare; gift cards and
travel certificates cannot pay more than their balance; a seat holds one passenger; one user holds
one booking per flight.

Run: ``python -m trajsynth.mcp_servers.servers.travel`` (stdio).
"""

from __future__ import annotations

import re
import sqlite3
from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

from trajsynth.mcp_servers.servers._backend import (
    fail,
    from_row,
    insert,
    money,
    next_id,
    one,
    one_or_fail,
    read_tool,
    serve_state,
    write_tool,
)
from trajsynth.mcp_servers.servers._stdio import serve_stdio
from trajsynth.mcp_servers.servers.travel.state import STORE

__all__ = ["STORE", "main", "server"]

server = MCPServer(
    name="travel",
    instructions="An airline's booking tools. Prices are per passenger in USD; dates YYYY-MM-DD.",
)
serve_state(server, STORE)

Cabin = Literal["economy", "business"]
FareBasis = Literal["basic", "standard", "flex"]

# ---------------------------------------------------------------- output models


class PaymentMethod(BaseModel):
    payment_method_id: str = Field(description="Id of the payment method")
    kind: Literal["credit_card", "gift_card", "travel_certificate"] = Field(description="Kind")
    label: str = Field(description="Human-readable label")
    balance: float | None = Field(description="Remaining balance (gift card, certificate)")


class Traveller(BaseModel):
    user_id: str = Field(description="Id of the traveller's account")
    name: str = Field(description="Full name")
    email: str = Field(description="Email address")
    membership: Literal["regular", "silver", "gold"] = Field(description="Loyalty tier")
    payment_methods: list[PaymentMethod] = Field(description="Payment methods on file")


class Airport(BaseModel):
    code: str = Field(description="IATA airport code, e.g. 'SFO'")
    city: str = Field(description="City served")
    name: str = Field(description="Airport name")


class AirportList(BaseModel):
    airports: list[Airport] = Field(description="Matching airports")


class FlightSummary(BaseModel):
    flight_id: str = Field(description="Id of the flight on that date, e.g. 'TS101-2025-06-10'")
    flight_number: str = Field(description="Flight number, e.g. 'TS101'")
    origin: str = Field(description="Departure airport code")
    destination: str = Field(description="Arrival airport code")
    date: str = Field(description="Departure date (YYYY-MM-DD)")
    depart_time: str = Field(description="Local departure time (HH:MM)")
    arrive_time: str = Field(description="Local arrival time (HH:MM)")
    status: Literal["scheduled", "cancelled", "landed"] = Field(description="Flight status")
    lowest_fare: float = Field(description="Cheapest fare in the requested cabin, USD")
    seats_left: int = Field(description="Free seats in the requested cabin")


class FlightSearch(BaseModel):
    origin: str = Field(description="Departure airport code searched")
    destination: str = Field(description="Arrival airport code searched")
    date: str = Field(description="Date searched")
    cabin: str = Field(description="Cabin searched")
    flights: list[FlightSummary] = Field(description="Flights on the route that day")


class Fare(BaseModel):
    cabin: Cabin = Field(description="Cabin")
    fare_basis: FareBasis = Field(description="Fare family")
    price: float = Field(description="Price per passenger, USD")
    refundable: bool = Field(description="Whether cancelling refunds money")
    cancel_fee: float = Field(description="Fee kept on cancellation, USD")
    seat_change_allowed: bool = Field(description="Whether the seat can be changed")


class FareRules(BaseModel):
    flight_id: str = Field(description="Id of the flight")
    fares: list[Fare] = Field(description="Fares on sale")


class Flight(BaseModel):
    flight_id: str = Field(description="Id of the flight on that date")
    flight_number: str = Field(description="Flight number")
    origin: str = Field(description="Departure airport code")
    destination: str = Field(description="Arrival airport code")
    date: str = Field(description="Departure date (YYYY-MM-DD)")
    depart_time: str = Field(description="Local departure time (HH:MM)")
    arrive_time: str = Field(description="Local arrival time (HH:MM)")
    aircraft: str = Field(description="Aircraft type")
    status: Literal["scheduled", "cancelled", "landed"] = Field(description="Flight status")
    economy_seats_left: int = Field(description="Free economy seats")
    business_seats_left: int = Field(description="Free business seats")
    fares: list[Fare] = Field(description="Fares on sale")


class SeatMap(BaseModel):
    flight_id: str = Field(description="Id of the flight")
    cabin: Cabin = Field(description="Cabin")
    available_seats: list[str] = Field(description="Free seats, e.g. ['10A', '12C']")


class Booking(BaseModel):
    booking_id: str = Field(description="Id of the booking, e.g. 'BK1001'")
    user_id: str = Field(description="Account that made the booking")
    flight_id: str = Field(description="Id of the booked flight")
    flight_number: str = Field(description="Flight number")
    date: str = Field(description="Departure date")
    origin: str = Field(description="Departure airport code")
    destination: str = Field(description="Arrival airport code")
    cabin: Cabin = Field(description="Cabin")
    fare_basis: FareBasis = Field(description="Fare family")
    passenger_name: str = Field(description="Passenger's name")
    seat: str | None = Field(description="Assigned seat")
    price_paid: float = Field(description="Price paid, USD")
    payment_method_id: str = Field(description="Payment method charged")
    status: Literal["confirmed", "cancelled"] = Field(description="Booking status")


class BookingList(BaseModel):
    user_id: str = Field(description="Account")
    bookings: list[Booking] = Field(description="Bookings, by departure date")


class Cancellation(BaseModel):
    booking_id: str = Field(description="Id of the cancelled booking")
    status: Literal["cancelled"] = Field(description="New booking status")
    refund_amount: float = Field(description="Money refunded, USD")
    payment_method_id: str = Field(description="Payment method refunded")


# ---------------------------------------------------------------- helpers

UserId = Annotated[str, Field(description="Traveller account id, e.g. 'amara_okoye_1207'")]
FlightId = Annotated[str, Field(description="Flight id from a search, e.g. 'TS101-2025-06-10'")]
BookingId = Annotated[str, Field(description="Booking id, e.g. 'BK1001'")]
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _today(conn: sqlite3.Connection) -> str:
    return STORE.now(conn)[:10]


def _airport_code(conn: sqlite3.Connection, text: str) -> str:
    key = text.strip()
    row = one_or_fail(
        conn,
        "SELECT code FROM airports WHERE code = ? OR lower(city) = ?",
        (key.upper(), key.lower()),
        f"unknown airport or city '{text}'",
    )
    return str(row["code"])


def _flight_row(conn: sqlite3.Connection, flight_id: str) -> sqlite3.Row:
    return one_or_fail(
        conn,
        "SELECT * FROM flights WHERE flight_id = ?",
        (flight_id.strip().upper(),),
        f"flight '{flight_id}' not found",
    )


def _fares(conn: sqlite3.Connection, flight_id: str, cabin: str | None = None) -> list[Fare]:
    rows = conn.execute(
        "SELECT * FROM fares WHERE flight_id = ? ORDER BY cabin DESC, price", (flight_id,)
    ).fetchall()
    return [
        Fare(
            cabin=r["cabin"],
            fare_basis=r["fare_basis"],
            price=r["price"],
            refundable=bool(r["refundable"]),
            cancel_fee=r["cancel_fee"],
            seat_change_allowed=bool(r["seat_change_allowed"]),
        )
        for r in rows
        if cabin is None or r["cabin"] == cabin
    ]


def _free_seats(conn: sqlite3.Connection, flight_id: str, cabin: str) -> list[str]:
    rows = conn.execute(
        "SELECT seat FROM seats WHERE flight_id = ? AND cabin = ? AND status = 'available'",
        (flight_id, cabin),
    ).fetchall()
    return sorted((r["seat"] for r in rows), key=lambda s: (int(s[:-1]), s[-1]))


def _booking(conn: sqlite3.Connection, booking_id: str) -> Booking:
    row = one_or_fail(
        conn,
        "SELECT b.*, f.flight_number, f.date, f.origin, f.destination FROM bookings b "
        "JOIN flights f ON f.flight_id = b.flight_id WHERE b.booking_id = ?",
        (booking_id.strip().upper(),),
        f"booking '{booking_id}' not found",
    )
    return from_row(Booking, row)


def _user(conn: sqlite3.Connection, user_id: str) -> sqlite3.Row:
    return one_or_fail(
        conn, "SELECT * FROM users WHERE user_id = ?", (user_id,), f"user '{user_id}' not found"
    )


# ---------------------------------------------------------------- tools


@server.tool(annotations=read_tool("Find traveller by email"))
async def find_user(
    email: Annotated[str, Field(description="The traveller's email address")],
) -> Traveller:
    """Look up a traveller's account by email, with payment methods and balances."""
    with STORE.tx() as conn:
        row = one_or_fail(
            conn,
            "SELECT * FROM users WHERE lower(email) = ?",
            (email.strip().lower(),),
            f"no user with email '{email}'",
        )
        pms = conn.execute(
            "SELECT * FROM payment_methods WHERE user_id = ? ORDER BY payment_method_id",
            (row["user_id"],),
        ).fetchall()
        return Traveller(
            user_id=row["user_id"],
            name=row["name"],
            email=row["email"],
            membership=row["membership"],
            payment_methods=[from_row(PaymentMethod, p) for p in pms],
        )


@server.tool(annotations=read_tool("Find airports"))
async def find_airports(
    query: Annotated[str, Field(description="City name, airport name or code, e.g. 'Boston'")],
) -> AirportList:
    """Find airports whose code, city or name matches the query."""
    q = query.strip().lower()
    with STORE.tx() as conn:
        rows = conn.execute("SELECT * FROM airports ORDER BY code").fetchall()
    hits = [
        Airport(code=r["code"], city=r["city"], name=r["name"])
        for r in rows
        if q and (q == r["code"].lower() or q in r["city"].lower() or q in r["name"].lower())
    ]
    return AirportList(airports=hits)


@server.tool(annotations=read_tool("Search flights"))
async def search_flights(
    origin: Annotated[str, Field(description="Departure airport code or city, e.g. 'SFO'")],
    destination: Annotated[str, Field(description="Arrival airport code or city, e.g. 'JFK'")],
    date: Annotated[str, Field(description="Departure date, YYYY-MM-DD")],
    cabin: Annotated[Cabin, Field(description="Cabin to price and count seats in")] = "economy",
) -> FlightSearch:
    """Search direct flights on a route and date, with the lowest fare and seats left."""
    if not _DATE.match(date.strip()):
        raise fail(f"date must be YYYY-MM-DD, got '{date}'")
    with STORE.tx() as conn:
        o, d = _airport_code(conn, origin), _airport_code(conn, destination)
        if o == d:
            raise fail("origin and destination are the same airport")
        rows = conn.execute(
            "SELECT * FROM flights WHERE origin = ? AND destination = ? AND date = ? "
            "ORDER BY depart_time",
            (o, d, date.strip()),
        ).fetchall()
        flights = [
            FlightSummary(
                flight_id=r["flight_id"],
                flight_number=r["flight_number"],
                origin=r["origin"],
                destination=r["destination"],
                date=r["date"],
                depart_time=r["depart_time"],
                arrive_time=r["arrive_time"],
                status=r["status"],
                lowest_fare=min(f.price for f in _fares(conn, r["flight_id"], cabin)),
                seats_left=len(_free_seats(conn, r["flight_id"], cabin)),
            )
            for r in rows
        ]
    return FlightSearch(origin=o, destination=d, date=date.strip(), cabin=cabin, flights=flights)


@server.tool(annotations=read_tool("Get flight details"))
async def get_flight(flight_id: FlightId) -> Flight:
    """Get a flight's schedule, status, seats left per cabin and fares."""
    with STORE.tx() as conn:
        r = _flight_row(conn, flight_id)
        fid = r["flight_id"]
        return Flight(
            **{
                k: r[k]
                for k in (
                    "flight_id",
                    "flight_number",
                    "origin",
                    "destination",
                    "date",
                    "depart_time",
                    "arrive_time",
                    "aircraft",
                    "status",
                )
            },
            economy_seats_left=len(_free_seats(conn, fid, "economy")),
            business_seats_left=len(_free_seats(conn, fid, "business")),
            fares=_fares(conn, fid),
        )


@server.tool(annotations=read_tool("Get fare rules"))
async def get_fare_rules(
    flight_id: FlightId,
    cabin: Annotated[Cabin | None, Field(description="Only this cabin's fares")] = None,
) -> FareRules:
    """Get the fares of a flight: price, refundability, cancellation fee, seat changes."""
    with STORE.tx() as conn:
        fid = _flight_row(conn, flight_id)["flight_id"]
        return FareRules(flight_id=fid, fares=_fares(conn, fid, cabin))


@server.tool(annotations=read_tool("Get seat map"))
async def get_seat_map(
    flight_id: FlightId,
    cabin: Annotated[Cabin, Field(description="Cabin to show")] = "economy",
) -> SeatMap:
    """List the free seats of one cabin of a flight."""
    with STORE.tx() as conn:
        fid = _flight_row(conn, flight_id)["flight_id"]
        return SeatMap(flight_id=fid, cabin=cabin, available_seats=_free_seats(conn, fid, cabin))


@server.tool(annotations=write_tool("Book a flight"))
async def book_flight(
    user_id: UserId,
    flight_id: FlightId,
    fare_basis: Annotated[FareBasis, Field(description="Fare family: basic, standard or flex")],
    payment_method_id: Annotated[
        str, Field(description="Payment method of the user to charge, e.g. 'credit_card_1207'")
    ],
    cabin: Annotated[Cabin, Field(description="Cabin")] = "economy",
    seat: Annotated[
        str | None, Field(description="Seat to take, e.g. '12C'; default: first free seat")
    ] = None,
    passenger_name: Annotated[
        str | None, Field(description="Passenger's name; default: the account holder")
    ] = None,
) -> Booking:
    """Book one passenger on a flight, charging the payment method the fare price."""
    with STORE.tx() as conn:
        user = _user(conn, user_id)
        f = _flight_row(conn, flight_id)
        fid = f["flight_id"]
        if f["status"] != "scheduled":
            raise fail(f"flight {fid} is {f['status']}; it cannot be booked")
        if f["date"] < _today(conn):
            raise fail(f"flight {fid} departed on {f['date']}; it cannot be booked")
        fare = one(
            conn,
            "SELECT * FROM fares WHERE flight_id = ? AND cabin = ? AND fare_basis = ?",
            (fid, cabin, fare_basis),
        )
        if fare is None:
            raise fail(f"no {fare_basis} fare in {cabin} on flight {fid}")
        dup = one(
            conn,
            "SELECT booking_id FROM bookings WHERE user_id = ? AND flight_id = ? "
            "AND status = 'confirmed'",
            (user_id, fid),
        )
        if dup is not None:
            raise fail(
                f"user '{user_id}' already holds booking {dup['booking_id']} on flight {fid}"
            )
        free = _free_seats(conn, fid, cabin)
        if not free:
            raise fail(f"no {cabin} seats left on flight {fid}")
        if seat is None:
            chosen = free[0]
        else:
            chosen = seat.strip().upper()
            cab = one(
                conn, "SELECT cabin FROM seats WHERE flight_id = ? AND seat = ?", (fid, chosen)
            )
            if cab is None or cab["cabin"] != cabin:
                raise fail(f"seat {chosen} is not a {cabin} seat on flight {fid}")
            if chosen not in free:
                raise fail(f"seat {chosen} on flight {fid} is already taken")
        pm = one(
            conn, "SELECT * FROM payment_methods WHERE payment_method_id = ?", (payment_method_id,)
        )
        if pm is None or pm["user_id"] != user_id:
            raise fail(f"payment method '{payment_method_id}' not found for user '{user_id}'")
        price = fare["price"]
        if pm["balance"] is not None:
            if pm["balance"] < price:
                raise fail(
                    f"insufficient funds: {pm['kind'].replace('_', ' ')} {payment_method_id} has "
                    f"{pm['balance']:.2f} left, the fare is {price:.2f}"
                )
            conn.execute(
                "UPDATE payment_methods SET balance = ? WHERE payment_method_id = ?",
                (money(pm["balance"] - price), payment_method_id),
            )
        booking_id = next_id(conn, "bookings", "booking_id", "BK", 1001)
        now = STORE.now(conn)
        insert(
            conn,
            "bookings",
            {
                "booking_id": booking_id,
                "user_id": user_id,
                "flight_id": fid,
                "cabin": cabin,
                "fare_basis": fare_basis,
                "passenger_name": passenger_name or user["name"],
                "seat": chosen,
                "price_paid": price,
                "payment_method_id": payment_method_id,
                "status": "confirmed",
                "created_at": now,
            },
        )
        conn.execute(
            "UPDATE seats SET status = 'occupied', booking_id = ? WHERE flight_id = ? AND seat = ?",
            (booking_id, fid, chosen),
        )
        insert(
            conn,
            "payments",
            {
                "txn_id": next_id(conn, "payments", "txn_id", "T", 1001),
                "booking_id": booking_id,
                "payment_method_id": payment_method_id,
                "amount": price,
                "kind": "charge",
                "created_at": now,
            },
        )
        return _booking(conn, booking_id)


@server.tool(annotations=read_tool("List bookings"))
async def list_bookings(user_id: UserId) -> BookingList:
    """List a traveller's bookings, by departure date."""
    with STORE.tx() as conn:
        _user(conn, user_id)
        ids = conn.execute(
            "SELECT b.booking_id FROM bookings b JOIN flights f ON f.flight_id = b.flight_id "
            "WHERE b.user_id = ? ORDER BY f.date, f.depart_time, b.booking_id",
            (user_id,),
        ).fetchall()
        return BookingList(user_id=user_id, bookings=[_booking(conn, r[0]) for r in ids])


@server.tool(annotations=read_tool("Get booking"))
async def get_booking(booking_id: BookingId) -> Booking:
    """Get one booking: flight, cabin, fare, seat, price and status."""
    with STORE.tx() as conn:
        return _booking(conn, booking_id)


@server.tool(annotations=write_tool("Change seat", idempotent=True))
async def change_seat(
    booking_id: BookingId,
    seat: Annotated[str, Field(description="New seat in the same cabin, e.g. '11C'")],
) -> Booking:
    """Move a confirmed booking to another free seat in the same cabin."""
    with STORE.tx() as conn:
        b = _booking(conn, booking_id)
        if b.status != "confirmed":
            raise fail(f"booking {b.booking_id} is {b.status}; its seat cannot be changed")
        f = _flight_row(conn, b.flight_id)
        if f["status"] != "scheduled" or f["date"] < _today(conn):
            raise fail(f"flight {b.flight_id} is {f['status']}; seats can no longer be changed")
        if b.fare_basis == "basic":
            raise fail(f"booking {b.booking_id} has a basic fare; basic fares allow no seat change")
        new = seat.strip().upper()
        row = one_or_fail(
            conn,
            "SELECT * FROM seats WHERE flight_id = ? AND seat = ?",
            (b.flight_id, new),
            f"seat {new} does not exist on flight {b.flight_id}",
        )
        if row["cabin"] != b.cabin:
            raise fail(f"seat {new} is in {row['cabin']}; booking {b.booking_id} is {b.cabin}")
        if new == b.seat:
            return b
        if row["status"] != "available":
            raise fail(f"seat {new} on flight {b.flight_id} is already taken")
        conn.execute(
            "UPDATE seats SET status = 'available', booking_id = NULL "
            "WHERE flight_id = ? AND seat = ?",
            (b.flight_id, b.seat),
        )
        conn.execute(
            "UPDATE seats SET status = 'occupied', booking_id = ? WHERE flight_id = ? AND seat = ?",
            (b.booking_id, b.flight_id, new),
        )
        conn.execute("UPDATE bookings SET seat = ? WHERE booking_id = ?", (new, b.booking_id))
        return _booking(conn, b.booking_id)


@server.tool(annotations=write_tool("Cancel booking", destructive=True))
async def cancel_booking(booking_id: BookingId) -> Cancellation:
    """Cancel a booking and refund what its fare rules allow (in full if the airline cancelled)."""
    with STORE.tx() as conn:
        b = _booking(conn, booking_id)
        if b.status != "confirmed":
            raise fail(f"booking {b.booking_id} is already {b.status}")
        f = _flight_row(conn, b.flight_id)
        if f["status"] == "landed" or f["date"] < _today(conn):
            raise fail(
                f"flight {b.flight_id} has already departed; booking {b.booking_id} "
                "cannot be cancelled"
            )
        fare = one(
            conn,
            "SELECT * FROM fares WHERE flight_id = ? AND cabin = ? AND fare_basis = ?",
            (b.flight_id, b.cabin, b.fare_basis),
        )
        assert fare is not None
        if f["status"] == "cancelled":
            refund = b.price_paid
        elif not fare["refundable"]:
            raise fail(
                f"booking {b.booking_id} has a non-refundable {b.fare_basis} fare; it cannot be "
                "cancelled for a refund"
            )
        else:
            refund = money(max(0.0, b.price_paid - fare["cancel_fee"]))
        pm = one(
            conn,
            "SELECT * FROM payment_methods WHERE payment_method_id = ?",
            (b.payment_method_id,),
        )
        assert pm is not None
        if pm["balance"] is not None:
            conn.execute(
                "UPDATE payment_methods SET balance = ? WHERE payment_method_id = ?",
                (money(pm["balance"] + refund), b.payment_method_id),
            )
        conn.execute(
            "UPDATE bookings SET status = 'cancelled' WHERE booking_id = ?", (b.booking_id,)
        )
        conn.execute(
            "UPDATE seats SET status = 'available', booking_id = NULL WHERE booking_id = ?",
            (b.booking_id,),
        )
        insert(
            conn,
            "payments",
            {
                "txn_id": next_id(conn, "payments", "txn_id", "T", 1001),
                "booking_id": b.booking_id,
                "payment_method_id": b.payment_method_id,
                "amount": -refund,
                "kind": "refund",
                "created_at": STORE.now(conn),
            },
        )
        return Cancellation(
            booking_id=b.booking_id,
            status="cancelled",
            refund_amount=refund,
            payment_method_id=b.payment_method_id,
        )


def main() -> None:
    """Seed the state if needed, then serve over stdio."""
    STORE.ensure()
    serve_stdio(server)


if __name__ == "__main__":
    main()
