"""What a server answered, as trajsynth reads it: a tool's result as the policy sees it
(``ToolResult``), a resource read as a result, and a probe's answer as a comparable value.

Both server kinds answer through these: a bundled server's errors come flagged (``isError``),
an outside server's may only say so in their text (``read_errors``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, PaginatedRequestParams
from pydantic import ValidationError

from trajsynth.schemas import JsonValue, Record, canonical_json, stable_hash
from trajsynth.schemas.clock import mask_clock_readings
from trajsynth.schemas.results import result_error

__all__ = [
    "ToolResult",
    "probe_value",
    "read_resource_result",
    "static_resources",
    "tool_result",
]

log = logging.getLogger(__name__)

_PROBE_CHARS = 4000  # a probe result longer than this is hashed, not kept as text
_MAX_RESOURCES = 16  # static resources listed as probe candidates
_MAX_RESOURCE_PAGES = 4


class ToolResult(Record):
    """What a tool call returned, as the policy will see it.

    ``is_error`` marks a tool-level failure (the MCP result's ``isError``, or a JSON-RPC
    "invalid params" answer): class ``tool``. Infra faults never become a ToolResult.
    """

    text: str
    structured: JsonValue = None
    is_error: bool = False
    error_type: str | None = None


def _content_text(result: CallToolResult) -> str:
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            text = getattr(resource, "text", None)
            parts.append(str(text) if text is not None else f"[resource {resource}]")
        else:
            mime = getattr(block, "mime_type", None) or getattr(block, "uri", "") or ""
            parts.append(f"[{kind} {mime}]".replace(" ]", "]"))
    if not parts and result.structured_content is not None:
        parts.append(canonical_json(result.structured_content))
    return "\n".join(parts)


def tool_result(raw: CallToolResult, *, read_errors: bool = True) -> ToolResult:
    """An MCP result as the policy sees it: a failure when the server flags it (``isError``)
    or, with ``read_errors``, when the result itself says so (``{"error": ...}``,
    ``Error: ...``; ``result_error``), so discovery, the gold run and a rollout all read a
    refused call as a failure. A bundled server raises its errors (``ToolError``), so its
    results are taken as flagged."""
    structured = raw.structured_content
    try:
        json.dumps(structured)
    except (TypeError, ValueError):
        structured = None
    text = _content_text(raw)
    if raw.is_error:
        return ToolResult(text=text, structured=structured, is_error=True, error_type="tool_error")
    if read_errors and result_error(text, structured) is not None:
        return ToolResult(
            text=text, structured=structured, is_error=True, error_type="error_result"
        )
    return ToolResult(text=text, structured=structured)


def probe_value(result: ToolResult, workdir: str = "") -> JsonValue:
    """A probe result as a comparable value: structured content, else parsed JSON text, else
    the text (hashed when long). The sandbox's own work dir path reads ``<workdir>`` and a
    reading of the clock (a file's modification time) ``<time>``, so two environments in the
    same state give the same value."""
    value: JsonValue
    if result.structured is not None:
        value = result.structured
    else:
        try:
            value = json.loads(result.text)
        except ValueError:
            value = result.text
    if workdir:
        value = json.loads(json.dumps(value).replace(workdir, "<workdir>"))
    value = mask_clock_readings(value)
    if isinstance(value, str) and len(value) > _PROBE_CHARS:
        return {"sha256": stable_hash(value, length=64)}
    return value


async def static_resources(session: Any) -> list[str]:
    """The URIs of the static resources (not templates) a live session's server lists; none
    when it does not declare the resources capability or the listing fails."""
    caps = getattr(session, "server_capabilities", None)
    if caps is None or caps.resources is None:
        return []
    uris: list[str] = []
    cursor: str | None = None
    try:
        for _ in range(_MAX_RESOURCE_PAGES):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            listed = await session.list_resources(params=params)
            uris += [str(r.uri) for r in listed.resources]
            cursor = listed.next_cursor
            if not cursor:
                break
    except (MCPError, ValidationError, TimeoutError, OSError) as exc:
        log.info("resources/list failed (%r): no resource probes", exc)
        return []
    return sorted(set(uris))[:_MAX_RESOURCES]


async def read_resource_result(session: Any, uri: str) -> ToolResult:
    """A resource read as a tool result: its text contents joined (a blob reads as its
    hash), or an error result when the server refuses the read."""
    try:
        read = await session.read_resource(uri)
    except MCPError as exc:
        return ToolResult(text=exc.message, is_error=True, error_type="tool_error")
    parts = []
    for c in read.contents:
        text = getattr(c, "text", None)
        parts.append(text if text is not None else f"blob:{stable_hash(c.blob, length=64)}")
    return ToolResult(text="\n".join(parts))
