"""State canonicalization: "is this the same situation?" (docs/methods.md §1.2).

One set of functions, four users: topology (§8), GiGPO anchors and HGPO contexts (§10), the
loop signal (§7) and the verifier's argument matchers (§4). Everything here is pure and
deterministic.

Identifier fields are kept exactly as given (case and whitespace matter in ``"#W1"``); a field
is an identifier when the schema says ``format: x-identifier`` or when its name (camelCase
folded to snake_case) is ``id``/``uuid`` or ends in ``_id``/``_uuid``, ``sku``, ``email`` or
``code`` (plural forms too, so the items of ``item_ids`` are identifiers). Every other string
is casefolded and stripped; every number other than an identifier is rounded to 6 significant
digits (so ``2`` and ``2.0000001`` canonicalize alike).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from decimal import Decimal
from typing import Any

from trajsynth.schemas import JsonValue, ObsClass, ToolCallRecord, canonical_json

__all__ = [
    "SOURCE_KEYS",
    "call_key",
    "call_key_memo",
    "canon_args",
    "canon_call",
    "canon_number",
    "canon_value",
    "field_schema",
    "is_identifier",
    "is_unordered",
    "leaf_paths",
    "normalize_source",
    "obs_class",
    "obs_digest",
    "parse_json_maybe",
    "resolve_schema",
    "sha1_hex",
    "value_at",
]

# Argument keys that hold program source: canonicalized by normalized source (§1.2, "code").
SOURCE_KEYS = frozenset({"code", "source", "script", "program"})

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_ID_NAME = re.compile(r"(^|_)(ids?|uuids?|guids?|skus?|emails?|codes?)$|(sku|email|code)s?$")


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


def resolve_schema(schema: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The non-null branch of an ``anyOf``/``oneOf`` (how pydantic writes ``X | None``).

    >>> resolve_schema({"anyOf": [{"type": "string"}, {"type": "null"}]})
    {'type': 'string'}
    """
    if not isinstance(schema, Mapping):
        return {}
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            for branch in branches:
                if isinstance(branch, Mapping) and branch.get("type") != "null":
                    merged = {k: v for k, v in schema.items() if k != key}
                    merged.update(branch)
                    return merged
    return schema


def field_schema(schema: Mapping[str, Any] | None, name: str) -> Mapping[str, Any]:
    """The schema of property ``name`` of an object schema ({} when unknown)."""
    props = resolve_schema(schema).get("properties")
    if isinstance(props, Mapping):
        return resolve_schema(props.get(name))
    return {}


def is_identifier(name: str | None, schema: Mapping[str, Any] | None = None) -> bool:
    """Whether a field holds an identifier, whose value must not be casefolded or rounded.

    >>> [is_identifier(n) for n in ("order_id", "orderId", "id", "item_ids", "sku", "note")]
    [True, True, True, True, True, False]
    >>> is_identifier("ref", {"format": "x-identifier"})
    True
    """
    sch = resolve_schema(schema)
    if sch.get("format") == "x-identifier":
        return True
    items = resolve_schema(sch.get("items")) if isinstance(sch.get("items"), Mapping) else {}
    if items.get("format") == "x-identifier":
        return True
    return bool(name) and bool(_ID_NAME.search(_snake(str(name))))


def is_unordered(schema: Mapping[str, Any] | None) -> bool:
    """Whether an array schema says its order means nothing (``uniqueItems``/``x-unordered``)."""
    sch = resolve_schema(schema)
    return bool(sch.get("uniqueItems") or sch.get("x-unordered"))


def canon_number(x: int | float) -> float | str:
    """A number rounded to 6 significant digits, as a float (a string if it overflows).

    >>> canon_number(54.2000001), canon_number(2), canon_number(1234567)
    (54.2, 2.0, 1234570.0)
    """
    text = format(Decimal(str(x)) if isinstance(x, int) else x, ".6g")
    value = float(text)
    return value if math.isfinite(value) or not isinstance(x, int) else text


def normalize_source(source: str) -> str:
    """Program text with indentation, trailing blanks and empty lines normalized away.

    >>> normalize_source("  x = 1  \\n\\n  print(x)\\n") == normalize_source("x = 1\\nprint(x)")
    True
    """
    lines = [line.rstrip() for line in textwrap.dedent(source.expandtabs(4)).splitlines()]
    return "\n".join(line for line in lines if line)


def canon_value(
    value: Any,
    *,
    name: str | None = None,
    schema: Mapping[str, Any] | None = None,
    volatile: frozenset[str] = frozenset(),
    identifier: bool | None = None,
) -> JsonValue:
    """Canonicalize one value of field ``name`` (schema ``schema``); see :func:`canon_args`."""
    sch = resolve_schema(schema)
    ident = is_identifier(name, sch) if identifier is None else identifier
    if isinstance(value, Mapping):
        return canon_args(value, sch, volatile)
    if isinstance(value, list | tuple):
        item_schema = sch.get("items") if isinstance(sch.get("items"), Mapping) else None
        items = [
            canon_value(v, name=name, schema=item_schema, volatile=volatile, identifier=ident)
            for v in value
        ]
        if is_unordered(sch):
            items.sort(key=canonical_json)
        return items
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return value if ident else canon_number(value)
    if isinstance(value, str):
        if name in SOURCE_KEYS and "\n" in value:
            return normalize_source(value)
        return value if ident else value.strip().casefold()
    return str(value)


def canon_args(
    args: Mapping[str, Any] | None,
    schema: Mapping[str, Any] | None = None,
    volatile: frozenset[str] = frozenset(),
) -> dict[str, JsonValue]:
    """Canonical tool arguments (docs/methods.md §1.2).

    Drops optional arguments that are null (all nulls when no schema says which are required),
    sorts keys, casefolds and strips strings except identifiers, rounds numbers to 6
    significant digits, sorts arrays the schema marks unordered and removes ``volatile`` keys
    at any depth. Idempotent. ``None`` (arguments that did not parse) gives ``{}``.

    >>> canon_args({"order_id": "#W1", "Note": "  Cracked ", "qty": 2.0000001, "x": None})
    {'Note': 'cracked', 'order_id': '#W1', 'qty': 2.0}
    >>> canon_args({"tags": ["b", "A"]}, {"properties": {"tags": {"uniqueItems": True}}})
    {'tags': ['a', 'b']}
    """
    if not isinstance(args, Mapping):
        return {}
    sch = resolve_schema(schema)
    required = sch.get("required")
    required = set(required) if isinstance(required, list) else set()
    out: dict[str, JsonValue] = {}
    for key in sorted(args, key=str):
        value = args[key]
        if key in volatile or (value is None and key not in required):
            continue
        out[str(key)] = canon_value(
            value, name=str(key), schema=field_schema(sch, key), volatile=volatile
        )
    return out


def sha1_hex(text: str) -> str:
    """Hex SHA-1 of ``text``: the short content key of state keys, actions and signatures
    (not a security hash)."""
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


def canon_call(
    tool: str,
    args: Mapping[str, Any] | str | None,
    schema: Mapping[str, Any] | None = None,
    volatile: frozenset[str] = frozenset(),
) -> tuple[str, str]:
    """``(tool_name, sha1(json(canon_args(args)))[:16])`` (docs/methods.md §1.2).

    ``args`` may be the raw argument text; text that is not a JSON object is hashed as it
    stands (stripped), so malformed calls are actions too and never raise.

    >>> canon_call("get_order", {"order_id": "#W1", "note": "A"}) == canon_call(
    ...     "get_order", '{"note": " a ", "order_id": "#W1"}')
    True
    """
    if isinstance(args, str):
        parsed = parse_json_maybe(args)
        if not isinstance(parsed, Mapping):
            return tool, sha1_hex("malformed:" + args.strip())[:16]
        args = parsed
    return tool, sha1_hex(canonical_json(canon_args(args, schema, volatile)))[:16]


_CALL_KEYS: ContextVar[dict[tuple[str, str], tuple[str, str]] | None] = ContextVar(
    "call_keys", default=None
)


@contextmanager
def call_key_memo() -> Iterator[None]:
    """Inside the block, :func:`call_key` canonicalizes each (tool, raw arguments) once.

    Curation reads every call in several stages (digests, CAC, duplicates); one memo per round
    saves re-canonicalizing the same arguments there. Nested blocks share the outer memo.
    """
    if _CALL_KEYS.get() is not None:
        yield
        return
    token = _CALL_KEYS.set({})
    try:
        yield
    finally:
        _CALL_KEYS.reset(token)


def call_key(call: ToolCallRecord, schema: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """:func:`canon_call` of a recorded call: its parsed arguments, else its raw text (§1.2).

    Without a ``schema``, memoized by ``(tool, raw_arguments)`` inside :func:`call_key_memo`
    (the parsed arguments are a function of the raw text).

    >>> from trajsynth.schemas import ObsClass
    >>> call = ToolCallRecord(call_id="c1", tool="get_order", raw_arguments='{"order_id": "#W1"}',
    ...     arguments={"order_id": "#W1"}, observation="{}", obs_class=ObsClass.EMPTY, turn=0)
    >>> call_key(call) == canon_call("get_order", {"order_id": "#W1"})
    True
    """
    memo = _CALL_KEYS.get() if schema is None else None
    if memo is not None:
        hit = memo.get((call.tool, call.raw_arguments))
        if hit is not None:
            return hit
    args = call.arguments if call.arguments is not None else call.raw_arguments
    key = canon_call(call.tool, args, schema)
    if memo is not None:
        memo[(call.tool, call.raw_arguments)] = key
    return key


def parse_json_maybe(value: Any) -> Any:
    """``value`` parsed if it is a string holding JSON, else ``value`` unchanged.

    >>> parse_json_maybe('{"a": 1}'), parse_json_maybe("plain text")
    ({'a': 1}, 'plain text')
    """
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def value_at(value: Any, path: Sequence[str | int]) -> Any:
    """The value at ``path`` (keys and list indexes) of a JSON value; ``KeyError`` if none.

    >>> value_at({"source": {"datetime": "09:47"}}, ["source", "datetime"])
    '09:47'
    >>> value_at({"items": [{"id": "i9"}]}, ["items", 0, "id"])
    'i9'
    """
    for step in path:
        # two tests, not one with `or`: each narrows ``value`` for its own index
        if isinstance(step, int) and isinstance(value, list) and -len(value) <= step < len(value):
            value = value[step]
            continue
        if isinstance(step, str) and isinstance(value, Mapping) and step in value:
            value = value[step]
            continue
        raise KeyError(f"no {step!r} in {canonical_json(value)[:60]}")
    return value


def leaf_paths(value: Any, target: Any) -> list[list[str | int]]:
    """Every path to a scalar of ``value`` equal to ``target`` (as JSON), outermost first.

    >>> leaf_paths({"a": {"t": "x"}, "b": ["x", "y"]}, "x")
    [['a', 't'], ['b', 0]]
    """
    want = canonical_json(target)
    out: list[list[str | int]] = []

    def walk(node: Any, at: list[str | int]) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, [*at, str(k)])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, [*at, i])
        elif canonical_json(node) == want:
            out.append(at)

    walk(value, [])
    return out


def obs_class(
    result: Any,
    *,
    is_error: bool = False,
    malformed: bool = False,
    schema_invalid: bool = False,
) -> ObsClass:
    """``ok``, ``empty`` or ``error`` for one observation (docs/methods.md §1.2).

    Error if the MCP result had ``isError``, the arguments failed schema validation or the call
    was malformed; empty if the result (parsed when it is JSON text) is null, ``[]``, ``{}``
    or blank text.

    >>> [obs_class(r).value for r in ('{"total": 3}', "[]", None, "  ")]
    ['ok', 'empty', 'empty', 'empty']
    >>> obs_class("boom", is_error=True).value
    'error'
    """
    if is_error or malformed or schema_invalid:
        return ObsClass.ERROR
    value = parse_json_maybe(result)
    if value is None or value == [] or value == {}:
        return ObsClass.EMPTY
    if isinstance(value, str) and not value.strip():
        return ObsClass.EMPTY
    return ObsClass.OK


def _strip_volatile(value: Any, volatile: frozenset[str]) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _strip_volatile(v, volatile) for k, v in value.items() if k not in volatile}
    if isinstance(value, list | tuple):
        return [_strip_volatile(v, volatile) for v in value]
    return value


def obs_digest(result: Any, volatile: frozenset[str] = frozenset()) -> str:
    """sha1 (40 hex) of the canonical JSON of an observation, volatile keys removed (§1.2).

    JSON text is parsed first, so the text and the structured form of one result agree.

    >>> obs_digest('{"b": 1, "a": 2, "ts": 5}', frozenset({"ts"})) == obs_digest({"a": 2, "b": 1})
    True
    """
    return sha1_hex(canonical_json(_strip_volatile(parse_json_maybe(result), volatile)))
