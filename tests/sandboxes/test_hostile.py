"""The hostile corpus: code that attacks its sandbox, run in both sandboxes.

Each case asserts precisely how it was contained and that the sandbox still works afterwards.
Every bomb is bounded (at most 3,000 forks, 2 GB of memory, 1 GB of disk, 600 MB of output) so
a containment failure cannot take the shared machine down. The local tier needs bubblewrap and
every limit enforceable here (it skips otherwise, naming what is missing); the Docker tier needs
the engine and the image. Both tiers take seconds per case: ``slow`` and ``docker``.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.kill import kill_code_server

import trajsynth
from trajsynth.sandboxes import DockerSandbox, LocalSandbox, Sandbox
from trajsynth.sandboxes._agent import OUTPUT_CAP
from trajsynth.sandboxes.local_sandbox import unenforced_limits
from trajsynth.sandboxes.pool import SandboxPool
from trajsynth.schemas import SandboxKind, SandboxLimits

LIMITS = SandboxLimits(memory_mb=256, pids=64, disk_mb=64, tmp_mb=32, timeout_s=30)
CHECKOUT = Path(trajsynth.__file__).resolve().parents[2]
PACKAGE = Path(trajsynth.__file__).resolve().parent
MB = 1024 * 1024
FLOOD = (  # 600 MB of stdout
    "import sys\nb = b'y' * (1024 * 1024)\nfor _ in range(600):\n    sys.stdout.buffer.write(b)\n"
)

pytestmark = pytest.mark.slow


def _local_or_skip() -> None:
    missing = unenforced_limits()
    if missing:
        pytest.skip(f"LocalSandbox cannot enforce {', '.join(missing)} on this machine")


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "local":
        _local_or_skip()
    return request.param


@pytest.fixture
def sandbox(kind: str, tmp_path: Path) -> Iterator[Sandbox]:
    sb: Sandbox
    if kind == "local":
        sb = LocalSandbox(LIMITS, use_bwrap=True, root=tmp_path)
    else:
        from trajsynth.sandboxes import ensure_image

        sb = DockerSandbox(LIMITS, image=ensure_image())
    with sb:
        yield sb


def _py(sb: Sandbox, source: str, timeout: float = 60) -> dict:
    """Run ``source`` in the sandbox; it prints one JSON object as its last line."""
    res = sb.exec([sb.python, "-c", source], timeout=timeout)
    assert res.exit_code == 0 and not res.timed_out, res
    return json.loads(res.stdout.strip().splitlines()[-1])


def _still_usable(sb: Sandbox) -> None:
    res = sb.exec(["sh", "-c", "echo ok > alive.txt && cat alive.txt"])
    assert (res.exit_code, res.stdout) == (0, "ok\n"), res
    sb.put_file("put.txt", b"put")
    assert sb.get_file("put.txt") == b"put"


def _processes_with(sb: Sandbox, marker: str) -> list[int]:
    """Live processes whose command line holds ``marker``: on the host for a LocalSandbox
    (its pid namespaces are under ours), inside the container for a DockerSandbox."""
    scan = (
        "import os, sys\n"
        "m = sys.argv[1].encode()\n"
        "found = []\n"
        "for n in os.listdir('/proc'):\n"
        "    if not n.isdigit() or int(n) == os.getpid():\n"
        "        continue\n"
        "    try:\n"
        "        cmd = open(f'/proc/{n}/cmdline', 'rb').read()\n"
        "        state = open(f'/proc/{n}/stat', 'rb').read().rsplit(b')', 1)[1].split()[0]\n"
        "    except OSError:\n"
        "        continue\n"
        "    if m in cmd and state != b'Z':\n"
        "        found.append(int(n))\n"
        "print(found)\n"
    )
    if isinstance(sb, DockerSandbox):
        res = sb.exec([sb.python, "-c", scan, marker])
        return json.loads(res.stdout)
    out = subprocess.run(
        ["python3", "-c", scan, marker], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)


def _gone(sb: Sandbox, marker: str) -> bool:
    """Whether no process with ``marker`` is left (a kill takes a moment on a loaded host)."""
    deadline = time.monotonic() + 5
    while _processes_with(sb, marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ---------------------------------------------------------------- resource bombs


def test_fork_bomb_stops_at_the_pids_limit(sandbox: Sandbox) -> None:
    marker = "forkbomb-7781"
    bomb = (
        f"# {marker}\n"
        "import json, os, time\n"
        "n, err = 0, None\n"
        "for _ in range(3000):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as e:\n"
        "        err = e.errno\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(120)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print(json.dumps({'forked': n, 'errno': err}))\n"
    )
    out = _py(sandbox, bomb)
    assert out["errno"] == errno.EAGAIN
    assert 0 < out["forked"] < LIMITS.pids
    assert _gone(sandbox, marker)  # the children die with the command
    _still_usable(sandbox)


def test_memory_bomb_is_killed_at_the_memory_limit(sandbox: Sandbox) -> None:
    bomb = (
        "import sys\n"
        "chunks = []\n"
        "for i in range(128):  # 128 x 16 MB = 2 GB at most\n"
        "    chunks.append(b'x' * (16 * 1024 * 1024))\n"
        "    print(16 * (i + 1), flush=True)\n"
    )
    res = sandbox.exec([sandbox.python, "-c", bomb], timeout=60)
    assert not res.timed_out
    reached = int(res.stdout.split()[-1]) if res.stdout.split() else 0
    assert reached <= LIMITS.memory_mb
    assert res.exit_code == -9 or "MemoryError" in res.stderr, res
    _still_usable(sandbox)


@pytest.mark.parametrize("where", ["workdir", "tmp"])
def test_disk_fill_is_enospc_at_the_size_limit(sandbox: Sandbox, where: str) -> None:
    target = "fill.bin" if where == "workdir" else "/tmp/fill.bin"
    size_mb = LIMITS.disk_mb if where == "workdir" else LIMITS.tmp_mb
    fill = (
        "import json, sys\n"
        "n, err = 0, None\n"
        "try:\n"
        "    with open(sys.argv[1], 'wb', buffering=0) as f:\n"
        "        for _ in range(1024):  # 1 GB at most\n"
        "            f.write(b'\\0' * (1024 * 1024))\n"
        "            n += 1\n"
        "except OSError as e:\n"
        "    err = e.errno\n"
        "print(json.dumps({'mb': n, 'errno': err}))\n"
    )
    res = sandbox.exec([sandbox.python, "-c", fill, target], timeout=60)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["errno"] == errno.ENOSPC
    assert out["mb"] <= size_mb
    assert sandbox.exec(["rm", "-f", target]).exit_code == 0
    _still_usable(sandbox)


def test_600_mb_of_stdout_is_capped(sandbox: Sandbox) -> None:
    res = sandbox.exec([sandbox.python, "-c", FLOOD], timeout=120)
    assert res.exit_code == 0 and not res.timed_out
    assert len(res.stdout) == OUTPUT_CAP
    _still_usable(sandbox)


# ---------------------------------------------------------------- reaching out


def test_tcp_to_host_loopback_and_outside_fails(sandbox: Sandbox) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        probe = (
            "import json, socket, sys\n"
            "out = {}\n"
            "for host, port in (('127.0.0.1', int(sys.argv[1])), ('1.1.1.1', 443),"
            " ('151.101.0.223', 443)):\n"
            "    try:\n"
            "        socket.create_connection((host, port), timeout=5).close()\n"
            "        out[host] = 'connected'\n"
            "    except OSError as e:\n"
            "        out[host] = e.errno\n"
            "print(json.dumps(out))\n"
        )
        res = sandbox.exec([sandbox.python, "-c", probe, str(port)], timeout=60)
        out = json.loads(res.stdout.strip().splitlines()[-1])
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing reached the host's loopback
    # its own loopback has nothing listening; there is no route out at all
    assert out["127.0.0.1"] in (errno.ECONNREFUSED, errno.ENETUNREACH), out
    assert out["1.1.1.1"] == errno.ENETUNREACH, out
    assert out["151.101.0.223"] == errno.ENETUNREACH, out
    _still_usable(sandbox)


def test_docker_socket_is_not_there(sandbox: Sandbox) -> None:
    probe = (
        "import json, socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "out = {}\n"
        "for path in ('/var/run/docker.sock', '/run/docker.sock'):\n"
        "    try:\n"
        "        s.connect(path)\n"
        "        out[path] = 'connected'\n"
        "    except OSError as e:\n"
        "        out[path] = e.errno\n"
        "print(json.dumps(out))\n"
    )
    out = _py(sandbox, probe)
    assert out == {"/var/run/docker.sock": errno.ENOENT, "/run/docker.sock": errno.ENOENT}
    _still_usable(sandbox)


def test_shadow_home_and_checkout_are_unreadable(sandbox: Sandbox) -> None:
    targets = [
        "/etc/shadow",
        str(CHECKOUT / "pyproject.toml"),
        str(CHECKOUT / ".git"),
        str(Path.home()),
        "/root",
        "/var/run",
    ]
    probe = (
        "import json, os, sys\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        out[p] = sorted(os.listdir(p)) if os.path.isdir(p) else open(p).read()[:20]\n"
        "    except OSError as e:\n"
        "        out[p] = e.errno\n"
        "print(json.dumps(out))\n"
    )
    res = sandbox.exec([sandbox.python, "-c", probe, *targets])
    out = json.loads(res.stdout.strip().splitlines()[-1])
    # LocalSandbox: not in its view; the image has one, readable by root only
    shadow = errno.EACCES if isinstance(sandbox, DockerSandbox) else errno.ENOENT
    assert out["/etc/shadow"] == shadow
    assert out[str(CHECKOUT / "pyproject.toml")] == errno.ENOENT
    assert out[str(CHECKOUT / ".git")] == errno.ENOENT
    interpreter_parents = {p.name for p in Path(os.__file__).resolve().parents}
    for home in (str(Path.home()), "/root"):
        # missing, or (LocalSandbox) only the directories that lead to the interpreter
        assert out[home] in (errno.ENOENT, errno.EACCES) or set(out[home]) <= interpreter_parents
    assert out["/var/run"] == errno.ENOENT or "docker.sock" not in out["/var/run"]
    # the one part of the checkout it needs, the package, is there and read-only
    assert sandbox.exec(["sh", "-c", "python3 -c 'import trajsynth.schemas'"]).exit_code == 0
    _still_usable(sandbox)


def test_writes_outside_the_work_dir_fail(sandbox: Sandbox) -> None:
    package = "/opt/trajsynth/src/trajsynth" if isinstance(sandbox, DockerSandbox) else PACKAGE
    targets = [
        "/hostile.txt",
        "/usr/hostile.txt",
        "/etc/hostile.txt",
        f"{Path.home()}/hostile.txt",
        f"{CHECKOUT}/hostile.txt",
        f"{package}/hostile.txt",
    ]
    probe = (
        "import json, sys\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        open(p, 'w').write('x')\n"
        "        out[p] = 'written'\n"
        "    except OSError as e:\n"
        "        out[p] = e.errno\n"
        "print(json.dumps(out))\n"
    )
    out = json.loads(sandbox.exec([sandbox.python, "-c", probe, *targets]).stdout)
    refused = (errno.EROFS, errno.EACCES, errno.ENOENT, errno.EPERM)
    assert all(v in refused for v in out.values()), out
    for path in (Path.home() / "hostile.txt", CHECKOUT / "hostile.txt", PACKAGE / "hostile.txt"):
        assert not path.exists()
    _still_usable(sandbox)


# ---------------------------------------------------------------- processes that linger


def test_setsid_child_past_the_timeout_is_killed(sandbox: Sandbox) -> None:
    marker = "301.75"  # a sleep length nothing else uses
    started = time.monotonic()
    res = sandbox.exec(
        ["sh", "-c", f"setsid sleep {marker} & setsid sh -c 'sleep {marker}' & sleep {marker}"],
        timeout=1,
    )
    assert res.timed_out and res.exit_code == -9
    assert time.monotonic() - started < 30  # the call came back, not the 300 s sleep
    assert _gone(sandbox, marker)
    # and a setsid child of a command that exits at once does not outlive it either
    res = sandbox.exec(["sh", "-c", f"setsid sleep {marker} > /dev/null 2>&1 & echo started"])
    assert res.stdout == "started\n" and not res.timed_out
    assert _gone(sandbox, marker)
    _still_usable(sandbox)


def _mount_tops_under_tmp(sandbox: Sandbox) -> set[str]:
    """Top directories under /tmp that the sandbox's own mounts (work dir, interpreter
    prefix, the trajsynth package) put there; none in a sandbox whose paths lie elsewhere."""
    paths = [Path(sandbox.workdir), Path(sys.prefix), Path(trajsynth.__file__).parent]
    return {
        p.resolve().relative_to("/tmp").parts[0]
        for p in paths
        if p.resolve().is_relative_to("/tmp")
    }


def test_a_planted_process_does_not_survive_a_reset(kind: str) -> None:
    marker = "planted-5521"
    image = None
    if kind == "docker":
        from trajsynth.sandboxes import ensure_image

        image = ensure_image()
    pool = SandboxPool(SandboxKind(kind), LIMITS, image, max_idle=1)
    try:
        sb = pool.acquire()
        # a long-lived process of the episode (as a server is), writing into the work dir
        loop = f"while :; do echo {marker} > planted.txt; sleep 0.1; done"
        planter = subprocess.Popen(
            sb.stdio_command(["sh", "-c", loop]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while not _processes_with(sb, marker) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _processes_with(sb, marker)
            sb.exec(["sh", "-c", "echo left > /tmp/left.txt"])
            pool.release(sb)
            again = pool.acquire()
            assert again is sb
            assert _processes_with(again, marker) == []
            assert again.exec(["sh", "-c", "ls -A"]).stdout == ""
            tmp = again.exec(["ls", "-A", "/tmp"]).stdout.split()
            # a LocalSandbox's work dir, and the read-only mounts of the interpreter and the
            # package, may sit under /tmp (a checkout there): their top directories are listed,
            # nothing the episode wrote is
            assert set(tmp) <= _mount_tops_under_tmp(again)
            planter.wait(timeout=30)  # its host side ended with it
        finally:
            if planter.poll() is None:
                planter.kill()
                planter.wait()
        _still_usable(again)
        pool.release(again)
    finally:
        pool.close()


# ---------------------------------------------------------------- through the code tool


@pytest.fixture
async def code_env(sandbox: Sandbox):
    from trajsynth.mcp_servers.environment import Environment
    from trajsynth.mcp_servers.registry import get_cluster

    env = Environment(get_cluster("code"), sandbox, tool_timeout_s=10, owns_sandbox=False)
    async with env:
        yield env


async def _run_python(env, source: str, timeout_s: float = 15):  # type: ignore[no-untyped-def]
    """A run_python call that must come back as a result, never as an infra fault."""
    return await env.call_tool("run_python", {"source": source, "timeout_s": timeout_s})


async def test_code_tool_faults_are_tool_errors_and_the_server_lives(code_env) -> None:  # type: ignore[no-untyped-def]
    env = code_env
    marker = "302.25"
    setsid = (
        "import subprocess, time\n"
        f"subprocess.Popen(['setsid', 'sleep', '{marker}'])\n"
        "time.sleep(1000)\n"
    )
    res = await _run_python(env, setsid, timeout_s=2)
    assert res.is_error and "timed out after 2s" in res.text
    assert _gone(env.sandbox, marker)
    # asking for more time than the call has is cut to fit it: a tool error, not a hang
    res = await _run_python(env, "import time\ntime.sleep(1000)", timeout_s=120)
    assert res.is_error and "timed out after 7s" in res.text
    res = await _run_python(env, FLOOD, timeout_s=60)
    assert not res.is_error and "more characters cut" in res.text
    fill = (
        "with open('fill.bin', 'wb') as f:\n"
        "    for _ in range(1024):\n"
        "        f.write(bytes(1 << 20))\n"
    )
    res = await _run_python(env, fill, timeout_s=60)
    assert res.is_error and "No space left on device" in res.text
    res = await env.call_tool("write_file", {"path": "more.txt", "content": "x" * 900_000})
    assert res.is_error and "the work directory is full" in res.text
    assert not (await env.call_tool("delete_file", {"path": "fill.bin"})).is_error
    bomb = "chunks = []\nfor _ in range(128):\n    chunks.append(b'x' * (16 << 20))\n"
    res = await _run_python(env, bomb, timeout_s=60)
    assert res.is_error and ("SIGKILL" in res.text or "MemoryError" in res.text), res.text
    fork = (
        "import os, time\n"
        "for _ in range(3000):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
    )
    res = await _run_python(env, fork, timeout_s=30)
    assert res.is_error and "BlockingIOError" in res.text
    # arguments the server could choke on are tool errors with a reason
    for tool, args, why in (
        ("read_file", {"path": "a\x00b"}, "NUL"),
        ("run_python", {"source": "print(1)\x00"}, "NUL"),
        ("write_file", {"path": "s.txt", "content": "\ud800"}, "surrogates not allowed"),
        ("run_python", {"source": "'\udfff'"}, "surrogates not allowed"),
    ):
        res = await env.call_tool(tool, args)
        assert res.is_error and why in res.text, (tool, res.text)
    assert env.restarts == 0  # every fault stayed inside the call
    ok = await _run_python(env, "print(6 * 7)")
    assert not ok.is_error and "42" in ok.text


# ------------------------------------------- the code tool's programs against their server

_ATTACK_SERVER = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
server = os.getppid()  # run_python's program is the MCP server's child
result = {"server_pid": server}


def errname(rc):
    return "ALLOWED" if rc == 0 else errno.errorcode.get(ctypes.get_errno(), "?")


result["ptrace_attach"] = errname(libc.ptrace(16, server, None, None))  # PTRACE_ATTACH
result["ptrace_seize"] = errname(libc.ptrace(0x4206, server, None, None))  # PTRACE_SEIZE
result["sigkill_server"] = errname(libc.kill(server, 9))
result["sigstop_server"] = errname(libc.kill(server, 19))
result["sigkill_server_group"] = errname(libc.kill(-os.getpgid(server), 9))
result["sigkill_everyone"] = errname(libc.kill(-1, 9))
result["sigkill_pid_1"] = errname(libc.kill(1, 9))
for name in ("mem", "environ", "fd/0"):
    try:
        open(f"/proc/{server}/{name}", "rb").close()
        result[f"proc_{name}"] = "ALLOWED"
    except OSError as exc:
        result[f"proc_{name}"] = errno.errorcode.get(exc.errno, "?")
print(json.dumps(result))
"""


async def test_run_python_can_neither_trace_nor_signal_its_server(code_env) -> None:  # type: ignore[no-untyped-def]
    env = code_env
    res = await _run_python(env, _ATTACK_SERVER)
    assert not res.is_error, res.text
    tried = json.loads(res.text if res.structured is None else res.structured["stdout"])
    server = tried.pop("server_pid")
    assert server > 1
    refused = {name: why for name, why in tried.items() if why != "ALLOWED"}
    assert refused == tried, f"allowed against the server: {set(tried) - set(refused)}"
    assert {tried[k] for k in tried if not k.startswith("proc_")} == {"EPERM"}
    assert env.restarts == 0  # the server never noticed
    ok = await _run_python(env, "print(6 * 7)")
    assert not ok.is_error and "42" in ok.text


async def test_a_server_that_dies_during_run_python_is_the_models_failure(code_env) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from trajsynth.mcp_servers.tool_calls import SERVER_KILLED, call_record
    from trajsynth.schemas import FailureClass, FunctionCall, ToolCall

    env = code_env
    args = {"source": "import time\ntime.sleep(5)\nprint('done')", "timeout_s": 6}
    call = asyncio.ensure_future(env.call_tool("run_python", args))
    await asyncio.sleep(1.5)
    await asyncio.to_thread(kill_code_server, env.sandbox)
    res = await call
    assert res.is_error and res.error_type == SERVER_KILLED, res
    assert "the tool server died while run_python ran the program" in res.text
    assert "the sandbox is alive" in res.text
    tool_call = ToolCall(id="c1", function=FunctionCall(name="run_python", arguments="{}"))
    record = call_record(tool_call, args, res, latency_s=0.0)
    assert record.failure_class is FailureClass.MODEL  # was infra: excused and retried
    assert env.restarts == 1
    ok = await _run_python(env, "print(6 * 7)")  # the restarted server serves the episode on
    assert not ok.is_error and "42" in ok.text


_DOCKER_DEFAULT_DENIES = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}
for name, call in {
    "ptrace_traceme": lambda: libc.ptrace(0, 0, None, None),
    "unshare_user": lambda: libc.unshare(0x10000000),
    "keyctl": lambda: libc.syscall(250, 0, 0, 0, 0, 0),  # x86-64 keyctl(GET_KEYRING_ID)
    "bpf": lambda: libc.syscall(321, 0, None, 0),
    "perf_event_open": lambda: libc.syscall(298, None, 0, -1, -1, 0),
    "userfaultfd": lambda: libc.syscall(323, 0),
}.items():
    rc = call()
    out[name] = "ALLOWED" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
print(json.dumps(out))
"""


def test_the_local_seccomp_filter_refuses_what_dockers_default_profile_refuses(
    tmp_path: Path,
) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("the probe uses x86-64 system call numbers")
    _local_or_skip()
    with LocalSandbox(LIMITS, use_bwrap=True, root=tmp_path) as sb:
        inside = _py(sb, _DOCKER_DEFAULT_DENIES)
    assert inside == dict.fromkeys(inside, "EPERM"), inside
    # the control: the same probe outside any filter, where ptrace(TRACEME) is allowed
    outside = json.loads(
        subprocess.run(
            [sys.executable, "-c", _DOCKER_DEFAULT_DENIES], capture_output=True, text=True
        ).stdout
    )
    assert outside["ptrace_traceme"] == "ALLOWED"
