"""Serving a bundled cluster over stdio: the SDK's transport, without its per-message thread hops.

``MCPServer.run("stdio")`` reads stdin and writes stdout through ``anyio.wrap_file``: every
line read, every write and every flush is a trip to a worker thread and back (three per
request, ~230 µs of a tool call on a 2-core machine), and its log records go through rich
(``RichHandler`` rendering a table per record: ~650 µs for each failed tool call, which the SDK
logs at INFO). ``serve_stdio`` runs the same server loop (``stdio_server`` and the low-level
server's ``run``, as ``MCPServer.run_stdio_async`` does) over the same pipes, read and written
by the event loop itself, and logs as plain lines (what the SDK does when rich is not
installed, as in the sandbox image). The protocol, the validation and the dispatch are
the SDK's, so its behaviour is unchanged and only the thread hops are gone.

As in the SDK, while serving, fd 0 reads the null device and fd 1 goes to stderr, so a stray
read or print of a tool (or a child it runs) never touches the wire. When stdin or stdout is not
a pipe or a socket (a terminal, a file), ``serve_stdio`` leaves everything to
``MCPServer.run("stdio")``.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import stat
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

__all__ = ["plain_logging", "serve_stdio"]

_LINE_LIMIT = 1 << 40  # a line is read whole, however long (as TextIOWrapper.readline does)
# MCPServer's own logger: at INFO it logs each tool call that failed or whose arguments were
# rejected, i.e. the model's mistakes, which reach the model (and the trajectory) as the
# result's text anyway; at WARNING and above, a tool or resource that crashed.
_SDK_SERVER_LOGGER = "mcp.server.mcpserver.server"


def plain_logging() -> None:
    """Log records as plain ``%(message)s`` lines on stderr instead of through rich (the
    handler ``MCPServer()`` installs when rich can be imported): same records, same level."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if type(handler).__module__.split(".", 1)[0] != "rich":
            continue
        plain = logging.StreamHandler()
        plain.setFormatter(logging.Formatter("%(message)s"))
        plain.setLevel(handler.level)
        root.removeHandler(handler)
        root.addHandler(plain)


def _is_wire(fd: int) -> bool:
    """A pipe or a socket: what the event loop can read and write without a thread."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _take(fd: int, divert: int) -> int:
    """A private duplicate of ``fd`` (close-on-exec, above the standard range) for the wire,
    and ``fd`` pointed at ``divert``."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(divert, fd)
    return private


class _Lines:
    """The wire's stdin as ``stdio_server`` iterates it: decoded lines until EOF."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def __aiter__(self) -> AsyncIterator[str]:
        while line := await self._reader.readline():
            yield line.decode("utf-8", errors="replace")


class _WireOut(asyncio.Protocol):
    """Flow control of the stdout pipe: ``drained`` is set while nothing waits in the
    transport's buffer (the high-water mark is 0), and when the pipe is gone."""

    def __init__(self) -> None:
        self.drained = asyncio.Event()
        self.drained.set()
        self.lost: BaseException | None = None

    def pause_writing(self) -> None:
        self.drained.clear()

    def resume_writing(self) -> None:
        self.drained.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or BrokenPipeError("the client closed the server's stdout")
        self.drained.set()


class _Writer:
    """The wire's stdout as ``stdio_server`` writes it: ``write`` hands the line to the pipe
    (written at once when the pipe has room), ``flush`` returns when all of it is written."""

    def __init__(self, transport: asyncio.WriteTransport, protocol: _WireOut) -> None:
        self._transport = transport
        self._protocol = protocol

    async def write(self, text: str) -> int:
        if self._protocol.lost is not None or self._transport.is_closing():
            raise BrokenPipeError("the client closed the server's stdout")
        self._transport.write(text.encode("utf-8"))
        return len(text)

    async def flush(self) -> None:
        await self._protocol.drained.wait()
        if self._protocol.lost is not None:
            raise self._protocol.lost


async def _serve(server: MCPServer) -> None:
    loop = asyncio.get_running_loop()
    with open(os.devnull, "rb") as null:
        wire_in = _take(0, null.fileno())
    wire_out = _take(1, 2)
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", buffering=0)
    )
    transport, protocol = await loop.connect_write_pipe(
        _WireOut, os.fdopen(wire_out, "wb", buffering=0)
    )
    transport.set_write_buffer_limits(high=0)
    # MCPServer.run_stdio_async, with our streams (the SDK keeps no public name for the
    # low-level server it wraps; a test serves a bundled cluster through this path)
    lowlevel: Any = server._lowlevel_server  # noqa: SLF001
    stdin: Any = _Lines(reader)
    stdout: Any = _Writer(transport, protocol)
    try:
        async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
    finally:
        transport.close()


def serve_stdio(server: MCPServer) -> None:
    """Serve ``server`` over this process's stdin and stdout until stdin ends.

    A failed tool call is not logged (its text is the result the model gets): in a container
    each line on stderr is one more frame through ``docker exec``, 60-300 µs of a failed call
    on a 2-core machine. A tool that crashes is still logged, with its traceback.
    """
    plain_logging()
    logging.getLogger(_SDK_SERVER_LOGGER).setLevel(logging.WARNING)
    if not (_is_wire(0) and _is_wire(1)):
        server.run("stdio")
        return
    anyio.run(_serve, server, backend="asyncio")
