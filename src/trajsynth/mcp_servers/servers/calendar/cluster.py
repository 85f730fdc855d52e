"""What the calendar cluster is: its domain, its description, the dependency edges it states
and the facts its tasks' words use. Its ``trajsynth.clusters`` entry point names ``CLUSTER``."""

from __future__ import annotations

from trajsynth.schemas import BundledCluster, DeclaredEdge, Domain, DomainFacts, Precondition

__all__ = ["CLUSTER"]

CLUSTER = BundledCluster(
    cluster_id="calendar",
    domain=Domain.PRODUCTIVITY,
    description=(
        "A team calendar with email: find colleagues, list a day's events, check availability, "
        "create, reschedule and cancel events, invite people, answer invitations, send and read "
        "messages."
    ),
    module=__name__.rpartition(".")[0],  # this folder's package
    declared_edges=[
        DeclaredEdge(
            source="find_user",
            target="invite_attendee",
            out_field="users[].user_id",
            in_param="user_id",
        ),
        DeclaredEdge(
            source="find_user",
            target="send_message",
            out_field="users[].email",
            in_param="to_email",
        ),
        DeclaredEdge(
            source="check_availability",
            target="create_event",
            out_field="user_id",
            in_param="organizer_id",
        ),
        DeclaredEdge(
            source="list_messages",
            target="read_message",
            out_field="messages[].message_id",
            in_param="message_id",
        ),
    ],
    # what the tools accept (the server's policy): only the organizer moves or cancels an
    # event, and only a confirmed one; an invitation goes to someone neither organizing nor
    # invited yet; only an invited attendee who does not organize it answers one, with an
    # answer other than the one they gave
    preconditions=[
        Precondition(
            tool=tool,
            param="event_id",
            table="events",
            column="event_id",
            where={"status": ["confirmed"]},
            same={"organizer_id": "user_id"},
        )
        for tool in ("reschedule_event", "cancel_event")
    ]
    + [
        Precondition(
            tool="invite_attendee",
            param="event_id",
            table="events",
            column="event_id",
            where={"status": ["confirmed"]},
        ),
        Precondition(
            tool="invite_attendee",
            param="event_id",
            table="events",
            column="event_id",
            same={"organizer_id": "user_id"},
            absent=True,
        ),
        Precondition(
            tool="invite_attendee",
            param="event_id",
            table="attendees",
            column="event_id",
            same={"user_id": "user_id"},
            absent=True,
        ),
        Precondition(
            tool="respond_to_invitation",
            param="event_id",
            table="events",
            column="event_id",
            same={"organizer_id": "user_id"},
            absent=True,
        ),
        Precondition(
            tool="respond_to_invitation",
            param="event_id",
            table="events",
            column="event_id",
            where={"status": ["confirmed"]},
        ),
        Precondition(
            tool="respond_to_invitation",
            param="event_id",
            table="attendees",
            column="event_id",
            same={"user_id": "user_id"},
        ),
        Precondition(
            tool="respond_to_invitation",
            param="response",
            table="attendees",
            column="response",
            same={"event_id": "event_id", "user_id": "user_id"},
            absent=True,
        ),
    ],
    facts=DomainFacts(persona="A busy professional keeping their schedule in order."),
)
