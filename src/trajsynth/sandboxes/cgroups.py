"""Per-sandbox control groups for ``LocalSandbox``: a memory and a process-count limit that
hold for everything a sandbox runs, whoever runs it (root included).

cgroup v2 is used where this process's cgroup can get the ``memory`` and ``pids``
controllers for a child; else the v1 ``memory`` and ``pids`` hierarchies (a hybrid host). A
new cgroup is made under this process's own cgroup in each hierarchy, so it sits inside
whatever limit the host already puts on us. A process joins by writing its pid to every
``procs_files`` entry before it execs the sandboxed command; ``kill`` ends every member.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Cgroup", "create_cgroup", "probe_cgroups", "reap_stale_cgroups"]

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
PREFIX = "trajsynth-"
_KILL_DEADLINE_S = 5.0


@dataclass
class Cgroup:
    """One sandbox's cgroup: a directory per hierarchy (one for v2, memory + pids for v1)."""

    dirs: list[Path]
    version: int
    procs_files: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.procs_files = [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError):
                found.update(int(line) for line in Path(path).read_text().split())
        return sorted(found)

    def kill(self) -> None:
        """SIGKILL every member until none is left (a fork bomb forks while it is killed)."""
        kill_file = self.dirs[0] / "cgroup.kill"
        if self.version == 2 and kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1")
        deadline = time.monotonic() + _KILL_DEADLINE_S
        while True:
            members = self.pids()
            if not members or time.monotonic() > deadline:
                return
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def oom_kills(self) -> int:
        """How many processes the memory limit killed so far."""
        for d in self.dirs:
            for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
                with contextlib.suppress(OSError):
                    for line in (d / name).read_text().splitlines():
                        parts = line.split()
                        if len(parts) == 2 and parts[0] == key:
                            return int(parts[1])
        return 0

    def remove(self) -> None:
        self.kill()
        for d in self.dirs:
            # an exiting member can hold the directory for a moment after its kill
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
            else:
                log.warning("could not remove cgroup %s", d)


def _own_cgroup(controller: str | None) -> Path | None:
    """This process's cgroup directory for ``controller`` (``None``: the v2 one)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller is None and controllers == "":
            for mount in (ROOT, ROOT / "unified"):
                if (mount / "cgroup.controllers").exists():
                    return mount / path.lstrip("/")
            return None
        if controller is not None and controller in controllers.split(","):
            return ROOT / controller / path.lstrip("/")
    return None


def _v2_parent() -> Path | None:
    """This process's v2 cgroup when a child of it can get ``memory`` and ``pids``."""
    own = _own_cgroup(None)
    if own is None:
        return None
    try:
        available = set((own / "cgroup.controllers").read_text().split())
        if not {"memory", "pids"} <= available:
            return None
        enabled = set((own / "cgroup.subtree_control").read_text().split())
        if not {"memory", "pids"} <= enabled:
            # fails when this cgroup holds processes (the no-internal-processes rule)
            (own / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError:
        return None
    return own


def _make(parent: Path, name: str) -> Path:
    child = parent / name
    child.mkdir()
    return child


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def create_cgroup(memory_bytes: int, pids: int) -> Cgroup:
    """A fresh cgroup with these limits; ``OSError`` when this host will not make one."""
    # the owner's pid is in the name, so a later process can reap what a killed one left
    name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
    parent = _v2_parent()
    if parent is not None:
        d = _make(parent, name)
        try:
            _write(d / "memory.max", str(memory_bytes))
            with contextlib.suppress(FileNotFoundError):  # no swap accounting here
                _write(d / "memory.swap.max", "0")
            _write(d / "pids.max", str(pids))
        except OSError:
            d.rmdir()
            raise
        return Cgroup([d], 2)
    mem_parent, pids_parent = _own_cgroup("memory"), _own_cgroup("pids")
    if mem_parent is None or pids_parent is None:
        raise OSError("no cgroup v2 with memory and pids, and no v1 memory and pids hierarchy")
    made: list[Path] = []
    try:
        made.append(_make(mem_parent, name))
        _write(made[0] / "memory.limit_in_bytes", str(memory_bytes))
        with contextlib.suppress(FileNotFoundError):  # memsw exists only with swap accounting
            _write(made[0] / "memory.memsw.limit_in_bytes", str(memory_bytes))
        made.append(_make(pids_parent, name))
        _write(made[1] / "pids.max", str(pids))
    except OSError:
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()
        raise
    return Cgroup(made, 1)


def probe_cgroups() -> str | None:
    """Why this host cannot give a sandbox its own memory and pids cgroup, or ``None``."""
    try:
        group = create_cgroup(64 * 1024 * 1024, 16)
    except OSError as exc:
        return f"cannot make a cgroup with memory and pids limits ({exc})"
    group.remove()
    return None


def owner_alive(name: str) -> bool:
    """Whether the process named in ``trajsynth-<pid>-...`` still runs (unknown: yes)."""
    pid = name.removeprefix(PREFIX).split("-", 1)[0]
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale_cgroups() -> int:
    """Kill and remove the sandbox cgroups whose owner died (a ``kill -9``); how many."""
    parents = [p for p in (_own_cgroup(None), _own_cgroup("memory"), _own_cgroup("pids")) if p]
    stale: dict[str, list[Path]] = {}
    for parent in parents:
        with contextlib.suppress(OSError):
            for child in parent.iterdir():
                if child.is_dir() and child.name.startswith(PREFIX) and not owner_alive(child.name):
                    stale.setdefault(child.name, []).append(child)
    for dirs in stale.values():
        Cgroup(dirs, 2 if (dirs[0] / "cgroup.controllers").exists() else 1).remove()
    return len(stale)
