"""Environments for real: MCP servers over stdio in a LocalSandbox and in Docker.

Each test starts real server processes. The LocalSandbox tests are the fast tier's proof that
the client, the state dump and snapshot/restore work; the ``docker`` ones do the same inside
the container, where a hung server must also be reaped by its pid.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.kill import kill_code_server

from trajsynth.mcp_servers.environment import Environment, ToolResult, open_environment
from trajsynth.mcp_servers.environment.bundled import BundledServer
from trajsynth.mcp_servers.registry import add_outside_cluster, get_cluster
from trajsynth.mcp_servers.tool_calls import SERVER_KILLED
from trajsynth.sandboxes import Sandbox, ensure_image, open_sandbox
from trajsynth.schemas import (
    EnvironmentStartError,
    InfraError,
    MCPServerError,
    SandboxError,
    SandboxGone,
    SandboxKind,
    SandboxLimits,
    ServerKind,
    ServerSpec,
    ToolCluster,
)

LIST_PROCESSES = r"""
import os
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        print(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode())
    except OSError:
        pass
"""
FAULTY_SOURCE = (Path(__file__).parent / "faulty_server.py").read_bytes()
LIMITS = SandboxLimits(memory_mb=1024, pids=256, timeout_s=60)


@pytest.fixture(scope="module")
def faulty_cluster(tmp_path_factory: pytest.TempPathFactory) -> ToolCluster:
    """The faulty server imported as an outside cluster (tools read with tools/list)."""
    script = tmp_path_factory.mktemp("faulty") / "faulty_server.py"
    script.parent.chmod(0o755)  # the sandbox's unprivileged user reads the server
    script.write_bytes(FAULTY_SOURCE)
    clusters = tmp_path_factory.mktemp("clusters")
    [cluster] = add_outside_cluster("faulty", command=[sys.executable, str(script)],
                                    clusters_dir=clusters)  # fmt: skip
    return cluster


def _in_sandbox(cluster: ToolCluster, sandbox: Sandbox) -> ToolCluster:
    """The faulty cluster with its script copied into ``sandbox`` and run from there."""
    sandbox.put_file("faulty_server.py", FAULTY_SOURCE)
    server = ServerSpec(
        kind=ServerKind.STDIO, command=[sandbox.python, f"{sandbox.workdir}/faulty_server.py"]
    )
    return cluster.model_copy(update={"server": server})


def _items(result: ToolResult) -> list[str]:
    assert not result.is_error, result.text
    assert isinstance(result.structured, dict)
    items = result.structured["result"]
    assert isinstance(items, list)
    return [str(i) for i in items]


@pytest.fixture
def local_sandbox() -> Iterator[Sandbox]:
    sandbox = open_sandbox(SandboxKind.LOCAL, LIMITS)
    yield sandbox
    sandbox.close()


@pytest.fixture
def docker_sandbox() -> Iterator[Sandbox]:
    ensure_image()
    sandbox = open_sandbox(SandboxKind.DOCKER, LIMITS)
    yield sandbox
    sandbox.close()


@pytest.fixture
async def shop_local() -> AsyncIterator[Environment]:
    env = await open_environment(
        get_cluster("shop"), sandbox_kind=SandboxKind.LOCAL, limits=LIMITS, tool_timeout_s=20
    )
    yield env  # closed in another task than the one that opened it, on purpose
    await env.close()


async def _shop_round_trip(env: Environment) -> None:
    """Reads, a write that changes the state, a tool error, snapshot and restore."""
    initial = await env.start()  # idempotent: the environment is already started
    assert initial.readable
    assert {"products", "cart_items", "orders"} <= set(initial.tables)
    assert (await env.state()).state_hash == initial.state_hash

    found = await env.call_tool("search_products", {"query": "mug"})
    assert not found.is_error
    assert isinstance(found.structured, dict)
    products = found.structured["products"]
    assert products and all("mug" in p["name"].lower() for p in products)
    assert (await env.state()).state_hash == initial.state_hash  # a read changes nothing

    def cart(tables: dict) -> set[tuple[str, str, int]]:
        return {(r["user_id"], r["product_id"], r["quantity"]) for r in tables["cart_items"]}

    in_carts = {(u, p) for u, p, _ in cart(initial.tables)}
    user_id, product_id = next(
        (u["user_id"], p["product_id"])
        for u in initial.tables["users"]
        for p in products
        if (u["user_id"], p["product_id"]) not in in_carts
    )
    user_cart = {p for u, p, _ in cart(initial.tables) if u == user_id}
    before_write = await env.snapshot()
    added = await env.call_tool(
        "add_to_cart", {"user_id": user_id, "product_id": product_id, "quantity": 2}
    )
    assert not added.is_error, added.text
    after = await env.state()
    assert after.state_hash != initial.state_hash
    assert cart(after.tables) - cart(initial.tables) == {(user_id, product_id, 2)}

    missing = await env.call_tool("get_product", {"product_id": "NO-SUCH"})
    assert missing.is_error and missing.error_type == "tool_error"
    assert "NO-SUCH" in missing.text
    unknown = await env.call_tool("no_such_tool", {})
    assert unknown.is_error

    await env.restore(before_write)
    assert (await env.state()).state_hash == initial.state_hash
    viewed = await env.call_tool("view_cart", {"user_id": user_id})  # sees the restore
    assert not viewed.is_error
    assert isinstance(viewed.structured, dict)
    assert {i["product_id"] for i in viewed.structured["items"]} == user_cart


@pytest.mark.slow
async def test_bundled_shop_in_a_local_sandbox(shop_local: Environment) -> None:
    assert shop_local.server_location == "sandbox"
    await _shop_round_trip(shop_local)
    assert shop_local.restarts == 0
    # checks run python in the work directory, and their results travel with the state
    assert await shop_local.run_check("db", "import os\nassert os.path.exists('shop.sqlite')")
    assert not await shop_local.run_check("nope", "raise SystemExit(1)")
    assert (await shop_local.state()).checks == {"db": True, "nope": False}


# Slow: `clusters add` starts the real server three times and waits two clock ticks.
@pytest.mark.slow
async def test_mcp_server_time_as_an_outside_cluster(tmp_path: Path) -> None:
    [cluster] = add_outside_cluster(
        "time", command=[sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"],
        clusters_dir=tmp_path,
    )  # fmt: skip
    async with open_environment(  # no await: it is an async context manager too
        cluster, sandbox_kind=SandboxKind.LOCAL, limits=LIMITS, tool_timeout_s=20
    ) as env:
        start = await env.state()
        # read through the probe discovery found: convert_time's stable answer
        assert start.readable is True
        assert list(start.tables) == ["probe0:convert_time"]
        now = await env.call_tool("get_current_time", {"timezone": "Europe/Paris"})
        assert not now.is_error, now.text
        assert isinstance(now.structured, dict) and now.structured["timezone"] == "Europe/Paris"
        converted = await env.call_tool(
            "convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        )
        assert not converted.is_error, converted.text
        assert isinstance(converted.structured, dict)
        assert converted.structured["target"]["datetime"].endswith("T21:00:00+09:00")
        bad = await env.call_tool("get_current_time", {"timezone": "Mars/Olympus"})
        assert bad.is_error
        # reads only: the probed end state does not move
        assert (await env.state()).state_hash == start.state_hash


async def _fault_round_trip(env: Environment) -> str:
    """Writes and replay, a tool error, a hang and a death: both restart the server.

    Returns the state hash after the first write, which the caller checks survived."""
    start = await env.state()
    assert start.readable  # through the cluster's read probes (list_items)
    added = await env.call_tool("add_item", {"name": "a"})
    assert added.structured == {"item_id": "a", "count": 1}
    after_a = await env.state()
    assert after_a.state_hash != start.state_hash
    mark = await env.snapshot()
    await env.call_tool("add_item", {"name": "b"})
    assert _items(await env.call_tool("list_items", {})) == ["a", "b"]

    refused = await env.call_tool("fail", {"reason": "no"})
    assert refused.is_error and "refused: no" in refused.text

    await env.restore(mark)  # restart + replay of the writes up to the mark
    assert _items(await env.call_tool("list_items", {})) == ["a"]
    assert (await env.state()).state_hash == after_a.state_hash

    began = time.monotonic()
    with pytest.raises(MCPServerError, match=r"'hang'.*no answer within 1\.5s"):
        await env.call_tool("hang", {"seconds": 3600})
    assert time.monotonic() - began < 30
    # restarted, never sent again: the model's arguments may be what hangs
    assert (env.restarts, env.retries) == (1, 0)
    # the environment works again, with its state replayed into the new server
    assert _items(await env.call_tool("list_items", {})) == ["a"]

    # a read that kills the server every time: restarted and sent again, then infra
    with pytest.raises(MCPServerError, match="closed the connection"):
        await env.call_tool("die", {})
    assert (env.restarts, env.retries) == (1 + env.call_attempts, env.call_attempts - 1)
    return after_a.state_hash


@pytest.mark.slow
async def test_hung_and_killed_outside_server_in_a_local_sandbox(
    local_sandbox: Sandbox, faulty_cluster: ToolCluster
) -> None:
    cluster = _in_sandbox(faulty_cluster, local_sandbox)
    env = Environment(
        cluster, local_sandbox, tool_timeout_s=1.5, owns_sandbox=False, retry_wait_s=0.05
    )
    async with env:
        kept = await _fault_round_trip(env)
        assert _items(await env.call_tool("list_items", {})) == ["a"]
        assert (await env.state()).state_hash == kept


async def _kill_code_server(env: Environment) -> str:
    """Write a file, then kill the bundled code server mid-call. Returns the state hash
    from before the kill, which the caller checks survived the restart.

    The program cannot kill its server itself (its guard refuses the signal: a tool error,
    no restart); a kill from outside during the call is what the server died of, and as the
    sandbox is alive that call is the model's failure (``server_killed``)."""
    wrote = await env.call_tool("write_file", {"path": "notes.txt", "content": "kept\n"})
    assert not wrote.is_error, wrote.text
    state = await env.state()
    kill_parent = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    refused = await env.call_tool("run_python", {"source": kill_parent})
    assert refused.is_error and "PermissionError" in refused.text, refused.text
    assert env.restarts == 0
    sleeper = {"source": "import time\ntime.sleep(8)", "timeout_s": 10}
    call = asyncio.ensure_future(env.call_tool("run_python", sleeper))
    await asyncio.sleep(1.5)
    await asyncio.to_thread(kill_code_server, env.sandbox)
    killed = await call
    assert killed.is_error and killed.error_type == SERVER_KILLED, killed
    return state.state_hash


@pytest.mark.slow
async def test_bundled_code_server_killed_in_a_local_sandbox(local_sandbox: Sandbox) -> None:
    env = Environment(get_cluster("code"), local_sandbox, tool_timeout_s=20, owns_sandbox=False)
    async with env:
        before = await _kill_code_server(env)
        assert env.restarts == 1  # the files (the state) survive the restart
        read = await env.call_tool("read_file", {"path": "notes.txt"})
        assert not read.is_error and "kept" in read.text
        assert (await env.state()).state_hash == before


async def test_a_server_that_cannot_start_is_an_infra_error(local_sandbox: Sandbox) -> None:
    cluster = get_cluster("shop").model_copy(
        update={"server": ServerSpec(kind=ServerKind.BUNDLED, module="trajsynth.no_such_module")}
    )
    # state_readable=False: no state dump first, so the failure is the server's start
    cluster = cluster.model_copy(update={"state_readable": False})
    env = Environment(cluster, local_sandbox, start_timeout_s=30, owns_sandbox=False)
    # a type callers branch on (skip the cluster, try elsewhere), still an MCPServerError
    with pytest.raises(EnvironmentStartError, match=r"no_such_module.*did not start") as info:
        await env.start()
    assert isinstance(info.value, MCPServerError) and isinstance(info.value, InfraError)
    await env.close()


# --------------------------------------------------------------------------- Docker


@pytest.mark.docker
async def test_bundled_shop_in_docker(docker_sandbox: Sandbox) -> None:
    env = Environment(get_cluster("shop"), docker_sandbox, seed=0, owns_sandbox=False)
    async with env:
        assert env.sandbox.workdir == "/work"
        assert env.server_location == "sandbox"
        await _shop_round_trip(env)
        seed0 = (await env.state()).state_hash
    other = open_sandbox(SandboxKind.DOCKER, LIMITS)
    try:
        async with Environment(get_cluster("shop"), other, seed=1, owns_sandbox=False) as env1:
            assert (await env1.state()).state_hash != seed0  # the seed reaches the server
    finally:
        other.close()


@pytest.mark.docker
async def test_hung_and_killed_outside_server_in_docker(
    docker_sandbox: Sandbox, faulty_cluster: ToolCluster
) -> None:
    cluster = _in_sandbox(faulty_cluster, docker_sandbox)
    env = Environment(
        cluster, docker_sandbox, tool_timeout_s=1.5, owns_sandbox=False, retry_wait_s=0.05
    )
    async with env:
        kept = await _fault_round_trip(env)
        assert _items(await env.call_tool("list_items", {})) == ["a"]
        assert (await env.state()).state_hash == kept
        # the hung server was reaped inside the container: only the live one is left
        procs = docker_sandbox.exec([docker_sandbox.python, "-c", LIST_PROCESSES])
        assert procs.exit_code == 0, procs.stderr
        assert procs.stdout.count("faulty_server.py") == 1, procs.stdout


async def _flaky_round_trip(env: Environment) -> None:
    """A read whose server dies twice answers on the third try; a write whose server dies
    is not sent twice (it may have been applied)."""
    await env.call_tool("add_item", {"name": "a"})
    env.sandbox.put_file("flaky.count", b"")  # armed
    counter = f"{env.sandbox.workdir}/flaky.count"
    answered = await env.call_tool("flaky", {"counter": counter, "failures": 2})
    assert not answered.is_error and answered.text == "answered after 2 failures"
    assert (env.restarts, env.retries) == (2, 2)
    assert _items(await env.call_tool("list_items", {})) == ["a"]  # writes replayed

    with pytest.raises(MCPServerError, match="'add_then_die'.*closed the connection"):
        await env.call_tool("add_then_die", {"name": "b"})
    assert (env.restarts, env.retries) == (3, 2)
    assert _items(await env.call_tool("list_items", {})) == ["a"]

    refused = await env.call_tool("fail", {"reason": "no"})  # the policy's: never resent
    assert refused.is_error and env.retries == 2


@pytest.mark.docker
async def test_a_server_that_dies_twice_answers_the_third_try_in_docker(
    docker_sandbox: Sandbox, faulty_cluster: ToolCluster
) -> None:
    cluster = _in_sandbox(faulty_cluster, docker_sandbox)
    env = Environment(
        cluster, docker_sandbox, tool_timeout_s=10, owns_sandbox=False, retry_wait_s=0.05
    )
    async with env:
        await _flaky_round_trip(env)
        # after it all: three restarts, two resends (the reads), the write applied once
        assert (env.restarts, env.retries) == (3, 2)
        assert _items(await env.call_tool("list_items", {})) == ["a"]


class _Flaky:
    """Wraps a sandbox operation so that its first ``failures`` calls raise SandboxError."""

    def __init__(self, op: Callable[..., Any], failures: int) -> None:
        self.op, self.failures, self.calls = op, failures, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise SandboxError(f"injected fault {self.calls}")
        return self.op(*args, **kwargs)


@pytest.mark.docker
async def test_sandbox_faults_are_retried_with_backoff_in_docker(
    docker_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = Environment(get_cluster("shop"), docker_sandbox, owns_sandbox=False, retry_wait_s=0.05)
    async with env:
        initial = await env.state()
        snapshot = _Flaky(docker_sandbox.snapshot, failures=2)
        monkeypatch.setattr(docker_sandbox, "snapshot", snapshot)
        handle = await env.snapshot()  # the third try answers
        assert (snapshot.calls, env.retries) == (3, 2)
        exec_ = _Flaky(docker_sandbox.exec, failures=2)
        monkeypatch.setattr(docker_sandbox, "exec", exec_)
        # the state dump in the sandbox (what state() runs when no session serves it)
        assert (await BundledServer(env).dump_state()).state_hash == initial.state_hash
        assert (exec_.calls, env.retries) == (3, 4)
        await env.restore(handle)

        broken = _Flaky(docker_sandbox.exec, failures=10**6)
        monkeypatch.setattr(docker_sandbox, "exec", broken)
        with pytest.raises(SandboxError, match="injected fault 3"):
            await BundledServer(env).dump_state()  # infra after call_attempts tries
        assert broken.calls == env.call_attempts


class _Counted:
    """Counts the calls of a sandbox operation (the faults are real ones)."""

    def __init__(self, op: Callable[..., Any]) -> None:
        self.op, self.calls = op, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.op(*args, **kwargs)


@pytest.mark.docker
@pytest.mark.parametrize("how", ["removed", "closed"])
async def test_a_sandbox_that_is_gone_fails_at_once_in_docker(
    docker_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A container removed under the run, or a sandbox already closed, is not retried: the
    first try raises SandboxGone (no backoff), where a transient fault gets call_attempts."""
    import docker

    env = Environment(get_cluster("shop"), docker_sandbox, owns_sandbox=False, retry_wait_s=0.5)
    async with env:
        await env.state()
        if how == "removed":
            docker.from_env().containers.get(docker_sandbox.container_id).remove(force=True)
        else:
            docker_sandbox.close()
        for op in ("exec", "snapshot"):
            counted = _Counted(getattr(docker_sandbox, op))
            monkeypatch.setattr(docker_sandbox, op, counted)
            started = time.monotonic()
            with pytest.raises(SandboxGone):
                await (env.state() if op == "exec" else env.snapshot())
            assert (counted.calls, env.retries) == (1, 0), op
            assert time.monotonic() - started < 0.5, op  # the first backoff alone is 0.5 s


async def test_a_sandbox_never_started_fails_at_once() -> None:
    """A sandbox used before its start is a permanent fault: one try, no backoff."""
    from trajsynth.sandboxes.local_sandbox import LocalSandbox

    fresh = LocalSandbox(LIMITS)  # made, never started
    env = Environment(get_cluster("shop"), fresh, owns_sandbox=False, retry_wait_s=0.5)
    counted = _Counted(fresh.exec)
    fresh.exec = counted  # type: ignore[method-assign]
    with pytest.raises(SandboxGone, match="not started"):
        await env._in_sandbox(fresh.exec, ["true"])
    assert (counted.calls, env.retries) == (1, 0)


@pytest.mark.docker
async def test_bundled_code_server_killed_in_docker(docker_sandbox: Sandbox) -> None:
    env = Environment(get_cluster("code"), docker_sandbox, tool_timeout_s=20, owns_sandbox=False)
    async with env:
        before = await _kill_code_server(env)
        assert env.restarts == 1  # the files (the state) survive the restart
        read = await env.call_tool("read_file", {"path": "notes.txt"})
        assert not read.is_error and "kept" in read.text
        assert (await env.state()).state_hash == before


@pytest.mark.docker
async def test_outside_server_missing_in_the_image_is_named_or_runs_on_the_host_when_asked(
    docker_sandbox: Sandbox, tmp_path: Path
) -> None:
    [cluster] = add_outside_cluster(
        "time", command=[sys.executable, "-m", "mcp_server_time"], clusters_dir=tmp_path
    )
    env = Environment(cluster, docker_sandbox, tool_timeout_s=20, owns_sandbox=False)
    with pytest.raises(EnvironmentStartError, match="cannot be found inside the Docker.*--mount"):
        await env.start()  # never silently on the host: the image has no mcp_server_time
    await env.close()
    [on_host] = add_outside_cluster(
        "time", command=[sys.executable, "-m", "mcp_server_time"], clusters_dir=tmp_path,
        on_host=True,
    )  # fmt: skip
    env = Environment(on_host, docker_sandbox, tool_timeout_s=20, owns_sandbox=False)
    async with env:
        assert env.server_location == "host"  # the user said so: --on-host-state-not-isolated
        now = await env.call_tool("get_current_time", {"timezone": "UTC"})
        assert not now.is_error, now.text
        assert isinstance(now.structured, dict) and now.structured["timezone"] == "UTC"


@pytest.mark.slow
def test_environments_close_from_another_event_loop_task() -> None:
    """open in one task, call from another, close from a third: no cancel-scope errors."""

    async def main() -> list[str]:
        env = await asyncio.create_task(
            open_environment(get_cluster("travel"), sandbox_kind=SandboxKind.LOCAL, limits=LIMITS)
        )
        result = await asyncio.create_task(
            env.call_tool("find_airports", {"query": "San Francisco"})
        )
        await asyncio.create_task(env.close())
        assert isinstance(result.structured, dict)
        return [a["code"] for a in result.structured["airports"]]

    codes = asyncio.run(main())
    assert codes == ["SFO"]


# --- pooled sandboxes ------------------------------------------------------------------------


async def _pooled_episodes(kind: SandboxKind) -> dict[str, object]:
    """Four episodes on one pooled sandbox (seed 7 read, seed 7 write, seed 7 read, seed 8):
    what each saw, for the tests to judge."""
    from trajsynth.sandboxes.pool import SandboxPool

    shop = get_cluster("shop")
    pool = SandboxPool(kind, LIMITS, max_idle=1)
    try:
        async with open_environment(shop, seed=7, pool=pool, tool_timeout_s=30) as fresh:
            seeded = await fresh.start()
        async with open_environment(shop, seed=7, pool=pool, tool_timeout_s=30) as first:
            reused_by_first = pool.stats.reused
            await first.snapshot()
            user = seeded.tables["users"][0]["user_id"]
            product = seeded.tables["products"][0]["product_id"]
            added = await first.call_tool(
                "add_to_cart", {"user_id": user, "product_id": product, "quantity": 3}
            )
            written = (await first.state()).state_hash
            sandbox = first.sandbox
        async with open_environment(shop, seed=7, pool=pool, tool_timeout_s=30) as second:
            same_sandbox = second.sandbox is sandbox
            second_hash = (await second.state()).state_hash
        async with open_environment(shop, seed=8, pool=pool, tool_timeout_s=30) as other:
            other_hash = (await other.state()).state_hash
        return {
            "seeded": seeded.state_hash,
            "reused_by_first": reused_by_first,
            "write_error": added.text if added.is_error else None,
            "written": written,
            "same_sandbox": same_sandbox,
            "opened": pool.stats.opened,
            "second": second_hash,
            "other": other_hash,
            "idle": pool.idle,
        }
    finally:
        pool.close()


def _assert_each_episode_fresh(seen: dict[str, object]) -> None:
    assert seen["reused_by_first"] == 1 and seen["write_error"] is None
    assert seen["written"] != seen["seeded"]  # episode 2 changed the state...
    assert seen["same_sandbox"] and seen["opened"] == 1
    assert seen["second"] == seen["seeded"]  # ...and episode 3, on the same sandbox, never sees it
    assert seen["other"] != seen["seeded"]  # another seed gets its own state
    assert seen["idle"] == 1


@pytest.mark.slow  # several seconds: planning, processes or a full round
async def test_pooled_local_sandboxes_start_each_episode_fresh() -> None:
    seen = await _pooled_episodes(SandboxKind.LOCAL)
    _assert_each_episode_fresh(seen)
    assert seen["second"] == seen["seeded"] != seen["written"]


@pytest.mark.docker
async def test_pooled_containers_start_each_episode_fresh() -> None:
    ensure_image()
    seen = await _pooled_episodes(SandboxKind.DOCKER)
    _assert_each_episode_fresh(seen)
    assert seen["second"] == seen["seeded"] != seen["written"]


@pytest.mark.slow
async def test_the_state_served_over_mcp_is_the_sandbox_dump(shop_local: Environment) -> None:
    # bench/environment.py: a served read takes a few ms, a dump process 45-83 ms
    bundled = BundledServer(shop_local)  # the environment's bundled side, read directly
    served = await bundled.served_state()
    assert served is not None and served == await bundled.dump_state()
    user = served.tables["users"][0]["user_id"]
    product = served.tables["products"][0]["product_id"]
    added = await shop_local.call_tool(
        "add_to_cart", {"user_id": user, "product_id": product, "quantity": 1}
    )
    assert not added.is_error, added.text
    after = await shop_local.state()
    assert after.state_hash != served.state_hash
    assert after == await bundled.dump_state() == await bundled.served_state()
    conn = shop_local._conn
    assert conn is not None
    await conn.close()  # no live session: the state is dumped in the sandbox, the same
    assert await bundled.served_state() is None
    assert await shop_local.state() == after
