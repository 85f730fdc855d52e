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
    """JSON with sorted keys and no whitespace: the same data always gives the same text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def stable_hash(data: Any, *, length: int = 24) -> str:
    """Hex sha256 of the canonical JSON of ``data``, cut to ``length`` characters."""
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:length]


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
