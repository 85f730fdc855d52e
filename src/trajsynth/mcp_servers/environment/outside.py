"""An outside cluster's side of an environment: a server someone else wrote, run exactly as
the user gave it (``mcp_servers.launch``), whose state trajsynth cannot open.

Where it runs: a stdio command inside a sandbox with the server's own files mounted read-only
and the ``--copy`` files in its work dir; on the host when the user asked for it
(``--on-host-state-not-isolated``); or at an HTTP URL. Its state is read through the cluster's
read-only probe calls (``probes``): the same calls after the gold run and after a rollout give
the same tables when the end states agree. A probe may read a static MCP resource instead of
a tool (``ProbeCall.resource``: a memo no tool reads); its text contents are read the same way
as a tool's text. Reset (``ServerSpec.reset``): ``snapshot`` restores the work dir's files and
restarts the server; ``fresh`` and ``replay`` restart it from its initial work dir and replay
the successful writes.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trajsynth.mcp_servers.client import TransportFactory, http_transport, stdio_transport
from trajsynth.mcp_servers.environment.results import probe_value
from trajsynth.mcp_servers.launch import server_env
from trajsynth.schemas import (
    EnvState,
    InputError,
    JsonValue,
    MCPServerError,
    MCPServerStartError,
    ProbeCall,
    ResetMode,
    SandboxError,
    ServerKind,
    SnapshotHandle,
    canonical_json,
    stable_hash,
)

if TYPE_CHECKING:
    from trajsynth.mcp_servers.environment.facade import Environment

__all__ = ["OutsideServer", "probe_state"]

log = logging.getLogger(__name__)


def _local() -> type:
    from trajsynth.sandboxes import LocalSandbox

    return LocalSandbox


async def probe_state(env: Environment, probes: Sequence[ProbeCall] | None = None) -> EnvState:
    """The results of ``probes`` (default: the cluster's) now, one table per probe, so the
    same end state gives the same hash whichever calls led there."""
    tables: dict[str, list[dict[str, JsonValue]]] = {}
    async with env._lock:
        if env._conn is None or not env._conn.alive:
            await env.restart("the server was not running before reading the state")
        for i, probe in enumerate(probes if probes is not None else env.cluster.probes):
            if probe.resource is not None:
                result = await env._read_resource(probe.resource)
            else:
                result = await env._call(probe.tool, dict(probe.arguments))
            row: dict[str, JsonValue] = {
                "arguments": canonical_json(probe.arguments),
                "is_error": result.is_error,
                "result": probe_value(result, env.sandbox.workdir),
            }
            tables[f"probe{i}:{probe.label}"] = [row]
    return EnvState(
        state_hash=stable_hash(tables, length=64),
        tables=tables,
        checks=dict(env._checks),
        readable=True,
    )


class OutsideServer:
    """What differs for an outside cluster: where and how its server starts, how its state is
    read (probes), saved (a snapshot of the work dir, or a point in the write trace) and put
    back. ``env`` is the environment it is one side of."""

    read_errors = True  # an outside server may say "error" only in its result's text

    def __init__(self, env: Environment) -> None:
        self.env = env
        self._replay_points: dict[str, list[tuple[str, dict[str, Any]]]] = {}

    @property
    def state_readable(self) -> bool:
        return bool(self.env.cluster.probes) and self.env.cluster.state_readable

    @property
    def files_reset(self) -> bool:
        """The state lives in the work dir's files: restore them and restart the server."""
        return self.env.cluster.server.reset is ResetMode.SNAPSHOT

    def server_env(self) -> dict[str, str]:
        return server_env(self.env.cluster.server, self.env.environ)

    async def transport(self) -> tuple[TransportFactory, str]:
        env = self.env
        spec = env.cluster.server
        server_vars = env._server_env()
        if spec.kind == ServerKind.HTTP:
            if not spec.url:
                raise InputError(f"cluster {env.cluster.cluster_id}: HTTP server without a url")
            env.server_location = "remote"
            return http_transport(spec.url), f"{env.cluster.cluster_id} ({spec.url})"
        command = list(spec.command or [])
        if not command:
            raise InputError(f"cluster {env.cluster.cluster_id}: stdio server without a command")
        label = f"{env.cluster.cluster_id} (`{shlex.join(command)}`)"
        if spec.on_host:
            # the user asked for it (--on-host-state-not-isolated): the exact command, on the
            # host, in the sandbox's work dir when it has one on this machine
            env.server_location = "host"
            log.warning("%s runs on the host: its state is not isolated", label)
            cwd = env.sandbox.workdir if isinstance(env.sandbox, _local()) else None
            return stdio_transport(command, server_vars, cwd=cwd), label + " on the host"
        await self._check_runnable(command, label)
        env.server_location = "sandbox"
        return stdio_transport(env._sandbox_stdio(command, server_vars)), label

    async def _check_runnable(self, command: list[str], label: str) -> None:
        """MCPServerError (the same at ``clusters add`` and in a run) when the sandbox cannot
        find the command's executable: the command is run as given, never rewritten."""
        sandbox = self.env.sandbox
        probe = ["sh", "-c", 'command -v "$1" >/dev/null', "sh", command[0]]
        try:
            result = await asyncio.to_thread(sandbox.exec, probe, timeout=30.0)
        except SandboxError as exc:
            raise MCPServerStartError(f"{label}: the sandbox failed: {exc}") from exc
        if result.exit_code != 0:
            mounts = getattr(sandbox, "mounts", [])
            raise MCPServerStartError(
                f"{label}: `{command[0]}` cannot be found inside the "
                f"{type(sandbox).__name__} (mounted read-only: "
                f"{', '.join(mounts) or 'nothing'}); name the folder that holds it with "
                "--mount, or run the server on the host with --on-host-state-not-isolated"
            )

    async def start(self) -> EnvState:
        return await self.env._open_in_snapshot()

    async def state(self) -> EnvState:
        return await probe_state(self.env)

    async def snapshot(self) -> SnapshotHandle:
        """The work dir's files (``reset: snapshot``), else a point in the write trace."""
        env = self.env
        if self.files_reset:
            return await env._snapshot_sandbox()
        writes = list(env._writes)
        snapshot_id = f"replay-{stable_hash(writes, length=16)}-{len(writes)}"
        self._replay_points[snapshot_id] = writes
        return SnapshotHandle(
            snapshot_id=snapshot_id, sandbox_id=env.sandbox.sandbox_id, method="replay"
        )

    async def restore(self, handle: SnapshotHandle) -> None:
        env = self.env
        if handle.method != "replay":
            await env._in_sandbox(env.sandbox.restore, handle)
            if self.files_reset:  # the server may hold the old files open: restart it
                conn, env._conn = env._conn, None
                if conn is not None:
                    await conn.close()
                await env._reap()
                await env._connect()
            return
        if handle.snapshot_id not in self._replay_points:
            raise MCPServerError(f"unknown snapshot {handle.snapshot_id} for this environment")
        writes = self._replay_points[handle.snapshot_id]
        if env.cluster.server.kind == ServerKind.HTTP:
            log.warning(
                "%s: an HTTP server cannot be reset; only the trace goes back",
                env.cluster.cluster_id,
            )
            env._writes = list(writes)
            return
        env._writes = []
        await self._start_over()
        await self._replay(writes)
        env._writes = list(writes)

    async def after_restart(self) -> None:
        """Replay the successful writes into the new server, unless its state survived (its
        files were kept, or it is a remote server that was never stopped)."""
        if not self.files_reset and self.env.cluster.server.kind != ServerKind.HTTP:
            await self._replay(self.env._writes)

    async def _replay(self, writes: Sequence[tuple[str, dict[str, Any]]]) -> None:
        env = self.env
        for name, arguments in writes:
            result = await env._call(name, arguments)
            if result.is_error:
                raise MCPServerError(
                    f"{env.cluster.cluster_id}: replaying {name} failed: {result.text[:200]}"
                )

    async def _start_over(self) -> None:
        """Stop the server and start it again on the sandbox as the episode began it: the
        initial work dir and, in a container, an empty ``/tmp`` with no process left
        (``Sandbox.reset``; mounts stay). For a ``replay`` restore; a crash ``restart``
        keeps the work dir. A server may keep its state in ``/tmp``
        (``MEMORY_FILE_PATH=/tmp/memory.jsonl``): restoring only the work dir gave every
        branch of a tree the entities its siblings had made. A LocalSandbox gives each
        command its own ``/tmp`` already."""
        env = self.env
        conn, env._conn = env._conn, None
        if conn is not None:
            await conn.close()
        await env._reap()
        if env._initial_snapshot is not None:
            back = env.sandbox.reset if env._in_container() else env.sandbox.restore
            await env._in_sandbox(back, env._initial_snapshot)
        await env._connect()
