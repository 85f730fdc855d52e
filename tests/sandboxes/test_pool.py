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
