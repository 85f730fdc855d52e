"""Argument values for a tool's parameters, from its JSON schema.

Order for one parameter: a value the user fixed in the cluster spec (``--arg name=value``),
then ``const``, ``enum``, ``default``, ``examples``, then values seen accepted or returned
before (``known``), then a value from ``format``/``pattern``, then one by name and type. Used
by discovery (probe calls) and by the planner's binder. Pure code, deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from trajsynth.mcp_servers.tags import name_tokens
from trajsynth.schemas import JsonValue, canonical_json

__all__ = [
    "PLACEHOLDERS",
    "fits_schema",
    "generate_arguments",
    "is_placeholder",
    "param_values",
    "schema_kinds",
]

_FORMATS: dict[str, JsonValue] = {
    "date-time": "2025-03-14T15:30:00Z",
    "date": "2025-03-14",
    "time": "15:30:00",
    "email": "alex@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "ipv4": "127.0.0.1",
    "hostname": "example.com",
}
# (name tokens, value) for strings, first match wins; the description is searched too
_BY_NAME: list[tuple[frozenset[str], list[JsonValue]]] = [
    (frozenset({"timezone", "tz"}),
     ["Europe/London", "America/New_York", "Asia/Tokyo", "Australia/Sydney"]),
    (frozenset({"email"}), ["alex@example.com", "sam@example.org"]),
    (frozenset({"url", "uri", "link"}), ["https://example.com/"]),
    (frozenset({"date"}), ["2025-03-14", "2025-07-01"]),
    (frozenset({"time"}), ["15:30", "09:15", "18:45"]),
    (frozenset({"directory", "dir", "folder"}), ["."]),
    (frozenset({"path", "file", "filename", "source", "destination", "src", "dest"}),
     ["notes.txt", "todo.md"]),
    (frozenset({"content", "text", "body", "message", "observation", "observations"}),
     ["hello from trajsynth", "buy milk and eggs"]),
    (frozenset({"pattern", "glob"}), ["*.txt"]),
    (frozenset({"name", "title", "entity", "from", "to", "label"}),
     ["notes", "groceries", "travel plans"]),
    (frozenset({"type", "kind", "relation"}), ["note", "list"]),
    (frozenset({"language", "lang"}), ["en", "fr"]),
    (frozenset({"city", "location"}), ["London", "Lisbon"]),
]  # fmt: skip


# Made-up records: names, texts, paths, kinds a guess by name gives. Discovery may send them
# to see what a tool does, but a task never takes one (a file called notes.txt that the
# server does not hold, an entity called "groceries"): its values come from the server's own
# reads, from --arg, or from the schema (enum, default, examples, a format such as a date or
# an IANA timezone, a range). One the server itself listed before any probe sent it is its
# own (``world``) and stays.
_INVENTED_WORDS = frozenset({"path", "file", "content", "name", "type", "city", "email", "url"})
PLACEHOLDERS: frozenset[str] = frozenset(
    {str(v) for words, values in _BY_NAME if words & _INVENTED_WORDS for v in values}
    | {str(_FORMATS[k]) for k in ("email", "uri", "url", "hostname")}
    | {"example"}
)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list | tuple):
        return [x for v in value for x in _leaves(v)]
    return [value]


def is_placeholder(value: Any, world: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether ``value`` holds a made-up record (``PLACEHOLDERS``, or the SQL that writes one)
    that is not in ``world`` (canonical JSON of values the server itself returned).

    >>> is_placeholder("groceries"), is_placeholder(["notes.txt"]), is_placeholder("Europe/Paris")
    (True, True, False)
    >>> is_placeholder("notes.txt", world={'"notes.txt"'})
    False
    """
    for leaf in _leaves(value):
        if not isinstance(leaf, str) or canonical_json(leaf) in world:
            continue
        if leaf in PLACEHOLDERS or leaf.rsplit("/", 1)[-1] in PLACEHOLDERS:
            return True
        if "trajsynth" in leaf or leaf.startswith(
            ("CREATE TABLE IF NOT EXISTS notes", "INSERT INTO notes")
        ):
            return True
    return False


def schema_kinds(schema: Mapping[str, Any]) -> set[str]:
    """The JSON types a schema allows (``anyOf``/``oneOf`` followed), ``null`` left out."""
    kinds: set[str] = set()
    raw = schema.get("type")
    if isinstance(raw, str):
        kinds.add(raw)
    elif isinstance(raw, list):
        kinds.update(str(k) for k in raw)
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key) or []:
            if isinstance(option, Mapping):
                kinds |= schema_kinds(option)
    kinds.discard("null")
    return kinds


def fits_schema(value: JsonValue, schema: Mapping[str, Any]) -> bool:
    """Whether ``value`` has a type the schema allows (and matches its enum and pattern).

    >>> fits_schema("a.txt", {"type": "string"}), fits_schema(3, {"type": "string"})
    (True, False)
    """
    kinds = schema_kinds(schema)
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        return False
    if not kinds:
        return value is not None
    if isinstance(value, bool):
        ok = "boolean" in kinds
    elif isinstance(value, int):
        ok = bool(kinds & {"integer", "number"})
    elif isinstance(value, float):
        ok = "number" in kinds
    elif isinstance(value, str):
        ok = "string" in kinds
        pattern = schema.get("pattern")
        if ok and isinstance(pattern, str):
            try:
                ok = re.search(pattern, value) is not None
            except re.error:
                ok = True
    elif isinstance(value, list):
        ok = "array" in kinds
    elif isinstance(value, dict):
        ok = "object" in kinds
    else:
        ok = False
    return ok


def _sql(name: str, description: str) -> str | None:
    text = f"{name} {description}".lower()
    if "sql" not in text and "select" not in text:
        return None
    if "create" in name.lower():
        return "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, body TEXT)"
    if "write" in name.lower() or "insert" in text and "select" not in text:
        return "INSERT INTO notes (body) VALUES ('hello from trajsynth')"
    return "SELECT name FROM sqlite_master WHERE type = 'table'"


def _by_name(param: str, schema: Mapping[str, Any], tool: str) -> list[JsonValue]:
    description = str(schema.get("description") or "")
    sql = _sql(param, description) if param.lower() in ("query", "sql", "statement") else None
    if sql is not None:
        return [_sql(tool, description + " sql") or sql]
    tokens = set(name_tokens(param))
    for words, values in _BY_NAME:
        if tokens & words:
            return list(values)
    lowered = description.lower()
    if "iana" in lowered or "timezone" in lowered:
        return list(_BY_NAME[0][1])
    if "hh:mm" in lowered or "24-hour" in lowered:
        return ["15:30", "09:15"]
    return ["example"]


def _one(
    param: str,
    schema: Mapping[str, Any],
    tool: str,
    known: Mapping[str, Sequence[JsonValue]],
    depth: int,
) -> JsonValue:
    for value in param_values(param, schema, tool, known=known, depth=depth)[:1]:
        return value
    return None


def param_values(
    param: str,
    schema: Mapping[str, Any],
    tool: str = "",
    *,
    known: Mapping[str, Sequence[JsonValue]] | None = None,
    fixed: Mapping[str, JsonValue] | None = None,
    depth: int = 0,
) -> list[JsonValue]:
    """Candidate values for ``param``, best first (see the module docstring for the order).

    >>> param_values("timezone", {"type": "string"})[:2]
    ['Europe/London', 'America/New_York']
    >>> param_values("unit", {"type": "string", "enum": ["c", "f"]})
    ['c', 'f']
    >>> param_values("limit", {"type": "integer", "minimum": 5})
    [5]
    """
    known = known or {}
    out: list[JsonValue] = []

    def add(value: JsonValue) -> None:
        if value is not None and value not in out and (not out or fits_schema(value, schema)):
            out.append(value)

    if fixed and param in fixed:
        add(fixed[param])
    if "const" in schema:
        add(schema["const"])
    for value in schema.get("enum") or []:
        add(value)
    if "default" in schema:
        add(schema["default"])
    for value in schema.get("examples") or []:
        add(value)
    for value in known.get(param, ()):
        if fits_schema(value, schema):
            add(value)
    kinds = schema_kinds(schema)
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS:
        add(_FORMATS[fmt])
    if "string" in kinds or not kinds:
        for value in _by_name(param, schema, tool):
            add(value)
    elif "boolean" in kinds:
        add(False)
    elif kinds & {"integer", "number"}:
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        add(int(low) + (1 if "exclusiveMinimum" in schema else 0) if low is not None else 1)
    elif "array" in kinds and depth < 3:
        items = schema.get("items")
        item = _one(param, items if isinstance(items, Mapping) else {}, tool, known, depth + 1)
        add([item] if item is not None else [])
    elif "object" in kinds and depth < 3:
        add(generate_arguments(schema, tool, known=known, depth=depth + 1))
    return out


def generate_arguments(
    schema: Mapping[str, Any],
    tool: str = "",
    *,
    known: Mapping[str, Sequence[JsonValue]] | None = None,
    fixed: Mapping[str, JsonValue] | None = None,
    overrides: Mapping[str, JsonValue] | None = None,
    depth: int = 0,
) -> dict[str, JsonValue]:
    """Arguments for every required property (and every fixed one the schema has).

    >>> generate_arguments({"type": "object", "properties": {"timezone": {"type": "string"}},
    ...     "required": ["timezone"]}, "get_current_time")
    {'timezone': 'Europe/London'}
    """
    props = schema.get("properties") or {}
    required = [str(p) for p in schema.get("required") or []]
    names = list(required)
    names += [p for p in props if p not in names and fixed and p in fixed]
    out: dict[str, JsonValue] = {}
    for param in names:
        if overrides and param in overrides:
            out[param] = overrides[param]
            continue
        sub = props.get(param)
        sub = sub if isinstance(sub, Mapping) else {}
        values = param_values(param, sub, tool, known=known, fixed=fixed, depth=depth)
        if values:
            out[param] = values[0]
    return out
