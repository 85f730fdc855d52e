"""One rollout environment: an MCP server process inside a sandbox, and its state.

docs/design.md §3 ("the tool executor"): one server process per environment, spoken to over
stdio with the SDK's ``ClientSession`` (through ``Sandbox.stdio_command``, e.g. ``docker exec
-i``). Every call has a timeout. A server that hangs or dies is restarted and the call raises
``MCPServerError`` (an ``infra`` failure, never blamed on the policy); a tool's own error comes
back as ``ToolResult(is_error=True)`` (a ``tool`` failure the policy sees; docs/style.md §3).

State:
- bundled clusters keep their state in the sandbox's work directory (SQLite, files), so
  ``state()`` runs ``python -m trajsynth.mcp_servers.servers._state <name>`` there, and
  snapshot/restore are the sandbox's. The servers open their database per call, so a restored
  work directory is seen by the next call without a restart.
- outside clusters run exactly the command the user gave (``mcp_servers.launch``),
  in a sandbox with the server's own files mounted read-only, with the ``--copy`` files in its
  work dir. Their state is read through the cluster's read-only probe calls (``probes``): the
  same calls after the gold run and after a rollout give the same tables when the end states
  agree. A probe may read a static MCP resource instead of a tool (``ProbeCall.resource``: a
  memo no tool reads); its text contents are read the same way as a tool's text. Without
  probes, ``state()`` is ``readable=False`` with the hash of the successful writes. Reset
  (``ServerSpec.reset``): ``snapshot`` restores the work dir's files and restarts the server;
  ``fresh`` and ``replay`` restart it from its initial work dir and replay writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shlex
import uuid
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    REQUEST_TIMEOUT,
    CallToolResult,
    PaginatedRequestParams,
)
from pydantic import ValidationError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from trajsynth.mcp_servers.client import (
    ServerConnection,
    TransportFactory,
    http_transport,
    stdio_transport,
)
from trajsynth.mcp_servers.launch import (
    copy_files,
    open_mounted_sandbox,
    server_env,
    server_mounts,
)
from trajsynth.mcp_servers.servers._backend import STATE_URI
from trajsynth.mcp_servers.tool_calls import SERVER_KILLED
from trajsynth.schemas import (
    Domain,
    EnvState,
    InputError,
    JsonValue,
    MCPServerError,
    MCPServerStartError,
    ProbeCall,
    Record,
    ResetMode,
    SandboxError,
    SandboxGone,
    SandboxKind,
    SandboxLimits,
    SandboxStartError,
    ServerKind,
    SnapshotHandle,
    ToolAccess,
    ToolCluster,
    ToolSpec,
    canonical_json,
    stable_hash,
)
from trajsynth.schemas.clock import mask_clock_readings
from trajsynth.schemas.results import result_error

if TYPE_CHECKING:
    from trajsynth.sandboxes import Sandbox
    from trajsynth.sandboxes.pool import SandboxPool

__all__ = [
    "STATE_MODULE",
    "Environment",
    "OpenEnvironment",
    "ToolResult",
    "open_environment",
    "read_resource_result",
    "static_resources",
    "tool_result",
]

log = logging.getLogger(__name__)

STATE_MODULE = "trajsynth.mcp_servers.servers._state"
SEED_ENV = "TRAJSYNTH_SEED"
# Extra wall-clock time over the request timeout before the whole call is abandoned (a write
# to a server that stopped reading its stdin can block before the request clock starts).
_CALL_GRACE_S = 5.0
_PROBE_CHARS = 4000  # a probe result longer than this is hashed, not kept as text
_MAX_RESOURCES = 16  # static resources listed as probe candidates
_MAX_RESOURCE_PAGES = 4
_T = TypeVar("_T")


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


def _local() -> type:
    from trajsynth.sandboxes import LocalSandbox

    return LocalSandbox


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


def _probe_value(result: ToolResult, workdir: str = "") -> JsonValue:
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
        self._replay_points: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self._checks: dict[str, bool] = {}
        self._lock = asyncio.Lock()
        self._pidfile = f"/tmp/trajsynth-mcp-{uuid.uuid4().hex[:12]}.pid"
        # where the server process runs: "sandbox", "host" (an outside command the sandbox
        # cannot run, started through a LocalSandbox) or "remote" (streamable HTTP)
        self.server_location: str | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def tools(self) -> list[ToolSpec]:
        return self.cluster.tools

    @property
    def bundled(self) -> bool:
        return self.cluster.server.kind == ServerKind.BUNDLED

    @property
    def state_readable(self) -> bool:
        if self.bundled:
            return self.cluster.state_readable
        return bool(self.cluster.probes) and self.cluster.state_readable

    @property
    def _files_reset(self) -> bool:
        """Outside state lives in the work dir's files: restore them and restart the server."""
        return not self.bundled and self.cluster.server.reset is ResetMode.SNAPSHOT

    @property
    def bundled_module(self) -> str:
        """The package a bundled cluster runs as (``ServerSpec.module``, from its folder's
        ``BundledCluster``); there is no default derived from the cluster's name."""
        module = self.cluster.server.module
        if not module:
            raise InputError(f"cluster {self.cluster.cluster_id}: a bundled server needs a module")
        return module

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
        if self.bundled and self.state_readable:
            # the server seeds a missing state as it starts and then serves it: one interpreter
            # start per opening, not two (a `--init` dump first cost 0.6-0.8 s of a 1.25 s open)
            await self._connect()
            self._initial_state = await self._served_state() or await self._dump_state(init=True)
        else:
            if self.cluster.server.copies:
                await asyncio.to_thread(copy_files, self.sandbox, self.cluster.server.copies)
            self._initial_snapshot = await self._in_sandbox(self.sandbox.snapshot)
            await self._connect()
            self._started = True
            self._initial_state = await self.state()
        self._started = True
        return self._initial_state

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
        return await self._probe_state(probes)

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
        if self.bundled:
            return {SEED_ENV: str(self.seed), **timeout, **self.cluster.server.env}
        return {
            SEED_ENV: str(self.seed),
            **timeout,
            **server_env(self.cluster.server, self.environ),
        }

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

    async def _transport(self) -> tuple[TransportFactory, str]:
        spec = self.cluster.server
        env = self._server_env()
        if spec.kind == ServerKind.BUNDLED:
            module = self.bundled_module
            argv = self._sandbox_stdio([self.sandbox.python, "-m", module], env)
            self.server_location = "sandbox"
            return stdio_transport(argv), f"{self.cluster.cluster_id} ({module})"
        if spec.kind == ServerKind.HTTP:
            if not spec.url:
                raise InputError(f"cluster {self.cluster.cluster_id}: HTTP server without a url")
            self.server_location = "remote"
            return http_transport(spec.url), f"{self.cluster.cluster_id} ({spec.url})"
        command = list(spec.command or [])
        if not command:
            raise InputError(f"cluster {self.cluster.cluster_id}: stdio server without a command")
        label = f"{self.cluster.cluster_id} (`{shlex.join(command)}`)"
        if spec.on_host:
            # the user asked for it (--on-host-state-not-isolated): the exact command, on the
            # host, in the sandbox's work dir when it has one on this machine
            self.server_location = "host"
            log.warning("%s runs on the host: its state is not isolated", label)
            cwd = self.sandbox.workdir if isinstance(self.sandbox, _local()) else None
            return stdio_transport(command, env, cwd=cwd), label + " on the host"
        await self._check_runnable(command, label)
        self.server_location = "sandbox"
        return stdio_transport(self._sandbox_stdio(command, env)), label

    async def _check_runnable(self, command: list[str], label: str) -> None:
        """MCPServerError (the same at ``clusters add`` and in a run) when the sandbox cannot
        find the command's executable: the command is run as given, never rewritten."""
        probe = ["sh", "-c", 'command -v "$1" >/dev/null', "sh", command[0]]
        try:
            result = await asyncio.to_thread(self.sandbox.exec, probe, timeout=30.0)
        except SandboxError as exc:
            raise MCPServerStartError(f"{label}: the sandbox failed: {exc}") from exc
        if result.exit_code != 0:
            mounts = getattr(self.sandbox, "mounts", [])
            raise MCPServerStartError(
                f"{label}: `{command[0]}` cannot be found inside the "
                f"{type(self.sandbox).__name__} (mounted read-only: "
                f"{', '.join(mounts) or 'nothing'}); name the folder that holds it with "
                "--mount, or run the server on the host with --on-host-state-not-isolated"
            )

    async def _connect(self) -> None:
        transport, label = await self._transport()
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
        http = self.cluster.server.kind == ServerKind.HTTP
        if not self.bundled and not self._files_reset and not http:
            await self._replay(self._writes)

    async def _start_over(self) -> None:
        """Stop the server and start it again on the sandbox as the episode began it: the
        initial work dir and, in a container, an empty ``/tmp`` with no process left
        (``Sandbox.reset``; mounts stay). For a ``replay`` restore; a crash ``restart``
        keeps the work dir. A server may keep its state in ``/tmp``
        (``MEMORY_FILE_PATH=/tmp/memory.jsonl``): restoring only the work dir gave every
        branch of a tree the entities its siblings had made. A LocalSandbox gives each
        command its own ``/tmp`` already."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
        await self._reap()
        if self._initial_snapshot is not None:
            back = self.sandbox.reset if self._in_container() else self.sandbox.restore
            await self._in_sandbox(back, self._initial_snapshot)
        await self._connect()

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
        return tool_result(raw, read_errors=not self.bundled)

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

    async def _replay(self, writes: Sequence[tuple[str, dict[str, Any]]]) -> None:
        for name, arguments in writes:
            result = await self._call(name, arguments)
            if result.is_error:
                raise MCPServerError(
                    f"{self.cluster.cluster_id}: replaying {name} failed: {result.text[:200]}"
                )

    # ------------------------------------------------------------------ state

    def _trace_state(self) -> EnvState:
        trace = [{"tool": n, "arguments": a} for n, a in self._writes]
        return EnvState(
            state_hash=stable_hash(trace, length=64), checks=dict(self._checks), readable=False
        )

    async def _dump_state(self, *, init: bool = False) -> EnvState:
        argv = [self.sandbox.python, "-m", STATE_MODULE, self.server_name]
        if init:
            argv.append("--init")
        result = await self._in_sandbox(
            self.sandbox.exec, argv, env=self._server_env(), timeout=self.start_timeout_s
        )
        if result.exit_code != 0 or result.timed_out:
            raise MCPServerError(
                f"{self.cluster.cluster_id}: `{shlex.join(argv)}` failed "
                f"(exit {result.exit_code}{', timed out' if result.timed_out else ''}): "
                f"{result.stderr.strip()[-1500:]}"
            )
        try:
            state = _dumped_state(result.stdout)
        except (ValueError, KeyError, TypeError) as exc:
            raise MCPServerError(
                f"{self.cluster.cluster_id}: state dump is not an EnvState: {result.stdout[:300]!r}"
            ) from exc
        return state.model_copy(update={"checks": dict(self._checks)})

    async def state(self) -> EnvState:
        """The canonical state now (``readable=False`` with the write-trace hash when the
        server's state cannot be read), with the results of checks run so far.

        An outside cluster with probes: each probe call's result is one table, so the same end
        state gives the same hash whichever calls led there.
        """
        if not self.state_readable:
            return self._trace_state()
        if not self.bundled:
            return await self._probe_state()
        return await self._served_state() or await self._dump_state()

    async def _served_state(self) -> EnvState | None:
        """The state the bundled server serves at ``STATE_URI`` over the live session (a few
        ms); None when there is no live session or the answer is not a state, and then the
        caller dumps it with a process in the sandbox (~45-83 ms), which needs no server."""
        async with self._lock:
            conn = self._conn
            if conn is None or not conn.alive:
                return None
            try:
                with anyio.fail_after(self.tool_timeout_s):
                    result = await conn.session.read_resource(STATE_URI)
                state = _dumped_state(result.contents[0].text)  # type: ignore[union-attr]
            except (
                MCPError,
                TimeoutError,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
                OSError,
                ValueError,
                KeyError,
                TypeError,
                IndexError,
                AttributeError,
            ) as exc:
                log.debug("%s: served state unreadable (%r); dumping", self.cluster.cluster_id, exc)
                return None
        return state.model_copy(update={"checks": dict(self._checks)})

    async def _probe_state(self, probes: Sequence[ProbeCall] | None = None) -> EnvState:
        tables: dict[str, list[dict[str, JsonValue]]] = {}
        async with self._lock:
            if self._conn is None or not self._conn.alive:
                await self.restart("the server was not running before reading the state")
            for i, probe in enumerate(probes if probes is not None else self.cluster.probes):
                if probe.resource is not None:
                    result = await self._read_resource(probe.resource)
                else:
                    result = await self._call(probe.tool, dict(probe.arguments))
                row: dict[str, JsonValue] = {
                    "arguments": canonical_json(probe.arguments),
                    "is_error": result.is_error,
                    "result": _probe_value(result, self.sandbox.workdir),
                }
                tables[f"probe{i}:{probe.label}"] = [row]
        return EnvState(
            state_hash=stable_hash(tables, length=64),
            tables=tables,
            checks=dict(self._checks),
            readable=True,
        )

    async def snapshot(self) -> SnapshotHandle:
        """Save the state: the sandbox's work directory, or a point in the write trace."""
        async with self._lock:
            if self.bundled or self._files_reset:
                handle = await self._in_sandbox(self.sandbox.snapshot)
                self._taken.append(handle)
                return handle
            writes = list(self._writes)
            snapshot_id = f"replay-{stable_hash(writes, length=16)}-{len(writes)}"
            self._replay_points[snapshot_id] = writes
            return SnapshotHandle(
                snapshot_id=snapshot_id, sandbox_id=self.sandbox.sandbox_id, method="replay"
            )

    async def restore(self, handle: SnapshotHandle) -> None:
        """Go back to a snapshot taken by this environment."""
        async with self._lock:
            if handle.method != "replay":
                await self._in_sandbox(self.sandbox.restore, handle)
                if self._files_reset:  # the server may hold the old files open: restart it
                    conn, self._conn = self._conn, None
                    if conn is not None:
                        await conn.close()
                    await self._reap()
                    await self._connect()
                return
            if handle.snapshot_id not in self._replay_points:
                raise MCPServerError(f"unknown snapshot {handle.snapshot_id} for this environment")
            writes = self._replay_points[handle.snapshot_id]
            if self.cluster.server.kind == ServerKind.HTTP:
                log.warning(
                    "%s: an HTTP server cannot be reset; only the trace goes back",
                    self.cluster.cluster_id,
                )
                self._writes = list(writes)
                return
            self._writes = []
            await self._start_over()
            await self._replay(writes)
            self._writes = list(writes)

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


class OpenEnvironment(Coroutine[Any, Any, Environment]):
    """What ``open_environment`` returns: a coroutine (await it, or hand it to
    ``asyncio.create_task``) for a started ``Environment``, and an async context manager
    (``async with open_environment(...) as env``) that closes the environment at the end."""

    def __init__(self, opener: Callable[[], Coroutine[Any, Any, Environment]]) -> None:
        self._opener = opener
        self._coro: Coroutine[Any, Any, Environment] | None = None
        self._env: Environment | None = None

    def _inner(self) -> Coroutine[Any, Any, Environment]:
        if self._coro is None:
            self._coro = self._opener()
        return self._coro

    def send(self, value: Any) -> Any:
        return self._inner().send(value)

    def throw(self, *args: Any) -> Any:
        return self._inner().throw(*args)

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()

    def __await__(self) -> Generator[Any, None, Environment]:
        return self._inner().__await__()

    async def __aenter__(self) -> Environment:
        self._env = await self._opener()
        return self._env

    async def __aexit__(self, *exc: object) -> None:
        env, self._env = self._env, None
        if env is not None:
            await env.close()


def _dumped_state(text: str) -> EnvState:
    """The EnvState of a bundled server's state dump (``servers._state`` or ``STATE_URI``)."""
    data = json.loads(text)
    return EnvState.model_validate(
        {"state_hash": data["state_hash"], "tables": data.get("tables", {})}
    )


def open_environment(
    cluster: ToolCluster,
    *,
    sandbox_kind: SandboxKind = SandboxKind.AUTO,
    limits: SandboxLimits | None = None,
    seed: int = 0,
    tool_timeout_s: float = 20.0,
    image: str | None = None,
    start_timeout_s: float = 60.0,
    pool: SandboxPool | None = None,
    environ: Mapping[str, str] | None = None,
) -> OpenEnvironment:
    """A started environment for ``cluster`` in a new sandbox that it owns, or in one
    borrowed from ``pool`` (given back, reset, when the environment closes).

    ``env = await open_environment(...)`` (then ``await env.close()``), or
    ``async with open_environment(...) as env:``.
    """

    async def opener() -> Environment:
        from trajsynth.sandboxes import open_sandbox

        spec = cluster.server
        if spec.kind is ServerKind.STDIO and not spec.on_host:
            # an outside server needs its own files mounted: a sandbox of its own, not pooled
            pool_ = None
            mounts = server_mounts(spec.command or [], spec.mounts)
            sandbox = await asyncio.to_thread(
                open_mounted_sandbox,
                sandbox_kind,
                limits or SandboxLimits(),
                image,
                mounts,
                spec.command or [],
            )
        elif pool is not None:
            pool_ = pool
            sandbox = await asyncio.to_thread(pool.acquire)
        else:
            pool_ = None
            sandbox = await asyncio.to_thread(
                open_sandbox, sandbox_kind, limits or SandboxLimits(), image
            )
        env = Environment(
            cluster,
            sandbox,
            seed=seed,
            tool_timeout_s=tool_timeout_s,
            start_timeout_s=start_timeout_s,
            pool=pool_,
            environ=environ,
        )
        try:
            await env.start()
        except BaseException:
            await env.close()
            raise
        return env

    return OpenEnvironment(opener)
