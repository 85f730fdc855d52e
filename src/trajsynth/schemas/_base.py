"""The base of every record: frozen, no unknown fields, content-derived ids."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue

__all__ = ["JsonValue", "Record", "canonical_json", "content_id", "stable_hash"]


class Record(BaseModel):
    """A pipeline record. A typo in a field name is an error, and records never change."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no whitespace: the same data always gives the same text.

    Any data gives a text, untrusted model output included: what ``json.dumps`` refuses (an
    integer past Python's digit limit, nesting deeper than the recursion limit) is written by
    an iterative encoder instead, with such integers as ``"0x..."`` strings.

    >>> canonical_json({"b": [1, 2], "a": "é"})
    '{"a":"é","b":[1,2]}'
    >>> canonical_json([16**4400])[:6], canonical_json({1: 2})
    ('["0x10', '{"1":2}')
    """
    try:
        return json.dumps(
            data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
        )
    except (ValueError, RecursionError, TypeError):
        return _iterative_json(data)


def _scalar_json(value: Any) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, float | str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # more digits than int -> str may convert
            return json.dumps(hex(value))
    return json.dumps(str(value), ensure_ascii=False)


def _key_text(key: Any) -> str:
    # json.dumps's own coercion of keys (True -> "true", 1 -> "1"); anything else by str
    if isinstance(key, str):
        return key
    if isinstance(key, bool) or key is None:
        return json.dumps(key)
    return _scalar_json(key).strip('"') if isinstance(key, int | float) else str(key)


def _iterative_json(data: Any) -> str:
    """``canonical_json`` without recursion: an explicit stack of what is left to write."""
    out: list[str] = []
    stack: list[Any] = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item.text)
        elif isinstance(item, dict):
            pairs = sorted((_key_text(k), v) for k, v in item.items())
            todo: list[Any] = [_Raw("{")]
            for i, (key, value) in enumerate(pairs):
                todo += [_Raw(("," if i else "") + json.dumps(key, ensure_ascii=False) + ":")]
                todo.append(value)
            todo.append(_Raw("}"))
            stack.extend(reversed(todo))
        elif isinstance(item, list | tuple):
            todo = [_Raw("[")]
            for i, value in enumerate(item):
                if i:
                    todo.append(_Raw(","))
                todo.append(value)
            todo.append(_Raw("]"))
            stack.extend(reversed(todo))
        else:
            out.append(_scalar_json(item))
    return "".join(out)


class _Raw:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def stable_hash(data: Any, *, length: int = 24) -> str:
    """Hex sha256 of the canonical JSON of ``data``, cut to ``length`` characters.

    Unpaired surrogates (``"\\ud800"`` in a model's JSON) are hashed as their code points
    (``surrogatepass``), so no text makes hashing fail and valid text hashes as before.
    """
    blob = canonical_json(data).encode("utf-8", "surrogatepass")
    return hashlib.sha256(blob).hexdigest()[:length]


def content_id(
    prefix: str, record: BaseModel | dict[str, Any], *, volatile: frozenset[str] = frozenset()
) -> str:
    """An id that hashes what a record means, never when or where it was made.

    Fields in ``volatile`` (wall-clock times, durations, hosts, and the record's own id field)
    and any field named ``id`` are left out, so the same inputs always give the same id.

    >>> content_id("x", {"a": 1, "b": [1, 2]}) == content_id("x", {"b": [1, 2], "a": 1})
    True
    """
    data = record.model_dump(mode="json") if isinstance(record, BaseModel) else dict(record)
    for key in (*volatile, "id"):
        data.pop(key, None)
    return f"{prefix}_{stable_hash(data)}"
