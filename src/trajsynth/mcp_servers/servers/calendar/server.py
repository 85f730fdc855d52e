"""Calendar and email for a small team: events, invitations, conflicts, messages (MCP server).

This module is the MCP server and its tools; their state
(``$TRAJSYNTH_WORKDIR/calendar.sqlite``, its tables and seeding) is ``state.py``'s ``STORE``.
Policy the tools enforce, as a calendar service would: nothing is scheduled in the past
or with an end before its start; an organizer cannot double-book, and an attendee cannot accept
an invitation that overlaps an event they organize or accepted (a conflict names the other
event); only the organizer may reschedule or cancel; cancelled events take no invitations or
replies. Invitations, reschedules and cancellations send messages to the people concerned.

Run: ``python -m trajsynth.mcp_servers.servers.calendar`` (stdio).
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
    next_id,
    one,
    one_or_fail,
    read_tool,
    serve_state,
    write_tool,
)
from trajsynth.mcp_servers.servers._stdio import serve_stdio
from trajsynth.mcp_servers.servers.calendar.state import STORE

__all__ = ["STORE", "main", "server"]

server = MCPServer(
    name="calendar",
    instructions="A team's shared calendar and email. Dates are YYYY-MM-DD, times HH:MM (24 h).",
)
serve_state(server, STORE)

Response = Literal["accepted", "declined", "tentative"]

# ---------------------------------------------------------------- output models


class Person(BaseModel):
    user_id: str = Field(description="Id of the colleague's account")
    name: str = Field(description="Full name")
    email: str = Field(description="Email address")
    job_title: str = Field(description="Job title, e.g. 'Staff Engineer'")


class PersonList(BaseModel):
    users: list[Person] = Field(description="Matching colleagues")


class Attendee(BaseModel):
    user_id: str = Field(description="Id of the attendee")
    name: str = Field(description="Attendee's name")
    response: Literal["pending", "accepted", "declined", "tentative"] = Field(
        description="Answer to the invitation"
    )


class EventSummary(BaseModel):
    event_id: str = Field(description="Id of the event, e.g. 'EV1001'")
    title: str = Field(description="Event title")
    date: str = Field(description="Date (YYYY-MM-DD)")
    start_time: str = Field(description="Start time (HH:MM)")
    end_time: str = Field(description="End time (HH:MM)")
    location: str = Field(description="Where it happens")
    organizer_id: str = Field(description="Id of the organizer")
    my_response: str = Field(description="'organizer' or the user's answer to the invitation")


class EventList(BaseModel):
    user_id: str = Field(description="Whose calendar")
    date: str = Field(description="Day listed")
    events: list[EventSummary] = Field(description="Confirmed events that day, by start time")


class Event(BaseModel):
    event_id: str = Field(description="Id of the event, e.g. 'EV1001'")
    title: str = Field(description="Event title")
    date: str = Field(description="Date (YYYY-MM-DD)")
    start_time: str = Field(description="Start time (HH:MM)")
    end_time: str = Field(description="End time (HH:MM)")
    location: str = Field(description="Where it happens")
    description: str = Field(description="Agenda or notes")
    organizer_id: str = Field(description="Id of the organizer")
    status: Literal["confirmed", "cancelled"] = Field(description="Event status")
    attendees: list[Attendee] = Field(description="Invited people and their answers")


class Availability(BaseModel):
    user_id: str = Field(description="Whose calendar was checked")
    date: str = Field(description="Day checked")
    start_time: str = Field(description="Start of the slot")
    end_time: str = Field(description="End of the slot")
    available: bool = Field(description="True when nothing overlaps the slot")
    conflicts: list[EventSummary] = Field(description="Events overlapping the slot")


class MessageSummary(BaseModel):
    message_id: str = Field(description="Id of the message, e.g. 'M1001'")
    from_email: str = Field(description="Sender's email")
    to_email: str = Field(description="Recipient's email")
    subject: str = Field(description="Subject line")
    sent_at: str = Field(description="When it was sent (ISO 8601)")
    read: bool = Field(description="Whether the recipient has read it")


class MessageList(BaseModel):
    user_id: str = Field(description="Whose mailbox")
    folder: str = Field(description="inbox or sent")
    messages: list[MessageSummary] = Field(description="Messages, newest first")


class Message(MessageSummary):
    body: str = Field(description="Message text")


# ---------------------------------------------------------------- helpers

UserId = Annotated[str, Field(description="Colleague's account id, e.g. 'priya_nair'")]
EventId = Annotated[str, Field(description="Event id, e.g. 'EV1001'")]
Date = Annotated[str, Field(description="Date, YYYY-MM-DD")]
StartTime = Annotated[str, Field(description="Start time, HH:MM (24 h)")]
EndTime = Annotated[str, Field(description="End time, HH:MM (24 h)")]
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")


def _user(conn: sqlite3.Connection, user_id: str) -> sqlite3.Row:
    return one_or_fail(
        conn,
        "SELECT * FROM users WHERE user_id = ?",
        (user_id.strip(),),
        f"user '{user_id}' not found",
    )


def _event_row(conn: sqlite3.Connection, event_id: str) -> sqlite3.Row:
    return one_or_fail(
        conn,
        "SELECT * FROM events WHERE event_id = ?",
        (event_id.strip().upper(),),
        f"event '{event_id}' not found",
    )


def _event(conn: sqlite3.Connection, event_id: str) -> Event:
    e = _event_row(conn, event_id)
    att = conn.execute(
        "SELECT a.user_id, u.name, a.response FROM attendees a JOIN users u "
        "ON u.user_id = a.user_id WHERE a.event_id = ? ORDER BY a.user_id",
        (e["event_id"],),
    ).fetchall()
    return Event(
        **{
            k: e[k]
            for k in (
                "event_id",
                "title",
                "date",
                "start_time",
                "end_time",
                "location",
                "description",
                "organizer_id",
                "status",
            )
        },
        attendees=[Attendee(user_id=a[0], name=a[1], response=a[2]) for a in att],
    )


def _check_slot(conn: sqlite3.Connection, date: str, start: str, end: str) -> None:
    if not _DATE.match(date):
        raise fail(f"date must be YYYY-MM-DD, got '{date}'")
    for t in (start, end):
        if not _TIME.match(t):
            raise fail(f"times must be HH:MM (24 h), got '{t}'")
    if end <= start:
        raise fail(f"end time {end} is not after start time {start}")
    now = STORE.now(conn)
    if f"{date}T{start}" < now[:16]:
        raise fail(f"{date} {start} is in the past (now is {now[:10]} {now[11:16]})")


def _busy(
    conn: sqlite3.Connection,
    user_id: str,
    date: str,
    start: str,
    end: str,
    *,
    exclude: str | None = None,
) -> list[EventSummary]:
    """Confirmed events the user organizes or accepted that overlap [start, end) on date."""
    rows = conn.execute(
        "SELECT e.*, CASE WHEN e.organizer_id = :u THEN 'organizer' ELSE a.response END AS mine "
        "FROM events e LEFT JOIN attendees a ON a.event_id = e.event_id AND a.user_id = :u "
        "WHERE e.status = 'confirmed' AND e.date = :d AND e.start_time < :end "
        "AND e.end_time > :start AND (e.organizer_id = :u OR a.response = 'accepted') "
        "AND e.event_id != :x ORDER BY e.start_time, e.event_id",
        {"u": user_id, "d": date, "start": start, "end": end, "x": exclude or ""},
    ).fetchall()
    return [_summary(r) for r in rows]


def _summary(r: sqlite3.Row) -> EventSummary:
    return EventSummary(
        **{
            k: r[k]
            for k in (
                "event_id",
                "title",
                "date",
                "start_time",
                "end_time",
                "location",
                "organizer_id",
            )
        },
        my_response=r["mine"],
    )


def _conflict_text(c: EventSummary) -> str:
    return f"{c.event_id} '{c.title}' {c.start_time}-{c.end_time}"


def _send(conn: sqlite3.Connection, sender: str, recipient: str, subject: str, body: str) -> str:
    message_id = next_id(conn, "messages", "message_id", "M", 1001)
    insert(
        conn,
        "messages",
        {
            "message_id": message_id,
            "sender_id": sender,
            "recipient_id": recipient,
            "subject": subject,
            "body": body,
            "sent_at": STORE.now(conn),
            "read": 0,
        },
    )
    return message_id


def _message(conn: sqlite3.Connection, message_id: str) -> Message:
    row = one_or_fail(
        conn,
        "SELECT m.*, s.email AS from_email, r.email AS to_email FROM messages m "
        "JOIN users s ON s.user_id = m.sender_id JOIN users r ON r.user_id = m.recipient_id "
        "WHERE m.message_id = ?",
        (message_id.strip().upper(),),
        f"message '{message_id}' not found",
    )
    return from_row(Message, row, read=bool(row["read"]))


def _when(e: sqlite3.Row) -> str:
    return f"{e['date']} {e['start_time']}-{e['end_time']}"


# ---------------------------------------------------------------- tools


@server.tool(annotations=read_tool("Find colleague"))
async def find_user(
    query: Annotated[str, Field(description="Name or email (or part of it), e.g. 'Priya'")],
) -> PersonList:
    """Find colleagues whose name or email contains the query."""
    q = query.strip().lower()
    if not q:
        raise fail("query is empty")
    with STORE.tx() as conn:
        rows = conn.execute(
            "SELECT * FROM users WHERE instr(lower(name), ?) > 0 OR instr(lower(email), ?) > 0 "
            "ORDER BY user_id",
            (q, q),
        ).fetchall()
    if not rows:
        raise fail(f"no user matches '{query}'")
    return PersonList(users=[from_row(Person, r) for r in rows])


@server.tool(annotations=read_tool("List a day's events"))
async def list_events(user_id: UserId, date: Date) -> EventList:
    """List the confirmed events a user organizes or is invited to on one day."""
    if not _DATE.match(date.strip()):
        raise fail(f"date must be YYYY-MM-DD, got '{date}'")
    with STORE.tx() as conn:
        _user(conn, user_id)
        rows = conn.execute(
            "SELECT e.*, CASE WHEN e.organizer_id = :u THEN 'organizer' ELSE a.response END "
            "AS mine FROM events e LEFT JOIN attendees a ON a.event_id = e.event_id "
            "AND a.user_id = :u WHERE e.status = 'confirmed' AND e.date = :d "
            "AND (e.organizer_id = :u OR a.user_id IS NOT NULL) ORDER BY e.start_time, e.event_id",
            {"u": user_id, "d": date.strip()},
        ).fetchall()
    return EventList(user_id=user_id, date=date.strip(), events=[_summary(r) for r in rows])


@server.tool(annotations=read_tool("Get event"))
async def get_event(event_id: EventId) -> Event:
    """Get an event with its time, place, organizer and attendees' answers."""
    with STORE.tx() as conn:
        return _event(conn, event_id)


@server.tool(annotations=read_tool("Check availability"))
async def check_availability(
    user_id: UserId, date: Date, start_time: StartTime, end_time: EndTime
) -> Availability:
    """Check whether a user is free in a time slot (events they organize or accepted)."""
    with STORE.tx() as conn:
        _user(conn, user_id)
        _check_slot(conn, date, start_time, end_time)
        busy = _busy(conn, user_id, date, start_time, end_time)
    return Availability(
        user_id=user_id,
        date=date,
        start_time=start_time,
        end_time=end_time,
        available=not busy,
        conflicts=busy,
    )


@server.tool(annotations=write_tool("Create event"))
async def create_event(
    organizer_id: Annotated[str, Field(description="Account id of the organizer")],
    title: Annotated[str, Field(description="Event title")],
    date: Date,
    start_time: StartTime,
    end_time: EndTime,
    location: Annotated[str, Field(description="Room, address or link")] = "",
    description: Annotated[str, Field(description="Agenda or notes")] = "",
) -> Event:
    """Create an event on the organizer's calendar; refused if it overlaps their schedule."""
    if not title.strip():
        raise fail("title is empty")
    with STORE.tx() as conn:
        _user(conn, organizer_id)
        _check_slot(conn, date, start_time, end_time)
        busy = _busy(conn, organizer_id, date, start_time, end_time)
        if busy:
            raise fail(
                f"conflicting booking: {organizer_id} is busy {date} {start_time}-{end_time} "
                f"({', '.join(_conflict_text(c) for c in busy)})"
            )
        event_id = next_id(conn, "events", "event_id", "EV", 1001)
        insert(
            conn,
            "events",
            {
                "event_id": event_id,
                "organizer_id": organizer_id,
                "title": title.strip(),
                "date": date,
                "start_time": start_time,
                "end_time": end_time,
                "location": location,
                "description": description,
                "status": "confirmed",
            },
        )
        return _event(conn, event_id)


@server.tool(annotations=write_tool("Invite attendee"))
async def invite_attendee(
    event_id: EventId,
    user_id: Annotated[str, Field(description="Account id of the person to invite")],
) -> Event:
    """Invite a colleague to an event; they receive an invitation message."""
    with STORE.tx() as conn:
        e = _event_row(conn, event_id)
        invitee = _user(conn, user_id)
        if e["status"] != "confirmed":
            raise fail(f"event {e['event_id']} is cancelled; it takes no invitations")
        if e["organizer_id"] == invitee["user_id"]:
            raise fail(f"{user_id} organizes event {e['event_id']}; organizers are not invited")
        if one(
            conn,
            "SELECT 1 FROM attendees WHERE event_id = ? AND user_id = ?",
            (e["event_id"], invitee["user_id"]),
        ):
            raise fail(f"{user_id} is already invited to event {e['event_id']}")
        insert(
            conn,
            "attendees",
            {"event_id": e["event_id"], "user_id": invitee["user_id"], "response": "pending"},
        )
        _send(
            conn,
            e["organizer_id"],
            invitee["user_id"],
            f"Invitation: {e['title']}",
            f"You are invited to '{e['title']}' on {_when(e)} at {e['location'] or 'TBD'} "
            f"({e['event_id']}).",
        )
        return _event(conn, e["event_id"])


@server.tool(annotations=write_tool("Answer invitation", idempotent=True))
async def respond_to_invitation(
    event_id: EventId,
    user_id: Annotated[str, Field(description="Account id of the invited person")],
    response: Annotated[Response, Field(description="accepted, declined or tentative")],
) -> Event:
    """Accept, decline or tentatively accept an invitation; accepting a clash is refused."""
    with STORE.tx() as conn:
        e = _event_row(conn, event_id)
        _user(conn, user_id)
        if e["status"] != "confirmed":
            raise fail(f"event {e['event_id']} is cancelled; it takes no replies")
        if e["organizer_id"] == user_id:
            raise fail(f"{user_id} organizes event {e['event_id']} and cannot reply to it")
        if not one(
            conn,
            "SELECT 1 FROM attendees WHERE event_id = ? AND user_id = ?",
            (e["event_id"], user_id),
        ):
            raise fail(f"{user_id} is not invited to event {e['event_id']}")
        if response == "accepted":
            busy = _busy(
                conn, user_id, e["date"], e["start_time"], e["end_time"], exclude=e["event_id"]
            )
            if busy:
                raise fail(
                    f"conflicting booking: accepting {e['event_id']} ({_when(e)}) overlaps "
                    f"{', '.join(_conflict_text(c) for c in busy)}"
                )
        conn.execute(
            "UPDATE attendees SET response = ? WHERE event_id = ? AND user_id = ?",
            (response, e["event_id"], user_id),
        )
        return _event(conn, e["event_id"])


@server.tool(annotations=write_tool("Reschedule event"))
async def reschedule_event(
    event_id: EventId,
    user_id: Annotated[str, Field(description="Account id of the organizer making the change")],
    date: Date,
    start_time: StartTime,
    end_time: EndTime,
) -> Event:
    """Move an event (organizer only); answers reset to pending and attendees are told."""
    with STORE.tx() as conn:
        e = _event_row(conn, event_id)
        _user(conn, user_id)
        if e["organizer_id"] != user_id:
            raise fail(f"only the organizer ({e['organizer_id']}) can reschedule {e['event_id']}")
        if e["status"] != "confirmed":
            raise fail(f"event {e['event_id']} is cancelled; it cannot be rescheduled")
        _check_slot(conn, date, start_time, end_time)
        busy = _busy(conn, user_id, date, start_time, end_time, exclude=e["event_id"])
        if busy:
            raise fail(
                f"conflicting booking: {user_id} is busy {date} {start_time}-{end_time} "
                f"({', '.join(_conflict_text(c) for c in busy)})"
            )
        conn.execute(
            "UPDATE events SET date = ?, start_time = ?, end_time = ? WHERE event_id = ?",
            (date, start_time, end_time, e["event_id"]),
        )
        conn.execute(
            "UPDATE attendees SET response = 'pending' "
            "WHERE event_id = ? AND response != 'declined'",
            (e["event_id"],),
        )
        for (attendee,) in conn.execute(
            "SELECT user_id FROM attendees WHERE event_id = ? ORDER BY user_id", (e["event_id"],)
        ).fetchall():
            _send(
                conn,
                user_id,
                attendee,
                f"Rescheduled: {e['title']}",
                f"'{e['title']}' moved from {_when(e)} to {date} {start_time}-{end_time}.",
            )
        return _event(conn, e["event_id"])


@server.tool(annotations=write_tool("Cancel event", destructive=True))
async def cancel_event(
    event_id: EventId,
    user_id: Annotated[str, Field(description="Account id of the organizer cancelling it")],
) -> Event:
    """Cancel an event (organizer only); every attendee gets a cancellation message."""
    with STORE.tx() as conn:
        e = _event_row(conn, event_id)
        _user(conn, user_id)
        if e["organizer_id"] != user_id:
            raise fail(f"only the organizer ({e['organizer_id']}) can cancel {e['event_id']}")
        if e["status"] == "cancelled":
            raise fail(f"event {e['event_id']} is already cancelled")
        conn.execute("UPDATE events SET status = 'cancelled' WHERE event_id = ?", (e["event_id"],))
        for (attendee,) in conn.execute(
            "SELECT user_id FROM attendees WHERE event_id = ? ORDER BY user_id", (e["event_id"],)
        ).fetchall():
            _send(
                conn,
                user_id,
                attendee,
                f"Cancelled: {e['title']}",
                f"'{e['title']}' on {_when(e)} has been cancelled.",
            )
        return _event(conn, e["event_id"])


@server.tool(annotations=write_tool("Send message"))
async def send_message(
    user_id: Annotated[str, Field(description="Account id of the sender")],
    to_email: Annotated[str, Field(description="Recipient's email address")],
    subject: Annotated[str, Field(description="Subject line")],
    body: Annotated[str, Field(description="Message text")],
) -> Message:
    """Send an email to a colleague."""
    with STORE.tx() as conn:
        _user(conn, user_id)
        rcpt = one(conn, "SELECT * FROM users WHERE lower(email) = ?", (to_email.strip().lower(),))
        if rcpt is None:
            raise fail(f"no mailbox for '{to_email}'")
        if not subject.strip() and not body.strip():
            raise fail("subject and body are both empty")
        return _message(conn, _send(conn, user_id, rcpt["user_id"], subject, body))


@server.tool(annotations=read_tool("List messages"))
async def list_messages(
    user_id: UserId,
    folder: Annotated[Literal["inbox", "sent"], Field(description="inbox or sent")] = "inbox",
    unread_only: Annotated[bool, Field(description="Only unread messages (inbox)")] = False,
) -> MessageList:
    """List a user's received or sent messages, newest first."""
    with STORE.tx() as conn:
        _user(conn, user_id)
        col = "recipient_id" if folder == "inbox" else "sender_id"
        rows = conn.execute(
            "SELECT m.*, s.email AS from_email, r.email AS to_email FROM messages m "
            "JOIN users s ON s.user_id = m.sender_id JOIN users r ON r.user_id = m.recipient_id "
            f"WHERE m.{col} = ? ORDER BY m.sent_at DESC, m.message_id DESC",
            (user_id,),
        ).fetchall()
    return MessageList(
        user_id=user_id,
        folder=folder,
        messages=[
            from_row(MessageSummary, r, read=bool(r["read"]))
            for r in rows
            if not (unread_only and r["read"])
        ],
    )


@server.tool(annotations=read_tool("Read message"))
async def read_message(
    message_id: Annotated[str, Field(description="Message id, e.g. 'M1001'")],
) -> Message:
    """Read one message in full."""
    with STORE.tx() as conn:
        return _message(conn, message_id)


def main() -> None:
    """Seed the state if needed, then serve over stdio."""
    STORE.ensure()
    serve_stdio(server)


if __name__ == "__main__":
    main()
