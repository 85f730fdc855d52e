"""The sandbox pool: reuse, reset between episodes, and what it refuses to reuse."""

from __future__ import annotations

import pytest

from trajsynth.sandboxes import Sandbox
from trajsynth.sandboxes.pool import SandboxPool, close_shared_pools, shared_pool
from trajsynth.schemas import SandboxError, SandboxKind, SandboxLimits

LIMITS = SandboxLimits(memory_mb=256, pids=64, timeout_s=20)


@pytest.fixture
def pool():
    p = SandboxPool(SandboxKind.LOCAL, LIMITS, max_idle=2)
    yield p
    p.close()


def test_a_released_sandbox_is_reused_with_a_fresh_work_dir(pool: SandboxPool) -> None:
    first = pool.acquire()
    first.put_file("left-behind.txt", b"episode 1")
    first.exec(["sh", "-c", "mkdir -p sub && echo x > sub/y"])
    pool.release(first)
    second = pool.acquire()
    assert second is first and pool.stats.reused == 1 and pool.stats.opened == 1
    with pytest.raises(FileNotFoundError):
        second.get_file("left-behind.txt")
    assert second.exec(["sh", "-c", "ls -A"]).stdout.strip() == ""
    pool.release(second)


def test_broken_and_surplus_sandboxes_are_closed(pool: SandboxPool) -> None:
    a, b, c = pool.acquire(), pool.acquire(), pool.acquire()
    assert pool.stats.opened == 3
    pool.release(a, broken=True)
    pool.release(b)
    pool.release(c)
    assert pool.idle == 2 and pool.stats.closed == 1
    pool.release(pool.acquire())
    pool.close()
    assert pool.idle == 0 and pool.stats.closed == 3


class _Unrestorable(Sandbox):
    """Wraps a real sandbox; its restore fails as a dead container's would."""

    def __init__(self, inner: Sandbox) -> None:
        self.inner = inner
        self.sandbox_id, self.workdir, self.python = inner.sandbox_id, inner.workdir, inner.python
        self.limits = inner.limits
        self.closed = False

    def start(self) -> None: ...
    def exec(self, argv, **kw):  # type: ignore[no-untyped-def, override]
        return self.inner.exec(argv, **kw)

    def put_file(self, path: str, data: bytes) -> None:
        self.inner.put_file(path, data)

    def get_file(self, path: str) -> bytes:
        return self.inner.get_file(path)

    def snapshot(self):  # type: ignore[no-untyped-def, override]
        return self.inner.snapshot()

    def restore(self, handle) -> None:  # type: ignore[no-untyped-def, override]
        raise SandboxError("the container is gone")

    def stdio_command(self, argv, *, env=None):  # type: ignore[no-untyped-def, override]
        return self.inner.stdio_command(argv, env=env)

    def close(self) -> None:
        self.closed = True
        self.inner.close()


def test_a_sandbox_that_cannot_be_reset_is_never_reused(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajsynth.sandboxes import pool as pool_module

    real_open = pool_module.open_sandbox
    monkeypatch.setattr(pool_module, "open_sandbox", lambda *a: _Unrestorable(real_open(*a)))
    sandbox = pool.acquire()
    pool.release(sandbox)
    assert isinstance(sandbox, _Unrestorable) and sandbox.closed
    assert pool.idle == 0 and pool.stats.closed == 1


def test_one_shared_pool_per_settings() -> None:
    try:
        a = shared_pool(SandboxKind.LOCAL, LIMITS)
        assert shared_pool(SandboxKind.LOCAL, LIMITS) is a
        assert shared_pool(SandboxKind.LOCAL, LIMITS.model_copy(update={"pids": 32})) is not a
    finally:
        close_shared_pools()


# Episode 1 writes a marker into every writable mount it can find (and a SysV shared memory
# segment); episode 2 lists which are still there. Nothing may be.
_PROBE = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
KEY = 0x7A5E
mounts = [line.split()[1] for line in open("/proc/self/mounts")]
places = sorted({m for m in mounts if not m.startswith(("/proc", "/sys"))} | {"/var/tmp"})
if sys.argv[1] == "write":
    wrote = []
    for place in places:
        try:
            with open(os.path.join(place, ".episode-1"), "w") as fh:
                fh.write("secret")
            wrote.append(place)
        except OSError:
            pass
    if libc.shmget(KEY, 4096, 0o1600) >= 0:  # IPC_CREAT | 0600
        wrote.append("sysv-shm")
    if libc.mq_open(b"/episode-1", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0:
        wrote.append("posix-mq")
    print(json.dumps(wrote))
else:
    left = [p for p in places if os.path.exists(os.path.join(p, ".episode-1"))]
    if libc.shmget(KEY, 0, 0) >= 0:
        left.append("sysv-shm")
    if libc.mq_open(b"/episode-1", os.O_RDONLY) >= 0:
        left.append("posix-mq")
    print(json.dumps(left))
"""


def _episodes_leave_nothing(pool: SandboxPool) -> list[str]:
    import json

    first = pool.acquire()
    wrote = json.loads(first.exec([first.python, "-c", _PROBE, "write"]).stdout)
    pool.release(first)
    second = pool.acquire()
    assert second is first  # the same sandbox, reset
    left = json.loads(second.exec([second.python, "-c", _PROBE, "read"]).stdout)
    pool.release(second)
    assert left == [], f"written in episode 1 and read in episode 2: {left}"
    return wrote


def test_every_writable_place_starts_clean_in_the_local_pool(pool: SandboxPool) -> None:
    wrote = _episodes_leave_nothing(pool)
    assert pool.acquire().workdir in wrote or any(w.endswith("/work") for w in wrote)
    assert "/tmp" in wrote


@pytest.mark.docker
def test_every_writable_place_starts_clean_in_the_docker_pool(sandbox_image: str) -> None:
    pool = SandboxPool(SandboxKind.DOCKER, LIMITS, sandbox_image, max_idle=1)
    try:
        wrote = _episodes_leave_nothing(pool)
    finally:
        pool.close()
    # the places a hostile episode used before: /dev/shm kept its files across episodes
    assert {"/tmp", "/dev/shm", "/work", "sysv-shm", "posix-mq"} <= set(wrote)
