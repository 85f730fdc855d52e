"""The MCP client side: one live session per server process, owned by its own task.

The SDK's ``stdio_client`` and ``ClientSession`` hold anyio cancel scopes that must be entered
and exited by the same task. An environment is opened in one task and closed in another (a
fixture's setup and teardown, a rollout that forks), so the transport and the session live in a
dedicated task (``ServerConnection``); callers only send requests through the session, which
is safe from any task.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TextIO

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, Implementation, PaginatedRequestParams, Tool

from trajsynth.schemas import MCPServerError, MCPServerStartError

__all__ = ["ServerConnection", "TransportFactory", "http_transport", "stdio_transport"]

log = logging.getLogger(__name__)

TransportFactory = Callable[[TextIO], AbstractAsyncContextManager[Any]]
"""Given a text file for the server's stderr, the SDK transport context manager."""

_CLOSE_TIMEOUT_S = 15.0
_STDERR_TAIL = 2000


def stdio_transport(
    argv: Sequence[str], env: Mapping[str, str] | None = None, *, cwd: str | None = None
) -> TransportFactory:
    """A stdio transport that runs ``argv`` (a HOST argv, e.g. ``docker exec -i ...``)."""
    if not argv:
        raise ValueError("empty server command")
    params = StdioServerParameters(
        command=argv[0], args=list(argv[1:]), env=dict(env or {}), cwd=cwd
    )
    return lambda errlog: stdio_client(params, errlog=errlog)


def http_transport(url: str) -> TransportFactory:
    """A streamable HTTP transport to ``url`` (the server runs elsewhere; it has no stderr)."""
    return lambda _errlog: streamable_http_client(url)


class _ServerCheckedSession(ClientSession):
    """A ``ClientSession`` that leaves a result's structured content to the server.

    For a bundled cluster only: its ``MCPServer`` builds ``structuredContent`` by validating the
    tool's return value with the tool's output model and dumping it, the model its
    ``outputSchema`` is generated from. The SDK client would check it again with jsonschema
    (30 µs for one product, 490 µs for a search's 2.7 kB), after listing the tools once per
    session to get the schemas (a round trip at the first call after each server start). An
    outside server's results are always checked.
    """

    async def validate_tool_result(self, name: str, result: CallToolResult) -> None:
        return None


class ServerConnection:
    """One MCP server process (or HTTP endpoint) and its initialized ``ClientSession``.

    ``await open()`` starts a task that enters the transport and the session, initializes,
    and then waits until ``close()``. ``session`` is usable from any task in between.
    ``check_results=False`` (a bundled server, which validates its own results) skips the
    client's output-schema check of each result (``_ServerCheckedSession``).
    """

    def __init__(
        self,
        transport: TransportFactory,
        *,
        label: str,
        start_timeout_s: float,
        check_results: bool = True,
    ) -> None:
        self._transport = transport
        self._session_type = ClientSession if check_results else _ServerCheckedSession
        self.label = label
        self._start_timeout_s = start_timeout_s
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[ClientSession] | None = None
        self._stop: asyncio.Event | None = None
        self._errlog: TextIO | None = None
        self._session: ClientSession | None = None
        self.server_info: Implementation | None = None
        self.instructions: str | None = None

    @property
    def session(self) -> ClientSession:
        if self._session is None:
            raise MCPServerError(f"{self.label}: no live MCP session")
        return self._session

    @property
    def alive(self) -> bool:
        return self._session is not None and self._task is not None and not self._task.done()

    def stderr_tail(self, limit: int = _STDERR_TAIL) -> str:
        """The last ``limit`` characters the server wrote to stderr."""
        if self._errlog is None or self._errlog.closed:
            return ""
        self._errlog.flush()
        self._errlog.seek(0)
        text = self._errlog.read()
        return text[-limit:].strip()

    async def open(self) -> ClientSession:
        """Start the server and initialize the session; MCPServerError when it does not come up."""
        if self._task is not None:
            raise RuntimeError(f"{self.label}: connection already opened")
        # lives as long as the server process (its stderr); closed in close()
        self._errlog = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._stop = asyncio.Event()
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._ready = ready
        self._task = asyncio.create_task(self._run(ready), name=f"mcp:{self.label}")
        try:
            async with asyncio.timeout(self._start_timeout_s):
                session = await asyncio.shield(ready)
        except (TimeoutError, MCPError, OSError, RuntimeError, ValueError) as exc:
            stderr = self.stderr_tail()
            await self.close()
            detail = (
                f"timed out after {self._start_timeout_s:g}s"
                if isinstance(exc, TimeoutError)
                else f"{type(exc).__name__}: {exc}"
            )
            message = f"{self.label}: MCP server did not start ({detail})"
            if stderr:
                message += f"; its stderr ends with:\n{stderr}"
            raise MCPServerStartError(message) from exc
        self._session = session
        return session

    async def _run(self, ready: asyncio.Future[ClientSession]) -> None:
        assert self._stop is not None and self._errlog is not None
        try:
            async with self._transport(self._errlog) as streams:
                read_stream, write_stream = streams[0], streams[1]
                async with self._session_type(read_stream, write_stream) as session:
                    result = await session.initialize()
                    self.server_info = result.server_info
                    self.instructions = result.instructions
                    if not ready.done():
                        ready.set_result(session)
                    await self._stop.wait()
        except (MCPError, OSError, RuntimeError, ValueError, TimeoutError) as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.debug("%s: MCP connection ended: %r", self.label, exc)
        except BaseExceptionGroup as group:
            # anyio task groups (the transport's, the session's) nest: report the first leaf.
            first: BaseException = group
            while isinstance(first, BaseExceptionGroup) and first.exceptions:
                first = first.exceptions[0]
            if not ready.done():
                ready.set_exception(
                    first
                    if isinstance(first, Exception) and not isinstance(first, BaseExceptionGroup)
                    else RuntimeError(str(first))
                )
            log.debug("%s: MCP connection ended: %r", self.label, group)
        finally:
            self._session = None
            if not ready.done():
                ready.set_exception(RuntimeError("the connection ended before it was ready"))

    async def close(self) -> None:
        """Stop the session and the server (stdin closed, then SIGTERM, then SIGKILL)."""
        task, self._task = self._task, None
        if self._stop is not None:
            self._stop.set()
        if task is not None:
            try:
                async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                    await asyncio.shield(task)
            except TimeoutError:
                log.warning("%s: MCP connection did not close in time; cancelling", self.label)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._session = None
        if self._ready is not None and self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # retrieved, so asyncio does not log it as lost
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None

    async def list_tools(self) -> list[Tool]:
        """Every tool the server lists (following pagination cursors)."""
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(1000):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self.session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools


async def with_timeout(seconds: float, label: str, awaitable: Any) -> Any:
    """Await with a deadline; a TimeoutError becomes MCPServerError naming ``label``."""
    try:
        with anyio.fail_after(seconds):
            return await awaitable
    except TimeoutError as exc:
        raise MCPServerError(f"{label}: no answer within {seconds:g}s") from exc
