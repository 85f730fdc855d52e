"""Started sandboxes kept warm and reused across episodes (a start costs more than a reset).

An episode takes a sandbox with ``acquire`` and gives it back with ``release``. A sandbox that
comes back is reset to the snapshot taken right after it started (every process it still runs
killed, ``/tmp`` emptied, the work directory restored), so nothing of the last episode (files,
seeded state, code the model wrote, a process it planted) reaches the next; one that cannot be
restored, or that the episode marks broken, is closed instead. At most ``max_idle`` wait per
pool; the rest are closed. ``shared_pool`` gives one pool per (kind, limits, image) in this
process, closed at exit.
"""

from __future__ import annotations

import atexit
import logging
import threading
from dataclasses import dataclass

from trajsynth.sandboxes.base import Sandbox
from trajsynth.sandboxes.factory import open_sandbox
from trajsynth.schemas import SandboxKind, SandboxLimits, SnapshotHandle

__all__ = ["PoolStats", "SandboxPool", "close_shared_pools", "shared_pool"]

log = logging.getLogger(__name__)


@dataclass
class PoolStats:
    opened: int = 0  # sandboxes started by this pool
    reused: int = 0  # acquisitions served by a waiting sandbox
    closed: int = 0  # sandboxes closed: broken, unrestorable, over max_idle, or at close()


class SandboxPool:
    """Thread-safe; ``acquire``/``release`` block on sandbox I/O, so call them off the event
    loop (``asyncio.to_thread``)."""

    def __init__(
        self,
        kind: SandboxKind | str = SandboxKind.AUTO,
        limits: SandboxLimits | None = None,
        image: str | None = None,
        *,
        max_idle: int = 4,
    ) -> None:
        self.kind = SandboxKind(kind)
        self.limits = limits or SandboxLimits()
        self.image = image
        self.max_idle = max_idle
        self.stats = PoolStats()
        self._idle: list[Sandbox] = []
        self._clean: dict[str, SnapshotHandle] = {}
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self) -> Sandbox:
        """A started sandbox whose work directory is as fresh as a new one's."""
        with self._lock:
            if self._idle:
                self.stats.reused += 1
                return self._idle.pop()
            self.stats.opened += 1
        sandbox = open_sandbox(self.kind, self.limits, self.image)
        try:
            clean = sandbox.snapshot()
        except BaseException:
            sandbox.close()
            raise
        with self._lock:
            self._clean[sandbox.sandbox_id] = clean
        return sandbox

    def release(self, sandbox: Sandbox, *, broken: bool = False) -> None:
        """Give ``sandbox`` back: restored and kept for the next episode, or closed."""
        clean = self._clean.get(sandbox.sandbox_id)
        keep = not broken and clean is not None and not self._closed
        if keep and clean is not None:  # keep implies a snapshot; the test narrows it
            try:
                sandbox.reset(clean)
            except Exception as exc:  # any failure to reset means it must not be reused
                log.info("sandbox %s not reused: restore failed: %s", sandbox.sandbox_id, exc)
                keep = False
        with self._lock:
            if keep and len(self._idle) < self.max_idle and not self._closed:
                self._idle.append(sandbox)
                return
            self._clean.pop(sandbox.sandbox_id, None)
            self.stats.closed += 1
        sandbox.close()

    def close(self) -> None:
        """Close every waiting sandbox; sandboxes still out are closed when released."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self.stats.closed += len(idle)
            for sandbox in idle:
                self._clean.pop(sandbox.sandbox_id, None)
        for sandbox in idle:
            sandbox.close()

    @property
    def idle(self) -> int:
        return len(self._idle)


_shared: dict[tuple[str, str, str | None, int], SandboxPool] = {}
_shared_lock = threading.Lock()


def shared_pool(
    kind: SandboxKind | str,
    limits: SandboxLimits | None = None,
    image: str | None = None,
    *,
    max_idle: int = 4,
) -> SandboxPool:
    """This process's pool for sandboxes of this kind, limits and image."""
    limits = limits or SandboxLimits()
    key = (SandboxKind(kind).value, limits.model_dump_json(), image, max_idle)
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None or pool._closed:
            pool = _shared[key] = SandboxPool(kind, limits, image, max_idle=max_idle)
        return pool


@atexit.register
def close_shared_pools() -> None:
    """Close every shared pool's waiting sandboxes (at exit; tests call it too)."""
    with _shared_lock:
        pools = list(_shared.values())
        _shared.clear()
    for pool in pools:
        pool.close()
