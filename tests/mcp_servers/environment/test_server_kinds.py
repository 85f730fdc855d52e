"""``Environment`` is one door; what differs by server kind is its side object
(``bundled.BundledServer`` or ``outside.OutsideServer``). In-process: no sandbox, no server."""

from __future__ import annotations

from typing import Any

import pytest

from trajsynth.mcp_servers.environment import Environment
from trajsynth.mcp_servers.environment.bundled import BundledServer, dumped_state
from trajsynth.mcp_servers.environment.outside import OutsideServer
from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.schemas import (
    InputError,
    MCPServerError,
    ProbeCall,
    ResetMode,
    ServerKind,
    ServerSpec,
    SnapshotHandle,
    ToolCluster,
)

NO_SANDBOX: Any = object()  # nothing here reaches a sandbox


def _outside(**spec: Any) -> ToolCluster:
    shop = get_cluster("shop")
    server = ServerSpec(kind=ServerKind.STDIO, command=["my-server"], **spec)
    return shop.model_copy(update={"server": server, "source": "outside", "probes": []})


def test_the_side_is_chosen_by_the_server_kind() -> None:
    bundled = Environment(get_cluster("shop"), NO_SANDBOX)
    assert isinstance(bundled._server, BundledServer)
    assert (bundled.bundled, bundled.bundled_module, bundled.server_name) == (
        True,
        "trajsynth.mcp_servers.servers.shop",
        "shop",
    )
    outside = Environment(_outside(), NO_SANDBOX)
    assert isinstance(outside._server, OutsideServer) and not outside.bundled
    with pytest.raises(InputError, match="a bundled server needs a module"):
        _ = outside.bundled_module


def test_an_outside_state_is_readable_only_through_probes() -> None:
    assert Environment(get_cluster("shop"), NO_SANDBOX).state_readable
    assert not Environment(_outside(), NO_SANDBOX).state_readable
    probed = _outside().model_copy(update={"probes": [ProbeCall(tool="get_user")]})
    assert Environment(probed, NO_SANDBOX).state_readable


def test_the_server_env_is_the_seed_the_call_limit_and_the_kinds_own() -> None:
    env = Environment(get_cluster("shop"), NO_SANDBOX, seed=3, tool_timeout_s=7.5)
    assert env._server_env() == {"TRAJSYNTH_SEED": "3", "TRAJSYNTH_TOOL_TIMEOUT_S": "7.5"}


async def test_a_replay_point_is_an_outside_servers_only() -> None:
    handle = SnapshotHandle(snapshot_id="replay-x-0", sandbox_id="s", method="replay")
    with pytest.raises(MCPServerError, match="unknown snapshot replay-x-0"):
        await Environment(get_cluster("shop"), NO_SANDBOX).restore(handle)
    outside = Environment(_outside(reset=ResetMode.REPLAY), NO_SANDBOX)
    with pytest.raises(MCPServerError, match="unknown snapshot replay-x-0"):
        await outside.restore(handle)


def test_a_bundled_dump_reads_as_an_env_state() -> None:
    state = dumped_state('{"state_hash": "abc", "tables": {"t": [{"k": 1}]}}')
    assert (state.state_hash, state.tables) == ("abc", {"t": [{"k": 1}]})
