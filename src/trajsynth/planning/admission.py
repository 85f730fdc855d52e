"""What a gold run must be before it becomes a task, asked of its calls alone.

Each check reads the gold run's calls (their arguments and results), the planned steps and the
cluster's write tools, never an environment, so the same function decides while the planner
plans (``planning.planner``) and when a stored blueprint is looked at again by today's planner
(``review_blueprint``: the precision bench re-admits the blueprints of its audit set, so a task
the planner would now refuse is not counted as one the product hands to the verifier).

The checks, each named by the reason a ``BlueprintAttempt`` records (docs/planning.md):

- ``two_users``: the calls act as more than one user (``ACTOR_PARAM``); one request has one
  requester, and words written for two read as nobody's request.
- ``repeated_call``: a call made again with the same arguments and no write between the two
  (``get-sum(a=1, b=1)`` twice): the second asks what the first already answered, and the
  words would ask it twice. A read made again after a write is a read-back and stays.
- ``same_ends``: a call whose two ends of one thing take the same value (``convert_time``
  from America/New_York to America/New_York, a file moved onto itself): the request asks
  for nothing, whatever the server answers.
- ``copied_status``: a call whose argument is, whole, what an earlier write answered
  (``write_file`` of "Successfully created directory ." into a note): a confirmation is no
  value a user gives.
- ``unrelated_reads``: a read-only path whose last read takes nothing from the reads before it
  (``get_current_time`` after ``convert_time``): the question is asked of the last read, and the
  words would state both questions.
- ``empty_read``: a read that finds nothing for a value no other call uses (a table
  ``groceries`` described, a node ``example`` searched for): the request is about a thing the
  server does not have.
- ``noop_write``: a write whose result shows, for the record it names, the values an earlier
  result already showed (a seat changed to the seat just booked): the task asks for a change
  that changes nothing.
- ``noop_write`` (outside servers, against the probes): a write whose gold run leaves every
  end-state probe's reading, and every read the probe search tried, as the initial state had
  it, while a read that names what the write named (``list_directory(docs)`` for
  ``create_directory(docs)``) answered the same before and after, or discovery saw a read
  change with that tool: the thing is visible and the write left it as it was.
- ``noop_write`` (a create): a write that creates a folder (``create_directory``, ``mkdir``)
  at a path the path showed existing before it: the work dir ``.``, a folder an
  earlier call listed or took as its path, a name a listing of its folder showed. The server
  answers "Successfully created directory ." and nothing changes.
- ``unseen_write``: the same, with no read naming what the write named and no read ever seen
  to change with the tool (a toggle of server-everything's logging): a write whose effect
  no read can see cannot carry a final-state check, so it is no task's target.
- ``copy_over``: a write that replaces a thing the path showed existing (a file listed) with
  text read from another thing (``README.md`` copied over ``data/sales.csv``): the task
  destroys the user's data with unrelated content, which no request asks for.
- ``words_check`` (stored blueprints only, ``review_blueprint``): the goal states two values
  under one label (``path: README.md; path: data/sales.csv``), so nobody can tell which is
  which (``planning.words.ambiguous_labels``, the check the planner's words pass).
- look-first (``explore_then_commit``): the words ask the assistant to look before it acts, so
  the read before the first write is held by an ``order`` constraint, or the mode is refused as
  ``mode_unrealised`` when nothing is read before the first write.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from trajsynth.curation.canon import parse_json_maybe
from trajsynth.mcp_servers.listings import is_path_param
from trajsynth.mcp_servers.tags import name_tokens
from trajsynth.planning.values import PROSE_PARAMS
from trajsynth.planning.words import ambiguous_labels
from trajsynth.schemas import (
    Blueprint,
    CallPattern,
    Constraint,
    GoldCall,
    Order,
    PlannedCall,
    ReasoningMode,
    RefArg,
    ToolAccess,
    ToolSpec,
)

__all__ = [
    "ACTOR_PARAM",
    "Refusal",
    "copied_status",
    "copy_over",
    "creates_existing",
    "first_of_many",
    "empty_read",
    "look_first",
    "noop_write",
    "repeated_call",
    "review_blueprint",
    "same_ends",
    "two_users",
    "unrelated_reads",
    "unseen_write",
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


def repeated_call(calls: Sequence[GoldCall], write_tools: Collection[str]) -> Refusal | None:
    """Refused when a call repeats an earlier one (same tool, same arguments) with no write
    between them."""
    since_write: list[GoldCall] = []
    for call in calls:
        if any(c.tool == call.tool and c.arguments == call.arguments for c in since_write):
            arguments = json.dumps(call.arguments, sort_keys=True, default=str)
            detail = f"{_route(calls)}: {call.tool}({arguments}) twice, nothing written between"
            return Refusal("repeated_call", detail, call.tool)
        since_write = [call] if call.tool in write_tools else [*since_write, call]
    return None


# words that name one end of a move, a copy or a conversion; the rest of the name says of what
_ENDS = frozenset(
    {"source", "src", "from", "origin", "old", "target", "destination", "dest", "dst", "to", "new"}
)


# a range of dates or times may start and end at one value (a single day's events)
_RANGES = frozenset({"date", "day", "time", "datetime", "timestamp", "row", "line", "page"})


def _end(param: str) -> tuple[str, tuple[str, ...]] | None:
    """(the end word, the rest of the name) when ``param`` names one end of something other
    than a range."""
    tokens = name_tokens(param)
    ends = [t for t in tokens if t in _ENDS]
    rest = tuple(t for t in tokens if t not in _ENDS)
    if len(ends) != 1 or _RANGES & set(rest):
        return None
    return ends[0], rest


def same_ends(calls: Sequence[GoldCall]) -> Refusal | None:
    """Refused when a call gives both ends of one thing (``source_timezone`` and
    ``target_timezone``, ``source`` and ``destination``) the same value."""
    for call in calls:
        ends = {p: e for p in call.arguments if (e := _end(p)) is not None}
        for first, (word, rest) in ends.items():
            for second, (other, other_rest) in ends.items():
                if first < second and word != other and rest == other_rest:
                    value = call.arguments[first]
                    if value == call.arguments[second] and value not in (None, ""):
                        detail = f"{call.tool}: {first} and {second} are both {value!r}"
                        return Refusal("same_ends", detail, call.tool)
    return None


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


def _is_id(key: str) -> bool:
    return key == "id" or key.endswith("_id")


def _shows(record: dict[str, Any], fields: dict[str, str]) -> bool:
    """The record holds at least one of the values a write sets (not only the ids it names),
    and every one of the write's fields it has holds the write's value."""
    present = [k for k in fields if k in record]
    if not any(not _is_id(k) for k in present):
        return False
    return all(_scalar(record[k]) == fields[k] for k in present)


def _same_record(after: dict[str, Any], before: dict[str, Any]) -> bool:
    """Both name one record: ``before`` has every id field ``after`` has (the acting user
    aside) and agrees on each. A row that shares only some ids is another kind of record: a
    flight's fare row shares ``flight_id`` with a booking on that flight, not ``booking_id``."""
    ids = [k for k in after if _is_id(k) and k != ACTOR_PARAM]
    return bool(ids) and all(k in before and _scalar(after[k]) == _scalar(before[k]) for k in ids)


def noop_write(
    calls: Sequence[GoldCall],
    write_tools: Collection[str],
    initial_rows: Sequence[dict[str, Any]] = (),
) -> Refusal | None:
    """Refused when a write sets what the record already was.

    A write is a no-op when its own result holds a record showing the values the write set,
    and the same record (the same ids) showed those values before it: in an earlier call's
    result, or in ``initial_rows`` (the initial state's rows, where the planner has them: a
    meeting moved to the time it already has). A write whose result shows other values (a
    quantity added to) or another record (an event created like one cancelled) is not one.
    """
    for i, call in enumerate(calls):
        if call.tool not in write_tools or call.is_error:
            continue
        fields = {k: s for k, v in call.arguments.items() if (s := _scalar(v)) is not None}
        after = [r for r in _records(call.observation) if _shows(r, fields)]
        if not after:
            continue
        sources = [(c.tool, list(_records(c.observation))) for c in calls[:i]]
        sources.append(("the initial state", list(initial_rows)))
        for where, records in sources:
            before = [r for r in records if _shows(r, fields)]
            if any(_same_record(a, b) for a in after for b in before):
                shown = ", ".join(f"{k}={v}" for k, v in sorted(fields.items()))
                detail = f"{_route(calls)}: {call.tool}({shown}) sets what {where} showed"
                return Refusal("noop_write", detail, call.tool)
    return None


def _seen_changing(tool: ToolSpec) -> bool:
    """Discovery saw a read (or a resource, or the work dir) change when the tool was called."""
    return tool.access_source == "probe" and " changed " in (tool.access_evidence or "")


def unseen_write(
    calls: Sequence[GoldCall],
    tools: Sequence[ToolSpec],
    tried: int,
    unchanged: Sequence[str] = (),
) -> Refusal:
    """Why a gold run whose writes changed nothing any probe or tried read shows is refused:
    ``noop_write`` when the write's target is visible (``unchanged``: reads naming what a
    write named that answered the same before and after) or its tool was seen to change a
    read, else ``unseen_write`` (module doc). Called only once the probe search found no
    read-back."""
    specs = {t.name: t for t in tools}
    writes = [
        c for c in calls
        if not c.is_error and c.tool in specs and specs[c.tool].access is ToolAccess.WRITE
    ]  # fmt: skip
    tool = writes[-1].tool if writes else None
    route = "; ".join(f"{c.tool}({json.dumps(c.arguments, default=str)[:120]})" for c in writes)
    seen = [c.tool for c in writes if _seen_changing(specs[c.tool])]
    if unchanged or seen:
        why = (
            f"{', '.join(unchanged[:3])} read the same before and after"
            if unchanged
            else f"discovery saw {seen[0]} change a read"
        )
        detail = (
            f"{route}: the gold run leaves every probe's reading as the initial state had it; {why}"
        )
        return Refusal("noop_write", detail, seen[0] if seen else tool)
    detail = (
        f"{route}: no probe and none of {tried} reads tried sees what "
        f"{', '.join(dict.fromkeys(c.tool for c in writes))} did"
    )
    return Refusal("unseen_write", detail, tool)


_COPIED_MIN_CHARS = 20  # shorter text (a name, a status) is copied between records honestly


def _copied_min_chars(param: str) -> int:
    """The shortest text that counts as copied over: any text at all for a parameter that
    holds a body of text (a file's ``content``: a three-line grocery list written over the
    meeting notes), else ``_COPIED_MIN_CHARS``."""
    tokens = name_tokens(param)
    return 1 if tokens and tokens[-1] in PROSE_PARAMS else _COPIED_MIN_CHARS


def _holds_text(observation: Any, text: str) -> bool:
    """``observation`` holds ``text`` whole as one of its values."""
    want = text.strip()
    value = parse_json_maybe(observation)
    if isinstance(value, str):
        return value.strip() == want
    return any(
        isinstance(v, str) and v.strip() == want for r in _records(value) for v in r.values()
    )


def _is_path(value: str) -> bool:
    return "/" in value.strip("/") or bool(re.search(r"[A-Za-z0-9]\.[A-Za-z0-9]{1,5}$", value))


def _mentions(text: str, path: str) -> bool:
    """``text`` names ``path`` whole: after a start, a space, a slash or a quote, and before an
    end, a space or a quote (``/work/docs/a.txt`` names ``docs/a.txt``)."""
    edge = r"\s\"'\\\[\](),"
    return re.search(rf"(?:^|[{edge}/]){re.escape(path)}(?=$|[{edge}])", text) is not None


def _listed_in_parent(path: str, arguments: Any, result: Any) -> bool:
    """A listing of ``path``'s folder (a call or probe whose argument is that folder) shows
    its last part (``list_directory(docs)`` answering ``[FILE] a.txt`` shows ``docs/a.txt``)."""
    parent, _, base = path.rstrip("/").rpartition("/")
    if not parent or not base:
        return False
    named = _values(parse_json_maybe(arguments))
    return parent in named and _mentions(json.dumps(result, default=str), base)


def _path_seen(
    path: str, calls: Sequence[GoldCall], initial_rows: Sequence[dict[str, Any]]
) -> bool:
    """A path-like name shown existing before the write: named by an earlier result, by the
    arguments of an earlier read that succeeded, by an initial probe that succeeded, or
    listed in its folder by either (a search listing ``/work/docs/a.txt``;
    ``read_file(docs/a.txt)`` answered; ``list_directory(docs)`` showing ``a.txt``)."""
    if not _is_path(path):
        return False
    done = [c for c in calls if not c.is_error]
    rows = [r for r in initial_rows if isinstance(r, Mapping) and not r.get("is_error")]
    shown = [json.dumps(c.observation, default=str) for c in done]
    shown += [json.dumps(c.arguments, default=str) for c in done]
    shown += [json.dumps(row, default=str) for row in rows]
    return (
        any(_mentions(text, path) for text in shown)
        or any(_listed_in_parent(path, c.arguments, c.observation) for c in done)
        or any(_listed_in_parent(path, r.get("arguments"), r.get("result")) for r in rows)
    )


_CREATE_WORDS = frozenset({"create", "make", "mkdir", "new"})
_CREATED_KINDS = frozenset({"directory", "dir", "folder", "mkdir"})


def _creates_a_path(tool: str) -> bool:
    """A tool that creates a folder (``create_directory``, ``mkdir``), not one that creates
    something else at a path it is given (``git_create_branch(repo_path)``). A file created
    where one exists is overwritten or refused, not left as it was."""
    tokens = set(name_tokens(tool))
    return bool(tokens & _CREATE_WORDS) and bool(tokens & _CREATED_KINDS)


def _plain_path(value: str) -> str:
    return posixpath.normpath(value.strip() or ".")


def _exists_before(
    path: str, calls: Sequence[GoldCall], initial_rows: Sequence[dict[str, Any]]
) -> bool:
    """``path`` was shown existing: the work dir itself, an earlier successful call or initial
    probe took it as an argument (``list_directory(docs)`` answered), a listing of its folder
    named it, or ``_path_seen`` finds it."""
    target = _plain_path(path)
    if target in (".", "/"):
        return True
    done = [(c.arguments, c.observation) for c in calls if not c.is_error]
    done += [
        (r.get("arguments"), r.get("result"))
        for r in initial_rows
        if isinstance(r, Mapping) and not r.get("is_error")
    ]
    for arguments, result in done:
        given = parse_json_maybe(arguments)
        named = given.values() if isinstance(given, dict) else []
        if any(isinstance(v, str) and _plain_path(v) == target for v in named):
            return True
        parent = target.rpartition("/")[0] or "."
        if any(isinstance(v, str) and _plain_path(v) == parent for v in named) and _mentions(
            json.dumps(result, default=str), target.rpartition("/")[2]
        ):
            return True
    return _path_seen(target, calls, initial_rows)


def creates_existing(
    calls: Sequence[GoldCall],
    write_tools: Collection[str],
    initial_rows: Sequence[dict[str, Any]] = (),
) -> Refusal | None:
    """Refused (as ``noop_write``) when a write that creates a folder names a path the calls
    or the initial state showed existing before it."""
    for i, call in enumerate(calls):
        if call.tool not in write_tools or call.is_error or not _creates_a_path(call.tool):
            continue
        for key, value in call.arguments.items():
            shown = (
                is_path_param(key)
                and isinstance(value, str)
                and _exists_before(value, calls[:i], initial_rows)
            )
            if shown:
                detail = (
                    f"{_route(calls)}: {call.tool}({key}={value!r}) creates what was "
                    "shown existing before it"
                )
                return Refusal("noop_write", detail, call.tool)
    return None


def copy_over(
    calls: Sequence[GoldCall],
    write_tools: Collection[str],
    initial_rows: Sequence[dict[str, Any]] = (),
) -> Refusal | None:
    """Refused when a write replaces an existing thing with text read from another thing.

    The write's text argument (``content``) is, whole, what an earlier read returned; that
    read named another thing by an argument the write also takes (``path=README.md`` against
    ``path=data/sales.csv``); and the thing the write names existed before it (an earlier
    result or the initial state's rows show its name). A copy to a new name, or a write back
    to the thing that was read (an edit), is kept.
    """
    for i, call in enumerate(calls):
        if call.tool not in write_tools or call.is_error:
            continue
        texts = [
            (k, v) for k, v in call.arguments.items()
            if isinstance(v, str) and len(v.strip()) >= _copied_min_chars(k)
        ]  # fmt: skip
        for text_arg, text in texts:
            for read in calls[:i]:
                if read.tool in write_tools or read.is_error:
                    continue
                if not _holds_text(read.observation, text):
                    continue
                names = [
                    k for k, v in read.arguments.items()
                    if k != text_arg and k in call.arguments
                    and _scalar(v) is not None and _scalar(v) != _scalar(call.arguments[k])
                ]  # fmt: skip
                for key in names:
                    target = _scalar(call.arguments[key])
                    seen = [c.observation for c in calls[:i]] + [list(initial_rows)]
                    if any(target in _values(parse_json_maybe(o)) for o in seen) or (
                        target is not None and _path_seen(target, calls[:i], initial_rows)
                    ):
                        detail = (
                            f"{_route(calls)}: {call.tool}({key}={call.arguments[key]}) "
                            f"overwrites it with the {text_arg} {read.tool} read from "
                            f"{key}={read.arguments[key]}"
                        )
                        return Refusal("copy_over", detail, call.tool)
    return None


_STATUS_MIN_CHARS = 8  # a shorter answer ("ok", an id) may honestly be the next call's value


def _answer_text(observation: Any) -> str | None:
    """A result that is one text (a confirmation), not a record: the text, else None."""
    value = parse_json_maybe(observation)
    if isinstance(value, dict) and len(value) == 1:
        value = next(iter(value.values()))
    return value.strip() if isinstance(value, str) else None


def copied_status(calls: Sequence[GoldCall], write_tools: Collection[str]) -> Refusal | None:
    """Refused when a call's text argument is, whole, an earlier write's answer in words (a
    record's field, a new id or a title, is the next call's value honestly)."""
    for i, call in enumerate(calls):
        for key, value in call.arguments.items():
            if not isinstance(value, str) or len(value.strip()) < _STATUS_MIN_CHARS:
                continue
            for write in calls[:i]:
                if write.tool in write_tools and _answer_text(write.observation) == value.strip():
                    detail = (
                        f"{_route(calls)}: {call.tool}({key}={value.strip()[:80]!r}) is what "
                        f"{write.tool} answered"
                    )
                    return Refusal("copied_status", detail, call.tool)
    return None


def _found_nothing(value: Any) -> bool:
    """A result with no records: empty, or an object whose every list or object is empty
    (``{"entities": [], "relations": []}``; the query it echoes does not count)."""
    value = parse_json_maybe(value)
    if value in (None, "", [], {}):
        return True
    if isinstance(value, dict):
        held = [v for v in value.values() if isinstance(v, list | dict)]
        return bool(held) and all(not v for v in held)
    return False


def _values(value: Any) -> set[str]:
    """Every scalar inside ``value`` (arguments, nested lists and objects), as compared."""
    if isinstance(value, dict):
        return set().union(*(_values(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_values(v) for v in value)) if value else set()
    s = _scalar(value)
    return {s} if s is not None else set()


def _names_a_thing(value: Any) -> bool:
    """A name or id (``groceries``, ``example``, ``EV1002``), not a query or free text: a
    statement that finds nothing (a ``SELECT`` over an empty database) names nothing."""
    return isinstance(value, str) and 0 < len(value) <= 64 and not any(c.isspace() for c in value)


def empty_read(calls: Sequence[GoldCall], write_tools: Collection[str]) -> Refusal | None:
    """Refused when a read finds nothing for a value no other call of the path uses.

    Such a value names a thing the server does not have (a table ``groceries`` described, a
    node ``example`` searched for), so the request is about nothing; a value a later call uses
    (a table looked for, then created) is a look before an act and is kept. Also refused: a
    read after a write that made records (its result shows them), sharing a value with it,
    that finds nothing; a read after a delete finding nothing is the delete confirmed.
    """
    for i, call in enumerate(calls):
        if call.tool in write_tools or call.is_error or not _found_nothing(call.observation):
            continue
        for write in calls[:i]:
            # a read-back of what a write just made (its result showed records) that finds
            # nothing: the write was about things the server does not have (a relation
            # between entities that do not exist)
            if (
                write.tool in write_tools
                and not write.is_error
                and any(True for _ in _records(write.observation))
                and _values(call.arguments) & _values(write.arguments)
            ):
                detail = (
                    f"{_route(calls)}: {call.tool} after {write.tool} finds nothing of what "
                    "the write made"
                )
                return Refusal("empty_read", detail, call.tool)
        others = " ".join(
            json.dumps(c.arguments, default=str).casefold() for j, c in enumerate(calls) if j != i
        )
        for name, given in call.arguments.items():
            # a list of names (``open_nodes(names=["example"])``) names each of them
            for value in given if isinstance(given, list) else [given]:
                if (
                    isinstance(value, str)
                    and _names_a_thing(value)
                    and value.casefold() not in others
                ):
                    detail = (
                        f"{_route(calls)}: {call.tool}({name}={value!r}) found nothing, and no "
                        "other call uses that value"
                    )
                    return Refusal("empty_read", detail, call.tool)
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


def first_of_many(blueprint: Blueprint) -> Refusal | None:
    """Refused when a stored read-only blueprint's answer is a field of the first of several
    records that all match what the user said (a day's events, each carrying the date asked):
    the planner now counts such records (``planning.words.pick_answer``) instead of asking for
    whichever came first."""
    calls = blueprint.gold_run.calls
    if blueprint.n_writes or not calls:
        return None
    asked = [
        {str(v) for v in c.values}
        for c in blueprint.constraints
        if c.kind == "answer_contains" and c.derived_from == "blueprint.answer_values"
    ]
    if not asked:
        return None
    given = {
        s for v in [*blueprint.slots.values(), *calls[-1].arguments.values()]
        if (s := _scalar(v)) is not None
    }  # fmt: skip
    value = parse_json_maybe(calls[-1].observation)
    lists = [v for v in value.values() if isinstance(v, list)] if isinstance(value, dict) else []
    lists += [value] if isinstance(value, list) else []
    for records in lists:
        rows = [r for r in records if isinstance(r, dict)]
        hits = [
            r for r in rows if any(_scalar(v) in given for v in r.values() if isinstance(v, str))
        ]
        if len(hits) < 2:
            continue
        for key, v in hits[0].items():
            if str(v) in asked[0] and len({str(h.get(key)) for h in hits}) > 1:
                detail = (
                    f"{_route(calls)}: answers {key}={v} of the first of {len(hits)} records "
                    "that all match the request"
                )
                return Refusal("first_of_many", detail)
    return None


def review_blueprint(
    blueprint: Blueprint,
    write_tools: Collection[str],
    initial_rows: Sequence[dict[str, Any]] = (),
) -> Blueprint | Refusal:
    """A stored blueprint as today's planner would admit it: refused by a check above, or with
    the constraints the planner adds today (the look-first order).

    ``initial_rows`` are the initial state's rows the gold writes name, where the caller kept
    them (the audit set does): ``noop_write`` and ``copy_over`` read them as the planner reads
    the whole initial state. Checks that need an environment (the gold run itself, the
    mutation lint, the self-check of the gold demonstration) are not repeated here; the
    precision bench reads the last from the audit set's own gold items. Nor are the checks of
    the values the planner drew (``placeholder_value``, ``same_ends``): the audit set labels
    trajectories of the tasks it was given: five of its time tasks convert a zone to itself,
    and it accepts five trajectories of them as degenerate but well-formed.
    """
    calls = blueprint.gold_run.calls
    ambiguous = ambiguous_labels(blueprint.goal)
    refused = (
        two_users(calls)
        or repeated_call(calls, write_tools)
        or unrelated_reads(blueprint.tool_path, blueprint.n_writes, calls, blueprint.slots)
        or noop_write(calls, write_tools, initial_rows)
        or creates_existing(calls, write_tools, initial_rows)
        or copy_over(calls, write_tools, initial_rows)
        or copied_status(calls, write_tools)
        or empty_read(calls, write_tools)
        or first_of_many(blueprint)
        or (Refusal("words_check", "; ".join(ambiguous)) if ambiguous else None)
    )
    if refused:
        return refused
    if blueprint.cell.target_mode is ReasoningMode.EXPLORE_THEN_COMMIT:
        constraints = look_first(calls, write_tools, blueprint.constraints)
        if isinstance(constraints, Refusal):
            return constraints
        return blueprint.model_copy(update={"constraints": constraints})
    return blueprint
