"""When a tool result says it failed, whatever its ``isError`` says.

Many MCP servers report a failure as an ordinary result: ``{"error": "User not
authenticated"}``, ``{"status": "error", ...}``, ``{"success": false, ...}`` or a text that
starts with ``Error:``. Discovery, the gold run and the verifier all read such a result as a
failure (a refused call changed nothing and evidences nothing), so the one test lives here,
below every layer that needs it.

>>> result_error('{"error": "No such file: a.txt"}')
'No such file: a.txt'
>>> result_error("Error: repository not found"), result_error('{"name": "error.log"}')
('Error: repository not found', None)
>>> result_error("Database error: no such table: notes"), result_error("no error: all fine")
('Database error: no such table: notes', None)

A result that lists one outcome per item fails when every item failed (server-filesystem's
``read_multiple_files``), and succeeds when any item was read:

>>> result_error(".: Error - EISDIR: illegal operation on a directory, read")
'.: Error - EISDIR: illegal operation on a directory, read'
>>> result_error("a.txt: hello world") is None, result_error("a.txt: Error - ENOENT") is None
(True, False)
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["result_error"]

# what a failing call's text starts with, in the wording servers use for their own errors
_ERROR_TEXT = re.compile(
    r"^\s*(?:(?:error|failed|failure|exception)\b(?!\.\w)|traceback \(most recent call last\)|"
    r"error executing tool|"
    # a qualified error with its colon: "Database error: no such table", "Validation error:"
    r"(?!no\b|not\b|without\b)(?:[\w-]+\s+){1,2}error\s*:)",
    re.IGNORECASE,
)
# one item's failure in a result that lists an outcome per item: "docs: Error - EISDIR: ..."
_ITEM_ERROR = re.compile(r"^\S[^\n]{0,300}?:\s+Error\s*[-:]\s")
# only the word for the call itself failing: an order whose status is "failed" is data
_ERROR_STATUS = frozenset({"error"})
_FALSE_FLAGS = ("success", "ok", "succeeded")


def _parsed(text: str) -> Any:
    stripped = text.strip()
    if stripped[:1] not in "{[":
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        pass
    try:  # a Python dict printed as text ({'error': '...'}), as some servers answer
        return ast.literal_eval(stripped)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _object_error(value: Any) -> str | None:
    """The error an object's top level reports, or None."""
    if not isinstance(value, Mapping):
        return None
    error = value.get("error")
    if error not in (None, False, "", [], {}):
        if isinstance(error, Mapping):
            return str(error.get("message") or error.get("detail") or json.dumps(error))[:500]
        return str(error)[:500] if error is not True else str(value.get("message") or "error")
    errors = value.get("errors")
    if isinstance(errors, list) and errors:
        return "; ".join(str(e) for e in errors[:3])[:500]
    status = value.get("status")
    if isinstance(status, str) and status.strip().lower() in _ERROR_STATUS:
        return str(value.get("message") or value.get("detail") or f"status {status}")[:500]
    for flag in _FALSE_FLAGS:
        if value.get(flag) is False:
            return str(value.get("message") or value.get("detail") or f"{flag}: false")[:500]
    return None


def result_error(text: Any, structured: Any = None) -> str | None:
    """The failure a tool result reports, or None when it reads as a success.

    ``structured`` (MCP ``structuredContent``, or ``text`` when that is parsed JSON) is read
    first; else the text, as JSON (or a
    printed Python dict) whose top level is an error object (``error``, ``errors``,
    ``status: "error"``, ``success: false``), or plain text that starts with the usual error
    wording (``Error:``, ``Failed``, a traceback). Only the top level counts: a list of log
    entries with an ``error`` field each is data, not a failure.
    """
    if text is not None and not isinstance(text, str):  # an observation already parsed
        text, structured = "", text if structured is None else structured
    found = _object_error(structured)
    if found is not None:
        return found
    if isinstance(structured, Mapping) and len(structured) == 1:
        inner = next(iter(structured.values()))  # {"result": "{\"error\": ...}"}
        if isinstance(inner, str):
            found = _object_error(_parsed(inner))
            if found is not None:
                return found
    body = text or ""
    parsed = _parsed(body)
    if parsed is not None:
        return _object_error(parsed)
    if _ERROR_TEXT.match(body):
        return body.strip()[:500]
    items = [line for line in body.splitlines() if line.strip()]
    if items and all(_ITEM_ERROR.match(line) for line in items):
        return body.strip()[:500]
    return None
