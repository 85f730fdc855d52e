"""The one door to an environment, whatever its server: ``Environment`` (start, restart, close;
calls, their timeouts and tries; checks; snapshots through the side of its server's kind).

What the package's doc says of faults holds here: a hung or dead server is restarted and the
call raises ``MCPServerError`` (``infra``) after its last try; a tool's own error is a
``ToolResult(is_error=True)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, INVALID_PARAMS, REQUEST_TIMEOUT, CallToolResult
from pydantic import ValidationError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from trajsynth.mcp_servers.client import ServerConnection, TransportFactory
from trajsynth.mcp_servers.environment.bundled import BundledServer, bundled_module
from trajsynth.mcp_servers.environment.outside import OutsideServer, probe_state
from trajsynth.mcp_servers.environment.results import (
    ToolResult,
    read_resource_result,
    static_resources,
    tool_result,
)
from trajsynth.mcp_servers.launch import copy_files
from trajsynth.mcp_servers.tool_calls import SERVER_KILLED
from trajsynth.schemas import (
    Domain,
    EnvState,
    MCPServerError,
    ProbeCall,
    SandboxError,
    SandboxGone,
    SandboxStartError,
    ServerKind,
    SnapshotHandle,
    ToolAccess,
    ToolCluster,
    ToolSpec,
    stable_hash,
)

if TYPE_CHECKING:
    from trajsynth.sandboxes import Sandbox
    from trajsynth.sandboxes.pool import SandboxPool

__all__ = ["Environment", "ServerSide"]

log = logging.getLogger(__name__)

SEED_ENV = "TRAJSYNTH_SEED"
# Extra wall-clock time over the request timeout before the whole call is abandoned (a write
# to a server that stopped reading its stdin can block before the request clock starts).
_CALL_GRACE_S = 5.0
_T = TypeVar("_T")


class ServerSide(Protocol):
    """What differs by server kind (``BundledServer``, ``OutsideServer``)."""

    read_errors: bool  # read "error" in a result's text as a failure (``tool_result``)

    @property
    def state_readable(self) -> bool: ...
    def server_env(self) -> dict[str, str]: ...
    async def transport(self) -> tuple[TransportFactory, str]: ...
    async def start(self) -> EnvState: ...
    async def state(self) -> EnvState: ...
    async def snapshot(self) -> SnapshotHandle: ...
    async def restore(self, handle: SnapshotHandle) -> None: ...
    async def after_restart(self) -> None: ...


def _transient_sandbox_fault(exc: BaseException) -> bool:
    """A sandbox fault worth trying again: an operation that failed or broke mid-way in a
    live sandbox, not one that is gone or never started (typed, never matched by message)."""
    return isinstance(exc, SandboxError) and not isinstance(exc, SandboxGone | SandboxStartError)


class _ServerLost(MCPServerError):
    """The server died or its transport broke during a call (it has been restarted).
    ``delivered`` is False when the call never reached a live server."""

    def __init__(self, message: str, *, delivered: bool) -> None:
        super().__init__(message)
        self.delivered = delivered


class Environment:
    """One MCP server in one sandbox, for one rollout (or one branch family of a tree).

    Use ``await open_environment(...)`` (started, ready), or build one on a sandbox you already
    hold and ``await env.start()``. ``async with env:`` starts it (if needed) and closes it.
    """

    def __init__(
        self,
        cluster: ToolCluster,
        sandbox: Sandbox,
        *,
        seed: int = 0,
        tool_timeout_s: float = 20.0,
        start_timeout_s: float = 60.0,
        check_timeout_s: float = 60.0,
        owns_sandbox: bool = True,
        pool: SandboxPool | None = None,
        environ: Mapping[str, str] | None = None,
        call_attempts: int = 3,
        retry_wait_s: float = 0.5,
    ) -> None:
        self.cluster = cluster
        # tries per call for an infra fault (module doc), backing off from retry_wait_s
        self.call_attempts = max(1, call_attempts)
        self.retry_wait_s = retry_wait_s
        self.retries = 0  # calls and sandbox operations sent again after an infra fault
        # where the values of the server's ``env_keys`` come from (None: this process's env)
        self.environ = environ
        self.sandbox = sandbox
        self.seed = seed
        self.tool_timeout_s = tool_timeout_s
        self.start_timeout_s = start_timeout_s
        self.check_timeout_s = check_timeout_s
        # a pooled sandbox is borrowed: closing gives it back to the pool instead
        self.pool = pool
        self.owns_sandbox = owns_sandbox and pool is None
        self._taken: list[SnapshotHandle] = []  # freed when a borrowed sandbox goes back
        self.restarts = 0
        self._conn: ServerConnection | None = None
        self._host_sandbox: Sandbox | None = None
        self._started = False
        self._initial_state: EnvState | None = None
        self._initial_snapshot: SnapshotHandle | None = None
        self._writes: list[tuple[str, dict[str, Any]]] = []
        self._checks: dict[str, bool] = {}
        self._lock = asyncio.Lock()
        self._pidfile = f"/tmp/trajsynth-mcp-{uuid.uuid4().hex[:12]}.pid"
        # where the server process runs: "sandbox", "host" (an outside command the sandbox
        # cannot run, started through a LocalSandbox) or "remote" (streamable HTTP)
        self.server_location: str | None = None
        # what differs by server kind: how it starts, where its state is read, how it resets
        bundled = cluster.server.kind == ServerKind.BUNDLED
        self._server: ServerSide = BundledServer(self) if bundled else OutsideServer(self)

    # ------------------------------------------------------------------ lifecycle

    @property
    def tools(self) -> list[ToolSpec]:
        return self.cluster.tools

    @property
    def bundled(self) -> bool:
        return self.cluster.server.kind == ServerKind.BUNDLED

    @property
    def state_readable(self) -> bool:
        return self._server.state_readable

    @property
    def bundled_module(self) -> str:
        """The package a bundled cluster runs as (``bundled.bundled_module``)."""
        return bundled_module(self.cluster)

    @property
    def server_name(self) -> str:
        """The cluster's folder: the state dump (``_state``) finds the state by it."""
        return self.bundled_module.rsplit(".", 1)[-1]

    async def __aenter__(self) -> Environment:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> EnvState:
        """Seed the state and start the server; the initial state. Idempotent."""
        if self._started and self._initial_state is not None:
            return self._initial_state
        self._initial_state = await self._server.start()
        self._started = True
        return self._initial_state

    async def _open_in_snapshot(self) -> EnvState:
        """Copy the server's files in, snapshot the work dir as the episode begins it, start
        the server and read the state (the opening of every server but a bundled one whose
        state is readable)."""
        if self.cluster.server.copies:
            await asyncio.to_thread(copy_files, self.sandbox, self.cluster.server.copies)
        self._initial_snapshot = await self._in_sandbox(self.sandbox.snapshot)
        await self._connect()
        self._started = True
        return await self.state()

    async def list_resources(self) -> list[str]:
        """The static resources the server lists (none without the resources capability)."""
        async with self._lock:
            if self._conn is None or not self._conn.alive:
                return []
            with anyio.move_on_after(self.tool_timeout_s + _CALL_GRACE_S):
                return await static_resources(self._conn.session)
            log.info("%s: resources/list timed out: no resource probes", self.cluster.cluster_id)
            return []

    async def _read_resource(self, uri: str) -> ToolResult:
        assert self._conn is not None
        what = f"{self.cluster.cluster_id}: resource {uri!r}"
        try:
            with anyio.fail_after(self.tool_timeout_s + _CALL_GRACE_S):
                return await read_resource_result(self._conn.session, uri)
        except (TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            await self._restart_after(f"{what}: no answer ({exc!r})", self._conn)
            raise MCPServerError(f"{what}: no answer; server restarted") from exc

    async def read_probes(self, probes: Sequence[ProbeCall]) -> EnvState:
        """The results of ``probes`` now, as the tables ``state()`` would give."""
        return await probe_state(self, probes)

    async def list_tools(self) -> list[Any]:
        """The server's ``tools/list`` (MCP ``Tool`` objects), through the live connection."""
        if self._conn is None:
            raise MCPServerError(f"{self.cluster.cluster_id}: environment not started")
        return await self._conn.list_tools()

    def stderr_tail(self) -> str:
        """What the server last wrote to its stderr ("" over HTTP or when not started)."""
        return self._conn.stderr_tail() if self._conn is not None else ""

    @property
    def server_info(self) -> tuple[Any, str | None]:
        """The server's ``Implementation`` and instructions from ``initialize``."""
        if self._conn is None:
            return None, None
        return self._conn.server_info, self._conn.instructions

    async def close(self) -> None:
        """Stop the server and, when this environment owns it, the sandbox."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
        if self._host_sandbox is not None:
            host, self._host_sandbox = self._host_sandbox, None
            await asyncio.to_thread(host.close)
        if self.owns_sandbox:
            await asyncio.to_thread(self.sandbox.close)
        elif self.pool is not None:
            await self._give_back(self.pool)
        self._started = False

    async def _give_back(self, pool: SandboxPool) -> None:
        """Return the borrowed sandbox with no server left running and no snapshot of ours."""
        pool, self.pool = pool, None
        await self._reap()
        taken, self._taken = self._taken, []
        if self._initial_snapshot is not None:
            taken.append(self._initial_snapshot)
        for handle in taken:
            # a handle already freed holds nothing: SandboxError is fine here
            with contextlib.suppress(SandboxError):
                await asyncio.to_thread(self.sandbox.discard, handle)
        await asyncio.to_thread(pool.release, self.sandbox)

    # ------------------------------------------------------------------ server process

    def _server_env(self) -> dict[str, str]:
        # the call's limit, so a server can stop its own work first (code.py TOOL_TIMEOUT_ENV)
        timeout = {"TRAJSYNTH_TOOL_TIMEOUT_S": f"{self.tool_timeout_s:g}"}
        return {SEED_ENV: str(self.seed), **timeout, **self._server.server_env()}

    def _in_container(self) -> bool:
        from trajsynth.sandboxes import DockerSandbox

        return isinstance(self.sandbox, DockerSandbox)

    def _sandbox_stdio(self, inner: list[str], env: Mapping[str, str]) -> list[str]:
        """The host argv for ``inner`` in the sandbox. In a container the server's pid goes
        to a file first: killing ``docker exec`` on the host does not kill the process inside,
        so a hung server is reaped by that pid (``_reap``)."""
        if self._in_container():
            inner = ["sh", "-c", 'echo $$ > "$0"; exec "$@"', self._pidfile, *inner]
        return self.sandbox.stdio_command(inner, env=env)

    async def _connect(self) -> None:
        transport, label = await self._server.transport()
        conn = ServerConnection(
            transport,
            label=label,
            start_timeout_s=self.start_timeout_s,
            check_results=not self.bundled,  # a bundled server validates its own results
        )
        await conn.open()
        self._conn = conn

    async def _reap(self) -> None:
        """Kill what is left of the old server inside a container (by the pid it wrote).

        A LocalSandbox needs nothing: the SDK kills the host process group, and bubblewrap's
        ``--die-with-parent`` takes the sandboxed process with it.
        """
        if not self._in_container():
            return
        script = 'p=$(cat "$0" 2>/dev/null) && kill -9 "$p" 2>/dev/null; rm -f "$0"; true'
        try:
            await asyncio.to_thread(
                self.sandbox.exec, ["sh", "-c", script, self._pidfile], timeout=15.0
            )
        except SandboxError as exc:
            log.warning("%s: could not reap the old server: %s", self.cluster.cluster_id, exc)

    async def restart(self, reason: str) -> None:
        """Stop the server (whatever state it is in) and start a fresh one.

        State survives in the sandbox's work directory; an outside server gets its successful
        writes replayed. Raises MCPServerError when the new server does not come up.
        """
        log.warning("%s: restarting the MCP server: %s", self.cluster.cluster_id, reason)
        self.restarts += 1
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
        await self._reap()
        await self._connect()
        await self._server.after_restart()

    # ------------------------------------------------------------------ tool calls

    def _retrying(self, retry: Callable[[BaseException], bool]) -> AsyncRetrying:
        def note(state: RetryCallState) -> None:
            self.retries += 1
            exc = state.outcome.exception() if state.outcome is not None else None
            log.warning(
                "%s: try %d of %d failed (%s); trying again",
                self.cluster.cluster_id,
                state.attempt_number,
                self.call_attempts,
                exc,
            )

        return AsyncRetrying(
            stop=stop_after_attempt(self.call_attempts),
            wait=wait_exponential(multiplier=self.retry_wait_s, max=30 * self.retry_wait_s),
            retry=retry_if_exception(retry),
            before_sleep=note,
            reraise=True,
        )

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None) -> ToolResult:
        """Call one tool. A tool error is an ``is_error`` result; a hung, dead or broken server
        is restarted, the call sent again when that is safe (module doc), and after the last
        try it raises MCPServerError (``infra``)."""
        args = {**dict(arguments or {}), **self._injected(name)}
        write = self._is_write(name)

        def resend(exc: BaseException) -> bool:
            return isinstance(exc, _ServerLost) and (not write or not exc.delivered)

        async with self._lock:
            if not self._started:
                raise MCPServerError(f"{self.cluster.cluster_id}: environment not started")
            # The first try runs outside tenacity, whose loop costs ~20 µs a call on
            # every call; only a fault worth sending again enters it (``_call_again``).
            try:
                result = await self._call_live(name, args)
            except _ServerLost as exc:
                if not resend(exc):
                    raise
                result = await self._call_again(name, args, exc, resend)
            if not result.is_error and write:
                self._writes.append((name, args))
            return result

    async def _call_again(
        self,
        name: str,
        arguments: dict[str, Any],
        first: _ServerLost,
        resend: Callable[[BaseException], bool],
    ) -> ToolResult:
        """The tries after a first one that failed with ``first``: tenacity's loop with
        ``first`` as its first attempt's outcome, so the tries, waits, logs and the last
        fault are what they were when every try ran inside it."""
        pending: _ServerLost | None = first
        async for attempt in self._retrying(resend):
            with attempt:
                if pending is not None:
                    fault, pending = pending, None
                    raise fault
                return await self._call_live(name, arguments)
        raise AssertionError("unreachable: tenacity reraises the last fault")

    async def _call_live(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """``_call`` on a running server; a server found dead first is restarted, and the
        fault is one the call never reached."""
        if self._conn is None or not self._conn.alive:
            await self.restart("the server was not running before the call")
            if self._conn is None or not self._conn.alive:
                raise _ServerLost(
                    f"{self.cluster.cluster_id}: the restarted server ended at once",
                    delivered=False,
                )
        return await self._call(name, arguments)

    async def _in_sandbox(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)`` (a sandbox operation) in a thread, tried again with
        backoff when the sandbox raises a transient SandboxError (every caller's operation is
        idempotent: a state dump, a check, a snapshot or a restore). A sandbox that is not
        there (``SandboxGone``: never started, closed, its container dead or removed) or
        could not start fails at once: no try can bring it back."""
        async for attempt in self._retrying(_transient_sandbox_fault):
            with attempt:
                return await asyncio.to_thread(fn, *args, **kwargs)
        raise AssertionError("unreachable: tenacity reraises the last fault")

    def _injected(self, name: str) -> dict[str, Any]:
        """The fixed values of parameters hidden from the model (``mcp_servers.hidden``)."""
        try:
            return dict(self.cluster.tool(name).injected)
        except KeyError:
            return {}

    def _is_write(self, name: str) -> bool:
        try:
            return self.cluster.tool(name).access == ToolAccess.WRITE
        except KeyError:
            return False

    async def _call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        assert self._conn is not None
        conn = self._conn
        what = f"{self.cluster.cluster_id}: tool {name!r}"
        try:
            # what cannot travel as UTF-8 JSON would break the transport (an infra restart);
            # it is the model's argument, so it is the model's error, never retried
            json.dumps(arguments, ensure_ascii=False).encode()
        except (TypeError, ValueError, RecursionError) as exc:
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            return ToolResult(
                text=f"invalid arguments: {reason}", is_error=True, error_type="invalid_params"
            )
        try:
            with anyio.fail_after(self.tool_timeout_s + _CALL_GRACE_S):
                raw = await conn.session.call_tool(
                    name, arguments, read_timeout_seconds=self.tool_timeout_s
                )
        except MCPError as exc:
            if exc.code == INVALID_PARAMS:
                return ToolResult(text=exc.message, is_error=True, error_type="invalid_params")
            if exc.code == REQUEST_TIMEOUT:
                fault = f"no answer within {self.tool_timeout_s:g}s"
                await self._restart_after(f"{what}: {fault}", conn)
                raise MCPServerError(f"{what}: {fault}; server restarted") from exc
            if exc.code == CONNECTION_CLOSED:
                fault = "the server closed the connection"
                await self._restart_after(f"{what}: {fault}", conn)
                killed = await self._killed_by_the_call(name, fault)
                if killed is not None:
                    return killed
                raise _ServerLost(f"{what}: {fault}; server restarted", delivered=True) from exc
            raise MCPServerError(f"{what}: JSON-RPC error {exc.code}: {exc.message}") from exc
        except TimeoutError as exc:
            fault = f"no answer within {self.tool_timeout_s + _CALL_GRACE_S:g}s"
            await self._restart_after(f"{what}: {fault}", conn)
            raise MCPServerError(f"{what}: {fault}; server restarted") from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            await self._restart_after(f"{what}: transport broke ({exc!r})", conn)
            killed = await self._killed_by_the_call(name, f"the transport broke ({exc!r})")
            if killed is not None:
                return killed
            raise _ServerLost(f"{what}: transport broke; server restarted", delivered=True) from exc
        except (RuntimeError, ValidationError) as exc:
            # The SDK rejects a result that breaks the tool's output schema (RuntimeError) or
            # the protocol (ValidationError): the server's fault, not the policy's.
            raise MCPServerError(f"{what}: invalid result: {exc}") from exc
        if not isinstance(raw, CallToolResult):
            raise MCPServerError(f"{what}: unexpected result type {type(raw).__name__}")
        return tool_result(raw, read_errors=self._server.read_errors)

    def _runs_code(self, name: str) -> bool:
        """Whether tool ``name`` runs a program the model wrote (the code cluster's write
        tools, or a tool named for running code)."""
        if not self._is_write(name):
            return False
        lowered = name.lower()
        named = any(w in lowered for w in ("python", "run_code", "execute", "exec_code"))
        return named or self.cluster.domain == Domain.CODE

    async def _killed_by_the_call(self, name: str, fault: str) -> ToolResult | None:
        """When the server died during a call that ran the model's program while the
        sandbox itself is alive, what that program did is what killed it: a ``model``
        failure with the evidence, not an infra fault excused from the pass rate (None:
        not such a call, or the sandbox is gone too, which is infra)."""
        if not self._runs_code(name):
            return None
        try:
            alive = await asyncio.to_thread(self.sandbox.exec, ["true"], timeout=10)
        except SandboxError:
            return None
        if alive.exit_code != 0:
            return None
        log.warning("%s: the server died during %s (%s)", self.cluster.cluster_id, name, fault)
        return ToolResult(
            text=(
                f"the tool server died while {name} ran the program ({fault}; the sandbox "
                "is alive), so the program killed or broke it; the server was restarted"
            ),
            is_error=True,
            error_type=SERVER_KILLED,
        )

    async def _restart_after(self, reason: str, failed: ServerConnection) -> None:
        if self._conn is not failed:  # someone restarted it already
            return
        try:
            await self.restart(reason)
        except MCPServerError as exc:
            log.error("%s: restart failed: %s", self.cluster.cluster_id, exc)

    # ------------------------------------------------------------------ state

    def _trace_state(self) -> EnvState:
        trace = [{"tool": n, "arguments": a} for n, a in self._writes]
        return EnvState(
            state_hash=stable_hash(trace, length=64), checks=dict(self._checks), readable=False
        )

    async def state(self) -> EnvState:
        """The canonical state now (``readable=False`` with the write-trace hash when the
        server's state cannot be read), with the results of checks run so far.

        An outside cluster with probes: each probe call's result is one table, so the same end
        state gives the same hash whichever calls led there.
        """
        if not self.state_readable:
            return self._trace_state()
        return await self._server.state()

    async def snapshot(self) -> SnapshotHandle:
        """Save the state: the sandbox's work directory, or a point in the write trace."""
        async with self._lock:
            return await self._server.snapshot()

    async def _snapshot_sandbox(self) -> SnapshotHandle:
        """A snapshot of the sandbox's work dir, freed when a borrowed sandbox goes back."""
        handle = await self._in_sandbox(self.sandbox.snapshot)
        self._taken.append(handle)
        return handle

    async def restore(self, handle: SnapshotHandle) -> None:
        """Go back to a snapshot taken by this environment."""
        async with self._lock:
            await self._server.restore(handle)

    async def run_check(self, check_id: str, source: str) -> bool:
        """Run python ``source`` in the work directory; True when it exits 0 in time.

        The result is kept and reported in ``state().checks[check_id]``.
        """
        result = await self._in_sandbox(
            self.sandbox.exec,
            [self.sandbox.python, "-"],
            stdin=source,
            timeout=self.check_timeout_s,
            cwd=self.sandbox.workdir,
        )
        passed = result.exit_code == 0 and not result.timed_out
        if not passed:
            log.debug("check %s failed: %s", check_id, result.stderr.strip()[-500:])
        self._checks[check_id] = passed
        return passed
