"""``DockerSandbox``: one hardened container per sandbox, driven through a resident agent.

The container runs with the network off, memory (no swap), pids and CPU limits, a read-only
root, all capabilities dropped, ``no-new-privileges`` and the non-root ``sandbox`` user. The
only writable places are the work directory (``/work``) and ``/tmp``: size-limited tmpfs mounts
charged to the memory limit and smaller than it (``tmpfs_sizes``), so filling them is ENOSPC.
The agent is a child subreaper: when a command exits or times out, every process under the
agent is killed, ``setsid`` children included; ``reset`` kills every process in the container
but the agent (servers too) before it restores the work directory. The trajsynth package is
bind-mounted read-only, so ``python3 -m trajsynth.mcp_servers.servers.<name>`` runs against the
host's code with the image's ``mcp``.

Its main process is ``_agent`` (under ``tini``), attached to our socket: ``exec``, file
transfer, ``snapshot`` and ``restore`` are one framed request and answer each, which keeps an
exec round trip to a few milliseconds. A snapshot is a tar of the work directory streamed
through the agent and kept in host memory; ``bench/sandbox.py`` measures it against
``docker commit``, which is slower by an order of magnitude and cannot see a tmpfs anyway.
When our socket closes (close, or this process dies) the agent exits and Docker removes the
container (``auto_remove``), so no container outlives its owner.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import LogConfig

import trajsynth
from trajsynth.sandboxes import _agent
from trajsynth.sandboxes.base import WORKDIR_ENV, Sandbox, TarSnapshots, as_bytes, decode
from trajsynth.sandboxes.engine import docker_client
from trajsynth.sandboxes.image import SANDBOX_UID, SITE_DIR, SRC_DIR, WORKDIR, image_tag
from trajsynth.schemas import (
    ExecResult,
    SandboxError,
    SandboxGone,
    SandboxLimits,
    SandboxStartError,
    SandboxTimeout,
    SnapshotHandle,
)

__all__ = ["DockerSandbox"]

log = logging.getLogger(__name__)

LABEL = "trajsynth.sandbox"
# the pid of the process that started the container: the CLI's watchdog removes what a killed
# owner left, should the agent not see its socket close
OWNER_LABEL = "trajsynth.owner_pid"
_ANSWER_GRACE_S = 15.0  # how long past a command's own timeout we wait for the agent
_OP_TIMEOUT_S = 120.0  # file transfer, snapshot and restore
_MUX = struct.Struct(">BxxxI")  # Docker's attach stream: stream id, 3 pad bytes, size
_AGENT_SOURCE = Path(_agent.__file__).read_text()
_PACKAGE_DIR = Path(trajsynth.__file__).resolve().parent


def tmpfs_sizes(limits: SandboxLimits) -> tuple[int, int]:
    """(work dir, /tmp) sizes in MB. Both are tmpfs charged to the container's memory, so
    together they take at most 5/8 of it: when they are full the agent, the servers and the
    command still have room, and a full work dir is ENOSPC for the command (a tool error),
    not an OOM kill that takes the container down."""
    work = max(8, min(limits.disk_mb, limits.memory_mb // 2))
    tmp = max(8, min(limits.tmp_mb, limits.memory_mb // 8))
    return work, tmp


class _AttachChannel:
    """Agent frames over a hijacked ``docker attach`` socket (stdin in, stdout/stderr out)."""

    def __init__(self, sock: Any) -> None:
        self._sock = getattr(sock, "_sock", sock)  # SocketIO -> the socket under it
        self._holder = sock  # keeps the HTTP response (and TLS) alive
        self._raw = bytearray()  # bytes read from the socket, not yet demultiplexed
        self._out = bytearray()  # agent stdout, not yet parsed into frames
        self.stderr: deque[bytes] = deque(maxlen=64)

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def _fill(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self._sock.settimeout(left)
        try:
            chunk = self._sock.recv(1 << 20)
        except TimeoutError:
            raise
        except OSError as exc:
            raise EOFError(str(exc)) from exc
        if not chunk:
            raise EOFError("attach socket closed")
        self._raw += chunk

    def _demux(self, deadline: float) -> None:
        """Move at least one stdout byte from the socket into ``_out``."""
        while True:
            while len(self._raw) < _MUX.size:
                self._fill(deadline)
            stream, size = _MUX.unpack_from(self._raw)
            while len(self._raw) < _MUX.size + size:
                self._fill(deadline)
            body = bytes(self._raw[_MUX.size : _MUX.size + size])
            del self._raw[: _MUX.size + size]
            if stream == 2:
                self.stderr.append(body)
            elif body:
                self._out += body
                return

    def _take(self, n: int, deadline: float) -> bytes:
        while len(self._out) < n:
            self._demux(deadline)
        data = bytes(self._out[:n])
        del self._out[:n]
        return data

    def recv(self, deadline: float) -> tuple[dict, bytes]:
        hlen, plen = struct.unpack(">II", self._take(8, deadline))
        header = json.loads(self._take(hlen, deadline))
        return header, self._take(plen, deadline) if plen else b""

    def close(self) -> None:
        for obj in (self._sock, self._holder):
            with contextlib.suppress(OSError):
                obj.close()


class DockerSandbox(Sandbox):
    """A sandbox in a hardened container from the locally built image (``synth sandbox build``).

    >>> from trajsynth.schemas import SandboxLimits
    >>> with DockerSandbox(SandboxLimits()) as sb:  # doctest: +SKIP
    ...     sb.exec(["python3", "-c", "print(1 + 1)"]).stdout
    '2\\n'
    """

    def __init__(self, limits: SandboxLimits | None = None, *, image: str | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self.image = image or image_tag()
        self.sandbox_id = f"sbx-{uuid.uuid4().hex[:12]}"
        self.workdir = WORKDIR
        self.python = "python3"
        self._container: Any = None
        self._chan: _AttachChannel | None = None
        self._ready = False
        self._dead: str | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._snapshots = TarSnapshots(self.sandbox_id)

    @property
    def container_id(self) -> str:
        if self._container is None:
            raise SandboxGone(f"sandbox {self.sandbox_id} is not started")
        return self._container.id

    def _container_kwargs(self) -> dict[str, Any]:
        mem = f"{self.limits.memory_mb}m"
        work_mb, tmp_mb = tmpfs_sizes(self.limits)
        return {
            "command": ["python3", "-I", "-S", "-c", _AGENT_SOURCE, WORKDIR],
            "name": f"trajsynth-{self.sandbox_id}",
            "labels": {LABEL: self.sandbox_id, OWNER_LABEL: str(os.getpid())},
            # with stdin open and not detached, the SDK sets StdinOnce: when our socket
            # closes, the agent's stdin closes and it exits
            "stdin_open": True,
            "tty": False,
            # stdout is our channel: a log driver would copy every answer to disk (slowly)
            "log_config": LogConfig(type=LogConfig.types.NONE),
            "init": True,
            "auto_remove": True,
            "network_mode": "none",
            "mem_limit": mem,
            "memswap_limit": mem,  # no swap
            "pids_limit": self.limits.pids,
            "nano_cpus": int(self.limits.cpus * 1e9),
            "read_only": True,
            "user": f"{SANDBOX_UID}:{SANDBOX_UID}",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "tmpfs": {
                WORKDIR: f"rw,nosuid,nodev,size={work_mb}m,"
                f"uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0755",
                "/tmp": f"rw,nosuid,nodev,size={tmp_mb}m,mode=1777",
            },
            "volumes": {str(_PACKAGE_DIR): {"bind": f"{SRC_DIR}/trajsynth", "mode": "ro"}},
            "environment": {
                "PYTHONPATH": f"{SITE_DIR}:{SRC_DIR}",
                "PYTHONDONTWRITEBYTECODE": "1",
                "HOME": WORKDIR,
                "LANG": "C.UTF-8",
                WORKDIR_ENV: WORKDIR,
            },
            "working_dir": WORKDIR,
        }

    def start(self) -> None:
        """Create, attach and start the container; does not wait for the agent to be ready."""
        if self._closed:
            raise SandboxGone(f"sandbox {self.sandbox_id} is closed")
        if self._container is not None:
            return
        client = docker_client()
        try:
            container = client.containers.create(self.image, **self._container_kwargs())
        except ImageNotFound as exc:
            raise SandboxStartError(
                f"sandbox image {self.image} not found: build it with `synth sandbox build` "
                "(or `make image`)"
            ) from exc
        except DockerException as exc:
            raise SandboxStartError(f"cannot create the sandbox container: {exc}") from exc
        # the engine answers a create with the new container's id (the stubs allow None)
        assert container.id is not None
        try:
            sock = client.api.attach_socket(
                container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            container.start()
        except DockerException as exc:
            _remove(container)
            raise SandboxStartError(f"cannot start the sandbox container: {exc}") from exc
        self._container = container
        self._chan = _AttachChannel(sock)
        log.debug("sandbox %s started as container %s", self.sandbox_id, container.short_id)

    def _died(self, why: str) -> SandboxGone:
        detail = ""
        try:
            self._container.reload()
            state = self._container.attrs.get("State", {})
            detail = f" (exit {state.get('ExitCode')}, oom_killed={state.get('OOMKilled')})"
        except DockerException:
            detail = " (container gone)"
        tail = b"".join(self._chan.stderr).decode(errors="replace")[-1500:] if self._chan else ""
        self._dead = f"sandbox {self.sandbox_id} died{detail}: {why}"
        if tail:
            self._dead += f"; agent stderr: {tail}"
        return SandboxGone(self._dead)

    def _request(self, header: dict, payload: bytes, wait: float) -> tuple[dict, bytes]:
        if self._container is None or self._closed:
            self.start()  # starts a fresh sandbox, or says it is closed
        if self._dead:
            raise SandboxGone(self._dead)
        assert self._chan is not None
        with self._lock:
            deadline = time.monotonic() + wait
            try:
                if not self._ready:
                    hello, _ = self._chan.recv(time.monotonic() + 60)
                    if not hello.get("ready"):
                        raise self._died(f"unexpected greeting {hello!r}")
                    self._ready = True
                self._chan.send(_agent.encode_frame(header, payload))
                answer, body = self._chan.recv(deadline)
            except TimeoutError:
                self._dead = f"sandbox {self.sandbox_id}: agent did not answer {header['op']}"
                raise SandboxTimeout(
                    f"sandbox {self.sandbox_id}: no answer to {header['op']} within {wait:.0f}s"
                ) from None
            except (EOFError, BrokenPipeError, ConnectionError) as exc:
                raise self._died(str(exc)) from exc
        if not answer.get("ok"):
            error, message = answer.get("error"), answer.get("message", "")
            if error == "FileNotFoundError":
                raise FileNotFoundError(message)
            if error == "ValueError":
                raise ValueError(message)
            raise SandboxError(f"sandbox {self.sandbox_id}: {header['op']} failed: {message}")
        return answer, body

    def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        limit = self._timeout(timeout)
        header = {
            "op": "exec",
            "argv": list(argv),
            "timeout": limit,
            "env": {WORKDIR_ENV: self.workdir, **(env or {})},
            "cwd": cwd,
        }
        started = time.perf_counter()
        answer, body = self._request(header, as_bytes(stdin) or b"", limit + _ANSWER_GRACE_S)
        split = answer["stdout_len"]
        return ExecResult(
            exit_code=answer["exit_code"],
            stdout=decode(body[:split]),
            stderr=decode(body[split:]),
            duration_s=time.perf_counter() - started,
            timed_out=answer["timed_out"],
        )

    def put_file(self, path: str, data: bytes) -> None:
        self._request({"op": "put", "path": path}, data, _OP_TIMEOUT_S)

    def get_file(self, path: str) -> bytes:
        return self._request({"op": "get", "path": path}, b"", _OP_TIMEOUT_S)[1]

    def snapshot(self) -> SnapshotHandle:
        _, data = self._request({"op": "snapshot"}, b"", _OP_TIMEOUT_S)
        return self._snapshots.add(data)

    def restore(self, handle: SnapshotHandle) -> None:
        self._request({"op": "restore"}, self._snapshots.get(handle), _OP_TIMEOUT_S)

    def reset(self, handle: SnapshotHandle) -> None:
        payload = self._snapshots.get(handle)
        self._request({"op": "reset", "clear": ["/tmp"]}, payload, _OP_TIMEOUT_S)

    def discard(self, handle: SnapshotHandle) -> None:
        self._snapshots.discard(handle)

    def stdio_command(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> list[str]:
        docker_cli = shutil.which("docker")
        if docker_cli is None:
            raise SandboxError("the docker CLI is not on PATH (it runs stdio servers in sandboxes)")
        cmd = [docker_cli, "exec", "-i", "-w", self.workdir]
        for key, value in {WORKDIR_ENV: self.workdir, **(env or {})}.items():
            cmd += ["-e", f"{key}={value}"]
        return [*cmd, self.container_id, *argv]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._snapshots.clear()
        if self._chan is not None:
            self._chan.close()
        if self._container is not None:
            _remove(self._container)
        log.debug("sandbox %s closed", self.sandbox_id)


def _remove(container: Any) -> None:
    try:
        container.remove(force=True)
    except NotFound:
        pass  # auto_remove got there first
    except APIError as exc:
        # 409 Conflict: a removal is already in progress (auto_remove got there first)
        if exc.status_code != 409:
            log.warning("could not remove container %s: %s", container.short_id, exc)
    except DockerException as exc:
        log.warning("could not remove container %s: %s", container.short_id, exc)
