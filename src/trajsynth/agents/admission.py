"""What a gold run must be before it becomes a task, asked of its calls alone.

Each check reads the gold run's calls (their arguments and results), the planned steps and the
cluster's write tools, never an environment, so the same function decides while the planner
plans (``agents.planner``) and when a stored blueprint is looked at again by today's planner
(``review_blueprint``: the precision bench re-admits the blueprints of its audit set, so a task
the planner would now refuse is not counted as one the product hands to the verifier).

The checks, each named by the reason a ``BlueprintAttempt`` records (docs/planning.md):

- ``two_users``: the calls act as more than one user (``ACTOR_PARAM``); one request has one
  requester, and words written for two read as nobody's request.
- ``unrelated_reads``: a read-only path whose last read takes nothing from the reads before it
  (``get_current_time`` after ``convert_time``): the question is asked of the last read, and the
  words would state both questions.
- ``noop_write``: a write whose result shows, for the record it names, the values an earlier
  result already showed (a seat changed to the seat just booked): the task asks for a change
  that changes nothing.
- look-first (``explore_then_commit``): the words ask the assistant to look before it acts, so
  the read before the first write is held by an ``order`` constraint, or the mode is refused as
  ``mode_unrealised`` when nothing is read before the first write.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from trajsynth.curation.canon import parse_json_maybe
from trajsynth.schemas import (
    Blueprint,
    CallPattern,
    Constraint,
    GoldCall,
    Order,
    PlannedCall,
    ReasoningMode,
    RefArg,
)

__all__ = [
    "ACTOR_PARAM",
    "Refusal",
    "look_first",
    "noop_write",
    "review_blueprint",
    "two_users",
    "unrelated_reads",
]

# The parameter that names the user a call acts as (the requester, not a recipient: those are
# ``to_email``, ``attendee_id`` and the like).
ACTOR_PARAM = "user_id"

LOOK_FIRST_SOURCE = "target_mode:explore_then_commit"


class Refusal(NamedTuple):
    """Why a gold run is not a task, and the tool to blame (None: no one tool)."""

    reason: str
    detail: str
    tool: str | None = None


def _route(steps: Sequence[PlannedCall] | Sequence[GoldCall]) -> str:
    return " -> ".join(s.tool for s in steps)


def actors(calls: Sequence[GoldCall]) -> set[str]:
    """The users the gold calls act as (their ``ACTOR_PARAM`` values)."""
    return {
        str(c.arguments[ACTOR_PARAM])
        for c in calls
        if isinstance(c.arguments.get(ACTOR_PARAM), str | int)
    }


def two_users(calls: Sequence[GoldCall]) -> Refusal | None:
    """Refused when the calls act as more than one user."""
    users = actors(calls)
    if len(users) <= 1:
        return None
    detail = f"{_route(calls)}: the path acts as {len(users)} users ({', '.join(sorted(users))})"
    return Refusal("two_users", detail, calls[-1].tool)


def unrelated_reads(
    steps: Sequence[PlannedCall],
    n_writes: int,
    calls: Sequence[GoldCall],
    slots: Mapping[str, Any],
) -> Refusal | None:
    """Refused when a read-only path's last read takes nothing from the reads before it.

    A value it takes from an earlier result that the user stated anyway (a time zone passed
    through ``convert_time``'s result to ``get_current_time``) is not taken from the read.
    """
    if n_writes or len(steps) < 2 or not calls:
        return None
    stated = {s for v in slots.values() if (s := _scalar(v)) is not None}
    last = calls[-1].arguments
    for name, arg in steps[-1].args.items():
        if isinstance(arg, RefArg) and _scalar(last.get(name)) not in stated:
            return None
    detail = f"{_route(steps)}: the last read takes nothing from the reads before it"
    return Refusal("unrelated_reads", detail, steps[-1].tool)


def _scalar(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str | int | float):
        return str(value).strip().casefold()
    return None


def _records(value: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in a result, outermost first."""
    value = parse_json_maybe(value)
    if isinstance(value, dict):
        yield value
        for inner in value.values():
            yield from _records(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _records(inner)


def _shows(record: dict[str, Any], fields: dict[str, str]) -> bool:
    return all(_scalar(record.get(k)) == v for k, v in fields.items())


def _same_record(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Both name one record: they share an id field and agree on every id field they share."""
    ids = [k for k in a.keys() & b.keys() if k == "id" or k.endswith("_id")]
    return bool(ids) and all(_scalar(a[k]) == _scalar(b[k]) for k in ids)


def noop_write(calls: Sequence[GoldCall], write_tools: Collection[str]) -> Refusal | None:
    """Refused when a write sets what an earlier result already showed of the same record.

    A write with at least two scalar arguments (the record it names and a value it sets) is a
    no-op when its own result holds a record showing every one of those arguments, and an
    earlier call's result held the same record (the same ids) showing the same values: the
    record already was what the write makes it. A write whose result shows other values (a
    quantity added to) or another record (an event created like one cancelled) is not one.
    """
    for i, call in enumerate(calls):
        if call.tool not in write_tools or call.is_error:
            continue
        fields = {k: s for k, v in call.arguments.items() if (s := _scalar(v)) is not None}
        if len(fields) < 2:
            continue
        after = [r for r in _records(call.observation) if _shows(r, fields)]
        for earlier in calls[:i]:
            before = [r for r in _records(earlier.observation) if _shows(r, fields)]
            if any(_same_record(a, b) for a in after for b in before):
                shown = ", ".join(f"{k}={v}" for k, v in sorted(fields.items()))
                detail = f"{_route(calls)}: {call.tool}({shown}) sets what {earlier.tool} showed"
                return Refusal("noop_write", detail, call.tool)
    return None


def _of_the_user(call: GoldCall) -> bool:
    """A read of the user's own records: it names the user, or takes no argument at all (the
    whole of a one-user service, such as a memory graph)."""
    return not call.arguments or ACTOR_PARAM in call.arguments


def look_first(
    calls: Sequence[GoldCall], write_tools: Collection[str], constraints: Sequence[Constraint]
) -> list[Constraint] | Refusal:
    """An explore-then-commit task's constraints with the read it commits after held by an
    ``order`` constraint, or why the path cannot carry that mode.

    The words of that mode ask the assistant to look at what the user has before it acts; they
    are honest only when the gold path reads the user's records before its first write (a seat
    map or a flight search is not what the user has), and they are checked only when a
    constraint says that read comes first (the last such read before the first write).
    """
    writes = [i for i, c in enumerate(calls) if c.tool in write_tools]
    route = _route(calls)
    if not writes:
        return Refusal("mode_unrealised", f"{route}: explore_then_commit without a write")
    reads = [c for c in calls[: writes[0]] if c.tool not in write_tools and _of_the_user(c)]
    if not reads:
        detail = (
            f"{route}: explore_then_commit, yet nothing of the user's is read before the first "
            "write"
        )
        return Refusal("mode_unrealised", detail)
    order = Order(
        first=CallPattern(tool=reads[-1].tool),
        then=CallPattern(tool=calls[writes[0]].tool),
        derived_from=LOOK_FIRST_SOURCE,
    )
    kept = [c for c in constraints if getattr(c, "derived_from", None) != LOOK_FIRST_SOURCE]
    return [*kept, order]


def review_blueprint(blueprint: Blueprint, write_tools: Collection[str]) -> Blueprint | Refusal:
    """A stored blueprint as today's planner would admit it: refused by a check above, or with
    the constraints the planner adds today (the look-first order).

    Checks that need an environment (the gold run itself, the mutation lint, the self-check of
    the gold demonstration) are not repeated here; the precision bench reads the last from the
    audit set's own gold items.
    """
    calls = blueprint.gold_run.calls
    refused = (
        two_users(calls)
        or unrelated_reads(blueprint.tool_path, blueprint.n_writes, calls, blueprint.slots)
        or noop_write(calls, write_tools)
    )
    if refused:
        return refused
    if blueprint.cell.target_mode is ReasoningMode.EXPLORE_THEN_COMMIT:
        constraints = look_first(calls, write_tools, blueprint.constraints)
        if isinstance(constraints, Refusal):
            return constraints
        return blueprint.model_copy(update={"constraints": constraints})
    return blueprint
