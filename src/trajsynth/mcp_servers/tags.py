"""Read/write tags for tools: from MCP annotations when the server gives them, else from names.

A *read* tool does not change the environment's state; a *write* tool may. The tag drives
snapshot reuse in the rollout engine and the constraints the planner derives (docs/design.md §1,
docs/style.md §2-§3). The source of every tag is recorded (``ToolSpec.access_source``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from trajsynth.schemas import ToolAccess

__all__ = ["READ_VERBS", "WRITE_VERBS", "TagSource", "name_tokens", "tag_from_name", "tag_tool"]

TagSource = Literal["annotation", "name", "default"]

READ_VERBS: frozenset[str] = frozenset(
    {
        "get", "list", "search", "find", "read", "fetch", "lookup", "query", "show", "describe",
        "view", "check", "count", "browse", "inspect", "retrieve", "convert", "calculate",
        "compute", "estimate", "quote", "preview", "validate", "verify", "compare", "explain",
        "lint", "diff", "stat", "status", "is", "has", "whoami", "ping", "echo",
    }
)  # fmt: skip

WRITE_VERBS: frozenset[str] = frozenset(
    {
        "create", "book", "cancel", "delete", "update", "add", "send", "remove", "set", "write",
        "put", "post", "patch", "edit", "modify", "insert", "submit", "checkout", "pay",
        "purchase", "order", "buy", "move", "rename", "reschedule", "schedule", "assign",
        "apply", "run", "execute", "exec", "upload", "save", "store", "reset", "clear", "approve",
        "reject", "transfer", "refund", "return", "reserve", "register", "invite", "accept",
        "decline", "archive", "restore", "close", "start", "stop", "kill", "install",
        "commit", "push", "merge", "deploy", "mark", "enable", "disable", "drop", "truncate",
        "upsert", "replace", "append", "subscribe", "unsubscribe", "rsvp", "confirm", "change",
        "make", "new", "mkdir", "rm", "mv", "cp", "copy", "touch", "record", "log", "share",
        "empty", "pick", "select", "redeem", "claim", "release", "lock", "unlock", "toggle",
    }
)  # fmt: skip

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def name_tokens(name: str) -> list[str]:
    """Lower-case word tokens of a snake_case, camelCase, kebab-case or dotted name.

    >>> name_tokens("getFlightStatus"), name_tokens("cart.add-item")
    (['get', 'flight', 'status'], ['cart', 'add', 'item'])
    """
    spaced = _CAMEL.sub("_", name)
    return [t for t in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if t]


def tag_from_name(name: str) -> ToolAccess | None:
    """Read or write from the tool's verb; None when the name says nothing.

    The first token decides when it is a known verb (``get_cart`` read, ``add_to_cart``
    write). Otherwise any write verb among the tokens makes it write (``cart_delete``),
    then any read verb makes it read (``product_search``).

    >>> tag_from_name("search_flights"), tag_from_name("cancel_booking"), tag_from_name("foo")
    (<ToolAccess.READ: 'read'>, <ToolAccess.WRITE: 'write'>, None)
    """
    tokens = name_tokens(name)
    if not tokens:
        return None
    if tokens[0] in WRITE_VERBS:
        return ToolAccess.WRITE
    if tokens[0] in READ_VERBS:
        return ToolAccess.READ
    if any(t in WRITE_VERBS for t in tokens[1:]):
        return ToolAccess.WRITE
    if any(t in READ_VERBS for t in tokens[1:]):
        return ToolAccess.READ
    return None


def _hint(annotations: Any, snake: str, camel: str) -> bool | None:
    if annotations is None:
        return None
    if isinstance(annotations, Mapping):
        value = annotations.get(snake, annotations.get(camel))
    else:
        value = getattr(annotations, snake, None)
    return value if isinstance(value, bool) else None


def tag_tool(name: str, annotations: Any = None) -> tuple[ToolAccess, TagSource]:
    """The read/write tag of a tool and where it came from.

    ``annotations`` is an MCP ``ToolAnnotations`` (or its JSON dict, snake or camel case).
    ``readOnlyHint`` decides when present; otherwise ``destructiveHint: true`` means write;
    otherwise the name decides; a name that says nothing is tagged write, the safe default
    (a write tag only costs a snapshot, a wrong read tag corrupts forked branches).

    >>> tag_tool("frobnicate", {"readOnlyHint": True})
    (<ToolAccess.READ: 'read'>, 'annotation')
    >>> tag_tool("get_time")
    (<ToolAccess.READ: 'read'>, 'name')
    """
    read_only = _hint(annotations, "read_only_hint", "readOnlyHint")
    if read_only is not None:
        return (ToolAccess.READ if read_only else ToolAccess.WRITE), "annotation"
    if _hint(annotations, "destructive_hint", "destructiveHint") is True:
        return ToolAccess.WRITE, "annotation"
    by_name = tag_from_name(name)
    if by_name is not None:
        return by_name, "name"
    return ToolAccess.WRITE, "default"
