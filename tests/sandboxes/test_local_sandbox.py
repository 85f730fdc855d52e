"""LocalSandbox with real subprocesses, on both paths: bubblewrap and plain rlimits."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from trajsynth.sandboxes import WORKDIR_ENV, LocalSandbox, bwrap_usable
from trajsynth.schemas import SandboxError, SandboxLimits

LIMITS = SandboxLimits(memory_mb=512, pids=64, timeout_s=20)
# the plain path enforces no isolation: it runs only with the unsafe opt-in
UNSAFE = LIMITS.model_copy(update={"allow_unsafe_local_sandbox": True})


@pytest.fixture(params=["bwrap", "plain"])
def local_sandbox(request: pytest.FixtureRequest, tmp_path: Path):
    use_bwrap = request.param == "bwrap"
    if use_bwrap and not bwrap_usable():
        pytest.skip("bubblewrap is missing or cannot make namespaces on this machine")
    with LocalSandbox(LIMITS if use_bwrap else UNSAFE, use_bwrap=use_bwrap, root=tmp_path) as sb:
        yield sb


@pytest.fixture
def bwrap_sandbox(tmp_path: Path):
    if not bwrap_usable():
        pytest.skip("bubblewrap is missing or cannot make namespaces on this machine")
    with LocalSandbox(LIMITS, use_bwrap=True, root=tmp_path) as sb:
        yield sb


def _host_processes_with(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ")
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(name))
    return found


def test_exec_output_exit_code_stdin_env_and_cwd(local_sandbox: LocalSandbox) -> None:
    local_sandbox.put_file("sub/f.txt", b"x")
    res = local_sandbox.exec(
        ["sh", "-c", 'echo "$TRAJSYNTH_WORKDIR|$EXTRA|$(pwd)"; cat; echo oops >&2; exit 4'],
        stdin=b"in\n",
        env={"EXTRA": "e"},
        cwd="sub",
    )
    assert res.exit_code == 4
    assert res.stdout == f"{local_sandbox.workdir}|e|{local_sandbox.workdir}/sub\nin\n"
    assert res.stderr == "oops\n"
    assert not res.timed_out


def test_host_environment_does_not_leak(
    local_sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    out = local_sandbox.exec(["env"]).stdout
    assert "sk-secret-value" not in out
    assert f"{WORKDIR_ENV}={local_sandbox.workdir}" in out.splitlines()


def test_python_in_the_sandbox_imports_trajsynth(local_sandbox: LocalSandbox) -> None:
    res = local_sandbox.exec([local_sandbox.python, "-c", "import trajsynth.schemas; print(1)"])
    assert res.exit_code == 0, res.stderr
    assert res.stdout == "1\n"


def test_put_get_and_paths_stay_inside(local_sandbox: LocalSandbox) -> None:
    local_sandbox.put_file("a/b/c.bin", b"\x00\x01data")
    assert local_sandbox.get_file("a/b/c.bin") == b"\x00\x01data"
    assert local_sandbox.get_file(f"{local_sandbox.workdir}/a/b/c.bin") == b"\x00\x01data"
    assert local_sandbox.exec(["cat", "a/b/c.bin"]).stdout == "\x00\x01data"
    with pytest.raises(FileNotFoundError):
        local_sandbox.get_file("nope")
    with pytest.raises(ValueError, match="outside the work directory"):
        local_sandbox.put_file("../escape.txt", b"x")
    local_sandbox.exec(["ln", "-s", "/etc/hostname", "link"])
    with pytest.raises(ValueError):
        local_sandbox.get_file("link")  # a planted link does not lead outside
    assert not (Path(local_sandbox.workdir).parent / "escape.txt").exists()


def test_timeout_kills_the_command_and_what_it_started(local_sandbox: LocalSandbox) -> None:
    marker = "317.25"  # a sleep length no other process uses
    started = time.monotonic()
    res = local_sandbox.exec(["sh", "-c", f"sleep {marker} & sleep {marker}"], timeout=0.5)
    assert res.timed_out
    assert time.monotonic() - started < 5
    deadline = time.monotonic() + 3
    while _host_processes_with(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _host_processes_with(f"sleep {marker}") == []


def test_background_leftovers_are_killed_when_the_command_ends(
    local_sandbox: LocalSandbox,
) -> None:
    marker = "318.25"
    res = local_sandbox.exec(["sh", "-c", f"sleep {marker} > /dev/null 2>&1 & echo started"])
    assert res.stdout == "started\n"
    assert not res.timed_out
    deadline = time.monotonic() + 3  # the kill is sent; a loaded machine takes a moment
    while _host_processes_with(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _host_processes_with(f"sleep {marker}") == []


def test_memory_limit_stops_a_memory_bomb(local_sandbox: LocalSandbox) -> None:
    bomb = "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 * 1024 * 1024))\n"
    res = local_sandbox.exec([local_sandbox.python, "-c", bomb], timeout=30)
    assert not res.timed_out
    assert res.exit_code != 0
    if local_sandbox._cgroup is None:
        assert "MemoryError" in res.stderr  # RLIMIT_AS refuses the allocation
    else:
        assert res.exit_code == -signal.SIGKILL  # the sandbox's cgroup OOM-kills it
    assert local_sandbox.exec(["echo", "alive"]).stdout == "alive\n"


def test_cpu_limit_follows_the_timeout(local_sandbox: LocalSandbox) -> None:
    res = local_sandbox.exec(["sh", "-c", "ulimit -t; ulimit -c"], timeout=4.2)
    assert res.stdout.split() == ["6", "0"]  # ceil(4.2) + 1 CPU seconds, no core files


def test_snapshot_restore_round_trip(local_sandbox: LocalSandbox) -> None:
    local_sandbox.put_file("state.sqlite", b"v1")
    local_sandbox.put_file("dir/keep.txt", b"keep")
    handle = local_sandbox.snapshot()
    local_sandbox.put_file("state.sqlite", b"v2")
    local_sandbox.exec(["sh", "-c", "rm -r dir && echo new > added.txt"])
    local_sandbox.restore(handle)
    assert local_sandbox.get_file("state.sqlite") == b"v1"
    assert local_sandbox.get_file("dir/keep.txt") == b"keep"
    assert sorted(os.listdir(local_sandbox.workdir)) == ["dir", "state.sqlite"]
    local_sandbox.put_file("state.sqlite", b"v3")
    local_sandbox.restore(handle)  # again: one branch point, several children
    assert local_sandbox.get_file("state.sqlite") == b"v1"
    local_sandbox.discard(handle)
    with pytest.raises(SandboxError, match="no snapshot"):
        local_sandbox.restore(handle)


def test_close_removes_the_directory_and_refuses_more_work(tmp_path: Path) -> None:
    sb = LocalSandbox(UNSAFE, use_bwrap=False, root=tmp_path)
    with pytest.raises(SandboxError, match="not started"):
        sb.exec(["true"])
    sb.start()
    workdir = Path(sb.workdir)
    sb.put_file("x", b"1")
    sb.close()
    sb.close()
    assert not workdir.exists()
    with pytest.raises(SandboxError, match="closed"):
        sb.exec(["true"])
    with pytest.raises(SandboxError, match="closed"):
        sb.start()


def test_plain_path_warns_that_it_does_not_isolate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with LocalSandbox(UNSAFE, use_bwrap=False, root=tmp_path):
        pass
    assert "runs with limits it cannot enforce" in caplog.text
    assert "isolation" in caplog.text


def test_plain_path_refuses_without_the_unsafe_setting(tmp_path: Path) -> None:
    sb = LocalSandbox(LIMITS, use_bwrap=False, root=tmp_path)
    with pytest.raises(SandboxError, match="allow_unsafe_local_sandbox"):
        sb.start()
    assert list(tmp_path.iterdir()) == []


def test_bwrap_network_is_unreachable(bwrap_sandbox: LocalSandbox) -> None:
    probe = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
        "    print('connected')\n"
        "except OSError as e:\n"
        "    print('refused')\n"
    )
    assert bwrap_sandbox.exec([bwrap_sandbox.python, "-c", probe]).stdout == "refused\n"
    devices = bwrap_sandbox.exec(["cat", "/proc/net/dev"]).stdout.splitlines()[2:]
    assert [line.split(":")[0].strip() for line in devices] == ["lo"]


def test_bwrap_write_outside_the_workdir_fails(bwrap_sandbox: LocalSandbox, tmp_path: Path) -> None:
    for path in ("/etc/trajsynth-test", "/usr/trajsynth-test", f"{Path.home()}/trajsynth-test"):
        res = bwrap_sandbox.exec(["sh", "-c", f"echo hi > {path}"])
        assert res.exit_code != 0, path
        assert any(
            why in res.stderr for why in ("Read-only file system", "Permission denied", "No such")
        ), res.stderr
        assert not Path(path).exists()
    # /tmp (where the work directory's parent is) is a private tmpfs: writes there vanish
    beside = Path(bwrap_sandbox.workdir).parent / "beside.txt"
    for path in (beside, tmp_path / "outside.txt", Path("/tmp/trajsynth-private-test")):
        bwrap_sandbox.exec(["sh", "-c", f"echo hi > {path}"])
        assert not path.exists(), path
    assert bwrap_sandbox.exec(["sh", "-c", "echo hi > inside.txt"]).exit_code == 0
    assert (Path(bwrap_sandbox.workdir) / "inside.txt").read_text() == "hi\n"


def test_bwrap_timeout_kills_processes_that_left_the_session(bwrap_sandbox: LocalSandbox) -> None:
    marker = "319.25"
    res = bwrap_sandbox.exec(["sh", "-c", f"setsid sleep {marker} & sleep {marker}"], timeout=0.5)
    assert res.timed_out
    assert res.exit_code == -signal.SIGKILL
    deadline = time.monotonic() + 3
    while _host_processes_with(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _host_processes_with(f"sleep {marker}") == []  # the pid namespace went with it


def test_use_bwrap_true_without_bwrap_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from trajsynth.sandboxes import local_sandbox as module

    monkeypatch.setattr(module, "bwrap_usable", lambda: False)
    with pytest.raises(SandboxError, match="bubblewrap"):
        LocalSandbox(LIMITS, use_bwrap=True)
    assert LocalSandbox(LIMITS).use_bwrap is False


@pytest.mark.slow
async def test_mcp_server_over_stdio(local_sandbox: LocalSandbox, notes_server: bytes) -> None:
    local_sandbox.put_file("notes_server.py", notes_server)
    argv = local_sandbox.stdio_command([local_sandbox.python, "notes_server.py"])
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        first = await session.call_tool("note", {"text": "one"})
        second = await session.call_tool("note", {"text": "two"})
    assert first.content[0].text == "one\n"
    assert second.content[0].text == "one\ntwo\n"
    assert local_sandbox.get_file("notes.txt") == b"one\ntwo\n"
