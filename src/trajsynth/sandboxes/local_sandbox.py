"""``LocalSandbox``: for machines with no Docker engine.

With bubblewrap (``bwrap``) a command runs in fresh namespaces: no network, its own pids, a
read-only view of the host file system, a private ``/tmp`` and the work directory as the one
writable place. Without it, a command is a plain subprocess: only the rlimits below and the
timeout hold, and it can reach the network and the host's files (a warning says so).

Both paths apply rlimits (address space from ``memory_mb``, CPU seconds from the timeout, no
core files and, for a non-root user, a process count), start the command with a clean
environment (no host variables, so no API keys), and kill its whole session on timeout.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import trajsynth
from trajsynth.sandboxes import _agent
from trajsynth.sandboxes.base import WORKDIR_ENV, Sandbox, TarSnapshots, as_bytes, decode
from trajsynth.schemas import ExecResult, SandboxError, SandboxLimits, SnapshotHandle

__all__ = ["LocalSandbox", "bwrap_usable"]

log = logging.getLogger(__name__)

# Sets rlimits and the directory, then becomes the command:
# `python -S -c SRC AS NPROC CPU CWD -- argv...` (a limit below 0 is left alone).
_RLIMIT_SRC = """\
import os, resource as r, sys
a = sys.argv
for res, v in ((r.RLIMIT_AS, a[1]), (r.RLIMIT_NPROC, a[2]), (r.RLIMIT_CPU, a[3])):
    if int(v) >= 0:
        r.setrlimit(res, (int(v), int(v)))
r.setrlimit(r.RLIMIT_CORE, (0, 0))
os.chdir(a[4])
try:
    os.execvp(a[6], a[6:])
except OSError as e:
    sys.stderr.write(f"cannot run {a[6]!r}: {e}\\n")
    sys.exit(127)
"""
_PACKAGE_PARENT = str(Path(trajsynth.__file__).resolve().parent.parent)


@functools.cache
def bwrap_usable() -> bool:
    """Whether bubblewrap is installed and can make namespaces here (probed once)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    probe = [exe, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    try:
        proc = subprocess.run([*probe, "--", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if proc.returncode != 0:
        log.info("bwrap cannot make namespaces here: %s", proc.stderr.decode(errors="replace"))
    return proc.returncode == 0


def _user_tasks() -> int:
    """Processes and threads this user runs now (RLIMIT_NPROC counts them all)."""
    uid, count = os.getuid(), 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                continue
    return count


class LocalSandbox(Sandbox):
    """A sandbox on this machine: bubblewrap when it works here, else a plain subprocess.

    ``use_bwrap=None`` picks bubblewrap when ``bwrap_usable()``; ``True`` insists on it.
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        use_bwrap: bool | None = None,
        root: Path | None = None,
    ) -> None:
        self.limits = limits or SandboxLimits()
        if use_bwrap and not bwrap_usable():
            raise SandboxError("bubblewrap (bwrap) is missing or cannot make namespaces here")
        self.use_bwrap = bwrap_usable() if use_bwrap is None else use_bwrap
        self.sandbox_id = f"sbx-{uuid.uuid4().hex[:12]}"
        self.python = sys.executable
        self.workdir = ""
        self._parent = root
        self._root: Path | None = None
        self._nproc = -1
        self._closed = False
        self._snapshots = TarSnapshots(self.sandbox_id)

    def start(self) -> None:
        if self._closed:
            raise SandboxError(f"sandbox {self.sandbox_id} is closed")
        if self._root is not None:
            return
        try:
            self._root = Path(
                tempfile.mkdtemp(prefix=f"trajsynth-{self.sandbox_id}-", dir=self._parent)
            )
            (self._root / "work").mkdir()
            (self._root / "tmp").mkdir()
        except OSError as exc:
            raise SandboxError(f"cannot make the sandbox directory: {exc}") from exc
        self.workdir = str(self._root / "work")
        if os.geteuid() != 0:
            self._nproc = _user_tasks() + self.limits.pids
        if not self.use_bwrap:
            log.warning(
                "sandbox %s: plain subprocess (no bubblewrap): rlimits and timeouts only, "
                "no network or file-system isolation",
                self.sandbox_id,
            )

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        bindir = str(Path(sys.executable).parent)
        return {
            "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": self.workdir,
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp" if self.use_bwrap else str(self._require_root() / "tmp"),
            "PYTHONPATH": _PACKAGE_PARENT,
            "PYTHONDONTWRITEBYTECODE": "1",
            WORKDIR_ENV: self.workdir,
            **(env or {}),
        }

    def _require_root(self) -> Path:
        if self._root is None:
            raise SandboxError(f"sandbox {self.sandbox_id} is not started")
        if self._closed:
            raise SandboxError(f"sandbox {self.sandbox_id} is closed")
        return self._root

    def _wrap(self, argv: Sequence[str], cwd: str, cpu_s: int) -> list[str]:
        mem = self.limits.memory_mb * 1024 * 1024
        limited = [sys.executable, "-S", "-c", _RLIMIT_SRC, str(mem), str(self._nproc)]
        limited += [str(cpu_s), cwd, "--", *argv]
        if not self.use_bwrap:
            return limited
        return [
            "bwrap",
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--tmpfs", "/tmp",
            *_host_paths_under_tmp(),
            "--bind", self.workdir, self.workdir,
            "--chdir", cwd,
            "--",
            *limited,
        ]  # fmt: skip

    def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        self._require_root()
        limit = self._timeout(timeout)
        workdir_cwd = _agent.resolve_in(self.workdir, cwd or ".")
        started = time.perf_counter()
        res = _agent.run_process(
            self._wrap(argv, workdir_cwd, math.ceil(limit) + 1),
            stdin=as_bytes(stdin),
            timeout=limit,
            env=self._env(env),
            cwd=workdir_cwd,
        )
        return ExecResult(
            exit_code=res["exit_code"],
            stdout=decode(res["stdout"]),
            stderr=decode(res["stderr"]),
            duration_s=time.perf_counter() - started,
            timed_out=res["timed_out"],
        )

    def put_file(self, path: str, data: bytes) -> None:
        self._require_root()
        _agent.write_file(self.workdir, path, data)

    def get_file(self, path: str) -> bytes:
        self._require_root()
        return _agent.read_file(self.workdir, path)

    def snapshot(self) -> SnapshotHandle:
        self._require_root()
        return self._snapshots.add(_agent.tar_dir(self.workdir))

    def restore(self, handle: SnapshotHandle) -> None:
        self._require_root()
        _agent.untar_into(self.workdir, self._snapshots.get(handle))

    def discard(self, handle: SnapshotHandle) -> None:
        self._snapshots.discard(handle)

    def stdio_command(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> list[str]:
        """``env VAR=... <limits> argv``: the clean environment travels in the argv itself."""
        self._require_root()
        assignments = [f"{key}={value}" for key, value in self._env(env).items()]
        return ["env", "-i", *assignments, *self._wrap(argv, self.workdir, -1)]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._snapshots.clear()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)


def _host_paths_under_tmp() -> list[str]:
    """Read-only binds for the interpreter and the trajsynth package when they live under
    /tmp (a checkout or virtualenv there), which the private /tmp would otherwise hide."""
    import trajsynth

    wanted = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.dirname(os.path.abspath(trajsynth.__file__))),
        os.path.dirname(os.path.abspath(sys.executable)),
    }
    args: list[str] = []
    for path in sorted(p for p in wanted if p.startswith("/tmp/") and os.path.exists(p)):
        args += ["--ro-bind", path, path]
    return args
