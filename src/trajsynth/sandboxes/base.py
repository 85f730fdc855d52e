"""The ``Sandbox`` interface: where model-written code and the MCP servers run.

A sandbox has one writable work directory (``workdir``) that holds all tool state; everything
else is read-only. ``snapshot`` and ``restore`` save and bring back that directory, which is
how a rollout tree forks an environment at a branch point. Calls are synchronous; async
callers use ``asyncio.to_thread``. Infra faults raise ``SandboxError``; a command that runs past
its timeout is killed and comes back as an ``ExecResult`` with ``timed_out=True``.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Mapping, Sequence
from types import TracebackType

from trajsynth.schemas import ExecResult, SandboxError, SandboxLimits, SnapshotHandle

__all__ = ["WORKDIR_ENV", "Sandbox"]

WORKDIR_ENV = "TRAJSYNTH_WORKDIR"  # set to ``workdir`` for every exec and stdio command


class Sandbox(abc.ABC):
    """One isolated place to run commands, with a single writable work directory.

    Use it as a context manager (``with open_sandbox(...) as sb:``); ``start`` is idempotent,
    so a sandbox that is already started can be entered too, and ``close`` is safe to repeat.
    """

    sandbox_id: str
    workdir: str  # absolute path of the writable directory, as the sandboxed commands see it
    python: str  # python executable inside the sandbox
    limits: SandboxLimits

    @abc.abstractmethod
    def start(self) -> None:
        """Make the sandbox ready; a second call does nothing."""

    @abc.abstractmethod
    def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run ``argv`` to completion (``timeout`` defaults to ``limits.timeout_s``).

        ``cwd`` is relative to ``workdir`` (or absolute under it). A command past its timeout
        is killed with everything it started and returns ``timed_out=True``; what a command
        leaves running when it exits is killed too. A negative ``exit_code`` is the signal
        that killed it (``-9`` for the timeout or the OOM killer); 127: it could not start.
        """

    @abc.abstractmethod
    def put_file(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` (relative to ``workdir`` or absolute under it)."""

    @abc.abstractmethod
    def get_file(self, path: str) -> bytes:
        """Read ``path``; ``FileNotFoundError`` when it does not exist."""

    @abc.abstractmethod
    def snapshot(self) -> SnapshotHandle:
        """Save the work directory (only it) and return a handle for ``restore``."""

    @abc.abstractmethod
    def restore(self, handle: SnapshotHandle) -> None:
        """Make the work directory exactly what it was when ``handle`` was taken.

        Processes that hold files open (a running MCP server) keep their old view, so stop
        them before a restore and start them again after.
        """

    def reset(self, handle: SnapshotHandle) -> None:
        """Start a new episode from ``handle``: kill every process the sandbox still runs
        (servers and anything a command left behind), empty ``/tmp``, then ``restore``."""
        self.restore(handle)

    def discard(self, handle: SnapshotHandle) -> None:  # noqa: B027 - optional to override
        """Free what ``handle`` holds; it cannot be restored afterwards (default: keep it)."""

    @abc.abstractmethod
    def stdio_command(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> list[str]:
        """A host argv that runs ``argv`` inside the sandbox with stdin and stdout attached."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop the sandbox and free what it holds; safe to call twice."""

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _timeout(self, timeout: float | None) -> float:
        return self.limits.timeout_s if timeout is None else timeout


def as_bytes(stdin: bytes | str | None) -> bytes | None:
    """Command input as bytes (text is UTF-8)."""
    if stdin is None or isinstance(stdin, bytes):
        return stdin
    return stdin.encode()


def decode(data: bytes) -> str:
    """Command output as text; bytes that are not UTF-8 become U+FFFD."""
    return data.decode("utf-8", errors="replace")


class TarSnapshots:
    """One sandbox's snapshots: tars of its work directory, kept in memory by id.

    A handle restores only into the sandbox that took it; restoring one handle several times
    works (a tree branches from one snapshot).
    """

    def __init__(self, sandbox_id: str) -> None:
        self.sandbox_id = sandbox_id
        self._data: dict[str, bytes] = {}

    def add(self, data: bytes) -> SnapshotHandle:
        snapshot_id = f"snap-{uuid.uuid4().hex[:12]}"
        self._data[snapshot_id] = data
        return SnapshotHandle(snapshot_id=snapshot_id, sandbox_id=self.sandbox_id, method="tar")

    def get(self, handle: SnapshotHandle) -> bytes:
        if handle.sandbox_id != self.sandbox_id:
            raise SandboxError(
                f"snapshot {handle.snapshot_id} belongs to sandbox {handle.sandbox_id}, "
                f"not {self.sandbox_id}"
            )
        try:
            return self._data[handle.snapshot_id]
        except KeyError:
            raise SandboxError(f"no snapshot {handle.snapshot_id} in {self.sandbox_id}") from None

    def discard(self, handle: SnapshotHandle) -> None:
        self.get(handle)
        del self._data[handle.snapshot_id]

    def clear(self) -> None:
        self._data.clear()
