"""The airline's state: its SQLite tables and how they are seeded (docs/methods.md §2).

One SQLite file, ``$TRAJSYNTH_WORKDIR/travel.sqlite``, seeded from ``seed.json`` (beside this
module) perturbed by ``$TRAJSYNTH_SEED`` (fare levels, which seats are taken, gift-card and
certificate balances).

Imported by ``server.py`` (the tools) and by ``_state --init``, which seeds a work
directory without loading the server (this module imports no ``mcp``).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from trajsynth.mcp_servers.servers._backend import (
    Column,
    Store,
    Table,
    money,
)

__all__ = ["STORE"]

STORE_TABLES = (
    Table(
        "airports",
        (Column("code"), Column("city"), Column("name"), Column("country")),
        ("code",),
    ),
    Table(
        "users",
        (Column("user_id"), Column("name"), Column("email"), Column("membership")),
        ("user_id",),
    ),
    Table(
        "payment_methods",
        (
            Column("payment_method_id"),
            Column("user_id"),
            Column("kind"),
            Column("label"),
            Column("balance", "REAL", nullable=True),
        ),
        ("payment_method_id",),
    ),
    Table(
        "flights",
        (
            Column("flight_id"),
            Column("flight_number"),
            Column("origin"),
            Column("destination"),
            Column("date"),
            Column("depart_time"),
            Column("arrive_time"),
            Column("aircraft"),
            Column("status"),
        ),
        ("flight_id",),
    ),
    Table(
        "fares",
        (
            Column("flight_id"),
            Column("cabin"),
            Column("fare_basis"),
            Column("price", "REAL"),
            Column("refundable", "INTEGER"),
            Column("cancel_fee", "REAL"),
            Column("seat_change_allowed", "INTEGER"),
        ),
        ("flight_id", "cabin", "fare_basis"),
    ),
    Table(
        "seats",
        (
            Column("flight_id"),
            Column("seat"),
            Column("cabin"),
            Column("status"),
            Column("booking_id", nullable=True),
        ),
        ("flight_id", "seat"),
    ),
    Table(
        "bookings",
        (
            Column("booking_id"),
            Column("user_id"),
            Column("flight_id"),
            Column("cabin"),
            Column("fare_basis"),
            Column("passenger_name"),
            Column("seat", nullable=True),
            Column("price_paid", "REAL"),
            Column("payment_method_id"),
            Column("status"),
            Column("created_at"),
        ),
        ("booking_id",),
        volatile=frozenset({"created_at"}),
    ),
    Table(
        "payments",
        (
            Column("txn_id"),
            Column("booking_id"),
            Column("payment_method_id"),
            Column("amount", "REAL"),
            Column("kind"),
            Column("created_at"),
        ),
        ("txn_id",),
        volatile=frozenset({"created_at"}),
    ),
)


def _seat_labels(layout: dict[str, Any]) -> list[str]:
    return [f"{r}{letter}" for r in layout["rows"] for letter in layout["letters"]]


def _seed(data: dict[str, Any], rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """Rows from the seed data; the rng moves fares, seat occupancy and stored balances."""
    rows: dict[str, list[dict[str, Any]]] = {
        "airports": [dict(a) for a in data["airports"]],
        "users": [dict(u) for u in data["users"]],
        "payment_methods": [],
        "flights": [],
        "fares": [],
        "seats": [],
        "bookings": [],
        "payments": [],
    }
    for pm in data["payment_methods"]:
        pm = dict(pm)
        if pm["balance"] is not None:
            pm["balance"] = money(pm["balance"] * rng.uniform(0.6, 1.4))
        rows["payment_methods"].append(pm)
    overrides: dict[str, dict[str, Any]] = data["flight_overrides"]
    booked: dict[str, dict[str, str]] = {}
    for b in data["bookings"]:
        booked.setdefault(b["flight_id"], {})[b["seat"]] = b["booking_id"]
    prices: dict[tuple[str, str, str], float] = {}
    for sched in data["schedules"]:
        for date in sched["dates"]:
            flight_id = f"{sched['flight_number']}-{date}"
            over = overrides.get(flight_id, {})
            rows["flights"].append(
                {
                    "flight_id": flight_id,
                    "flight_number": sched["flight_number"],
                    "origin": sched["origin"],
                    "destination": sched["destination"],
                    "date": date,
                    "depart_time": sched["depart"],
                    "arrive_time": sched["arrive"],
                    "aircraft": sched["aircraft"],
                    "status": over.get("status", "scheduled"),
                }
            )
            factor = rng.uniform(0.9, 1.15)
            for rule in data["fare_rules"]:
                price = money(sched[rule["cabin"]] * factor * rule["multiplier"])
                prices[(flight_id, rule["cabin"], rule["fare_basis"])] = price
                rows["fares"].append(
                    {
                        "flight_id": flight_id,
                        "cabin": rule["cabin"],
                        "fare_basis": rule["fare_basis"],
                        "price": price,
                        "refundable": int(rule["refundable"]),
                        "cancel_fee": rule["cancel_fee"],
                        "seat_change_allowed": int(rule["seat_change_allowed"]),
                    }
                )
            taken = booked.get(flight_id, {})
            for cabin, layout in data["cabins"].items():
                labels = _seat_labels(layout)
                lo, hi = data[f"{cabin}_load"]
                load = over.get(f"{cabin}_load", rng.uniform(lo, hi))
                free = [s for s in labels if s not in taken]
                n_more = max(0, round(load * len(labels)) - sum(s in taken for s in labels))
                others = set(rng.sample(free, min(n_more, len(free))))
                for s in labels:
                    occupied = s in taken or s in others
                    rows["seats"].append(
                        {
                            "flight_id": flight_id,
                            "seat": s,
                            "cabin": cabin,
                            "status": "occupied" if occupied else "available",
                            "booking_id": taken.get(s),
                        }
                    )
    for n, b in enumerate(data["bookings"], start=1001):
        price = prices[(b["flight_id"], b["cabin"], b["fare_basis"])]
        rows["bookings"].append({**b, "price_paid": price, "status": "confirmed"})
        rows["payments"].append(
            {
                "txn_id": f"T{n}",
                "booking_id": b["booking_id"],
                "payment_method_id": b["payment_method_id"],
                "amount": price,
                "kind": "charge",
                "created_at": b["created_at"],
            }
        )
    return rows


STORE = Store("travel", STORE_TABLES, _seed, Path(__file__).with_name("seed.json"))
