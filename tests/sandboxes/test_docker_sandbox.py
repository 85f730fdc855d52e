"""DockerSandbox against a real container from the locally built image."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from docker.errors import NotFound
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from trajsynth.sandboxes import WORKDIR_ENV, DockerSandbox, docker_client, open_sandbox
from trajsynth.schemas import SandboxError, SandboxKind, SandboxLimits, SandboxStartError

pytestmark = pytest.mark.docker


def test_exec_returns_exit_code_output_and_env(docker_sandbox: DockerSandbox) -> None:
    res = docker_sandbox.exec(
        [
            "sh",
            "-c",
            'echo "$TRAJSYNTH_WORKDIR $EXTRA $(pwd) $(id -u)"; cat; echo oops >&2; exit 3',
        ],
        stdin="from stdin\n",
        env={"EXTRA": "x1"},
    )
    assert res.exit_code == 3
    assert res.stdout == "/work x1 /work 1000\nfrom stdin\n"
    assert res.stderr == "oops\n"
    assert not res.timed_out
    assert res.duration_s > 0


def test_exec_cwd_is_relative_to_workdir(docker_sandbox: DockerSandbox) -> None:
    docker_sandbox.put_file("sub/dir/f.txt", b"x")
    assert docker_sandbox.exec(["pwd"], cwd="sub/dir").stdout == "/work/sub/dir\n"
    with pytest.raises(ValueError, match="outside the work directory"):
        docker_sandbox.exec(["pwd"], cwd="../etc")


def test_missing_command_is_exit_127(docker_sandbox: DockerSandbox) -> None:
    res = docker_sandbox.exec(["no-such-program"])
    assert res.exit_code == 127
    assert "no-such-program" in res.stderr


def test_put_and_get_round_trip_binary(docker_sandbox: DockerSandbox) -> None:
    # includes Docker's detach keys (ctrl-p ctrl-q): the attach stream must pass them through
    blob = bytes(range(256)) * 4096 + b"\x10\x11"
    docker_sandbox.put_file("data/blob.bin", blob)
    assert docker_sandbox.get_file("data/blob.bin") == blob
    assert docker_sandbox.get_file("/work/data/blob.bin") == blob
    size = docker_sandbox.exec(["stat", "-c", "%s %u", "data/blob.bin"]).stdout.split()
    assert size == [str(len(blob)), "1000"]
    with pytest.raises(FileNotFoundError):
        docker_sandbox.get_file("data/missing")
    with pytest.raises(ValueError):
        docker_sandbox.get_file("../etc/passwd")
    # a link planted inside the work directory cannot lead a read outside it
    docker_sandbox.exec(["ln", "-s", "/etc/passwd", "link"])
    with pytest.raises(ValueError):
        docker_sandbox.get_file("link")


def test_timeout_kills_the_command_and_its_children(docker_sandbox: DockerSandbox) -> None:
    started = time.monotonic()
    res = docker_sandbox.exec(["sh", "-c", "sleep 300 & sleep 301"], timeout=1.0)
    assert res.timed_out
    assert res.exit_code == -signal.SIGKILL
    assert time.monotonic() - started < 10
    left = docker_sandbox.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]).stdout
    assert "sleep 30" not in left
    # the sandbox still works after a kill
    assert docker_sandbox.exec(["echo", "alive"]).stdout == "alive\n"


def test_memory_bomb_is_killed_and_sandbox_survives(docker_sandbox: DockerSandbox) -> None:
    bomb = "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 * 1024 * 1024))\n"
    res = docker_sandbox.exec(["python3", "-c", bomb], timeout=60)
    assert not res.timed_out
    assert res.exit_code == -signal.SIGKILL  # the cgroup's OOM killer, not our timeout
    attrs = docker_client().api.inspect_container(docker_sandbox.container_id)
    assert attrs["HostConfig"]["Memory"] == 128 * 1024 * 1024
    assert docker_sandbox.exec(["echo", "alive"]).stdout == "alive\n"


def test_fork_bomb_is_contained_by_the_pids_limit(docker_sandbox: DockerSandbox) -> None:
    counter = textwrap.dedent(
        """
        import os, time
        n = 0
        try:
            while n < 10000:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                n += 1
        except OSError:
            pass
        print(n)
        """
    )
    res = docker_sandbox.exec(["python3", "-c", counter], timeout=30)
    forked = int(res.stdout)
    assert 0 < forked < 64  # the pids limit stopped it, far below 10000
    bomb = docker_sandbox.exec(["sh", "-c", "f() { f | f & }; f"], timeout=3)
    # The shell returns at once and leaves the bomb running in the background; the sandbox
    # kills whatever a command leaves behind, within the pids limit meanwhile.
    assert bomb.duration_s < 10
    # everything the bombs started is gone, and the sandbox still forks
    procs = docker_sandbox.exec(["sh", "-c", "ls -d /proc/[0-9]* | wc -l"])
    assert procs.exit_code == 0
    assert int(procs.stdout) < 10


def test_network_is_unreachable(docker_sandbox: DockerSandbox) -> None:
    probe = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
        "    print('connected')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    res = docker_sandbox.exec(["python3", "-c", probe])
    assert res.stdout.startswith("refused")
    interfaces = docker_sandbox.exec(["ls", "/sys/class/net"]).stdout.split()
    assert interfaces == ["lo"]


@pytest.mark.parametrize(
    "path", ["/etc/x", "/x", "/opt/trajsynth/site/x", "/opt/trajsynth/src/trajsynth/x", "/home/x"]
)
def test_write_outside_the_workdir_fails(docker_sandbox: DockerSandbox, path: str) -> None:
    res = docker_sandbox.exec(["sh", "-c", f"echo hi > {path}"])
    assert res.exit_code != 0
    assert "Read-only file system" in res.stderr or "Permission denied" in res.stderr
    assert docker_sandbox.exec(["sh", "-c", "echo hi > /work/ok"]).exit_code == 0


def test_runs_unprivileged(docker_sandbox: DockerSandbox) -> None:
    status = docker_sandbox.exec(["cat", "/proc/self/status"]).stdout
    caps = dict(line.split(":\t") for line in status.splitlines() if line.startswith("Cap"))
    assert caps["CapEff"] == "0000000000000000"
    assert "NoNewPrivs:\t1" in status
    assert docker_sandbox.exec(["id", "-u"]).stdout == "1000\n"


def test_snapshot_restore_round_trip(docker_sandbox: DockerSandbox) -> None:
    docker_sandbox.put_file("state.sqlite", b"v1")
    docker_sandbox.put_file("dir/keep.txt", b"keep")
    handle = docker_sandbox.snapshot()
    assert handle.sandbox_id == docker_sandbox.sandbox_id
    docker_sandbox.put_file("state.sqlite", b"v2")
    docker_sandbox.exec(["sh", "-c", "rm -r dir && echo new > added.txt"])
    docker_sandbox.restore(handle)
    assert docker_sandbox.get_file("state.sqlite") == b"v1"
    assert docker_sandbox.get_file("dir/keep.txt") == b"keep"
    assert docker_sandbox.exec(["ls", "/work"]).stdout.split() == ["dir", "state.sqlite"]
    # one snapshot restores many times (a branch point with several children)
    docker_sandbox.put_file("state.sqlite", b"v3")
    docker_sandbox.restore(handle)
    assert docker_sandbox.get_file("state.sqlite") == b"v1"
    docker_sandbox.discard(handle)
    with pytest.raises(SandboxError, match="no snapshot"):
        docker_sandbox.restore(handle)


def test_snapshot_of_another_sandbox_is_refused(
    docker_sandbox: DockerSandbox, sandbox_image: str
) -> None:
    with DockerSandbox(image=sandbox_image) as other:
        handle = other.snapshot()
    with pytest.raises(SandboxError, match="belongs to sandbox"):
        docker_sandbox.restore(handle)


async def test_mcp_server_over_stdio_in_the_container(
    docker_sandbox: DockerSandbox, notes_server: bytes
) -> None:
    docker_sandbox.put_file("notes_server.py", notes_server)
    argv = docker_sandbox.stdio_command(["python3", "notes_server.py"], env={"X": "1"})
    assert f"{WORKDIR_ENV}=/work" in argv
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        assert [t.name for t in tools.tools] == ["note"]
        first = await session.call_tool("note", {"text": "one"})
        second = await session.call_tool("note", {"text": "two"})
    assert first.content[0].text == "one\n"
    assert second.content[0].text == "one\ntwo\n"
    assert docker_sandbox.get_file("notes.txt") == b"one\ntwo\n"


def test_bundled_package_is_importable_read_only(docker_sandbox: DockerSandbox) -> None:
    res = docker_sandbox.exec(
        ["python3", "-c", "import trajsynth, mcp.server.mcpserver; print(trajsynth.__file__)"],
        timeout=60,
    )
    assert res.exit_code == 0, res.stderr
    assert res.stdout == "/opt/trajsynth/src/trajsynth/__init__.py\n"


def test_close_removes_the_container(sandbox_image: str) -> None:
    sb = DockerSandbox(image=sandbox_image)
    sb.start()
    container_id = sb.container_id
    sb.close()
    sb.close()  # twice is fine
    with pytest.raises(NotFound):
        docker_client().containers.get(container_id)
    with pytest.raises(SandboxError, match="closed"):
        sb.start()


def test_container_goes_when_its_owner_dies(sandbox_image: str) -> None:
    """An owner killed with SIGKILL leaves no container behind (stdin closes, agent exits)."""
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from trajsynth.sandboxes import DockerSandbox\n"
            f"sb = DockerSandbox(image={sandbox_image!r}); sb.start()\n"
            "sb.exec(['true'])\n"
            "print(sb.container_id, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    container_id = owner.stdout.readline().strip()
    assert docker_client().containers.get(container_id).status == "running"
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    owner.stdout.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            docker_client().containers.get(container_id)
        except NotFound:
            return
        time.sleep(0.2)
    pytest.fail(f"container {container_id} outlived its owner")


def test_missing_image_says_how_to_build_it() -> None:
    sb = DockerSandbox(image="trajsynth-sandbox:does-not-exist")
    with pytest.raises(SandboxStartError, match="synth sandbox build"):
        sb.start()
    sb.close()


def test_open_sandbox_auto_picks_docker_when_image_exists(sandbox_image: str) -> None:
    with open_sandbox(SandboxKind.AUTO, SandboxLimits(), image=sandbox_image) as sb:
        assert isinstance(sb, DockerSandbox)
        assert sb.exec(["echo", "hi"]).stdout == "hi\n"


def test_agent_crash_becomes_sandbox_error(docker_sandbox: DockerSandbox) -> None:
    docker_sandbox.exec(["true"])
    docker_client().api.kill(docker_sandbox.container_id)
    with pytest.raises(SandboxError, match="died"):
        docker_sandbox.exec(["true"])
    with pytest.raises(SandboxError):
        docker_sandbox.exec(["true"])
