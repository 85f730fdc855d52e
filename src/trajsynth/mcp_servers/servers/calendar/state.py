"""The calendar's state: its SQLite tables and how they are seeded (docs/methods.md §2).

One SQLite file, ``$TRAJSYNTH_WORKDIR/calendar.sqlite``, seeded from ``seed.json`` (beside this
module) perturbed by ``$TRAJSYNTH_SEED`` (which pending invitations were answered, which messages
are unread).

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
)

__all__ = ["STORE"]

STORE_TABLES = (
    Table(
        "users",
        (Column("user_id"), Column("name"), Column("email"), Column("job_title")),
        ("user_id",),
    ),
    Table(
        "events",
        (
            Column("event_id"),
            Column("organizer_id"),
            Column("title"),
            Column("date"),
            Column("start_time"),
            Column("end_time"),
            Column("location"),
            Column("description"),
            Column("status"),
        ),
        ("event_id",),
    ),
    Table(
        "attendees",
        (Column("event_id"), Column("user_id"), Column("response")),
        ("event_id", "user_id"),
    ),
    Table(
        "messages",
        (
            Column("message_id"),
            Column("sender_id"),
            Column("recipient_id"),
            Column("subject"),
            Column("body"),
            Column("sent_at"),
            Column("read", "INTEGER"),
        ),
        ("message_id",),
        volatile=frozenset({"sent_at"}),
    ),
)


def _seed(data: dict[str, Any], rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """Rows from the seed data; the rng answers some pending invitations and flips read flags."""
    rows: dict[str, list[dict[str, Any]]] = {
        "users": [dict(u) for u in data["users"]],
        "events": [],
        "attendees": [],
        "messages": [],
    }
    for e in data["events"]:
        e = dict(e)
        attendees: dict[str, str] = e.pop("attendees")
        rows["events"].append(e)
        for user_id in sorted(attendees):
            response = attendees[user_id]
            if response == "pending" and e["status"] == "confirmed":
                response = rng.choice(["pending", "pending", "accepted", "tentative"])
            rows["attendees"].append(
                {"event_id": e["event_id"], "user_id": user_id, "response": response}
            )
    for m in data["messages"]:
        m = dict(m)
        if rng.random() < 0.3:
            m["read"] = 1 - m["read"]
        rows["messages"].append(m)
    return rows


STORE = Store("calendar", STORE_TABLES, _seed, Path(__file__).with_name("seed.json"))
