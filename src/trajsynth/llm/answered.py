"""The embedded server's record of requests it has answered, kept on disk across restarts.

A client that stops waiting for a request (its timeout) has the embedded server restarted
before it retries, so that llama.cpp does not go on computing the abandoned request while the
retry waits (``llm.endpoints``). A request that finished just before the restart reached
it was computed, and its answer was lost with the process: the retry computed it again,
and on a one-slot server that doubled the wait. Now every request carries
``X-Trajsynth-Request: <id>``, the same id on
each of its tries (``llm.client``), and :class:`AnsweredRequests`, an ASGI middleware around
llama-cpp-python's app, writes each answer to a folder the server's owner keeps
(``EmbeddedLLMServer``) before sending it. A try whose id is in the folder gets the recorded
answer and computes nothing, whichever process (the first server or its restart) computed it.

Servers other than ours ignore the header. Only complete, successful, non-streamed answers
are recorded; the folder keeps the newest ``keep`` of them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

__all__ = ["HEADER", "AnsweredRequests"]

HEADER = "x-trajsynth-request"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class AnsweredRequests:
    """ASGI middleware: answers a request id already answered from ``folder``, records the
    rest."""

    def __init__(self, app: ASGIApp, folder: Path, keep: int = 64) -> None:
        self.app = app
        self.folder = folder
        self.keep = keep
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, request_id: str) -> Path:
        return self.folder / f"{hashlib.sha256(request_id.encode()).hexdigest()[:32]}.json"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id = _request_id(scope)
        if request_id is None:
            await self.app(scope, receive, send)
            return
        path = self._path(request_id)
        recorded = _read(path)
        if recorded is not None:
            await _replay(recorded, send)
            return
        start: Message | None = None
        body: list[bytes] = []

        async def recording(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body" and start is not None:
                body.append(bytes(message.get("body", b"")))
                if not message.get("more_body", False) and _recordable(start):
                    self._write(path, start, b"".join(body))  # before the client may be gone
            await send(message)

        await self.app(scope, receive, recording)

    def _write(self, path: Path, start: Message, body: bytes) -> None:
        record = {
            "status": start["status"],
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in start["headers"]],
            "body": body.decode("utf-8", errors="surrogateescape"),
        }
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with contextlib.suppress(OSError):  # a record we cannot keep costs a recompute only
            tmp.write_text(json.dumps(record), encoding="utf-8", errors="surrogateescape")
            os.replace(tmp, path)
            self._trim()

    def _trim(self) -> None:
        files = sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in files[: max(0, len(files) - self.keep)]:
            old.unlink(missing_ok=True)


def _request_id(scope: Scope) -> str | None:
    if scope["type"] != "http" or scope.get("method") != "POST":
        return None
    for key, value in scope.get("headers", []):
        if key.lower() == HEADER.encode():
            text = value.decode("latin-1").strip()
            return text or None
    return None


def _recordable(start: Message) -> bool:
    headers = {k.lower(): v for k, v in start.get("headers", [])}
    return start["status"] == 200 and b"event-stream" not in headers.get(b"content-type", b"")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8", errors="surrogateescape"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


async def _replay(record: dict[str, Any], send: Send) -> None:
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in record["headers"]]
    await send({"type": "http.response.start", "status": record["status"], "headers": headers})
    body = str(record["body"]).encode("utf-8", errors="surrogateescape")
    await send({"type": "http.response.body", "body": body})
