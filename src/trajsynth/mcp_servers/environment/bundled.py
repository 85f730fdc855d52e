"""A bundled cluster's side of an environment: its server is a package of ours run with
``python -m`` inside the sandbox, and its state lives in the sandbox's work directory.

The server seeds a missing state as it starts and serves its canonical state as the MCP
resource ``STATE_URI`` over the session the environment already holds (a few ms); without a
live session the state is dumped by ``python -m trajsynth.mcp_servers.servers._state <name>``
in the sandbox (~45-83 ms), which needs no server. The servers open their database per call,
so a restored work directory is seen by the next call without a restart, and a snapshot is the
sandbox's.
"""

from __future__ import annotations

import json
import logging
import shlex
from typing import TYPE_CHECKING

import anyio
from mcp.shared.exceptions import MCPError

from trajsynth.mcp_servers.client import TransportFactory, stdio_transport
from trajsynth.mcp_servers.servers._backend import STATE_URI
from trajsynth.schemas import EnvState, InputError, MCPServerError, SnapshotHandle, ToolCluster

if TYPE_CHECKING:
    from trajsynth.mcp_servers.environment.facade import Environment

__all__ = ["STATE_MODULE", "BundledServer", "bundled_module", "dumped_state"]

log = logging.getLogger(__name__)

STATE_MODULE = "trajsynth.mcp_servers.servers._state"


def bundled_module(cluster: ToolCluster) -> str:
    """The package a bundled cluster runs as (``ServerSpec.module``, from its folder's
    ``BundledCluster``); there is no default derived from the cluster's name."""
    module = cluster.server.module
    if not module:
        raise InputError(f"cluster {cluster.cluster_id}: a bundled server needs a module")
    return module


def dumped_state(text: str) -> EnvState:
    """The EnvState of a bundled server's state dump (``servers._state`` or ``STATE_URI``)."""
    data = json.loads(text)
    return EnvState.model_validate(
        {"state_hash": data["state_hash"], "tables": data.get("tables", {})}
    )


class BundledServer:
    """What differs for a bundled cluster: how its server starts, where its state is read,
    how it is saved and restored. ``env`` is the environment it is one side of."""

    read_errors = False  # a bundled server raises its errors: its results come flagged

    def __init__(self, env: Environment) -> None:
        self.env = env

    @property
    def state_readable(self) -> bool:
        return self.env.cluster.state_readable

    @property
    def module(self) -> str:
        return bundled_module(self.env.cluster)

    @property
    def name(self) -> str:
        """The cluster's folder: the state dump (``_state``) finds the state by it."""
        return self.module.rsplit(".", 1)[-1]

    def server_env(self) -> dict[str, str]:
        return dict(self.env.cluster.server.env)

    async def transport(self) -> tuple[TransportFactory, str]:
        env = self.env
        argv = env._sandbox_stdio([env.sandbox.python, "-m", self.module], env._server_env())
        env.server_location = "sandbox"
        return stdio_transport(argv), f"{env.cluster.cluster_id} ({self.module})"

    async def start(self) -> EnvState:
        """Start the server and read the state it seeded: one interpreter start per opening,
        not two (a ``--init`` dump first cost 0.6-0.8 s of a 1.25 s open)."""
        if not self.state_readable:
            return await self.env._open_in_snapshot()
        await self.env._connect()
        return await self.served_state() or await self.dump_state(init=True)

    async def state(self) -> EnvState:
        return await self.served_state() or await self.dump_state()

    async def served_state(self) -> EnvState | None:
        """The state the server serves at ``STATE_URI`` over the live session; None when
        there is no live session or the answer is not a state, and then the caller dumps
        it with a process in the sandbox."""
        env = self.env
        async with env._lock:
            conn = env._conn
            if conn is None or not conn.alive:
                return None
            try:
                with anyio.fail_after(env.tool_timeout_s):
                    result = await conn.session.read_resource(STATE_URI)
                state = dumped_state(result.contents[0].text)  # type: ignore[union-attr]
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
                log.debug("%s: served state unreadable (%r); dumping", env.cluster.cluster_id, exc)
                return None
        return state.model_copy(update={"checks": dict(env._checks)})

    async def dump_state(self, *, init: bool = False) -> EnvState:
        """The state dumped by a process in the sandbox (``--init``: seeded first if missing)."""
        env = self.env
        argv = [env.sandbox.python, "-m", STATE_MODULE, self.name]
        if init:
            argv.append("--init")
        result = await env._in_sandbox(
            env.sandbox.exec, argv, env=env._server_env(), timeout=env.start_timeout_s
        )
        if result.exit_code != 0 or result.timed_out:
            raise MCPServerError(
                f"{env.cluster.cluster_id}: `{shlex.join(argv)}` failed "
                f"(exit {result.exit_code}{', timed out' if result.timed_out else ''}): "
                f"{result.stderr.strip()[-1500:]}"
            )
        try:
            state = dumped_state(result.stdout)
        except (ValueError, KeyError, TypeError) as exc:
            raise MCPServerError(
                f"{env.cluster.cluster_id}: state dump is not an EnvState: {result.stdout[:300]!r}"
            ) from exc
        return state.model_copy(update={"checks": dict(env._checks)})

    async def snapshot(self) -> SnapshotHandle:
        return await self.env._snapshot_sandbox()

    async def restore(self, handle: SnapshotHandle) -> None:
        if handle.method == "replay":  # only an outside environment takes replay points
            raise MCPServerError(f"unknown snapshot {handle.snapshot_id} for this environment")
        await self.env._in_sandbox(self.env.sandbox.restore, handle)

    async def after_restart(self) -> None:
        """Nothing: the state survived in the work directory."""
